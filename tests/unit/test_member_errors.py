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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from groupcoord.client.discovery import Connections
from groupcoord.client.errors import CoordinatorUnavailable, FatalError, PolicyViolation
from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment
from groupcoord.client.sync import SyncGroupMember
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.fake_coordinator import FakeCoordinator

pytestmark = pytest.mark.timeout(20)

SESSION_MS = 1000
ALL = tuple(("t", p) for p in range(4))


@pytest.fixture
async def other() -> AsyncIterator[FakeCoordinator]:
    server = await FakeCoordinator(node_id=2).start()
    yield server
    await server.stop()


class Recorder:
    """on_assigned / on_revoked callbacks that remember what they were given."""

    def __init__(self) -> None:
        self.assigned: list[tuple[Any, ...]] = []
        self.revoked: list[tuple[Any, ...]] = []

    def on_assigned(self, assignment: Assignment) -> None:
        self.assigned.append(assignment.partitions)

    def on_revoked(self, assignment: Assignment) -> None:
        self.revoked.append(assignment.partitions)


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., tuple[GroupMember, Recorder]]]:
    """Builds members on a fake (short timings) and closes them all, bounded, at the end."""
    members: list[GroupMember] = []

    def build(server: FakeCoordinator, **kwargs: Any) -> tuple[GroupMember, Recorder]:
        recorder = Recorder()
        options: dict[str, Any] = {
            "client_id": "c",
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 2000,
            "heartbeat_interval_ms": 50,
            "on_assigned": recorder.on_assigned,
            "on_revoked": recorder.on_revoked,
        }
        options.update(kwargs)
        member = GroupMember([server.address], "g", {"t": 4}, **options)
        members.append(member)
        return member, recorder

    yield build
    for member in members:
        await asyncio.wait_for(member.close(), 10)


async def started(member: GroupMember) -> GroupMember:
    await member.start()
    return member


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Polls `predicate` until true or fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def failed_with(member: GroupMember, code: int, timeout_s: float = 5.0) -> None:
    with pytest.raises(FatalError) as caught:
        await asyncio.wait_for(member.wait_failed(), timeout_s)
    assert caught.value.code == code


async def quiet_after_failure(server: FakeCoordinator) -> None:
    """Nothing more is sent once the member failed."""
    before = server.count()
    await asyncio.sleep(0.3)
    assert server.count() == before, server.requests[before:]


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

    def answer(request: Any, context: Any) -> int:
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


# -- session loss -----------------------------------------------------------------------------------------------


async def test_heartbeat_failures_for_a_session_timeout_revoke(fake: FakeCoordinator, make: Any) -> None:
    member, recorder = make(fake)
    await started(member)
    await member.wait_stable(5)
    fake.always["Heartbeat"] = Errors.COORDINATOR_NOT_AVAILABLE
    fake.always["JoinGroup"] = Errors.COORDINATOR_NOT_AVAILABLE
    failing_since = time.monotonic()
    await asyncio.sleep(SESSION_MS / 1000 / 2)
    assert member.assignment.partitions == ALL, "kept while the coordinator may still hold the session"
    await until(lambda: recorder.revoked == [ALL], timeout_s=3)
    assert time.monotonic() - failing_since >= SESSION_MS / 1000 * 0.9
    assert member.assignment.partitions == ()


async def test_a_hanging_coordinator_cannot_stretch_ownership_past_the_session(
    fake: FakeCoordinator, make: Any
) -> None:
    """A heartbeat that never returns is cut at the session deadline, not at its own (longer) RPC timeout."""
    revoked_at: list[float] = []
    member, _ = make(fake, heartbeat_interval_ms=400, group_instance_id="i-1")
    member.on_revoked = lambda assignment: revoked_at.append(time.monotonic())
    await started(member)
    await member.wait_stable(5)

    async def hang(request: Any, context: Any) -> Any:
        await asyncio.sleep(30)

    fake.always["Heartbeat"] = hang
    fake.always["JoinGroup"] = hang
    await until(lambda: revoked_at, timeout_s=SESSION_MS / 1000 + 2)
    deadline = member.last_heartbeat_ok + SESSION_MS / 1000
    assert member.revoke_reason == "session_lost"
    assert deadline <= revoked_at[0] < deadline + 0.25, revoked_at[0] - deadline


async def test_a_hanging_node_asked_for_the_coordinator_cannot_stretch_ownership(
    fake: FakeCoordinator, make: Any
) -> None:
    """The coordinator moves and the node asked where to (FindCoordinator) hangs, like a SIGSTOPped node whose
    socket still accepts: the lookup is cut at the session deadline, so ownership ends in time."""
    revoked_at: list[float] = []
    member, _ = make(fake, heartbeat_interval_ms=400, group_instance_id="i-1")
    member.on_revoked = lambda assignment: revoked_at.append(time.monotonic())
    await started(member)
    await member.wait_stable(5)

    async def hang(request: Any, context: Any) -> Any:
        await asyncio.sleep(30)

    fake.always["FindCoordinator"] = hang
    fake.always["Heartbeat"] = Errors.COORDINATOR_NOT_AVAILABLE
    await until(lambda: revoked_at, timeout_s=SESSION_MS / 1000 + 2)
    deadline = member.last_heartbeat_ok + SESSION_MS / 1000
    assert member.revoke_reason == "session_lost"
    assert deadline <= revoked_at[0] < deadline + 0.25, revoked_at[0] - deadline


async def test_a_coordinator_lookup_keeps_its_deadline_when_a_node_hangs(fake: FakeCoordinator) -> None:
    async def hang(request: Any, context: Any) -> Any:
        await asyncio.sleep(30)

    fake.always["FindCoordinator"] = hang
    connections = Connections([fake.address])
    started_at = time.monotonic()
    with pytest.raises(CoordinatorUnavailable):
        await connections.coordinator("g", timeout_s=0.5)
    assert time.monotonic() - started_at < 1.0
    await connections.close()


async def test_unreachable_cluster_revokes_after_session_timeout(fake: FakeCoordinator, make: Any) -> None:
    # Static, so that close() sends no LeaveGroup to the unreachable cluster.
    member, recorder = make(fake, group_instance_id="i-1")
    await started(member)
    await member.wait_stable(5)
    await fake.stop()
    await until(lambda: recorder.revoked == [ALL], timeout_s=SESSION_MS / 1000 + 1.5)


# -- close ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("static", [False, True])
async def test_close_leaves_only_when_dynamic(fake: FakeCoordinator, make: Any, static: bool) -> None:
    member, recorder = make(fake, group_instance_id="i-1" if static else "")
    await started(member)
    await member.wait_stable(5)
    member_id = member.member_id
    await asyncio.wait_for(member.close(), 5)
    assert recorder.revoked == [ALL]
    leaves = fake.sent("LeaveGroup")
    if static:
        assert leaves == []
    else:
        [leave] = leaves
        assert [(m.member_id, m.group_instance_id) for m in leave.members] == [(member_id, "")]


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


# -- synchronous wrapper ----------------------------------------------------------------------------------------


async def test_sync_wrapper(fake: FakeCoordinator) -> None:
    def script() -> tuple[Any, ...]:
        with SyncGroupMember(
            [fake.address], "g", {"t": 4}, client_id="s", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=50
        ) as member:
            assignment = member.wait_stable(5)
            assert member.commit({("t", 0): 7}) == {("t", 0): Errors.NONE}
            assert member.committed() == {("t", 0): 7}
            assert member.assignment == assignment
            return assignment.partitions

    # The server runs on this test's loop, so the blocking script runs in a worker thread.
    assert await asyncio.wait_for(asyncio.to_thread(script), 10) == ALL
    assert fake.count("LeaveGroup") == 1


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
