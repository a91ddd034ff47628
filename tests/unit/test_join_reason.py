"""JoinReason (docs/PROTOCOL.md#joinreason): RESTART without rebalance, TOPIC_METADATA_CHANGE / UPGRADE with one,
UNKNOWN = classic rules, forced rebalances win; every rebalance records why, DescribeGroups shows it."""

from __future__ import annotations

import pytest

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import (
    COMPLETING,
    PREPARING,
    RESTART,
    STABLE,
    TOPIC_METADATA_CHANGE,
    UNKNOWN,
    UPGRADE,
    Harness,
    code,
    records_of,
)

Cause = r.RebalanceCause

# -- rule 2: RESTART of a known member in Stable ---------------------------------------------------------


def test_restart_of_the_stable_leader_does_not_rebalance():
    h = Harness()
    a, b, c = h.form("a", "b", "c")
    eff = a.join(join_reason=RESTART, reason="pod restarted")
    resp = eff.response
    assert code(resp) == Errors.NONE
    assert (resp.generation_id, resp.leader, resp.member_id, resp.skip_assignment) == (
        1,
        a.member_id,
        a.member_id,
        True,
    )
    assert [(m.member_id, m.metadata) for m in resp.members] == [
        (a.member_id, b"range-meta"),
        (b.member_id, b"range-meta"),
        (c.member_id, b"range-meta"),
    ]
    assert records_of(eff, r.RebalanceStarted) == []
    g = h.group()
    assert (g.state, g.generation_id) == (STABLE, 1)
    # Assignments are untouched; a leader with skip_assignment syncs without assignments.
    assert a.sync().response.assignment == b"assign-a"
    assert b.sync().response.assignment == b"assign-b"
    assert code(c.heartbeat().response) == Errors.NONE


def test_restart_of_a_stable_follower_gets_the_current_generation():
    h = Harness()
    a, b = h.form("a", "b")
    eff = b.join(join_reason=RESTART)
    resp = eff.response
    assert code(resp) == Errors.NONE
    assert (resp.generation_id, resp.leader, resp.skip_assignment) == (1, a.member_id, False)
    assert not resp.members
    # No rebalance: only the marker that makes the avoided one visible as an event.
    assert [(type(x), x.cause) for x in eff.records] == [(r.RebalanceAvoided, r.AvoidedCause.RESTART)]


def test_restart_of_a_static_leader_by_instance_id_does_not_rebalance():
    h = Harness()
    s1, _s2 = h.form(static=["s1", "s2"])
    eff = s1.restart(join_reason=RESTART)
    resp = eff.response
    assert code(resp) == Errors.NONE
    assert resp.skip_assignment is True
    assert resp.leader == resp.member_id != ""
    assert len(resp.members) == 2
    assert records_of(eff, r.RebalanceStarted) == []
    assert h.group().state == STABLE


def test_restart_in_completing_answers_the_current_generation():
    h = Harness()
    _a, b = h.form("a", "b", sync=False)
    eff = b.join(join_reason=RESTART)
    assert code(eff.response) == Errors.NONE
    assert eff.response.generation_id == 1
    assert eff.records == []
    assert h.group().state == COMPLETING


# -- rule 1: forced rebalances win over RESTART ------------------------------------------------------------


def test_restart_with_changed_protocols_rebalances():
    h = Harness()
    a, _b = h.form("a", "b")
    eff = a.join(join_reason=RESTART, protocols=(("range", b"v2"),))
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.join_reason) == (Cause.PROTOCOL_CHANGED, RESTART)
    assert h.group().state == PREPARING


def test_restart_of_a_new_dynamic_member_rebalances():
    h = Harness()
    h.form("a", "b")
    c = h.member("c")
    assert code(c.join(join_reason=RESTART).response) == Errors.MEMBER_ID_REQUIRED
    eff = c.join(join_reason=RESTART)
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id, rb.join_reason) == (Cause.MEMBER_JOINED, c.member_id, RESTART)


# -- rule 3: TOPIC_METADATA_CHANGE and UPGRADE ---------------------------------------------------------------


@pytest.mark.parametrize("join_reason", [TOPIC_METADATA_CHANGE, UPGRADE])
@pytest.mark.parametrize("who", ["leader", "follower"])
def test_stable_topic_metadata_change_or_upgrade_rebalances(join_reason, who):
    h = Harness()
    a, b = h.form("a", "b")
    m = a if who == "leader" else b
    eff = m.join(join_reason=join_reason, reason="new partitions")
    assert eff.response is None
    assert h.group().state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id, rb.group_instance_id, rb.join_reason, rb.reason) == (
        Cause.JOIN_REASON,
        m.member_id,
        "",
        join_reason,
        "new partitions",
    )
    other = b if m is a else a
    other.join()
    assert (m.generation, other.generation, h.group().generation_id) == (2, 2, 2)


@pytest.mark.parametrize("join_reason", [TOPIC_METADATA_CHANGE, UPGRADE])
def test_completing_topic_metadata_change_or_upgrade_rebalances(join_reason):
    h = Harness()
    a, _b = h.form("a", "b", sync=False)
    eff = a.join(join_reason=join_reason)
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.join_reason) == (Cause.JOIN_REASON, join_reason)
    assert h.group().state == PREPARING


def test_static_member_topic_metadata_change_records_its_instance_id():
    h = Harness()
    s1, _s2 = h.form(static=["s1", "s2"])
    eff = s1.join(join_reason=TOPIC_METADATA_CHANGE)
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id, rb.group_instance_id) == (Cause.JOIN_REASON, s1.member_id, "s1")


# -- rule 4: UNKNOWN keeps the classic rules ---------------------------------------------------------------


def test_unknown_reason_leader_rejoin_rebalances_and_follower_does_not():
    h = Harness()
    a, b = h.form("a", "b")
    eff = b.join(join_reason=UNKNOWN)
    assert code(eff.response) == Errors.NONE
    # No rebalance: only the marker that makes the avoided one visible as an event.
    assert [(type(x), x.cause) for x in eff.records] == [(r.RebalanceAvoided, r.AvoidedCause.KNOWN_MEMBER)]
    eff = a.join(join_reason=UNKNOWN)
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id, rb.join_reason) == (Cause.LEADER_REJOINED, a.member_id, UNKNOWN)


# -- the recorded reason ---------------------------------------------------------------------------------


def test_describe_returns_the_last_rebalance_reason():
    h = Harness()
    a, _b = h.form("a", "b")
    h.clock.advance(1234)
    a.join(join_reason=TOPIC_METADATA_CHANGE, reason="topic t grew to 12 partitions")
    last = h.describe_one().last_rebalance_reason
    assert (last.cause, last.member_id, last.group_instance_id, last.join_reason, last.reason, last.time_ms) == (
        "join_reason",
        a.member_id,
        "",
        TOPIC_METADATA_CHANGE,
        "topic t grew to 12 partitions",
        h.clock.wall_ms(),
    )
    h.assert_replay()


def test_reason_text_is_truncated_to_255_characters():
    h = Harness()
    a, _b = h.form("a", "b")
    eff = a.join(join_reason=UPGRADE, reason="x" * 300)
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.reason == "x" * 255
    assert h.describe_one().last_rebalance_reason.reason == "x" * 255


def test_leave_reason_is_recorded():
    h = Harness()
    _a, b = h.form("a", "b")
    b.leave("y" * 400)
    last = h.describe_one().last_rebalance_reason
    assert (last.cause, last.member_id, last.reason) == ("member_left", b.member_id, "y" * 255)


def test_every_rebalance_records_a_cause():
    """A scenario through most internal causes; each RebalanceStarted names a known cause."""
    h = Harness()
    a, b, s = h.form("a", "b", static=["s1"])  # member_joined
    c = h.member("c")
    c.join()
    c.join()  # member_joined
    a.join()
    b.join()
    s.join()
    h.sync_all([a, b, s, c])
    c.leave()  # member_left
    for m in (a, b, s):
        m.join()
    h.sync_all([a, b, s])
    h.leave("g", ("", "s1"))  # admin_removal
    a.join()
    b.join()
    h.sync_all([a, b])
    h.run(6_000, a)
    h.advance(4_000)  # b's session expires: session_expired
    a.join()
    a.sync({a.member_id: b"A"})
    h.add_members("g", "n1")
    h.member("n1", static=True).join()  # pre_registered_joined
    causes = [rb.cause for rb in h.rebalances()]
    assert causes == [
        Cause.MEMBER_JOINED,
        Cause.MEMBER_JOINED,
        Cause.MEMBER_LEFT,
        Cause.ADMIN_REMOVAL,
        Cause.SESSION_EXPIRED,
        Cause.PRE_REGISTERED_JOINED,
    ]
    times = [rb.time_ms for rb in h.rebalances()]
    assert times == sorted(times) and times[-1] == h.clock.wall_ms()
    h.assert_replay()
