"""The client's reaction to every error code (docs/PROTOCOL.md#error-codes) a coordinator can return to a member
(the policy of docs/CLIENT.md#errors).

A real `GroupMember` talks to a real gRPC server (`FakeCoordinator`) that answers from scripted responses.

Code → expected reaction (tests below):
* MEMBER_ID_REQUIRED (JoinGroup) → adopt the given id, rejoin with it.
* UNKNOWN_MEMBER_ID (JoinGroup / SyncGroup / Heartbeat) → rejoin with an empty member id.
* ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (Heartbeat / SyncGroup) → revoke, rejoin with the same member id.
* COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR (any call, FindCoordinator) → FindCoordinator again, move there.
* COORDINATOR_LOAD_IN_PROGRESS → retry the same node, no FindCoordinator.
* FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID,
  GROUP_MAX_SIZE_REACHED, INVALID_REQUEST (code or gRPC INVALID_ARGUMENT) → fatal: `wait_failed()` raises
  the code's `FatalError` (client/errors.py) and nothing more is sent.
* THROTTLING_QUOTA_EXCEEDED (JoinGroup) → wait `throttle_time_ms`, join again; POLICY_VIOLATION (a configured
  limit) → fatal, with the node's message; an OffsetCommit refused as a whole → its code for every partition.
* UNKNOWN_SERVER_ERROR: the client treats it as fatal on JoinGroup, SyncGroup and Heartbeat (docs/CLIENT.md#errors;
  Kafka does the same for JoinGroup; its heartbeat also surfaces it as an exception).
* OFFSET_METADATA_TOO_LARGE, ILLEGAL_GENERATION (OffsetCommit) → returned per partition; the member goes on.
* UNSTABLE_OFFSET_COMMIT (OffsetFetch): `committed()` never sets require_stable, and no groupcoord offset is
  transactional (docs/PROTOCOL.md#error-codes), so a coordinator never returns it to a member; if one does,
  `committed()` ignores the code and returns the offsets (pinned below as found behaviour).

Codes a coordinator cannot return to a member's calls, hence not covered here:
* NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND: DeleteGroups / DescribeGroups only (the Admin client's business).
* DUPLICATE_RESOURCE (beyond the group protocol's list): AddMembersToGroup only.
* NONE: covered implicitly by every happy path.

Ownership bounded by the session, close and the blocking wrapper: test_member_session.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from groupcoord.client.errors import PolicyViolation
from groupcoord.client.member import GroupMember
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.fake_coordinator import FakeCoordinator
from tests.unit.member_harness import (
    ALL,
    Recorder,
    failed_with,
    member_factory,
    quiet_after_failure,
    started,
    until,
)

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
async def other() -> AsyncIterator[FakeCoordinator]:
    server = await FakeCoordinator(node_id=2).start()  # type: ignore[abstract]  # it serves what a member calls
    yield server
    await server.stop()


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., tuple[GroupMember, Recorder]]]:
    """Builds members on a fake (short timings) and closes them all, bounded, at the end."""
    async with member_factory() as build:
        yield build


# -- MEMBER_ID_REQUIRED / UNKNOWN_MEMBER_ID ----------------------------------------------------------------


async def test_member_id_required_adopts_id_and_rejoins(fake: FakeCoordinator, make: Any) -> None:
    fake.script("JoinGroup", pb.JoinGroupResponse(error_code=Errors.MEMBER_ID_REQUIRED, member_id="c-minted"))
    member, _ = make(fake)
    await started(member)
    assert (await member.wait_stable(5)).partitions == ALL
    assert [j.member_id for j in fake.sent("JoinGroup")] == ["", "c-minted"]
    assert member.member_id == "c-minted"
    assert fake.sent("SyncGroup")[0].member_id == "c-minted"


@pytest.mark.parametrize("where", ["JoinGroup", "SyncGroup", "Heartbeat"])
async def test_unknown_member_id_rejoins_with_empty_id(fake: FakeCoordinator, make: Any, where: str) -> None:
    if where == "JoinGroup":
        # Give the member an id first, so that dropping it is visible.
        fake.script("JoinGroup", pb.JoinGroupResponse(error_code=Errors.MEMBER_ID_REQUIRED, member_id="c-old"))
    fake.script(where, Errors.UNKNOWN_MEMBER_ID)
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    if where == "JoinGroup":
        assert [j.member_id for j in fake.sent("JoinGroup")] == ["", "c-old", ""]
    else:
        # The coordinator named the member "c-1" in the first join; the rejoin drops it.
        assert [j.member_id for j in await fake.wait_for("JoinGroup", 2)] == ["", ""]
    if where == "Heartbeat":
        await until(lambda: member.generation_id == 2)
        assert recorder.revoked == [ALL]
    await member.wait_stable(5)
    assert member.assignment.partitions == ALL


@pytest.mark.parametrize("code", [Errors.ILLEGAL_GENERATION, Errors.REBALANCE_IN_PROGRESS])
async def test_heartbeat_rejoin_codes_revoke_and_rejoin_with_same_id(
    fake: FakeCoordinator, make: Any, code: int
) -> None:
    fake.script("Heartbeat", None, code)
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    first_id = member.member_id
    joins = await fake.wait_for("JoinGroup", 2)
    assert joins[1].member_id == first_id
    await until(lambda: member.generation_id == 2 and member.assignment.partitions == ALL)
    assert recorder.revoked == [ALL]
    assert recorder.assigned == [ALL, ALL]
    # Heartbeats carried the identity of the generation they were sent in.
    beats = fake.sent("Heartbeat")
    assert (beats[0].member_id, beats[0].generation_id) == (first_id, 1)


@pytest.mark.parametrize("code", [Errors.ILLEGAL_GENERATION, Errors.REBALANCE_IN_PROGRESS])
async def test_sync_rejoin_codes_rejoin_with_same_id(fake: FakeCoordinator, make: Any, code: int) -> None:
    # Generation 1 is fine; a heartbeat asks for a rebalance; the sync of generation 2 fails with `code`.
    fake.script("Heartbeat", Errors.REBALANCE_IN_PROGRESS)
    fake.script("SyncGroup", None, code)
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    first_id = member.member_id
    joins = await fake.wait_for("JoinGroup", 3)
    assert [j.member_id for j in joins] == ["", first_id, first_id]
    await until(lambda: member.generation_id == 3 and member.assignment.partitions == ALL)
    # Revoked once (before the first rejoin); the failed sync never handed out anything.
    assert recorder.revoked == [ALL]
    assert recorder.assigned == [ALL, ALL]
    assert member.generation_id == 3


# -- coordinator moves ---------------------------------------------------------------------------------------


def moved_to(server: FakeCoordinator, target: FakeCoordinator, code: int) -> Callable[[Any, Any], Any]:
    """A scripted answer that moves `server`'s FindCoordinator answer to `target`, then answers `code`."""

    def answer(request: Any, context: Any) -> Any:
        server.coordinator = target
        return server._error(method_of(request), request, code)

    return answer


def method_of(request: Any) -> str:
    return type(request).__name__.removesuffix("Request")


@pytest.mark.parametrize("code", [Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR])
async def test_join_rediscovers_and_moves(fake: FakeCoordinator, other: FakeCoordinator, make: Any, code: int) -> None:
    fake.script("JoinGroup", moved_to(fake, other, code))
    member, _ = make(fake)
    await started(member)
    assert (await member.wait_stable(5)).partitions == ALL
    assert fake.count("FindCoordinator") == 2
    assert fake.count("JoinGroup") == 1
    assert other.count("JoinGroup") == 1 and other.count("SyncGroup") == 1


@pytest.mark.parametrize("code", [Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR])
async def test_sync_rediscovers_and_moves(fake: FakeCoordinator, other: FakeCoordinator, make: Any, code: int) -> None:
    fake.script("SyncGroup", moved_to(fake, other, code))
    member, _ = make(fake)
    await started(member)
    await member.wait_stable(5)
    # The sync finds the move; a heartbeat beside it (client/session.py) may find it too, before the sync does.
    assert fake.count("FindCoordinator") in (2, 3)
    # The same sync (generation and member id) is retried at the new coordinator: no new join.
    assert fake.count("JoinGroup") == 1 and other.count("JoinGroup") == 0
    [sync] = other.sent("SyncGroup")
    assert (sync.generation_id, sync.member_id) == (1, member.member_id)


@pytest.mark.parametrize("code", [Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR])
async def test_heartbeat_rediscovers_and_moves_without_rebalance(
    fake: FakeCoordinator, other: FakeCoordinator, make: Any, code: int
) -> None:
    fake.script("Heartbeat", None, moved_to(fake, other, code))
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    beats = await other.wait_for("Heartbeat", 3)
    assert {(b.member_id, b.generation_id) for b in beats} == {(member.member_id, 1)}
    assert fake.count("FindCoordinator") == 2
    assert other.count("JoinGroup") == 0 and fake.count("JoinGroup") == 1
    assert recorder.revoked == [] and member.assignment.partitions == ALL


@pytest.mark.parametrize("code", [Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR])
async def test_commit_rediscovers_and_moves(
    fake: FakeCoordinator, other: FakeCoordinator, make: Any, code: int
) -> None:
    fake.script("OffsetCommit", moved_to(fake, other, code))
    member, _ = make(fake)
    await started(member)
    await member.wait_stable(5)
    assert await asyncio.wait_for(member.commit({("t", 0): 5}), 5) == {("t", 0): Errors.NONE}
    assert other.offsets == {("t", 0): 5}


async def test_find_coordinator_not_available_is_retried(fake: FakeCoordinator, make: Any) -> None:
    fake.find_error = Errors.COORDINATOR_NOT_AVAILABLE
    member, _ = make(fake)
    await started(member)
    await fake.wait_for("FindCoordinator", 3)
    fake.find_error = Errors.NONE
    assert (await member.wait_stable(5)).partitions == ALL


@pytest.mark.parametrize("method", ["JoinGroup", "SyncGroup", "OffsetFetch"])
async def test_load_in_progress_retries_same_node(fake: FakeCoordinator, make: Any, method: str) -> None:
    fake.script(method, Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_LOAD_IN_PROGRESS)
    member, _ = make(fake)
    await started(member)
    await member.wait_stable(5)
    if method == "OffsetFetch":
        assert await asyncio.wait_for(member.committed(), 5) == {}
    assert fake.count(method) == 3
    assert fake.count("FindCoordinator") == 1
    assert fake.count("JoinGroup") == (3 if method == "JoinGroup" else 1)


async def test_heartbeat_load_in_progress_retries_same_node(fake: FakeCoordinator, make: Any) -> None:
    fake.script("Heartbeat", Errors.COORDINATOR_LOAD_IN_PROGRESS)
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    await fake.wait_for("Heartbeat", 3)
    assert recorder.revoked == []
    assert fake.count("FindCoordinator") == 1


# -- fatal codes ----------------------------------------------------------------------------------------------

FATAL_ON_JOIN = [
    Errors.FENCED_INSTANCE_ID,
    Errors.INCONSISTENT_GROUP_PROTOCOL,
    Errors.INVALID_SESSION_TIMEOUT,
    Errors.INVALID_GROUP_ID,
    Errors.GROUP_MAX_SIZE_REACHED,
    Errors.POLICY_VIOLATION,
    Errors.INVALID_REQUEST,
    Errors.UNKNOWN_SERVER_ERROR,
]


@pytest.mark.parametrize("code", FATAL_ON_JOIN, ids=lambda c: Errors(c).name)
async def test_fatal_on_join(fake: FakeCoordinator, make: Any, code: int) -> None:
    fake.script("JoinGroup", code)
    member, recorder = make(fake, group_instance_id="i-1")
    await started(member)
    await failed_with(member, code)
    await quiet_after_failure(fake)
    assert recorder.assigned == []


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("SyncGroup", Errors.FENCED_INSTANCE_ID),
        ("SyncGroup", Errors.INCONSISTENT_GROUP_PROTOCOL),
        ("SyncGroup", Errors.UNKNOWN_SERVER_ERROR),
        ("Heartbeat", Errors.FENCED_INSTANCE_ID),
        ("Heartbeat", Errors.UNKNOWN_SERVER_ERROR),
    ],
    ids=lambda v: v if isinstance(v, str) else Errors(v).name,
)
async def test_fatal_after_join(fake: FakeCoordinator, make: Any, method: str, code: int) -> None:
    fake.script(method, *([None] if method == "Heartbeat" else []), code)
    member, _ = make(fake, group_instance_id="i-1")
    await started(member)
    await failed_with(member, code)
    await quiet_after_failure(fake)


async def test_invalid_argument_status_is_fatal_invalid_request(fake: FakeCoordinator, make: Any) -> None:
    async def abort(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed")

    fake.script("JoinGroup", abort)
    member, _ = make(fake)
    await started(member)
    await failed_with(member, Errors.INVALID_REQUEST)
    await quiet_after_failure(fake)


async def test_find_coordinator_invalid_group_id_is_fatal(fake: FakeCoordinator, make: Any) -> None:
    fake.find_error = Errors.INVALID_GROUP_ID
    member, _ = make(fake)
    await started(member)
    await failed_with(member, Errors.INVALID_GROUP_ID, timeout_s=1.5)


async def test_fenced_member_drops_its_assignment(fake: FakeCoordinator, make: Any) -> None:
    fake.script("Heartbeat", None, Errors.FENCED_INSTANCE_ID)
    member, recorder = make(fake, group_instance_id="i-1")
    await started(member)
    await member.wait_stable(5)
    await failed_with(member, Errors.FENCED_INSTANCE_ID)
    assert member.assignment.partitions == ()
    assert recorder.revoked == [ALL]


# -- offsets ----------------------------------------------------------------------------------------------------


async def test_commit_returns_per_partition_codes_and_member_goes_on(fake: FakeCoordinator, make: Any) -> None:
    def answer(request: Any, context: Any) -> Any:
        response = pb.OffsetCommitResponse()
        topic = response.topics.add(name="t")
        topic.partitions.add(partition_index=0, error_code=Errors.NONE)
        topic.partitions.add(partition_index=1, error_code=Errors.OFFSET_METADATA_TOO_LARGE)
        return response

    fake.script("OffsetCommit", answer, Errors.ILLEGAL_GENERATION)
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    result = await asyncio.wait_for(member.commit({("t", 0): 1, ("t", 1): 2}), 5)
    assert result == {("t", 0): Errors.NONE, ("t", 1): Errors.OFFSET_METADATA_TOO_LARGE}
    result = await asyncio.wait_for(member.commit({("t", 2): 3}), 5)
    assert result == {("t", 2): Errors.ILLEGAL_GENERATION}
    [first, _] = fake.sent("OffsetCommit")
    assert (first.generation_id, first.member_id) == (1, member.member_id)
    beats = fake.count("Heartbeat")
    await fake.wait_for("Heartbeat", beats + 2)
    assert fake.count("JoinGroup") == 1 and recorder.revoked == []
    assert member.assignment.partitions == ALL


async def test_committed_ignores_unstable_offset_commit(fake: FakeCoordinator, make: Any) -> None:
    """Found behaviour: `committed()` sends require_stable=false and returns offsets whatever the codes say."""
    response = pb.OffsetFetchResponse(error_code=Errors.UNSTABLE_OFFSET_COMMIT)
    response.topics.add(name="t").partitions.add(
        partition_index=0, committed_offset=-1, error_code=Errors.UNSTABLE_OFFSET_COMMIT
    )
    fake.script("OffsetFetch", response)
    member, _ = make(fake)
    assert await asyncio.wait_for(member.committed(), 5) == {("t", 0): -1}
    [request] = fake.sent("OffsetFetch")
    assert request.require_stable is False


# -- no busy spin -----------------------------------------------------------------------------------------------


async def count_requests_for(fake: FakeCoordinator, make: Any, window_s: float) -> int:
    member, _ = make(fake)
    await started(member)
    await asyncio.sleep(window_s)
    # Heartbeats go on at their interval beside a rejoin (client/session.py); the loops are the other calls.
    n = fake.count() - fake.count("Heartbeat")
    await asyncio.wait_for(member.close(), 5)
    return n


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("JoinGroup", Errors.COORDINATOR_NOT_AVAILABLE),
        ("JoinGroup", Errors.NOT_COORDINATOR),
        ("JoinGroup", Errors.COORDINATOR_LOAD_IN_PROGRESS),
        ("FindCoordinator", Errors.COORDINATOR_NOT_AVAILABLE),
    ],
    ids=lambda v: v if isinstance(v, str) else Errors(v).name,
)
async def test_retries_back_off(fake: FakeCoordinator, make: Any, method: str, code: int) -> None:
    if method == "FindCoordinator":
        fake.find_error = code
    else:
        fake.always[method] = code
    # One second for the brief's headline case, half a second (half the budget) for the others.
    window_s = 1.0 if code == Errors.COORDINATOR_NOT_AVAILABLE and method == "JoinGroup" else 0.5
    n = await count_requests_for(fake, make, window_s)
    print(f"{method} {Errors(code).name}: {n} requests in {window_s} s")
    assert n < 40 * window_s


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("JoinGroup", Errors.REBALANCE_IN_PROGRESS),
        ("JoinGroup", Errors.UNKNOWN_MEMBER_ID),
        ("SyncGroup", Errors.REBALANCE_IN_PROGRESS),
        ("SyncGroup", Errors.ILLEGAL_GENERATION),
    ],
    ids=lambda v: v if isinstance(v, str) else Errors(v).name,
)
async def test_rejoin_loops_back_off(fake: FakeCoordinator, make: Any, method: str, code: int) -> None:
    fake.always[method] = code
    n = await count_requests_for(fake, make, 0.5)
    print(f"{method} {Errors(code).name}: {n} requests in 0.5 s")
    assert n < 20


# -- limits (docs/SECURITY.md#limits) --------------------------------------------------------------------------


async def test_throttled_join_waits_the_hint_then_joins(fake: FakeCoordinator, make: Any) -> None:
    throttled = pb.JoinGroupResponse(
        error_code=Errors.THROTTLING_QUOTA_EXCEEDED, generation_id=-1, throttle_time_ms=300, error_message="slow down"
    )
    fake.script("JoinGroup", throttled, throttled)
    member, _ = make(fake)
    begun = time.monotonic()
    await started(member)
    assert (await member.wait_stable(5)).partitions == ALL
    assert time.monotonic() - begun >= 0.6
    assert len(fake.sent("JoinGroup")) == 3


async def test_policy_violation_on_join_is_fatal_with_the_nodes_message(fake: FakeCoordinator, make: Any) -> None:
    message = "this coordinator partition holds max_groups_per_partition = 3 groups"
    fake.script("JoinGroup", pb.JoinGroupResponse(error_code=Errors.POLICY_VIOLATION, error_message=message))
    member, _ = make(fake)
    await started(member)
    with pytest.raises(PolicyViolation, match=f"POLICY_VIOLATION: JoinGroup: {message}"):
        await asyncio.wait_for(member.wait_failed(), 5)
    await quiet_after_failure(fake)


async def test_commit_refused_as_a_whole_gives_its_code_for_each_partition(fake: FakeCoordinator, make: Any) -> None:
    refused = pb.OffsetCommitResponse(error_code=Errors.POLICY_VIOLATION, error_message="more than 1 partitions")
    fake.script("OffsetCommit", refused)
    member, _ = make(fake)
    await started(member)
    await member.wait_stable(5)
    codes = await asyncio.wait_for(member.commit({("t", 0): 5, ("t", 1): 6}), 5)
    assert codes == {("t", 0): Errors.POLICY_VIOLATION, ("t", 1): Errors.POLICY_VIOLATION}
