"""group.max.size (GROUP_MAX_SIZE_REACHED), Kafka's acceptJoiningMember (docs/PROTOCOL.md#timing-rules-and-limits)."""

from __future__ import annotations

import dataclasses

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, PREPARING, STABLE, Harness, code, records_of


def test_stable_group_at_max_size_rejects_new_dynamic_and_static_members():
    h = Harness(max_size=2)
    _a, _b = h.form("a", "b")
    eff = h.join(client_id="c")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.records == []
    eff = h.join(instance_id="s1")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.records == []
    g = h.group()
    assert (g.state, g.generation_id, len(g.members), g.pending_members) == (STABLE, 1, 2, {})


def test_existing_members_of_a_full_stable_group_can_rejoin():
    h = Harness(max_size=2)
    a, b = h.form("a", "b")
    assert code(b.join().response) == Errors.NONE
    assert a.join().response is None
    b.join()
    assert code(a.join_reply()) == Errors.NONE
    assert h.group().generation_id == 2


def test_completing_group_at_max_size_rejects_a_new_member():
    h = Harness(max_size=2)
    h.form("a", "b", sync=False)
    eff = h.join(instance_id="s1")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.records == []
    assert h.group().state == COMPLETING


def test_group_below_max_size_accepts_a_new_member():
    h = Harness(max_size=3)
    h.form("a", "b")
    assert code(h.join(client_id="c").response) == Errors.MEMBER_ID_REQUIRED


def test_preparing_known_member_rejoining_after_the_limit_is_removed():
    h = Harness(max_size=2)
    a, b = h.form("a", "b")
    a.join()  # leader rejoin: PreparingRebalance, 1 parked
    s = h.member("s1", static=True)
    assert s.join().response is None  # fewer than max parked: accepted
    assert len(h.group().members) == 3
    eff = b.join()  # two are parked now: b is over the limit
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.response.member_id == ""
    removed = records_of(eff, r.MemberRemoved)
    assert [(x.member_id, x.cause) for x in removed] == [(b.member_id, r.RemovalCause.GROUP_MAX_SIZE)]
    g = h.group()
    assert b.member_id not in g.members
    # The remaining members are all parked: the join phase completes.
    assert (g.state, g.generation_id, set(g.members)) == (COMPLETING, 2, {a.member_id, s.member_id})
    assert code(a.join_reply()) == code(s.join_reply()) == Errors.NONE
    h.assert_replay()


def test_preparing_new_member_is_rejected_when_max_members_are_parked():
    # The initial rebalance delay keeps the group in PreparingRebalance with every member parked.
    h = Harness(max_size=2, initial_rebalance_delay_ms=3_000)
    s1, s2 = h.member("s1", static=True), h.member("s2", static=True)
    s1.join()
    s2.join()
    assert h.group().state == PREPARING
    eff = h.join(instance_id="s3")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert records_of(eff, r.MemberAdded) == []
    assert "s3" not in h.group().static_members
    eff = h.join(client_id="d")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.records == []


def test_preparing_parked_member_can_send_join_again_at_the_limit():
    h = Harness(max_size=2, initial_rebalance_delay_ms=3_000)
    s1, s2 = h.member("s1", static=True), h.member("s2", static=True)
    s1.join()
    s2.join()
    s2_id = h.group().static_members["s2"]
    first = s2.join_token
    eff = s2.join(member_id=s2_id)  # already parked: accepted, replaces its parked request
    assert eff.response is None
    assert code(eff.reply_for(first)) == Errors.REBALANCE_IN_PROGRESS
    assert s2_id in h.group().members
    h.advance(6_000)  # s2 arrived within the first delay window: one extension
    assert code(s2.join_reply()) == Errors.NONE
    assert h.group().generation_id == 1


def test_empty_group_accepts_its_first_member():
    h = Harness(max_size=1)
    (a,) = h.form("a")
    assert code(h.join(client_id="b").response) == Errors.GROUP_MAX_SIZE_REACHED
    assert set(h.group().members) == {a.member_id}


# -- group.max.size comes before member identity (validation order, Kafka's acceptJoiningMember) ------------------


def test_a_refused_member_gets_the_same_answer_when_it_retries():
    h = Harness(max_size=2)
    a, b = h.form("a", "b")
    a.join()
    h.member("s1", static=True).join()
    old_id = b.member_id
    assert code(b.join().response) == Errors.GROUP_MAX_SIZE_REACHED  # removed; the join phase completed
    assert h.group().state == COMPLETING
    eff = h.join(member_id=old_id, client_id="b")
    assert (code(eff.response), eff.response.member_id, eff.records) == (Errors.GROUP_MAX_SIZE_REACHED, "", [])


def test_a_refused_pending_member_leaves_the_pending_set_and_the_join_phase_completes():
    h = Harness(max_size=2)
    (a,) = h.form("a")
    c, d = h.member("c"), h.member("d")
    assert code(c.join().response) == code(d.join().response) == Errors.MEMBER_ID_REQUIRED  # 1 member < 2
    assert c.join().response is None  # c joins: PreparingRebalance, d's pending id holds the phase open
    assert a.join().response is None  # 2 parked
    assert h.group().state == PREPARING
    eff = d.join()
    assert (code(eff.response), eff.response.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    removed = records_of(eff, r.PendingMemberRemoved)
    assert [(x.member_id, x.cause) for x in removed] == [(d.member_id, r.RemovalCause.GROUP_MAX_SIZE)]
    g = h.group()
    assert (g.state, g.generation_id, g.pending_members) == (COMPLETING, 2, {})
    assert code(a.join_reply()) == code(c.join_reply()) == Errors.NONE
    h.assert_replay()


def test_a_pending_member_of_a_stable_group_over_a_lowered_limit_is_refused_and_forgotten():
    h = Harness(max_size=3)
    h.form("a", "b")
    d = h.member("d")
    assert code(d.join().response) == Errors.MEMBER_ID_REQUIRED
    h.core.runtime.config = dataclasses.replace(h.config, max_size=2)
    eff = d.join()
    assert (code(eff.response), eff.response.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    assert [type(x) for x in eff.records] == [r.PendingMemberRemoved]
    assert (h.group().state, h.group().pending_members) == (STABLE, {})
    eff = d.join()
    assert (code(eff.response), eff.records) == (Errors.GROUP_MAX_SIZE_REACHED, [])


def test_static_member_restart_in_a_full_stable_group_is_a_replacement_not_a_new_member():
    h = Harness(max_size=2)
    _a, s = h.form("a", static=["s1"])
    old = s.member_id
    eff = s.restart()
    assert code(eff.response) == Errors.NONE
    assert eff.response.member_id != old
    assert records_of(eff, r.RebalanceStarted) == []
    assert (h.group().state, h.group().static_members["s1"]) == (STABLE, s.member_id)


def test_static_member_restart_in_a_full_completing_group_rebalances():
    h = Harness(max_size=2)
    _a, s = h.form("a", static=["s1"], sync=False)
    eff = s.restart()
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.cause == r.RebalanceCause.STATIC_MEMBER_REPLACED


def test_static_member_restart_over_the_limit_of_a_preparing_group_is_refused_and_keeps_its_member():
    h = Harness(max_size=2)
    a, s = h.form("a", static=["s1"])
    a.join()
    h.member("n1", static=True).join()  # 2 parked
    eff = s.restart()
    assert (code(eff.response), eff.records) == (Errors.GROUP_MAX_SIZE_REACHED, [])
    assert h.group().static_members["s1"] == s.member_id


def test_unknown_member_id_in_a_full_group_is_group_max_size_reached():
    h = Harness(max_size=2)
    h.form("a", "b")
    eff = h.join(member_id="ghost-1")
    assert (code(eff.response), eff.response.member_id, eff.records) == (Errors.GROUP_MAX_SIZE_REACHED, "", [])


def test_full_preparing_group_refuses_a_member_before_checking_its_identity():
    h = Harness(max_size=2)
    a, s = h.form("a", static=["s1"])
    a.join()  # PreparingRebalance, 1 parked
    n = h.member("n1", static=True)
    n.join()  # 2 parked: the group is at its limit
    assert h.group().state == PREPARING
    # s1's member id with another instance's id: the limit answers first, and s1's id is removed (Kafka's
    # group.remove(memberId)); the two parked members then form the generation.
    eff = h.join(member_id=s.member_id, instance_id="n1")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert [x.member_id for x in records_of(eff, r.MemberRemoved)] == [s.member_id]
    assert (h.group().state, set(h.group().members)) == (COMPLETING, {a.member_id, n.member_id})
    h.assert_replay()
