"""DescribeGroups, ListGroups, DeleteGroups (Empty -> removed), and the Dead row of the per-state table
(docs/PROTOCOL.md#answers-per-state): the coordinator partition moved away (unload)."""

from __future__ import annotations

import pytest

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, PREPARING, Harness, code

# -- DescribeGroups -------------------------------------------------------------------------------------


def test_describe_absent_group_is_group_id_not_found_and_dead():
    h = Harness()
    resp = h.describe("nope", "").response
    assert [(g.group_id, code(g), g.group_state) for g in resp.groups] == [
        ("nope", Errors.GROUP_ID_NOT_FOUND, "Dead"),
        ("", Errors.GROUP_ID_NOT_FOUND, "Dead"),
    ]


def test_describe_stable_group_shows_members_metadata_assignments_and_last_rebalance():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    d = h.describe_one()
    assert code(d) == Errors.NONE
    assert (d.group_id, d.group_state, d.protocol_type, d.protocol_data, d.generation_id, d.leader_id) == (
        "g",
        "Stable",
        "consumer",
        "range",
        1,
        a.member_id,
    )
    assert [
        (m.member_id, m.group_instance_id, m.client_id, m.member_metadata, m.member_assignment) for m in d.members
    ] == [
        (a.member_id, "", "a", b"range-meta", b"assign-a"),
        (s.member_id, "s1", "s1", b"range-meta", b"assign-s1"),
    ]
    last = d.last_rebalance_reason
    assert (last.cause, last.member_id) == (r.RebalanceCause.MEMBER_JOINED, a.member_id)
    assert list(d.pending_instance_ids) == []
    assert d.pending_member_count == 0


@pytest.mark.parametrize("state", [PREPARING, COMPLETING])
def test_describe_shows_metadata_and_assignment_only_when_stable(state):
    h = Harness()
    a, b = h.form("a", "b", sync=state == PREPARING)
    if state == PREPARING:
        a.join()
    d = h.describe_one()
    assert d.group_state == state.value
    assert [m.member_id for m in d.members] == [a.member_id, b.member_id]
    assert all(m.member_metadata == b"" and m.member_assignment == b"" for m in d.members)


def test_describe_batch_answers_each_group():
    h = Harness()
    h.form("a", group_id="g1")
    h.commit(group_id="g2")
    resp = h.describe("g1", "g2", "g3").response
    assert [(g.group_id, code(g), g.group_state) for g in resp.groups] == [
        ("g1", Errors.NONE, "Stable"),
        ("g2", Errors.NONE, "Empty"),
        ("g3", Errors.GROUP_ID_NOT_FOUND, "Dead"),
    ]


# -- ListGroups ------------------------------------------------------------------------------------------


def make_groups(h):
    h.form("a", group_id="stable")
    h.form("b", group_id="completing", sync=False)
    h.commit(group_id="empty")
    x, _y = h.form("x", "y", group_id="preparing")
    x.join()


def test_list_groups_all_and_filtered_case_insensitively():
    h = Harness()
    make_groups(h)
    resp = h.list_groups().response
    assert code(resp) == Errors.NONE
    assert {(g.group_id, g.group_state, g.protocol_type) for g in resp.groups} == {
        ("stable", "Stable", "consumer"),
        ("completing", "CompletingRebalance", "consumer"),
        ("empty", "Empty", ""),
        ("preparing", "PreparingRebalance", "consumer"),
    }
    resp = h.list_groups("stable", "EMPTY").response
    assert {g.group_id for g in resp.groups} == {"stable", "empty"}
    resp = h.list_groups("PreparingRebalance", "completingrebalance").response
    assert {g.group_id for g in resp.groups} == {"preparing", "completing"}
    assert h.list_groups("Dead").response.groups == []


def test_list_groups_unknown_state_is_invalid_request():
    h = Harness()
    make_groups(h)
    resp = h.list_groups("Stable", "Rebalancing").response
    assert code(resp) == Errors.INVALID_REQUEST
    assert list(resp.groups) == []


# -- DeleteGroups -----------------------------------------------------------------------------------------


def test_delete_groups_per_group_results():
    h = Harness()
    h.form("a", group_id="busy")
    h.commit(group_id="idle")
    (c,) = h.form("c", group_id="left")
    c.leave()
    eff = h.delete("busy", "idle", "absent", "left")
    assert [(x.group_id, code(x)) for x in eff.response.results] == [
        ("busy", Errors.NON_EMPTY_GROUP),
        ("idle", Errors.NONE),
        ("absent", Errors.GROUP_ID_NOT_FOUND),
        ("left", Errors.NONE),
    ]
    assert [(x.group_id, type(x)) for x in eff.records] == [("idle", r.GroupDeleted), ("left", r.GroupDeleted)]
    # Empty -> Dead: gone for every API.
    assert code(h.describe_one("idle")) == Errors.GROUP_ID_NOT_FOUND
    assert h.describe_one("idle").group_state == "Dead"
    assert h.fetch("idle").response.topics == []
    assert {g.group_id for g in h.list_groups().response.groups} == {"busy"}
    h.assert_replay()


@pytest.mark.parametrize("state", [PREPARING, COMPLETING])
def test_delete_rebalancing_group_is_non_empty(state):
    h = Harness()
    a, _b = h.form("a", "b", sync=state == PREPARING)
    if state == PREPARING:
        a.join()
    eff = h.delete("g")
    assert code(eff.response.results[0]) == Errors.NON_EMPTY_GROUP
    assert eff.records == []


def test_deleted_group_starts_afresh():
    h = Harness()
    (a,) = h.form("a")
    a.leave()
    h.delete("g")
    assert code(a.join().response) == Errors.UNKNOWN_MEMBER_ID
    (_b,) = h.form("b")
    assert h.group().generation_id == 1


# -- Dead: the partition moved away ------------------------------------------------------------------


def test_unload_answers_parked_requests_and_every_later_call_with_coordinator_not_available():
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    assert b.sync().response is None  # parked in SyncGroup
    x, _y = h.form("x", "y", group_id="other")
    assert x.join().response is None  # parked in JoinGroup
    eff = h.unload()
    assert eff.records == []
    assert code(eff.reply_for(b.sync_token)) == Errors.COORDINATOR_NOT_AVAILABLE
    assert code(eff.reply_for(x.join_token)) == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.core.parked_count() == 0

    cna = Errors.COORDINATOR_NOT_AVAILABLE
    assert code(a.join().response) == cna
    assert code(h.join(client_id="new").response) == cna
    assert code(h.join(instance_id="s9").response) == cna
    assert code(a.sync({a.member_id: b"A"}).response) == cna
    assert code(a.heartbeat().response) == cna
    assert [code(p) for t in a.commit().response.topics for p in t.partitions] == [cna]
    assert [code(p) for t in h.commit().response.topics for p in t.partitions] == [cna]
    assert code(a.leave().response) == cna
    assert code(h.add_members("g", "s1").response) == cna
    assert code(h.fetch().response) == cna
    d = h.describe_one()
    assert (code(d), d.group_state) == (cna, "Dead")
    assert code(h.list_groups().response) == cna
    assert code(h.delete("g").response.results[0]) == cna
    # Timers do not fire any more either.
    eff = h.advance(1_000_000)
    assert eff.records == [] and eff.replies == []


def test_unload_checks_group_id_first():
    h = Harness()
    h.form("a")
    h.unload()
    assert code(h.join(group_id="").response) == Errors.INVALID_GROUP_ID
    assert code(h.heartbeat(group_id="", member_id="m").response) == Errors.INVALID_GROUP_ID


def test_unload_leaves_hard_state_untouched():
    h = Harness()
    h.form("a", "b")
    before = h.core.store.snapshot()
    h.unload()
    h.advance(60_000)
    assert h.core.store.snapshot() == before


def test_describe_and_delete_with_too_long_group_id():
    h = Harness()
    d = h.describe_one("x" * 256)
    assert (code(d), d.group_state) == (Errors.INVALID_GROUP_ID, "Dead")
    assert code(h.delete("x" * 256).response.results[0]) == Errors.INVALID_GROUP_ID
