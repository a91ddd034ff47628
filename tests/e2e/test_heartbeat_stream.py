"""HeartbeatStream: each message answered in order as Heartbeat would answer it, for any group of the node."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from groupcoord.client.member import GroupMember
from groupcoord.protocol.errors import Errors
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


async def test_each_heartbeat_on_the_stream_gets_the_unary_answer_in_order(stub):
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
    answers = []
    for request in requests:
        await call.write(request)
        answers.append((await call.read()).error_code)
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    unary = [(await stub.Heartbeat(r)).error_code for r in requests]
    expected = [Errors.NONE, Errors.NONE, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID, Errors.NONE]
    assert answers == unary == expected


async def test_a_malformed_message_ends_the_stream_with_invalid_argument(channel):
    call = channel.stream_stream("/groupcoord.v1.GroupCoordinator/HeartbeatStream")()
    await call.write(b"\xff\xff\xff")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await asyncio.wait_for(call.read(), 10)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_sdk_heartbeats_over_one_stream(node):
    member = GroupMember([node.address], "stream-sdk", {"t": 4}, session_timeout_ms=6_000, heartbeat_interval_ms=50)
    await member.start()
    try:
        await member.wait_stable()
        synced_at = member.last_heartbeat_ok
        await asyncio.sleep(0.5)
        stream = member._heartbeats
        assert member.last_heartbeat_ok > synced_at
        call = stream._call
        assert call is not None and stream._address == node.address
        await asyncio.sleep(0.3)
        assert stream._call is call  # still the same stream, not one per heartbeat
    finally:
        await member.close()
    assert member._heartbeats._call is None
