"""The shape of the core (issue 26): one shard per partition whose collaborators write into the result each call
returns; pure validation; typed timers whose operations re-check what they act on; injected time and ids."""

from __future__ import annotations

import ast
import copy
import inspect
from pathlib import Path

import pytest

from groupcoord.coordinator import CoordinatorResult, CoreCallFailed, GroupConfig, GroupCoordinator, ReentrantCall
from groupcoord.coordinator import validation as v
from groupcoord.coordinator.responses import join_error, sync_error
from groupcoord.coordinator.timers import (
    JoinDeadline,
    PendingMemberTimeout,
    RetentionCheck,
    SessionTimeout,
    SyncDeadline,
    Timers,
)
from groupcoord.node.responses import error_response
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import FakeClock, SeqIds
from tests.unit.harness import PREPARING, STABLE, Harness, code

COORDINATOR = Path(__file__).resolve().parents[2] / "coordinator"


# -- one shard, collaborators, explicit results --------------------------------------------------------------


def test_the_shard_has_collaborators_not_base_classes():
    assert GroupCoordinator.__mro__ == (GroupCoordinator, object)
    core = GroupCoordinator(GroupConfig(), FakeClock(), new_uuid=SeqIds())
    shared = {id(c.rt) for c in (core.rebalance, core.membership, core.offsets, core.admin, core.topics)}
    assert shared == {id(core.runtime)}


def test_a_call_from_inside_another_is_refused_and_the_outer_result_kept():
    """`node_groups` is the node's callback, run in the middle of a JoinGroup that would create a group. A call made
    from it would apply its records under the outer call and hand them back apart: the shard refuses it."""
    h = Harness()
    (a,) = h.form("a")
    nested: list[CoordinatorResult] = []

    def node_groups() -> int:
        nested.append(h.core.heartbeat(pb.HeartbeatRequest(group_id="g", member_id=a.member_id, generation_id=1)))
        return 0

    with pytest.raises(CoreCallFailed) as failed:
        h.core.join_group(h.join_req(group_id="new"), "outer", node_groups=node_groups)
    assert isinstance(failed.value.__cause__, ReentrantCall)
    assert nested == []
    assert failed.value.result.token == "outer"
    assert failed.value.result.records == []
    # The shard is usable again: the guard is released with the failed call.
    assert code(a.heartbeat().response) == Errors.NONE
    assert code(h.join(group_id="new", token="again").response) == Errors.MEMBER_ID_REQUIRED


def test_load_from_inside_a_call_is_refused():
    h = Harness()

    def node_groups() -> int:
        h.core.load()
        return 0

    with pytest.raises(CoreCallFailed) as failed:
        h.core.join_group(h.join_req(), "t", node_groups=node_groups)
    assert isinstance(failed.value.__cause__, ReentrantCall)


def test_each_call_returns_its_own_result():
    h = Harness()
    first = h.join()
    kept = (list(first.records), list(first.replies))
    second = h.join(member_id=first.response.member_id)
    assert second is not first
    assert (first.records, first.replies) == kept
    assert [type(rec) for rec in first.records] == [r.PendingMemberAdded]


# -- validation is pure -------------------------------------------------------------------------------------


def _soft_state(core: GroupCoordinator) -> tuple[object, object, object]:
    timers = core.runtime.timers
    deadlines = {key: timers.deadline(key) for key in _keys(core)}
    return core.store.snapshot(), copy.deepcopy(core.runtime.soft), deadlines


def _keys(core: GroupCoordinator) -> list[object]:
    keys: list[object] = [RetentionCheck()]
    for gid, group in core.store.groups.items():
        keys += [JoinDeadline(gid), SyncDeadline(gid)]
        keys += [SessionTimeout(gid, mid) for mid in group.members]
        keys += [PendingMemberTimeout(gid, mid) for mid in group.pending_members]
    return [key for key in keys if key in core.runtime.timers]


def test_validation_functions_take_no_writer():
    """Nothing a check is given can write: no runtime, shard, rebalance or result among their parameters."""
    writers = {"Runtime", "GroupCoordinator", "Rebalance", "CoordinatorResult", "Timers", "GroupSoft"}
    checks = [f for name, f in vars(v).items() if inspect.isfunction(f) and f.__module__ == v.__name__]
    assert len(checks) >= 10
    for check in checks:
        annotations = " ".join(str(a) for a in inspect.get_annotations(check).values())
        assert not any(w in annotations for w in writers), (check.__name__, annotations)


def test_validation_leaves_records_soft_state_and_timers_alone():
    h = Harness(max_size=2)
    a, b = h.form("a", "b")
    h.clock.advance(5_000)
    h.join(client_id="pending")  # a pending id, and its timer
    core, group, cfg = h.core, h.group(), h.config
    before = _soft_state(core)
    commit = pb.OffsetCommitRequest(group_id="g", member_id=a.member_id, generation_id=1)
    join = h.join_req(member_id=b.member_id)
    stranger = h.join_req(member_id="stranger")
    assert v.offset_commit_error(group, commit) == Errors.NONE
    assert not v.is_simple_commit(group, commit)
    assert v.member_error(group, a.member_id, "") == Errors.NONE
    assert v.generation_error(cfg, False, core.store, "g", a.member_id, "", 1) == (Errors.NONE, group)
    assert v.join_request_error(cfg, join) == (Errors.NONE, "")
    assert v.supports_protocols(group, "consumer", ["range"], a.member_id)
    assert v.accepts_joining(cfg, group, {}, join)
    assert not v.accepts_joining(cfg, group, {}, stranger)
    assert v.new_group_refusal(cfg, core.store, "other", lambda: 0) == ""
    assert v.group_id_error(cfg, False, "g") == Errors.NONE
    assert _soft_state(core) == before


def test_an_accepted_commit_still_refreshes_the_member_session():
    """The refresh moved out of the check into the handler: the handler still does it."""
    h = Harness()
    (a,) = h.form("a")
    key = SessionTimeout("g", a.member_id)
    h.clock.advance(4_000)
    assert h.core.runtime.timers.deadline(key) == 10_000
    h.commit(member_id=a.member_id, generation_id=1)
    assert h.core.runtime.timers.deadline(key) == 14_000


def test_the_node_answers_join_and_sync_errors_with_the_core_builders():
    join = pb.JoinGroupRequest(group_id="g", member_id="m")
    assert error_response(join, Errors.NOT_COORDINATOR, "x") == join_error(Errors.NOT_COORDINATOR, "m", "x")
    sync = pb.SyncGroupRequest(group_id="g")
    assert error_response(sync, Errors.NOT_COORDINATOR, "x") == sync_error(Errors.NOT_COORDINATOR, "x")


# -- timers: a typed table of operations --------------------------------------------------------------------


def test_timers_run_the_operation_armed_last_for_a_key():
    timers = Timers()
    ran: list[str] = []
    timers.arm(JoinDeadline("g"), 10, lambda out: ran.append("first"))
    timers.arm(JoinDeadline("g"), 20, lambda out: ran.append("replaced"))
    timers.arm(SessionTimeout("g", "m"), 15, lambda out: ran.append("session"))
    timers.arm(SyncDeadline("g"), 15, lambda out: ran.append("cancelled"))
    timers.cancel(SyncDeadline("g"))
    assert timers.next_deadline() == 15
    assert timers.pop_due(14) is None
    while (operation := timers.pop_due(20)) is not None:
        operation(CoordinatorResult())
    assert ran == ["session", "replaced"]
    assert len(timers) == 0


def test_every_timer_kind_is_armed_with_an_operation():
    h = Harness()
    h.form("a", "b", group_id="stable")
    c, _d = h.form("c", "d", group_id="preparing")
    c.join()
    h.form("e", group_id="completing", sync=False)
    h.join(group_id="pending", client_id="p")
    timers = h.core.runtime.timers
    assert RetentionCheck() in timers
    assert JoinDeadline("preparing") in timers
    assert SyncDeadline("completing") in timers
    assert PendingMemberTimeout("pending", next(iter(h.group("pending").pending_members))) in timers
    assert SessionTimeout("stable", next(iter(h.group("stable").members))) in timers


@pytest.mark.parametrize("kind", ["join", "sync", "session", "pending"])
def test_a_stale_timer_re_checks_its_precondition_and_writes_nothing(kind):
    """A deadline that fires in a state it was not armed for (a Stable group's join or sync deadline, a member that
    left, a pending id that joined) does nothing; so does any deadline of a deleted group."""
    h = Harness()
    a, b = h.form("a", "b")
    assert h.group().state == STABLE
    rebalance = h.core.rebalance
    arm = {
        "join": lambda gid: rebalance.arm_join(gid, 0),
        "sync": lambda gid: rebalance.arm_sync(gid, 0),
        "session": lambda gid: rebalance.arm_session(gid, "left-long-ago", 0),
        "pending": lambda gid: rebalance.arm_pending(gid, a.member_id, 0),
    }[kind]
    if kind == "sync":
        a.join()  # PreparingRebalance: a sync deadline has nothing to end
        assert h.group().state == PREPARING
    arm("g")
    arm("deleted")
    state = h.group().state
    tick = h.absorb(h.core.tick())
    assert (tick.records, h.group().state) == ([], state)
    assert set(h.group().members) == {a.member_id, b.member_id}


# -- time and ids are injected ------------------------------------------------------------------------------


def test_the_core_has_no_clock_or_id_source_of_its_own():
    params = inspect.signature(GroupCoordinator).parameters
    assert params["clock"].default is inspect.Parameter.empty
    assert params["new_uuid"].default is inspect.Parameter.empty
    forbidden = {"time", "uuid", "random", "secrets", "datetime", "os", "threading", "asyncio", "socket"}
    for path in sorted(COORDINATOR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            assert not forbidden & set(names), (path.name, names)
