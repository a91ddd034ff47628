"""Fuzz target 2: every RPC of a real node over gRPC, with hostile field values and with random payload bytes.

Contract (README, "Talking to the cluster"): errors are codes in the response; gRPC statuses mean transport
trouble only. So a call ends in a response whose error codes are all known, or INVALID_ARGUMENT (a payload
that is not the request message), or RESOURCE_EXHAUSTED (over max_request_bytes). Never INTERNAL or UNKNOWN
(a handler bug), never a dead or NOT_SERVING node, never a traceback in its log (the `node` fixture), and the
offsets acknowledged before the run are still there after it. A JoinGroup or SyncGroup may legitimately
park past the client's deadline (a join phase waits for the group's rebalance timeout).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2
from hypothesis import given
from hypothesis import strategies as st

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.e2e.support import assign, health_status, join_request
from tests.fuzz import strategies as hs
from tests.fuzz.profiles import campaign, fuzz_settings, time_limit
from tests.fuzz.support import FuzzNode, anchor, anchored

SERVICE = pb.DESCRIPTOR.services_by_name["GroupCoordinator"]
METHODS = {m.name: m for m in SERVICE.methods}
GROUPS = ("fz0", "fz1", "fz2")
INSTANCES = ("i0", "i1")
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the node's default max_request_bytes
PARKING = {"JoinGroup", "SyncGroup"}
# Bulk lists stay small here: the pure target checks that work grows linearly; over the network a bulk
# OffsetFetch is answered with ~8 times its size (every partition index comes back with two -1s).
BULK = 2_000
# A parked JoinGroup / SyncGroup is given up on after PARK_S. Any other call is answered at once, so its
# deadline is a hang detector, generous for a loaded CI machine (a bulk request is linear, ~0.1 s).
PARK_S, HANG_S = 3.0, 15.0
# Member ids the node handed out so far, offered to the strategies of the next targets.
MEMBERS: list[str] = []


def check_status(method: str, error: grpc.RpcError, size: int) -> None:
    code = error.code()  # type: ignore[attr-defined]
    allowed = {grpc.StatusCode.INVALID_ARGUMENT}
    if size > MAX_REQUEST_BYTES:
        allowed.add(grpc.StatusCode.RESOURCE_EXHAUSTED)
    if method in PARKING:
        allowed.add(grpc.StatusCode.DEADLINE_EXCEEDED)
    assert code in allowed, f"{method}: {code} {error.details()}"  # type: ignore[attr-defined]


def check_replies(method: str, replies: list[Message]) -> None:
    for reply in replies:
        assert not hs.unknown_codes(reply), f"{method}: unknown error code in {reply}"
        member_id = getattr(reply, "member_id", "")
        if method == "JoinGroup" and member_id and member_id not in MEMBERS:
            MEMBERS.append(member_id)


def invoke(node: FuzzNode, method: str, payload: bytes) -> list[Message]:
    """Sends raw request bytes; returns the parsed replies (a stream's, or the one unary reply)."""
    descriptor = METHODS[method]
    path = f"/{SERVICE.full_name}/{method}"
    parse = GetMessageClass(descriptor.output_type).FromString
    timeout = PARK_S if method in PARKING else HANG_S
    if descriptor.client_streaming:  # the same request twice on one stream: two answers, in order
        call = node.channel.stream_stream(path, response_deserializer=parse)
        return list(call(iter((payload, payload)), timeout=timeout))
    if descriptor.server_streaming:
        return list(node.channel.unary_stream(path, response_deserializer=parse)(payload, timeout=timeout))
    return [node.channel.unary_unary(path, response_deserializer=parse)(payload, timeout=timeout)]


def send(node: FuzzNode, method: str, payload: bytes) -> None:
    try:
        replies = invoke(node, method, payload)
    except grpc.RpcError as error:
        check_status(method, error, len(payload))
    else:
        check_replies(method, replies)


@pytest.fixture
def untouched(node: FuzzNode) -> Iterator[FuzzNode]:
    """Offsets acknowledged before the test are unchanged after it, and the node still serves."""
    anchor(node.stub, 1_000)
    before = anchored(node.stub)
    yield node
    assert anchored(node.stub) == before
    assert health_status(node.process.address) == health_pb2.HealthCheckResponse.SERVING


def test_every_rpc_has_a_strategy():
    assert set(hs.BY_METHOD) == set(METHODS)


@time_limit(120)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_random_field_values(untouched: FuzzNode, method: str):
    # Fixed for the whole hypothesis run: a pool that changed between examples would make the same choices
    # draw differently (FlakyStrategyDefinition).
    strategy = hs.BY_METHOD[method](GROUPS, tuple(MEMBERS[-16:]), INSTANCES, BULK)

    @fuzz_settings(25)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        request = data.draw(strategy, label="request")
        send(untouched, method, request.SerializeToString())

    campaign(run)


def mutated(method: str) -> st.SearchStrategy[bytes]:
    """A valid encoding of a hostile request with a few bytes overwritten, inserted or cut off."""
    encoded = hs.BY_METHOD[method](GROUPS, (), INSTANCES, BULK).map(lambda m: m.SerializeToString())

    def edit(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
        out = bytearray(data)
        for position, value in edits:
            if out:
                out[position % len(out)] = value
            else:
                out.append(value)
        return bytes(out[: len(out) - cut])

    return st.builds(
        edit, encoded, st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), max_size=4), st.integers(0, 8)
    )


@time_limit(120)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_random_payload_bytes(untouched: FuzzNode, method: str):
    @fuzz_settings(25)
    @given(payload=st.one_of(st.binary(max_size=256), mutated(method)))
    def run(payload: bytes) -> None:
        send(untouched, method, payload)

    campaign(run)


@time_limit(30)
def test_afterwards_a_normal_group_still_works(untouched: FuzzNode):
    stub, group = untouched.stub, "fuzz-after"
    first = [stub.JoinGroup(join_request(group), timeout=10) for _ in range(2)]
    assert {j.error_code for j in first} == {Errors.MEMBER_ID_REQUIRED}
    futures = [stub.JoinGroup.future(join_request(group, member_id=j.member_id), timeout=20) for j in first]
    joins = [f.result() for f in futures]
    assert {j.error_code for j in joins} == {Errors.NONE}, joins
    leader = next(j for j in joins if j.member_id == j.leader)
    syncs = [
        stub.SyncGroup.future(
            pb.SyncGroupRequest(
                group_id=group,
                generation_id=j.generation_id,
                member_id=j.member_id,
                assignments=assign(leader) if j is leader else [],
            ),
            timeout=20,
        )
        for j in joins
    ]
    assert {s.result().error_code for s in syncs} == {Errors.NONE}
    for j in joins:
        beat = pb.HeartbeatRequest(group_id=group, generation_id=j.generation_id, member_id=j.member_id)
        assert stub.Heartbeat(beat, timeout=10).error_code == Errors.NONE
    described = stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[group]), timeout=10).groups[0]
    assert described.group_state == "Stable"
