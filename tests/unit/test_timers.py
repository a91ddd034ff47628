"""Timing rules (docs/PROTOCOL.md#timing-rules-and-limits): the initial rebalance delay, the join deadline
(rebalance timeout), the sync deadline, session expiry in each state, and that no group waits forever."""

from __future__ import annotations

from groupcoord.coordinator import GroupCoordinator
from groupcoord.coordinator.timers import LoadedSessions
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.support import SeqIds
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, SESSION_MS, STABLE, Harness, code, records_of

Cause = r.RebalanceCause

# -- initial rebalance delay ------------------------------------------------------------------------------


def delayed(**config):
    return Harness(initial_rebalance_delay_ms=3_000, **config)


def statics(h, *names, **kwargs):
    return [h.member(n, static=True, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, **kwargs) for n in names]


def test_initial_delay_never_completes_early():
    h = delayed()
    (s1,) = statics(h, "s1")
    assert s1.join().response is None  # the only member is parked, yet the group waits
    assert h.group().state == PREPARING
    assert h.advance(2_999).records == []
    eff = h.advance(1)
    (gen,) = records_of(eff, r.GenerationCompleted)
    assert gen.generation_id == 1
    assert code(s1.join_reply()) == Errors.NONE


def test_initial_delay_extends_by_whole_windows_while_members_arrive():
    h = delayed()
    s1, s2 = statics(h, "s1", "s2")
    s1.join()
    h.advance(2_000)
    s2.join()  # arrives within the first window
    assert h.advance(1_000).records == []  # t=3s: extended by one window
    assert h.group().state == PREPARING
    assert h.advance(2_999).records == []
    eff = h.advance(1)  # t=6s
    (gen,) = records_of(eff, r.GenerationCompleted)
    assert gen.generation_id == 1
    assert set(h.group().members) == {s1.member_id, s2.member_id}
    assert code(s1.join_reply()) == code(s2.join_reply()) == Errors.NONE


def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    h = delayed()
    members = statics(h, "s1", "s2", "s3", "s4", "s5")
    members[0].join()
    for at, m in zip((2_000, 5_000, 8_000, 9_500), members[1:], strict=True):
        h.advance(at - h.clock.now)
        m.join()
        assert h.group().state == PREPARING
    assert h.advance(9_999 - h.clock.now).records == []
    eff = h.advance(1)  # t=10s = rebalance timeout
    (_gen,) = records_of(eff, r.GenerationCompleted)
    assert len(h.group().members) == 5
    assert all(code(m.join_reply()) == Errors.NONE for m in members)


def test_initial_delay_window_without_arrivals_ends_the_wait():
    h = delayed()
    s1, s2 = statics(h, "s1", "s2")
    s1.join()
    h.advance(3_000)  # window without arrivals: generation 1 with s1 alone
    assert (h.group().state, h.group().generation_id) == (COMPLETING, 1)
    s2.join()  # from CompletingRebalance: an ordinary rebalance, no delay
    s1.join()
    assert (h.group().state, h.group().generation_id) == (COMPLETING, 2)


def test_initial_delay_only_applies_to_a_rebalance_from_empty():
    h = delayed()
    s1, s2 = statics(h, "s1", "s2")
    s1.join()
    s2.join()
    h.advance(6_000)
    h.sync_all([s1, s2])
    s1.join()  # leader rejoin from Stable
    eff = s2.join()
    assert records_of(eff, r.GenerationCompleted)  # completes as soon as everyone is in
    assert h.group().generation_id == 2


def test_no_initial_delay_when_it_is_zero():
    h = Harness(initial_rebalance_delay_ms=0)
    (s1,) = statics(h, "s1")
    assert code(s1.join().response) == Errors.NONE
    assert h.group().generation_id == 1


# -- join deadline -------------------------------------------------------------------------------------


def test_join_deadline_is_the_largest_rebalance_timeout_and_removes_dynamic_non_rejoiners():
    h = Harness()
    a = h.member("a", rebalance_timeout_ms=30_000)
    b = h.member("b", session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    a.join()
    b.join()
    a.join()
    b.join()
    h.sync_all([a, b])
    a.join()
    assert h.advance(29_999).records == []
    assert h.group().state == PREPARING
    eff = h.advance(1)
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (b.member_id, r.RemovalCause.JOIN_TIMEOUT)
    ]
    g = h.group()
    assert (g.state, g.generation_id, set(g.members)) == (COMPLETING, 2, {a.member_id})
    assert code(a.join_reply()) == Errors.NONE
    h.assert_replay()


def test_join_phase_with_only_absent_static_members_waits_until_their_session_expires():
    h = Harness()
    s1, s2 = h.form(static=["s1", "s2"], session_timeout_ms=25_000, rebalance_timeout_ms=10_000)
    # s2 synced at t=0: its session ends at t=25s
    s1.leave()
    assert h.group().state == PREPARING
    for _ in range(2):
        h.advance(10_000)  # t=10s, 20s: the deadline passes, s2 is kept, the wait is re-armed
        g = h.group()
        assert (g.state, set(g.members)) == (PREPARING, {s2.member_id})
    eff = h.advance(5_000)
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (s2.member_id, r.RemovalCause.SESSION_EXPIRED)
    ]
    g = h.group()
    assert (g.state, g.generation_id, g.members) == (EMPTY, 2, {})


def test_absent_static_member_rejoining_after_the_deadline_completes_the_join_phase():
    h = Harness()
    s1, s2 = h.form(static=["s1", "s2"], session_timeout_ms=60_000, rebalance_timeout_ms=10_000)
    s1.leave()
    h.advance(15_000)
    assert h.group().state == PREPARING
    eff = s2.join()
    assert code(eff.response) == Errors.NONE
    assert (h.group().state, h.group().generation_id) == (COMPLETING, 2)


# -- sync deadline --------------------------------------------------------------------------------------


def sync_phase(h, *names, static=()):
    return h.form(*names, static=static, sync=False, session_timeout_ms=30_000, rebalance_timeout_ms=10_000)


def test_dynamic_member_that_never_syncs_is_removed_and_a_rebalance_starts():
    h = Harness()
    a, b = sync_phase(h, "a", "b")
    a.sync({a.member_id: b"A", b.member_id: b"B"})
    assert h.group().state == STABLE
    assert h.advance(9_999).records == []
    eff = h.advance(1)
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (b.member_id, r.RemovalCause.SYNC_TIMEOUT)
    ]
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.cause == Cause.SYNC_TIMEOUT
    assert h.group().state == PREPARING
    a.join()
    assert (h.group().state, h.group().generation_id) == (COMPLETING, 2)
    h.assert_replay()


def test_leader_that_never_syncs_is_removed_and_parked_followers_are_told_to_rejoin():
    h = Harness()
    a, b = sync_phase(h, "a", "b")
    assert b.sync().response is None
    eff = h.advance(10_000)
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (a.member_id, r.RemovalCause.SYNC_TIMEOUT)
    ]
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.cause == Cause.SYNC_TIMEOUT
    assert code(b.sync_reply()) == Errors.REBALANCE_IN_PROGRESS
    assert h.group().state == PREPARING
    b.join()
    g = h.group()
    assert (g.state, g.generation_id, g.leader_id) == (COMPLETING, 2, b.member_id)


def test_nobody_syncs_the_group_ends_empty():
    h = Harness()
    _a, _b = sync_phase(h, "a", "b")
    eff = h.advance(10_000)
    assert len(records_of(eff, r.MemberRemoved)) == 2
    assert (h.group().state, h.group().generation_id) == (EMPTY, 2)


def test_static_member_that_never_syncs_is_kept():
    h = Harness()
    s1, s2 = sync_phase(h, static=["s1", "s2"])
    s1.sync({s1.member_id: b"1", s2.member_id: b"2"})
    eff = h.advance(10_000)
    assert eff.records == []
    g = h.group()
    assert (g.state, g.generation_id, set(g.members)) == (STABLE, 1, {s1.member_id, s2.member_id})
    assert s2.sync().response.assignment == b"2"


def test_static_leader_that_never_syncs_triggers_a_rebalance_but_stays():
    h = Harness()
    s1, s2 = sync_phase(h, static=["s1", "s2"])
    eff = h.advance(10_000)
    assert records_of(eff, r.MemberRemoved) == []
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.cause == Cause.SYNC_TIMEOUT
    assert h.group().state == PREPARING
    assert set(h.group().members) == {s1.member_id, s2.member_id}


def test_sync_deadline_does_not_fire_once_everyone_synced():
    h = Harness()
    a, b = sync_phase(h, "a", "b")
    h.sync_all([a, b])
    eff = h.advance(10_000)
    assert eff.records == []
    assert h.group().state == STABLE


# -- session expiry per state ------------------------------------------------------------------------------


def test_session_expiry_in_completing_rebalances():
    h = Harness()
    a, b = h.form("a", "b", sync=False, rebalance_timeout_ms=60_000)
    b.sync()
    eff = h.advance(10_000)  # the leader never syncs nor heartbeats
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (a.member_id, r.RemovalCause.SESSION_EXPIRED)
    ]
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (Cause.SESSION_EXPIRED, a.member_id)
    assert code(b.sync_reply()) == Errors.REBALANCE_IN_PROGRESS


def test_session_expiry_in_preparing_removes_and_can_complete_the_join_phase():
    h = Harness()
    a, b = h.form("a", "b", rebalance_timeout_ms=30_000)
    a.join()
    eff = h.advance(10_000)
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (b.member_id, r.RemovalCause.SESSION_EXPIRED)
    ]
    assert records_of(eff, r.RebalanceStarted) == []
    assert (h.group().state, h.group().generation_id) == (COMPLETING, 2)
    assert code(a.join_reply()) == Errors.NONE


def test_last_member_expiring_leaves_the_group_empty():
    h = Harness()
    (_a,) = h.form("a")
    eff = h.advance(10_000)
    assert [type(x) for x in eff.records] == [r.MemberRemoved, r.RebalanceStarted, r.GenerationCompleted]
    assert (h.group().state, h.group().generation_id) == (EMPTY, 2)


# -- no group waits forever ----------------------------------------------------------------------------


def test_abandoned_groups_always_reach_a_resting_state():
    """Members that go silent at any point: every group ends Empty, nothing stays parked."""
    h = Harness()
    h.form("a", "b", group_id="stable")
    h.form("c", "d", group_id="completing", sync=False)
    e, _f = h.form("e", "f", group_id="preparing")
    e.join()
    h.form("x", group_id="single")
    h.add_members("registered", "r1")
    h.member("r1", group_id="registered", static=True).join()
    h.add_members("registered", "r2")
    h.join(group_id="pending", client_id="p")
    h.advance(120_000)
    for gid in ("stable", "completing", "preparing", "single", "registered"):
        g = h.group(gid)
        assert (g.state, g.members) == (EMPTY, {}), gid
    assert h.group("pending").pending_members == {}
    assert h.core.parked_count() == 0
    assert code(h.reply(e.join_token)) == Errors.NONE  # its join phase completed before it went silent
    h.assert_replay()


def test_pending_member_blocks_the_end_of_the_initial_delay():
    """KIP-394: pending members block join-phase completion, also when the initial delay runs out."""
    h = delayed()
    (s1,) = statics(h, "s1")
    s1.join()
    h.advance(2_000)
    d = h.member("d", session_timeout_ms=10_000, rebalance_timeout_ms=10_000)
    assert code(d.join().response) == Errors.MEMBER_ID_REQUIRED  # pending from t=2s
    h.advance(1_500)  # t=3.5s: the first window is over, d's id still pending
    d.join()
    h.advance(10_000 - h.clock.now)  # t=10s: the rebalance timeout bounds the join phase
    assert len(h.generations()) == 1
    g = h.group()
    assert g.generation_id == 1
    assert set(g.members) == {s1.member_id, d.member_id}
    assert s1.generation == d.generation == 1


def test_coordinator_check_comes_before_session_timeout():
    h = Harness()
    h.unload()
    assert code(h.join(session_timeout_ms=1).response) == Errors.COORDINATOR_NOT_AVAILABLE


# -- a new leader's sessions ---------------------------------------------------------------------------


def _new_leader(h: Harness) -> None:
    """The partition moves: a new leader loads a copy of the committed state, every session starting now."""
    h.absorb(h.core.unload())
    h.core = GroupCoordinator(h.config, h.clock, new_uuid=SeqIds(), store=h.core.store.copy())


def test_a_new_leader_starts_every_session_under_one_timer_per_group():
    h = Harness()
    h.form("a", "b", "c")
    h.form("d", "e", group_id="other")
    _new_leader(h)
    timers = h.core.runtime.timers
    assert len(timers) == 3, "one per group and the retention check, not one per member"
    assert LoadedSessions("g") in timers and LoadedSessions("other") in timers
    assert timers.deadline(LoadedSessions("g")) == h.clock.now + SESSION_MS


def test_after_a_takeover_only_the_silent_members_expire_a_session_after_it():
    h = Harness()
    a, b = h.form("a", "b")
    h.advance(4_000)
    _new_leader(h)
    taken_over = h.clock.now
    h.advance(6_000)
    assert code(a.heartbeat().response) == Errors.NONE  # its own session from here
    eff = h.advance(SESSION_MS - 6_000 - 1)
    assert records_of(eff, r.MemberRemoved) == []
    eff = h.advance(1)
    assert h.clock.now == taken_over + SESSION_MS
    assert [(x.member_id, x.cause) for x in records_of(eff, r.MemberRemoved)] == [
        (b.member_id, r.RemovalCause.SESSION_EXPIRED)
    ]
    assert list(h.group().members) == [a.member_id]
    h.assert_replay()


def test_after_a_takeover_silent_members_expire_in_the_order_of_their_session_timeouts():
    h = Harness()
    a, b, c = h.form("a", "b", "c")
    assert code(b.join(session_timeout_ms=30_000).response) == Errors.NONE  # a follower: no rebalance
    assert code(c.join(session_timeout_ms=20_000).response) == Errors.NONE
    _new_leader(h)
    taken_over = h.clock.now
    removed: list[tuple[int, str]] = []
    for _ in range(3):
        eff = h.advance_to_next_deadline()
        removed += [(h.clock.now - taken_over, x.member_id) for x in records_of(eff, r.MemberRemoved)]
    assert removed == [(SESSION_MS, a.member_id), (20_000, c.member_id), (30_000, b.member_id)]


def test_after_a_takeover_a_parked_member_keeps_its_place_past_its_load_time_session():
    """A member waiting in a join phase has its session paused, the one the takeover started included."""
    h = Harness()
    a, b = h.form("a", "b", rebalance_timeout_ms=60_000)
    _new_leader(h)
    assert a.join().response is None  # the leader rejoins: a rebalance, a parked
    for _ in range(4):
        h.advance(4_000)
        assert code(b.heartbeat().response) == Errors.REBALANCE_IN_PROGRESS
    assert list(h.group().members) == [a.member_id, b.member_id]
    assert h.group().state == PREPARING


def test_a_takeover_keeps_no_table_of_loaded_sessions_once_every_member_has_its_own():
    h = Harness()
    a, b = h.form("a", "b")
    _new_leader(h)
    assert h.core.runtime.loaded_sessions == {
        "g": {a.member_id: h.clock.now + SESSION_MS, b.member_id: h.clock.now + SESSION_MS}
    }
    h.advance(1_000)
    a.heartbeat()
    b.heartbeat()
    assert h.core.runtime.loaded_sessions == {"g": {}}
    h.advance(SESSION_MS - 1_000)
    assert h.core.runtime.loaded_sessions == {}
    assert list(h.group().members) == [a.member_id, b.member_id]
