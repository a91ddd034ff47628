"""BatchStream (client/batching.py) against the fake coordinator: what goes in one batch, in what order the
answers come back, and what a failure or a silent node does to the callers and to the next batch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from groupcoord.client.batching import StreamBroken
from groupcoord.client.discovery import Connections
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.fake_coordinator import FakeCoordinator


@pytest.fixture
async def connections(fake: FakeCoordinator) -> AsyncIterator[Connections]:
    conns = Connections([f"127.0.0.1:{fake.port}"])
    yield conns
    await conns.close()


def _beat(member: str) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(group_id="g", generation_id=1, member_id=member)


def _commit(member: str, offset: int) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group_id="g", generation_id=1, member_id=member)
    request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
    return request


def _by_member(codes: dict[str, int]) -> Any:
    """A scripted Heartbeat answer: the code set for the request's member."""
    return lambda request, context: pb.HeartbeatResponse(error_code=codes.get(request.member_id, Errors.NONE))


async def test_calls_made_together_go_in_one_batch_and_get_their_own_answers(fake, connections):
    fake.always["Heartbeat"] = _by_member({"m3": Errors.REBALANCE_IN_PROGRESS, "m7": Errors.UNKNOWN_MEMBER_ID})
    address = f"127.0.0.1:{fake.port}"
    answers = await asyncio.gather(*(connections.heartbeats.call(address, _beat(f"m{i}"), 5) for i in range(50)))
    assert fake.batches == [("Heartbeat", 50)]
    assert [m for _, m in fake.requests] == [_beat(f"m{i}") for i in range(50)]
    expected = {3: Errors.REBALANCE_IN_PROGRESS, 7: Errors.UNKNOWN_MEMBER_ID}
    assert [a.error_code for a in answers] == [expected.get(i, Errors.NONE) for i in range(50)]


async def test_calls_made_while_a_batch_is_answered_go_together_in_the_next(fake, connections):
    release = asyncio.Event()

    async def slow(request: Any, context: Any) -> Any:
        await release.wait()
        return fake._error("OffsetCommit", request, Errors.NONE)

    fake.queues["OffsetCommit"] = [slow]
    address = f"127.0.0.1:{fake.port}"
    first = asyncio.create_task(connections.commits.call(address, _commit("a", 1), 5))
    while not fake.batches:
        await asyncio.sleep(0.005)
    later = [asyncio.create_task(connections.commits.call(address, _commit(f"b{i}", i), 5)) for i in range(10)]
    await asyncio.sleep(0.1)
    assert fake.batches == [("OffsetCommit", 1)]  # one batch in flight at a time
    release.set()
    answers = await asyncio.gather(first, *later)
    assert fake.batches == [("OffsetCommit", 1), ("OffsetCommit", 10)]
    assert all(a.topics[0].partitions[0].error_code == Errors.NONE for a in answers)
    assert fake.offsets == {("t", 0): 9}  # committed in request order


async def test_a_failed_stream_fails_its_batch_and_the_next_call_opens_another(fake, connections):
    async def abort(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")

    fake.queues["Heartbeat"] = [abort]
    address = f"127.0.0.1:{fake.port}"
    failed = await asyncio.gather(*(connections.heartbeats.call(address, _beat(f"m{i}"), 5) for i in range(3)),
                                  return_exceptions=True)  # fmt: skip
    assert all(isinstance(f, grpc.aio.AioRpcError) and f.code() == grpc.StatusCode.UNAVAILABLE for f in failed)
    answer = await connections.heartbeats.call(address, _beat("again"), 5)
    assert answer.error_code == Errors.NONE
    assert fake.batches == [("Heartbeat", 3), ("Heartbeat", 1)]


async def test_a_silent_node_gives_stream_broken_at_the_deadline_and_the_stream_is_replaced(fake, connections):
    async def hang(request: Any, context: Any) -> Any:
        await asyncio.sleep(30)

    fake.queues["Heartbeat"] = [hang]
    address = f"127.0.0.1:{fake.port}"
    started = asyncio.get_running_loop().time()
    with pytest.raises(StreamBroken):
        await connections.heartbeats.call(address, _beat("a"), 0.3)
    assert asyncio.get_running_loop().time() - started < 2
    # The hung stream is abandoned once nobody waits for it: the next heartbeat goes on a new one.
    answer = await connections.heartbeats.call(address, _beat("b"), 5)
    assert answer.error_code == Errors.NONE


async def test_each_call_fails_at_its_own_deadline_not_its_batch_mates(fake, connections):
    async def hang(request: Any, context: Any) -> Any:
        await asyncio.sleep(30)

    fake.queues["Heartbeat"] = [hang]
    address = f"127.0.0.1:{fake.port}"
    loop = asyncio.get_running_loop()

    async def timed(member: str, timeout_s: float) -> float:
        started = loop.time()
        with pytest.raises(StreamBroken, match=f"in {timeout_s:.1f} s"):
            await connections.heartbeats.call(address, _beat(member), timeout_s)
        return loop.time() - started

    # One batch of three timeouts: each caller gets its own StreamBroken at its own deadline (the message names
    # it), not the batch's longest.
    short, long, behind = await asyncio.gather(timed("a", 0.3), timed("b", 1.5), timed("c", 0.6))
    assert 0.25 <= short < 0.9 and 0.55 <= behind < 1.2 and 1.45 <= long < 3
    answer = await connections.heartbeats.call(address, _beat("d"), 5)
    assert answer.error_code == Errors.NONE


async def test_close_fails_the_waiting_calls_and_ends_the_streams(fake, connections):
    release = asyncio.Event()

    async def slow(request: Any, context: Any) -> Any:
        await release.wait()
        return pb.HeartbeatResponse()

    fake.queues["Heartbeat"] = [slow]
    address = f"127.0.0.1:{fake.port}"
    first = asyncio.create_task(connections.heartbeats.call(address, _beat("a"), 5))
    while not fake.batches:
        await asyncio.sleep(0.005)
    queued = asyncio.create_task(connections.heartbeats.call(address, _beat("b"), 5))
    await asyncio.sleep(0.05)
    closed = asyncio.get_running_loop().time()
    await connections.close()
    for task in (first, queued):
        with pytest.raises(StreamBroken, match="closed"):
            await task
    assert asyncio.get_running_loop().time() - closed < 1  # at once, not at the calls' deadlines
    release.set()
