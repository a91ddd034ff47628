"""SyncGroup and Heartbeat: the per-state table (SyncGroup and Heartbeat columns, docs/PROTOCOL.md),
CompletingRebalance -> Stable, generation fencing, protocol checks, and which calls refresh the session."""

from __future__ import annotations

import pytest

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, STABLE, Harness, code, records_of

# -- Empty ----------------------------------------------------------------------------------------------


def test_empty_group_sync_and_heartbeat_are_unknown_member():
    h = Harness()
    a, b = h.form("a", "b")
    a.leave()
    b.leave()
    assert (h.group().state, h.group().generation_id) == (EMPTY, 2)
    for gen in (1, 2):
        assert code(a.sync(generation_id=gen).response) == Errors.UNKNOWN_MEMBER_ID
        assert code(a.heartbeat(generation_id=gen).response) == Errors.UNKNOWN_MEMBER_ID


def test_absent_group_sync_and_heartbeat_are_unknown_member():
    h = Harness()
    assert code(h.sync(member_id="m", generation_id=1).response) == Errors.UNKNOWN_MEMBER_ID
    assert code(h.heartbeat(member_id="m", generation_id=1).response) == Errors.UNKNOWN_MEMBER_ID
    assert not h.has_group()


# -- PreparingRebalance ------------------------------------------------------------------------------


def test_preparing_sync_and_heartbeat_are_rebalance_in_progress():
    h = Harness()
    a, b = h.form("a", "b")
    a.join()
    assert h.group().state == PREPARING
    eff = b.sync()
    assert code(eff.response) == Errors.REBALANCE_IN_PROGRESS
    assert eff.records == []
    assert code(b.heartbeat().response) == Errors.REBALANCE_IN_PROGRESS
    assert h.group().state == PREPARING


# -- CompletingRebalance -------------------------------------------------------------------------------


def test_completing_heartbeat_is_none():
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    assert code(a.heartbeat().response) == Errors.NONE
    assert code(b.heartbeat().response) == Errors.NONE
    assert h.group().state == COMPLETING


def test_completing_follower_sync_parks_until_leader_assignment_completes_all():
    h = Harness()
    a, b, c = h.form("a", "b", "c", sync=False)
    assert b.sync().response is None
    assert c.sync().response is None
    assert h.group().state == COMPLETING
    eff = a.sync({a.member_id: b"A", b.member_id: b"B", c.member_id: b"C"})
    assert h.group().state == STABLE
    assert records_of(eff, r.AssignmentsSynced) == [
        r.AssignmentsSynced("g", 1, {a.member_id: b"A", b.member_id: b"B", c.member_id: b"C"}, h.clock.wall_ms())
    ]
    replies = dict(eff.replies)
    assert set(replies) == {a.sync_token, b.sync_token, c.sync_token}
    for m, data in ((a, b"A"), (b, b"B"), (c, b"C")):
        resp = replies[m.sync_token]
        assert code(resp) == Errors.NONE
        assert (resp.assignment, resp.protocol_type, resp.protocol_name) == (data, "consumer", "range")
    h.assert_replay()


def test_completing_to_stable_then_late_follower_sync_gets_stored_assignment():
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    a.sync({a.member_id: b"A", b.member_id: b"B"})
    assert h.group().state == STABLE
    resp = b.sync().response
    assert (code(resp), resp.assignment) == (Errors.NONE, b"B")


def test_leader_assignment_missing_a_member_gives_it_an_empty_assignment():
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    a.sync({a.member_id: b"A", "not-a-member": b"X"})
    resp = b.sync().response
    assert (code(resp), resp.assignment) == (Errors.NONE, b"")
    assert "not-a-member" not in h.group().members


def test_completing_parked_sync_is_answered_when_a_rebalance_starts():
    h = Harness()
    _a, b = h.form("a", "b", sync=False)
    assert b.sync().response is None
    eff = b.join(protocols=(("range", b"changed"),))
    assert code(eff.reply_for(b.sync_token)) == Errors.REBALANCE_IN_PROGRESS
    assert h.group().state == PREPARING


# -- Stable ------------------------------------------------------------------------------------------------


def test_stable_sync_is_immediate_with_stored_assignment_and_heartbeat_is_none():
    h = Harness()
    a, b = h.form("a", "b")
    for m, data in ((a, b"assign-a"), (b, b"assign-b")):
        eff = m.sync()
        assert (code(eff.response), eff.response.assignment) == (Errors.NONE, data)
        assert eff.records == []
        assert code(m.heartbeat().response) == Errors.NONE
    # A leader re-sending SyncGroup with other assignments in Stable does not change them.
    a.sync({a.member_id: b"other", b.member_id: b"other"})
    assert b.sync().response.assignment == b"assign-b"


# -- generation, identity, protocol checks --------------------------------------------------------------


@pytest.mark.parametrize("state", ["completing", "stable"])
def test_wrong_generation_is_illegal_generation(state):
    h = Harness()
    _a, b = h.form("a", "b", sync=state == "stable")
    for gen in (0, 2, -1):
        eff = b.sync(generation_id=gen)
        assert code(eff.response) == Errors.ILLEGAL_GENERATION
        assert eff.records == []
        assert code(b.heartbeat(generation_id=gen).response) == Errors.ILLEGAL_GENERATION


def test_previous_generation_is_illegal_after_a_rebalance():
    h = Harness()
    a, b = h.form("a", "b")
    a.join()
    b.join()
    assert h.group().generation_id == 2
    assert code(h.heartbeat(generation_id=1, member_id=b.member_id).response) == Errors.ILLEGAL_GENERATION
    assert code(h.sync(generation_id=1, member_id=b.member_id).response) == Errors.ILLEGAL_GENERATION


def test_unknown_member_in_an_active_group():
    h = Harness()
    h.form("a", "b")
    assert code(h.sync(generation_id=1, member_id="x").response) == Errors.UNKNOWN_MEMBER_ID
    assert code(h.heartbeat(generation_id=1, member_id="x").response) == Errors.UNKNOWN_MEMBER_ID
    assert code(h.heartbeat(generation_id=1, member_id="").response) == Errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    "fields", [{"protocol_type": "connect"}, {"protocol_name": "roundrobin"}], ids=["type", "name"]
)
@pytest.mark.parametrize("state", ["completing", "stable"])
def test_sync_with_mismatched_protocol_is_inconsistent(fields, state):
    h = Harness()
    a, _b = h.form("a", "b", sync=state == "stable")
    eff = a.sync({a.member_id: b"A"}, **fields)
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []
    assert h.group().state == (STABLE if state == "stable" else COMPLETING)


def test_sync_with_matching_protocol_fields_is_accepted():
    h = Harness()
    a, _b = h.form("a", "b", sync=False)
    eff = a.sync({a.member_id: b"A"}, protocol_type="consumer", protocol_name="range")
    assert code(eff.response) == Errors.NONE
    assert h.group().state == STABLE


@pytest.mark.parametrize("group_id", ["", "x" * 256])
def test_invalid_group_id(group_id):
    h = Harness()
    h.form("a")
    assert code(h.sync(group_id=group_id, generation_id=1, member_id="a").response) == Errors.INVALID_GROUP_ID
    assert code(h.heartbeat(group_id=group_id, generation_id=1, member_id="a").response) == Errors.INVALID_GROUP_ID


# -- session refresh ------------------------------------------------------------------------------------


def test_heartbeats_keep_a_member_alive_and_silence_expires_it():
    h = Harness()
    a, b = h.form("a", "b")
    h.run(30_000, a, b)
    assert (h.group().state, h.group().generation_id) == (STABLE, 1)
    h.run(6_000, a)  # b's last heartbeat was at t=30s
    assert h.advance(3_999).records == []
    eff = h.advance(1)
    removed = records_of(eff, r.MemberRemoved)
    assert [(x.member_id, x.cause) for x in removed] == [(b.member_id, r.RemovalCause.SESSION_EXPIRED)]
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.SESSION_EXPIRED, b.member_id)
    assert h.group().state == PREPARING
    h.assert_replay()


def test_stable_sync_refreshes_the_session():
    h = Harness()
    a, b = h.form("a", "b")
    h.run(8_000, a)
    assert code(b.sync().response) == Errors.NONE  # at t=8s: b's session now ends at t=18s
    h.run(9_999, a, step=3_333)
    assert b.member_id in h.group().members
    eff = h.advance(1)
    assert [x.member_id for x in records_of(eff, r.MemberRemoved)] == [b.member_id]


def test_error_heartbeat_of_an_unknown_member_changes_nothing():
    h = Harness()
    _a, _b = h.form("a", "b")
    eff = h.heartbeat(generation_id=1, member_id="ghost")
    assert eff.records == []
    assert h.core.next_deadline() == 10_000


def test_members_parked_in_join_or_sync_do_not_session_expire():
    h = Harness()
    a = h.member("a", rebalance_timeout_ms=60_000)
    b = h.member("b", session_timeout_ms=60_000)
    a.join()
    b.join()
    a.join()
    b.join()
    h.sync_all([a, b])
    a.join()  # parked in JoinGroup for 40s, far past its 10s session
    assert h.advance(40_000).records == []
    g = h.group()
    assert g.state == PREPARING
    assert a.member_id in g.members
    b.join()
    assert (code(a.join_reply()), a.generation) == (Errors.NONE, 2)
    # A follower parked in SyncGroup while the leader takes its time.
    h2 = Harness()
    a, b = h2.form("a", "b", sync=False, rebalance_timeout_ms=60_000)
    assert b.sync().response is None
    h2.run(40_000, a)
    assert b.member_id in h2.group().members
    a.sync({a.member_id: b"A", b.member_id: b"B"})
    assert (code(b.sync_reply()), b.assignment) == (Errors.NONE, b"B")


def test_parked_sync_session_restarts_when_answered():
    h = Harness()
    a, b = h.form("a", "b", sync=False, rebalance_timeout_ms=60_000)
    b.sync()
    h.run(20_000, a)
    a.sync({a.member_id: b"A", b.member_id: b"B"})  # b answered at t=20s: its session ends at t=30s
    h.run(9_999, a, step=3_333)
    assert b.member_id in h.group().members
    eff = h.advance(1)
    assert [x.member_id for x in records_of(eff, r.MemberRemoved)] == [b.member_id]
