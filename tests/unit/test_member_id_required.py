"""KIP-394 (docs/PROTOCOL.md#member_id_required-kip-394): MEMBER_ID_REQUIRED, pending members, their expiry,
their removal, their bound."""

from __future__ import annotations

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, STABLE, Harness, code, records_of


def test_dynamic_member_without_id_gets_member_id_required_and_nothing_else_changes():
    h = Harness()
    eff = h.join(client_id="c")
    resp = eff.response
    assert code(resp) == Errors.MEMBER_ID_REQUIRED
    assert resp.member_id == "c-u1"
    assert eff.records == [r.PendingMemberAdded("g", "c-u1", 10_000, h.clock.wall_ms())]
    g = h.group()
    assert (g.state, g.generation_id, g.members, g.pending_members) == (EMPTY, 0, {}, {"c-u1": 10_000})
    assert h.describe_one().pending_member_count == 1


def test_member_id_required_in_a_stable_group_changes_nothing_else():
    h = Harness()
    a, b = h.form("a", "b")
    eff = h.join(client_id="c")
    assert code(eff.response) == Errors.MEMBER_ID_REQUIRED
    assert [type(rec) for rec in eff.records] == [r.PendingMemberAdded]
    g = h.group()
    assert (g.state, g.generation_id, set(g.members)) == (STABLE, 1, {a.member_id, b.member_id})
    assert code(b.heartbeat().response) == Errors.NONE


def test_rejoin_with_the_minted_id_adds_the_member():
    h = Harness()
    c = h.member("c")
    c.join()
    minted = c.member_id
    eff = c.join()
    assert code(eff.response) == Errors.NONE
    assert eff.response.member_id == minted
    g = h.group()
    assert minted in g.members
    assert g.pending_members == {}
    assert g.state == COMPLETING
    assert isinstance(eff.records[0], r.MemberAdded)
    h.assert_replay()


def test_static_members_never_get_member_id_required():
    h = Harness()
    eff = h.join(instance_id="s1", client_id="c")
    assert code(eff.response) == Errors.NONE
    assert eff.response.member_id == "s1-u1"
    assert h.group().pending_members == {}


def test_pending_member_blocks_join_phase_completion():
    h = Harness()
    a, b = h.form("a", "b")
    c = h.member("c")
    c.join()
    a.join()
    b.join()
    assert h.group().state == PREPARING  # everyone is parked, but c's id is pending
    assert a.join_reply() is None and b.join_reply() is None
    eff = c.join()
    assert code(eff.response) == Errors.NONE
    g = h.group()
    assert (g.state, g.generation_id) == (COMPLETING, 2)
    assert set(g.members) == {a.member_id, b.member_id, c.member_id}
    assert code(a.join_reply()) == code(b.join_reply()) == Errors.NONE


def test_pending_member_expires_after_its_session_timeout_and_unblocks_the_join_phase():
    h = Harness()
    a, b = h.form("a", "b", rebalance_timeout_ms=60_000)
    c = h.member("c", session_timeout_ms=8_000)
    c.join()
    a.join()
    b.join()
    eff = h.advance(7_999)
    assert eff.records == []
    assert h.group().pending_members == {c.member_id: 8_000}
    eff = h.advance(1)
    assert records_of(eff, r.PendingMemberRemoved) == [
        r.PendingMemberRemoved("g", c.member_id, r.RemovalCause.PENDING_EXPIRED, h.clock.wall_ms())
    ]
    g = h.group()
    assert g.pending_members == {}
    assert (g.state, g.generation_id) == (COMPLETING, 2)
    assert code(a.join_reply()) == Errors.NONE
    # The expired id is not accepted any more.
    assert code(c.join().response) == Errors.UNKNOWN_MEMBER_ID
    h.assert_replay()


def test_pending_member_in_empty_group_expires():
    h = Harness()
    c = h.member("c")
    c.join()
    eff = h.advance(10_000)
    assert [type(rec) for rec in eff.records] == [r.PendingMemberRemoved]
    assert h.group().pending_members == {}
    eff = c.join()
    assert code(eff.response) == Errors.UNKNOWN_MEMBER_ID
    assert eff.records == []


def test_pending_member_can_be_removed_by_leave_group():
    h = Harness()
    a, b = h.form("a", "b")
    c = h.member("c")
    c.join()
    a.join()
    b.join()
    assert h.group().state == PREPARING
    eff = h.leave("g", (c.member_id, ""))
    assert [code(m) for m in eff.response.members] == [Errors.NONE]
    assert code(eff.response) == Errors.NONE
    assert records_of(eff, r.PendingMemberRemoved)[0].member_id == c.member_id
    g = h.group()
    assert g.pending_members == {}
    assert (g.state, g.generation_id) == (COMPLETING, 2)  # the leave unblocked the join phase
    assert code(c.join().response) == Errors.UNKNOWN_MEMBER_ID


def test_pending_id_is_not_a_member_for_sync_heartbeat_or_commit():
    h = Harness()
    h.form("a")
    c = h.member("c")
    c.join()
    assert code(h.heartbeat(member_id=c.member_id, generation_id=1).response) == Errors.UNKNOWN_MEMBER_ID
    assert code(h.sync(member_id=c.member_id, generation_id=1).response) == Errors.UNKNOWN_MEMBER_ID
    resp = h.commit(member_id=c.member_id, generation_id=1).response
    assert code(resp.topics[0].partitions[0]) == Errors.UNKNOWN_MEMBER_ID


def test_pending_set_is_bounded():
    h = Harness(max_pending_members=3)
    ids = [h.join(client_id=f"c{i}").response.member_id for i in range(3)]
    assert len(set(ids)) == 3
    eff = h.join(client_id="c3")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.records == []
    assert len(h.group().pending_members) == 3
    # Once they expire there is room again.
    h.advance(10_000)
    assert code(h.join(client_id="c4").response) == Errors.MEMBER_ID_REQUIRED


def test_pending_set_stays_bounded_under_a_flood_of_anonymous_joins():
    h = Harness(max_pending_members=5)
    h.form("a")
    codes = []
    for i in range(200):
        codes.append(code(h.join(client_id=f"x{i}").response))
        assert len(h.group().pending_members) <= 5
        h.clock.advance(100)
        h.absorb(h.core.tick())
    assert Errors.GROUP_MAX_SIZE_REACHED in codes
    assert codes.count(Errors.MEMBER_ID_REQUIRED) > 5  # expiries made room again


def test_pending_member_joining_a_stable_group_starts_a_rebalance_with_it():
    h = Harness()
    _a, _b = h.form("a", "b")
    c = h.member("c")
    c.join()
    eff = c.join()
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.MEMBER_JOINED, c.member_id)
