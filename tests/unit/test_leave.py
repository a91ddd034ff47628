"""LeaveGroup: the per-state table (LeaveGroup column, docs/PROTOCOL.md#answers-per-state) and request
validation. The static / batch cases of KIP-345 are in test_static.py."""

from __future__ import annotations

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, Harness, code, records_of


def member_codes(eff):
    return [code(m) for m in eff.response.members]


def test_empty_group_leave_is_unknown_member_per_member():
    h = Harness()
    a, b = h.form("a", "b")
    a.leave()
    b.leave()
    assert h.group().state == EMPTY
    eff = h.leave("g", (a.member_id, ""), ("", "s1"), ("x", ""))
    assert code(eff.response) == Errors.NONE
    assert member_codes(eff) == [Errors.UNKNOWN_MEMBER_ID] * 3
    assert eff.records == []


def test_absent_group_leave_is_unknown_member_per_member():
    h = Harness()
    eff = h.leave("g", ("m1", ""), ("", "s1"))
    assert code(eff.response) == Errors.NONE
    assert member_codes(eff) == [Errors.UNKNOWN_MEMBER_ID] * 2
    assert not h.has_group()


def test_preparing_leave_removes_the_member_and_may_complete_the_join_phase():
    h = Harness()
    a, b, c = h.form("a", "b", "c")
    a.join()
    b.join()
    assert h.group().state == PREPARING
    eff = c.leave("bye")
    assert member_codes(eff) == [Errors.NONE]
    removed = records_of(eff, r.MemberRemoved)
    assert [(x.member_id, x.cause, x.reason) for x in removed] == [(c.member_id, r.RemovalCause.LEAVE, "bye")]
    assert records_of(eff, r.RebalanceStarted) == []  # already rebalancing
    g = h.group()
    assert (g.state, g.generation_id, set(g.members)) == (COMPLETING, 2, {a.member_id, b.member_id})
    assert code(a.join_reply()) == code(b.join_reply()) == Errors.NONE
    h.assert_replay()


def test_completing_leave_removes_and_rebalances():
    h = Harness()
    _a, b, c = h.form("a", "b", "c", sync=False)
    b.sync()
    eff = c.leave("scaling in")
    assert member_codes(eff) == [Errors.NONE]
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id, rb.reason) == (r.RebalanceCause.MEMBER_LEFT, c.member_id, "scaling in")
    assert h.group().state == PREPARING
    assert c.member_id not in h.group().members
    assert code(eff.reply_for(b.sync_token)) == Errors.REBALANCE_IN_PROGRESS


def test_stable_leave_removes_and_rebalances():
    h = Harness()
    a, b, c = h.form("a", "b", "c")
    eff = b.leave()
    assert member_codes(eff) == [Errors.NONE]
    assert [type(rec) for rec in eff.records] == [r.MemberRemoved, r.RebalanceStarted]
    rb = eff.records[1]
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.MEMBER_LEFT, b.member_id)
    assert h.group().state == PREPARING
    a.join()
    c.join()
    g = h.group()
    assert (g.state, g.generation_id, set(g.members)) == (COMPLETING, 2, {a.member_id, c.member_id})
    # The member that left is gone for every API.
    assert code(b.heartbeat(generation_id=2).response) == Errors.UNKNOWN_MEMBER_ID
    assert code(b.join().response) == Errors.UNKNOWN_MEMBER_ID


def test_leader_leaving_hands_leadership_to_a_remaining_member():
    h = Harness()
    a, b = h.form("a", "b")
    a.leave()
    assert h.group().leader_id == b.member_id
    b.join()
    assert b.last_join.leader == b.member_id
    assert [m.member_id for m in b.last_join.members] == [b.member_id]


def test_unknown_member_in_a_batch_does_not_stop_the_others():
    h = Harness()
    a, b, c = h.form("a", "b", "c")
    eff = h.leave("g", ("ghost", ""), (b.member_id, ""), (c.member_id, ""))
    assert member_codes(eff) == [Errors.UNKNOWN_MEMBER_ID, Errors.NONE, Errors.NONE]
    assert set(h.group().members) == {a.member_id}
    assert len(records_of(eff, r.RebalanceStarted)) == 1


def test_leave_with_no_members_is_invalid_request():
    h = Harness()
    h.form("a")
    eff = h.leave("g")
    assert code(eff.response) == Errors.INVALID_REQUEST
    assert eff.records == []


def test_leave_with_invalid_group_id():
    h = Harness()
    for group_id in ("", "x" * 256):
        eff = h.leave(group_id, ("m", ""))
        assert code(eff.response) == Errors.INVALID_GROUP_ID
        assert eff.records == []


def test_leave_of_a_member_parked_in_join_answers_its_join():
    h = Harness()
    a, b, _c = h.form("a", "b", "c")
    a.join()
    b.join()
    eff = h.leave("g", (b.member_id, ""))
    assert code(eff.reply_for(b.join_token)) == Errors.UNKNOWN_MEMBER_ID
    assert h.group().state == PREPARING
