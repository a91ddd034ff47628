"""HeartbeatStream and OffsetCommitStream: each request of a batch answered in order as the unary RPC would answer
it, for any group of the node; the SDK's members sharing connections share the streams."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from groupcoord.client.discovery import Connections
from groupcoord.client.member import GroupMember
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.limits import MAX_BATCH_REQUESTS
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.e2e.support import join_dynamic, sync_all


async def _stable_member(stub, group: str) -> pb.JoinGroupResponse:
    joined = await join_dynamic(stub, group)
    (synced,) = await sync_all(stub, group, [joined], [""])
    assert synced.error_code == Errors.NONE
    return joined


def _beat(group: str, joined: pb.JoinGroupResponse, generation: int | None = None) -> pb.HeartbeatRequest:
    gen = joined.generation_id if generation is None else generation
    return pb.HeartbeatRequest(group_id=group, generation_id=gen, member_id=joined.member_id)


def _commit(group: str, joined: pb.JoinGroupResponse, offset: int, generation: int | None = None):
    gen = joined.generation_id if generation is None else generation
    request = pb.OffsetCommitRequest(group_id=group, generation_id=gen, member_id=joined.member_id)
    request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
    return request


async def test_each_heartbeat_of_a_batch_gets_the_unary_answer_in_order(stub):
    a = await _stable_member(stub, "stream-a")
    b = await _stable_member(stub, "stream-b")
    requests = [
        _beat("stream-a", a),
        _beat("stream-b", b),
        _beat("stream-a", a, generation=a.generation_id + 5),
        pb.HeartbeatRequest(group_id="stream-b", generation_id=b.generation_id, member_id="nobody"),
        _beat("stream-b", b),
    ]
    call = stub.HeartbeatStream()
    await call.write(pb.HeartbeatBatchRequest(requests=requests))
    batched = [r.error_code for r in (await call.read()).responses]
    await call.write(pb.HeartbeatBatchRequest(requests=requests[:1]))  # the stream carries on, a batch at a time
    again = [r.error_code for r in (await call.read()).responses]
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    unary = [(await stub.Heartbeat(r)).error_code for r in requests]
    expected = [Errors.NONE, Errors.NONE, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID, Errors.NONE]
    assert batched == unary == expected
    assert again == [Errors.NONE]


async def test_each_commit_of_a_batch_is_answered_as_offset_commit_once_committed(stub):
    a = await _stable_member(stub, "commits-a")
    b = await _stable_member(stub, "commits-b")
    requests = [
        _commit("commits-a", a, 10),
        _commit("commits-b", b, 20),
        _commit("commits-a", a, 99, generation=a.generation_id + 1),  # refused: not this generation
        _commit("commits-a", a, 11),
    ]
    call = stub.OffsetCommitStream()
    await call.write(pb.OffsetCommitBatchRequest(requests=requests))
    reply = await call.read()
    call.cancel()
    codes = [r.topics[0].partitions[0].error_code for r in reply.responses]
    assert codes == [Errors.NONE, Errors.NONE, Errors.ILLEGAL_GENERATION, Errors.NONE]
    for group, offset in (("commits-a", 11), ("commits-b", 20)):  # later commits of one group win, in order
        fetched = await stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group))
        assert [(t.name, p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions] == [
            ("t", 0, offset)
        ]


@pytest.mark.parametrize("rpc", ["HeartbeatStream", "OffsetCommitStream"])
async def test_a_malformed_message_ends_the_stream_with_invalid_argument(channel, rpc: str):
    call = channel.stream_stream(f"/groupcoord.v1.GroupCoordinator/{rpc}")()
    await call.write(b"\xff\xff\xff")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await asyncio.wait_for(call.read(), 10)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_batch_over_the_limit_ends_the_stream_with_invalid_argument(stub):
    call = stub.HeartbeatStream()
    too_many = [pb.HeartbeatRequest(group_id="g", member_id="m")] * (MAX_BATCH_REQUESTS + 1)
    await call.write(pb.HeartbeatBatchRequest(requests=too_many))
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await asyncio.wait_for(call.read(), 10)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_BATCH_REQUESTS}" in failed.value.details()


async def test_sdk_members_sharing_connections_share_one_heartbeat_stream(node):
    shared = Connections([node.address])
    options = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 50, "connections": shared}
    members = [GroupMember([node.address], f"shared-{i}", {"t": 4}, **options) for i in range(3)]
    try:
        for member in members:
            await member.start()
        for member in members:
            await member.wait_stable()
        synced_at = [m.last_heartbeat_ok for m in members]
        await asyncio.sleep(0.5)
        assert all(m.last_heartbeat_ok > t for m, t in zip(members, synced_at, strict=True))
        (lane,) = shared.heartbeats._lanes.values()  # one node, one lane, whichever member heartbeats
        call = lane.call
        assert call is not None
        await asyncio.sleep(0.3)
        assert lane.call is call  # still the same stream, not one per heartbeat or per member
        await members[0].commit({("t", 0): 5})
        assert len(shared.commits._lanes) == 1
    finally:
        for member in members:
            await member.close()
        await shared.close()
    assert shared.heartbeats._lanes == {}
