"""KIP-345 static membership (docs/PROTOCOL.md#static-membership-kip-345): instance -> member mapping,
replacement without rebalance, fencing of the old id on every API, replacement per state, static members vs
join/sync deadlines, session expiry, batch LeaveGroup, and the identity order (docs/PROTOCOL.md#validation-order)."""

from __future__ import annotations

from groupcoord.coordinator import GroupCoordinator, GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.support import SeqIds
from tests.unit.harness import (
    COMPLETING,
    PREPARING,
    RESTART,
    STABLE,
    TOPIC_METADATA_CHANGE,
    UPGRADE,
    Harness,
    code,
    records_of,
)


def test_static_member_mapping_is_recorded():
    h = Harness()
    s1, s2 = h.form(static=["s1", "s2"])
    assert h.group().static_members == {"s1": s1.member_id, "s2": s2.member_id}
    assert s1.member_id.startswith("s1-") and s2.member_id.startswith("s2-")
    d = h.describe_one()
    assert [(m.member_id, m.group_instance_id) for m in d.members] == [(s1.member_id, "s1"), (s2.member_id, "s2")]


# -- replacement in Stable ----------------------------------------------------------------------------


def test_stable_follower_replacement_gets_new_id_without_rebalance():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    old = s.member_id
    eff = s.restart()
    resp = eff.response
    assert code(resp) == Errors.NONE
    new = resp.member_id
    assert new != old and new.startswith("s1-")
    assert (resp.generation_id, resp.leader, resp.skip_assignment) == (1, a.member_id, False)
    assert [type(rec) for rec in eff.records] == [r.StaticMemberReplaced]
    g = h.group()
    assert (g.state, g.generation_id) == (STABLE, 1)
    assert g.static_members == {"s1": new}
    assert set(g.members) == {a.member_id, new}
    # The assignment moved to the new id.
    assert code(s.sync().response) == Errors.NONE
    assert s.sync().response.assignment == b"assign-s1"
    assert code(s.heartbeat().response) == Errors.NONE
    h.assert_replay()


def test_stable_leader_replacement_gets_skip_assignment_and_full_member_list():
    h = Harness()
    s1, s2, s3 = h.form(static=["s1", "s2", "s3"])
    assert h.group().leader_id == s1.member_id
    eff = s1.restart()
    resp = eff.response
    assert code(resp) == Errors.NONE
    new = resp.member_id
    assert resp.skip_assignment is True
    assert resp.leader == new
    assert resp.generation_id == 1
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in resp.members] == [
        (new, "s1", b"range-meta"),
        (s2.member_id, "s2", b"range-meta"),
        (s3.member_id, "s3", b"range-meta"),
    ]
    assert records_of(eff, r.RebalanceStarted) == []
    g = h.group()
    assert (g.state, g.generation_id, g.leader_id) == (STABLE, 1, new)
    assert s1.sync().response.assignment == b"assign-s1"
    assert s2.sync().response.assignment == b"assign-s2"


def test_old_id_is_fenced_on_join_sync_heartbeat_commit_and_leave():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    old = s.member_id
    s.restart()
    kw = {"member_id": old, "instance_id": "s1"}
    assert code(h.join(**kw).response) == Errors.FENCED_INSTANCE_ID
    assert code(h.sync(generation_id=1, **kw).response) == Errors.FENCED_INSTANCE_ID
    assert code(h.heartbeat(generation_id=1, **kw).response) == Errors.FENCED_INSTANCE_ID
    resp = h.commit(generation_id=1, **kw).response
    assert [code(p) for t in resp.topics for p in t.partitions] == [Errors.FENCED_INSTANCE_ID]
    eff = h.leave("g", (old, "s1"))
    assert code(eff.response) == Errors.NONE
    assert [code(m) for m in eff.response.members] == [Errors.FENCED_INSTANCE_ID]
    assert eff.records == []
    g = h.group()
    assert (g.state, g.generation_id, g.static_members["s1"]) == (STABLE, 1, s.member_id)
    assert h.fetch().response.topics == []  # the fenced commit wrote nothing


def test_old_id_without_instance_id_is_unknown():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    old = s.member_id
    s.restart()
    assert code(h.heartbeat(generation_id=1, member_id=old).response) == Errors.UNKNOWN_MEMBER_ID
    assert code(h.join(member_id=old).response) == Errors.UNKNOWN_MEMBER_ID


def test_stable_replacement_that_would_change_the_protocol_rebalances():
    h = Harness()
    s1, s2 = h.form(static=["s1", "s2"])
    assert h.group().protocol_name == "range"
    eff = s2.restart(protocols=(("roundrobin", b"rr-only"),))
    assert eff.response is None
    assert h.group().state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.cause == r.RebalanceCause.PROTOCOL_CHANGED
    assert rb.group_instance_id == "s2"
    s1.join()
    assert h.group().protocol_name == "roundrobin"
    assert s2.generation == 2


def test_stable_replacement_with_topic_metadata_change_or_upgrade_rebalances():
    for reason in (TOPIC_METADATA_CHANGE, UPGRADE):
        h = Harness()
        _a, s = h.form("a", static=["s1"])
        eff = s.restart(join_reason=reason, reason="why")
        assert eff.response is None
        (rb,) = records_of(eff, r.RebalanceStarted)
        assert (rb.cause, rb.group_instance_id, rb.join_reason, rb.reason) == (
            r.RebalanceCause.JOIN_REASON,
            "s1",
            reason,
            "why",
        )
        assert h.group().state == PREPARING


def test_stable_replacement_with_restart_does_not_rebalance():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    eff = s.restart(join_reason=RESTART)
    assert code(eff.response) == Errors.NONE
    assert records_of(eff, r.RebalanceStarted) == []
    assert h.group().state == STABLE


# -- replacement in the other states ----------------------------------------------------------------


def test_completing_replacement_rebalances_and_fences_the_old_parked_sync():
    h = Harness()
    a, s = h.form("a", static=["s1"], sync=False)
    old = s.member_id
    assert s.sync().response is None  # parked until the leader's assignment
    old_sync = s.sync_token
    eff = s.restart()
    assert code(eff.reply_for(old_sync)) == Errors.FENCED_INSTANCE_ID
    assert eff.response is None
    g = h.group()
    assert g.state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.group_instance_id) == (r.RebalanceCause.STATIC_MEMBER_REPLACED, "s1")
    assert g.static_members["s1"] != old
    a.join()
    assert code(s.join_reply()) == Errors.NONE
    assert (h.group().generation_id, s.generation) == (2, 2)
    h.assert_replay()


def test_preparing_replacement_just_joins_and_fences_the_old_parked_join():
    h = Harness()
    a, b, s = h.form("a", "b", static=["s1"])
    a.join()  # leader rejoin: PreparingRebalance
    assert s.join().response is None
    old_join = s.join_token
    old = s.member_id
    eff = s.restart()
    assert code(eff.reply_for(old_join)) == Errors.FENCED_INSTANCE_ID
    assert eff.response is None  # the new id waits for the join phase like everyone else
    assert [type(rec) for rec in eff.records] == [r.StaticMemberReplaced]
    assert h.group().state == PREPARING
    new = h.group().static_members["s1"]
    assert new != old
    b.join()
    assert code(s.join_reply()) == Errors.NONE
    assert s.join_reply().member_id == new
    assert (s.generation, h.group().state) == (2, COMPLETING)
    assert set(h.group().members) == {a.member_id, b.member_id, new}
    assert [rb.cause for rb in h.rebalances()] == [r.RebalanceCause.MEMBER_JOINED, r.RebalanceCause.LEADER_REJOINED]


def test_new_static_member_rebalances_even_with_restart():
    h = Harness()
    h.form("a")
    s = h.member("s1", static=True)
    eff = s.join(join_reason=RESTART)
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.group_instance_id) == (r.RebalanceCause.MEMBER_JOINED, "s1")


def test_known_static_member_rejoining_with_its_id_in_stable_is_a_known_member():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    eff = s.join()  # follower, same protocols: immediate answer, same id
    assert code(eff.response) == Errors.NONE
    assert eff.response.member_id == s.member_id
    # No rebalance: only the marker that makes the avoided one visible as an event.
    assert [(type(x), x.cause) for x in eff.records] == [(r.RebalanceAvoided, r.AvoidedCause.KNOWN_MEMBER)]


# -- deadlines, session expiry ------------------------------------------------------------------------


def test_static_member_is_kept_when_it_misses_the_join_deadline_but_dynamic_one_is_removed():
    h = Harness()
    a = h.member("a", rebalance_timeout_ms=10_000)
    b = h.member("b", session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    s = h.member("s1", static=True, session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    for m in (a, b):
        m.join()
    a.join()
    s.join()
    b.join()
    h.sync_all([a, b, s])
    a.join()  # leader rejoin; b and s never rejoin
    assert h.advance(9_999).records == []
    eff = h.advance(1)
    removed = records_of(eff, r.MemberRemoved)
    assert [(x.member_id, x.cause) for x in removed] == [(b.member_id, r.RemovalCause.JOIN_TIMEOUT)]
    g = h.group()
    assert (g.state, g.generation_id) == (COMPLETING, 2)
    assert set(g.members) == {a.member_id, s.member_id}
    assert g.static_members == {"s1": s.member_id}
    assert code(a.join_reply()) == Errors.NONE
    assert [m.member_id for m in a.last_join.members] == [a.member_id, s.member_id]
    h.assert_replay()


def test_static_member_is_removed_by_session_expiry():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    h.run(8_000, a)
    eff = h.advance(2_000)
    removed = records_of(eff, r.MemberRemoved)
    assert [(x.member_id, x.cause) for x in removed] == [(s.member_id, r.RemovalCause.SESSION_EXPIRED)]
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id, rb.group_instance_id) == (r.RebalanceCause.SESSION_EXPIRED, s.member_id, "s1")
    assert h.group().static_members == {}
    # It comes back as a new static member, not as a replacement.
    eff = s.restart()
    assert records_of(eff, r.StaticMemberReplaced) == []
    (added,) = records_of(eff, r.MemberAdded)
    assert added.group_instance_id == "s1"
    assert h.group().static_members == {"s1": added.member_id}


def test_static_mapping_survives_failover():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    store = GroupStore.restore(h.core.store.snapshot())
    h.core = GroupCoordinator(h.config, h.clock, new_uuid=SeqIds(), store=store)
    old = s.member_id
    eff = s.restart()
    assert code(eff.response) == Errors.NONE
    assert records_of(eff, r.RebalanceStarted) == []
    assert code(h.heartbeat(generation_id=1, member_id=old, instance_id="s1").response) == Errors.FENCED_INSTANCE_ID


# -- batch LeaveGroup -----------------------------------------------------------------------------------


def test_batch_leave_answers_per_member_and_rebalances_immediately():
    h = Harness()
    a, s1, s2, s3 = h.form("a", static=["s1", "s2", "s3"])
    eff = h.leave(
        "g",
        ("", "s1", "scale down"),
        ("bogus-id", "s2"),
        ("", "nope"),
        (s3.member_id, "s3"),
        (a.member_id, ""),
    )
    resp = eff.response
    assert code(resp) == Errors.NONE
    assert [(m.member_id, m.group_instance_id, code(m)) for m in resp.members] == [
        ("", "s1", Errors.NONE),
        ("bogus-id", "s2", Errors.FENCED_INSTANCE_ID),
        ("", "nope", Errors.UNKNOWN_MEMBER_ID),
        (s3.member_id, "s3", Errors.NONE),
        (a.member_id, "", Errors.NONE),
    ]
    g = h.group()
    assert set(g.members) == {s2.member_id}
    assert g.static_members == {"s2": s2.member_id}
    assert g.state == PREPARING
    rebalances = records_of(eff, r.RebalanceStarted)
    assert len(rebalances) == 1
    assert (rebalances[0].cause, rebalances[0].group_instance_id, rebalances[0].reason) == (
        r.RebalanceCause.ADMIN_REMOVAL,
        "s1",
        "scale down",
    )
    removed = records_of(eff, r.MemberRemoved)
    assert [(x.member_id, x.cause) for x in removed] == [
        (s1.member_id, r.RemovalCause.ADMIN_REMOVAL),
        (s3.member_id, r.RemovalCause.LEAVE),
        (a.member_id, r.RemovalCause.LEAVE),
    ]
    s2.join()
    assert (h.group().state, h.group().generation_id) == (COMPLETING, 2)
    h.assert_replay()


def test_leave_by_instance_id_of_a_member_parked_in_join_answers_its_join():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    h.member("b").join()  # a pending id keeps the join phase open
    a.join()
    assert s.join().response is None
    eff = h.leave("g", ("", "s1"))
    assert [code(m) for m in eff.response.members] == [Errors.NONE]
    assert code(eff.reply_for(s.join_token)) == Errors.UNKNOWN_MEMBER_ID
    assert s.member_id not in h.group().members
    assert h.group().state == PREPARING


# -- identity order -------------------------------------------------------------------------------------


def test_identity_order_instance_mapped_to_another_member_is_fenced():
    h = Harness()
    a, _s = h.form("a", static=["s1"])
    # Fenced wins over an unknown member id and over a wrong generation.
    assert code(h.heartbeat(generation_id=7, member_id="nobody", instance_id="s1").response) == (
        Errors.FENCED_INSTANCE_ID
    )
    assert code(h.sync(generation_id=7, member_id=a.member_id, instance_id="s1").response) == (
        Errors.FENCED_INSTANCE_ID
    )
    assert code(h.join(member_id=a.member_id, instance_id="s1").response) == Errors.FENCED_INSTANCE_ID


def test_identity_order_unmapped_instance_is_unknown_member():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    assert code(h.heartbeat(generation_id=7, member_id=s.member_id, instance_id="s9").response) == (
        Errors.UNKNOWN_MEMBER_ID
    )
    assert code(h.join(member_id=s.member_id, instance_id="s9").response) == Errors.UNKNOWN_MEMBER_ID
    resp = h.commit(generation_id=1, member_id=s.member_id, instance_id="s9").response
    assert [code(p) for t in resp.topics for p in t.partitions] == [Errors.UNKNOWN_MEMBER_ID]


def test_identity_before_generation():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    assert code(s.heartbeat(generation_id=5).response) == Errors.ILLEGAL_GENERATION
    assert code(s.sync(generation_id=5).response) == Errors.ILLEGAL_GENERATION
    assert code(h.heartbeat(generation_id=5, member_id="nobody").response) == Errors.UNKNOWN_MEMBER_ID


def test_replacement_hands_the_session_to_the_new_id():
    h = Harness()
    a, s = h.form("a", static=["s1"])  # s1's session would end at t=10s
    h.run(8_000, a)
    s.restart()  # t=8s: the new id's session ends at t=18s, the old timer is gone
    h.run(9_999, a, step=3_333)
    assert h.group().static_members == {"s1": s.member_id}
    eff = h.advance(1)
    assert [x.member_id for x in records_of(eff, r.MemberRemoved)] == [s.member_id]


def test_replacement_with_new_metadata_for_the_same_protocol_does_not_rebalance():
    h = Harness()
    _a, s = h.form("a", static=["s1"])
    eff = s.restart(protocols=(("range", b"range-meta-v2"), ("roundrobin", b"rr-meta")))
    assert code(eff.response) == Errors.NONE
    assert records_of(eff, r.RebalanceStarted) == []
    assert h.describe_one().members[1].member_metadata == b"range-meta-v2"
