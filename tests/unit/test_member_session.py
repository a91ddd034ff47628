"""A member's ownership is bounded by its session (docs/CLIENT.md#errors): heartbeats that fail, a coordinator or a
node that hangs, an unreachable cluster all end it within a session timeout of the last heartbeat the coordinator
accepted, never later; on close a dynamic member leaves and a static one does not; the blocking wrapper does the
same. A real `GroupMember` talks to a real gRPC server (`FakeCoordinator`) that answers from scripted responses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from groupcoord.client.discovery import Connections
from groupcoord.client.errors import CoordinatorUnavailable
from groupcoord.client.member import GroupMember
from groupcoord.client.sync import SyncGroupMember
from groupcoord.protocol.errors import Errors
from tests.unit.fake_coordinator import FakeCoordinator
from tests.unit.member_harness import ALL, SESSION_MS, Recorder, member_factory, started, until

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., tuple[GroupMember, Recorder]]]:
    """Builds members on a fake (short timings) and closes them all, bounded, at the end."""
    async with member_factory() as build:
        yield build


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
    await until(lambda: bool(revoked_at), timeout_s=SESSION_MS / 1000 + 2)
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
    await until(lambda: bool(revoked_at), timeout_s=SESSION_MS / 1000 + 2)
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
