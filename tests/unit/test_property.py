"""Property-based test of the group coordinator (issue 2 acceptance).

A hypothesis state machine drives one `GroupCoordinator` with random request / time sequences over three
groups and six simulated clients (three static, three dynamic). The clients mostly follow the classic
protocol (join, adopt MEMBER_ID_REQUIRED ids, sync with the leader's assignment, heartbeat, commit) and
sometimes misbehave (stale generation, stale or foreign member ids, missing instance id, changed or
inconsistent protocols, lazy clients that never sync, static restarts), while admins add members, remove
them by instance id and delete groups, time passes (ticking at each deadline, or one late tick), a
snapshot is taken, or the partition fails over (unload + a new coordinator over the restored store). The machine
is tests/unit/property_machine.py (its rules), property_driver.py (the driver and the invariants) and
property_model.py (the clients' views, strategies, `check_derived`).

Checked after every step (and at every tick inside a step):
  (a) replay: every call's records go through `encode_batch` / `decode_batch` into a replica `GroupStore`;
      each record changes the replica as it changed the live store, and the snapshots are equal. At
      teardown the whole log is replayed again into a fresh store.
  (b) snapshots: at random points a snapshot (round-tripped through msgpack) is kept; restore(snapshot) +
      the records after it equals the live store, every step and at teardown (for every snapshot).
  (c) a group's generation never decreases while the group exists.
  (d) liveness: no group stays in PreparingRebalance / CompletingRebalance past a bound derived from the
      configuration (`check_liveness`), no JoinGroup stays parked past its join deadline (`check_parked`),
      and after a long quiet period every group is Empty with nothing parked (`quiet`).
  (e) pending members: at most `max_pending_members` per group, and each one is gone within its session
      timeout unless it joined; every member the coordinator has not heard from for a session timeout is
      gone (`check_sessions`).
  (f) parked requests: every token is answered exactly once, with the right message type; only JoinGroup
      and SyncGroup ever park; parked joins exist only in PreparingRebalance and parked syncs only in
      CompletingRebalance; the coordinator's parked count equals ours; an unload answers all of them.
  (g) state shape (`check_derived`, live and replayed): Empty has no members; CompletingRebalance and Stable
      have members and the protocol the vote picks; leader, static mapping and protocol counts agree.
  (h) responses agree with the state: heartbeat NONE / REBALANCE_IN_PROGRESS, committed, fetched and
      deleted offsets, simple commits on Empty groups, batch leave results, SyncGroup assignments, DescribeGroups
      and ListGroups; a static restart of a Stable group with unchanged protocols replaces the member id
      without a rebalance.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

from groupcoord.coordinator import GroupConfig, GroupCoordinator, GroupState
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import FakeClock, SeqIds
from tests.unit.profiles import examples
from tests.unit.property_machine import CoordinatorMachine
from tests.unit.property_model import METADATA_LIMIT

CoordinatorMachine.TestCase.settings = settings(
    max_examples=examples(500),
    stateful_step_count=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoordinatorProperties = CoordinatorMachine.TestCase


# -- regressions ---------------------------------------------------------------------------------------


def _static_join(core: GroupCoordinator, instance: str, token: str, member_id: str = "") -> Any:
    return core.join_group(
        pb.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            member_id=member_id,
            group_instance_id=instance,
            client_id="c",
            protocol_type="consumer",
            protocols=[pb.JoinGroupRequest.Protocol(name="range")],
        ),
        token,
    )


def _run_timers(core: GroupCoordinator, clock: FakeClock, until: int) -> list[Any]:
    replies: list[Any] = []
    while (deadline := core.next_deadline()) is not None and deadline <= until:
        clock.now = max(clock.now, deadline)
        replies.extend(core.tick().replies)
    clock.now = until
    replies.extend(core.tick().replies)
    return replies


def test_regression_member_whose_parked_sync_is_failed_keeps_a_session() -> None:
    """Found by the machine (fixed in 6067a56): a member whose parked SyncGroup was failed by a new
    rebalance lost its session deadline, so it never expired.

    Static a and b form generation 1 (leader a); b's SyncGroup parks; a never syncs, its session expires,
    the rebalance answers b's SyncGroup REBALANCE_IN_PROGRESS. If b then goes silent it must expire one
    session timeout later and the group must become Empty, not wait for b forever."""
    clock = FakeClock()
    core = GroupCoordinator(GroupConfig(), clock, new_uuid=SeqIds())  # initial delay 3 s, sessions 10 s
    _static_join(core, "a", "ja")
    _static_join(core, "b", "jb")
    replies = dict(_run_timers(core, clock, 6_000))  # one delay window plus one extension for b
    a, b = replies["ja"], replies["jb"]
    assert (a.error_code, b.error_code, a.generation_id, a.leader) == (0, 0, 1, a.member_id)
    sync = pb.SyncGroupRequest(group_id="g", generation_id=1, member_id=b.member_id, group_instance_id="b")
    assert core.sync_group(sync, "sb").response is None
    replies = dict(_run_timers(core, clock, 16_000))  # a's session (and the sync deadline) expire
    assert replies["sb"].error_code == Errors.REBALANCE_IN_PROGRESS
    group = core.store.get("g")
    assert group is not None and group.state == GroupState.PREPARING_REBALANCE
    _run_timers(core, clock, 16_000 + 10_000)  # b's session, counted from that reply
    group = core.store.get("g")
    assert group is not None
    assert b.member_id not in group.members
    assert group.state == GroupState.EMPTY


def test_regression_machine_sequence() -> None:
    """The machine's shrunk counterexample for that bug, replayed with every check."""
    m = CoordinatorMachine()
    m.setup(GroupConfig(initial_rebalance_delay_ms=0, offset_metadata_max_bytes=METADATA_LIMIT))
    m.checks()
    m.live(members=[(0, "g0", False), (2, "g0", False)], ms=6_001, interval=3_000, stagger=False)
    m.checks()
    m.live(members=[(1, "g0", False)], ms=10_000, interval=1_000, stagger=False)
    m.checks()
    m.teardown()
