"""Malformed input gets an error code or a gRPC status, never a crash, and the node keeps serving."""

from __future__ import annotations

import asyncio
import os

import grpc
import pytest

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.e2e.support import describe, heartbeat, join_dynamic, join_request, sync_all

MIB = 1024 * 1024


def big_protocol(size: int) -> list[pb.JoinGroupRequest.Protocol]:
    return [pb.JoinGroupRequest.Protocol(name="range", metadata=b"x" * size)]


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"group_id": ""}, Errors.INVALID_GROUP_ID),
        ({"group_id": "g" * 256}, Errors.INVALID_GROUP_ID),
        ({"session_timeout_ms": -1}, Errors.INVALID_SESSION_TIMEOUT),
        ({"session_timeout_ms": 499}, Errors.INVALID_SESSION_TIMEOUT),
        ({"rebalance_timeout_ms": -1}, Errors.INVALID_REQUEST),
        ({"join_reason": 99}, Errors.INVALID_REQUEST),
        ({"protocols": big_protocol(2 * MIB)}, Errors.INVALID_REQUEST),
        ({"protocol_type": ""}, Errors.INCONSISTENT_GROUP_PROTOCOL),
    ],
    ids=[
        "empty-group-id",
        "long-group-id",
        "negative-session-timeout",
        "session-timeout-below-min",
        "negative-rebalance-timeout",
        "unknown-join-reason",
        "2MB-metadata",
        "no-protocol-type",
    ],
)
async def test_bad_join_group_gets_an_error_code(stub, overrides, code):
    reply = await stub.JoinGroup(join_request(**{"group_id": "malformed", **overrides}))
    assert reply.error_code == code
    assert reply.generation_id == -1


async def test_bad_requests_of_other_apis_get_error_codes(stub):
    assert await heartbeat(stub, "", "m", 1) == Errors.INVALID_GROUP_ID
    sync = await stub.SyncGroup(pb.SyncGroupRequest(group_id="", member_id="m"))
    assert sync.error_code == Errors.INVALID_GROUP_ID
    leave = await stub.LeaveGroup(pb.LeaveGroupRequest(group_id="nobody-here"))
    assert leave.error_code == Errors.INVALID_REQUEST
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["g" * 256, "ok"]))
    assert [c.error_code for c in found.coordinators] == [Errors.INVALID_GROUP_ID, Errors.NONE]
    listed = await stub.ListGroups(pb.ListGroupsRequest(states_filter=["NoSuchState"]))
    assert listed.error_code == Errors.INVALID_REQUEST


async def test_a_message_over_the_transport_limit_is_resource_exhausted(stub):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.JoinGroup(join_request("malformed", protocols=big_protocol(10 * MIB)))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    ("method", "payload"),
    [
        ("JoinGroup", b"\xff\xff\xff\xff"),
        ("JoinGroup", b"\x0a\xff"),
        # Field 1 (group_id) holding bytes that are not UTF-8.
        ("JoinGroup", b"\x0a\x03\xff\xfe\xfd"),
        ("Heartbeat", b"\x0a\x03\xff\xfe\xfd"),
        ("DescribeCluster", b"\xff\xff\xff\xff"),
    ],
)
async def test_garbage_payload_is_invalid_argument(channel, method, payload):
    call = channel.unary_unary(f"/groupcoord.v1.GroupCoordinator/{method}")  # no serializers: raw bytes
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(payload)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_garbage_on_the_tcp_port_drops_the_connection(node):
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    writer.write(os.urandom(4096) + b"GET / HTTP/1.1\r\n\r\n")
    await writer.drain()
    received = await asyncio.wait_for(reader.read(), timeout=10)  # returns at EOF: the node hung up
    assert reader.at_eof()
    writer.close()
    assert len(received) < 4096  # at most a GOAWAY frame, never a reply


async def test_after_all_that_the_node_still_serves_a_new_group(node, stub):
    assert node.alive()
    group = "after-malformed"
    joins = list(await asyncio.gather(join_dynamic(stub, group), join_dynamic(stub, group)))
    syncs = await sync_all(stub, group, joins, ["", ""])
    assert {s.error_code for s in syncs} == {Errors.NONE}
    assert (await describe(stub, group)).group_state == "Stable"
    for joined in joins:
        assert await heartbeat(stub, group, joined.member_id, joined.generation_id) == Errors.NONE
    assert node.alive()
