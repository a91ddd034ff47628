"""OffsetCommit / OffsetFetch (docs/PROTOCOL.md#offsets and the OffsetCommit column of the per-state table) and
offset retention / empty-group expiry."""

from __future__ import annotations

import pytest

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, STABLE, Harness, code, records_of


def commit_codes(eff):
    return [code(p) for t in eff.response.topics for p in t.partitions]


def fetched(h, group_id="g", topics=None):
    resp = h.fetch(group_id, topics).response
    assert code(resp) == Errors.NONE
    return {
        (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata)
        for t in resp.topics
        for p in t.partitions
    }


# -- OffsetCommit per state ---------------------------------------------------------------------------------


def test_simple_commit_to_absent_group_creates_an_empty_group():
    h = Harness()
    eff = h.commit(offsets={("t", 0): 5, ("t", 1): (7, "meta")})
    assert commit_codes(eff) == [Errors.NONE, Errors.NONE]
    g = h.group()
    assert (g.state, g.generation_id, g.members) == (EMPTY, 0, {})
    assert fetched(h) == {("t", 0): (5, 0, ""), ("t", 1): (7, 0, "meta")}
    h.assert_replay()


def test_simple_commit_accepted_by_an_empty_group_that_had_members():
    h = Harness()
    a, b = h.form("a", "b")
    a.leave()
    b.leave()
    assert h.group().state == EMPTY
    assert commit_codes(h.commit(offsets={("t", 0): 10})) == [Errors.NONE]
    assert fetched(h)[("t", 0)][0] == 10


def test_simple_commit_with_empty_group_id_is_allowed():
    h = Harness()
    assert commit_codes(h.commit(group_id="", offsets={("t", 0): 3})) == [Errors.NONE]
    assert fetched(h, "") == {("t", 0): (3, 0, "")}


def test_commit_with_too_long_group_id_is_invalid_group_id():
    h = Harness()
    eff = h.commit(group_id="g" * 256)
    assert commit_codes(eff) == [Errors.INVALID_GROUP_ID]
    assert eff.records == []


@pytest.mark.parametrize("state", [PREPARING, COMPLETING, STABLE])
def test_simple_commit_to_a_non_empty_group_is_unknown_member(state):
    h = Harness()
    a, _b = h.form("a", "b", sync=state != COMPLETING)
    if state == PREPARING:
        a.join()
    assert h.group().state == state
    eff = h.commit(offsets={("t", 0): 1})
    assert commit_codes(eff) == [Errors.UNKNOWN_MEMBER_ID]
    assert eff.records == []


def test_simple_commit_carrying_a_member_id_creates_an_absent_group():
    """Kafka's validateOffsetCommit: generation < 0 on an absent (so new, Empty) group is simple, whatever ids."""
    h = Harness()
    eff = h.commit(member_id="consumer-1", instance_id="i1", offsets={("t", 0): 5})
    assert commit_codes(eff) == [Errors.NONE]
    assert (h.group().state, fetched(h)) == (EMPTY, {("t", 0): (5, 0, "")})
    h.assert_replay()


def test_simple_commit_with_a_stale_member_id_is_accepted_by_an_empty_group():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    a.leave()
    h.leave("g", ("", "s1"))
    assert h.group().state == EMPTY
    assert commit_codes(a.commit({("t", 0): 7}, generation_id=-1)) == [Errors.NONE]
    assert commit_codes(s.commit({("t", 1): 8}, generation_id=-1)) == [Errors.NONE]
    assert set(fetched(h)) == {("t", 0), ("t", 1)}


def test_negative_generation_with_ids_on_a_live_group_is_fenced_by_identity_then_generation():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    assert commit_codes(a.commit(generation_id=-1)) == [Errors.ILLEGAL_GENERATION]
    assert commit_codes(h.commit(member_id="ghost")) == [Errors.UNKNOWN_MEMBER_ID]
    assert commit_codes(h.commit(instance_id="s1")) == [Errors.FENCED_INSTANCE_ID]
    assert commit_codes(h.commit(instance_id="nobody")) == [Errors.UNKNOWN_MEMBER_ID]
    assert commit_codes(s.commit(generation_id=-1)) == [Errors.ILLEGAL_GENERATION]
    assert fetched(h) == {}


def test_member_commit_to_absent_group_is_unknown_member():
    h = Harness()
    eff = h.commit(generation_id=1, member_id="m1")
    assert commit_codes(eff) == [Errors.UNKNOWN_MEMBER_ID]
    assert eff.records == []
    assert not h.has_group()


def test_member_commit_to_empty_group_is_unknown_member():
    h = Harness()
    (a,) = h.form("a")
    a.leave()
    assert commit_codes(a.commit(generation_id=2)) == [Errors.UNKNOWN_MEMBER_ID]


def test_preparing_commit_with_the_current_generation_is_accepted():
    h = Harness()
    a, b = h.form("a", "b")
    a.join()
    assert h.group().state == PREPARING
    eff = b.commit({("t", 0): 42})
    assert commit_codes(eff) == [Errors.NONE]
    assert records_of(eff, r.OffsetsCommitted)[0].generation_id == 1
    assert fetched(h)[("t", 0)][0] == 42


def test_completing_commit_is_rebalance_in_progress():
    h = Harness()
    _a, b = h.form("a", "b", sync=False)
    eff = b.commit({("t", 0): 42})
    assert commit_codes(eff) == [Errors.REBALANCE_IN_PROGRESS]
    assert eff.records == []
    assert fetched(h) == {}


def test_stable_commit_is_accepted():
    h = Harness()
    _a, b = h.form("a", "b")
    eff = b.commit({("t", 0): 42, ("u", 3): (9, "m")})
    assert commit_codes(eff) == [Errors.NONE, Errors.NONE]
    assert fetched(h) == {("t", 0): (42, 4, ""), ("u", 3): (9, 0, "m")}
    h.assert_replay()


def test_stable_commit_fencing():
    h = Harness()
    a, s = h.form("a", static=["s1"])
    assert commit_codes(s.commit(generation_id=2)) == [Errors.ILLEGAL_GENERATION]
    assert commit_codes(s.commit(generation_id=0)) == [Errors.ILLEGAL_GENERATION]
    assert commit_codes(h.commit(generation_id=1, member_id="ghost")) == [Errors.UNKNOWN_MEMBER_ID]
    # identity before generation
    assert commit_codes(h.commit(generation_id=9, member_id="ghost")) == [Errors.UNKNOWN_MEMBER_ID]
    assert commit_codes(h.commit(generation_id=9, member_id="ghost", instance_id="s1")) == [Errors.FENCED_INSTANCE_ID]
    assert commit_codes(h.commit(generation_id=1, member_id=a.member_id, instance_id="s1")) == [
        Errors.FENCED_INSTANCE_ID
    ]
    assert fetched(h) == {}
    assert commit_codes(s.commit()) == [Errors.NONE]


def test_member_commit_refreshes_the_session():
    h = Harness()
    a, b = h.form("a", "b")
    h.run(8_000, a)
    assert commit_codes(b.commit()) == [Errors.NONE]  # b's session now ends at t=18s
    h.run(9_999, a, step=3_333)
    assert b.member_id in h.group().members
    eff = h.advance(1)
    assert [x.member_id for x in records_of(eff, r.MemberRemoved)] == [b.member_id]


# -- per-partition errors ---------------------------------------------------------------------------------


def test_metadata_too_large_fails_only_that_partition():
    h = Harness()
    _a, b = h.form("a", "b")
    eff = b.commit({("t", 0): (1, "x" * 4096), ("t", 1): (2, "x" * 4097), ("t", 2): (3, "é" * 2049)})
    assert commit_codes(eff) == [Errors.NONE, Errors.OFFSET_METADATA_TOO_LARGE, Errors.OFFSET_METADATA_TOO_LARGE]
    assert set(fetched(h)) == {("t", 0)}


def test_metadata_limit_comes_from_config():
    h = Harness(offset_metadata_max_bytes=10)
    eff = h.commit(offsets={("t", 0): (1, "x" * 10), ("t", 1): (1, "x" * 11)})
    assert commit_codes(eff) == [Errors.NONE, Errors.OFFSET_METADATA_TOO_LARGE]


@pytest.mark.parametrize(
    "offsets",
    [{("", 0): 1}, {("t", -1): 1}, {("t", 0): -1}],
    ids=["empty topic", "negative partition", "negative offset"],
)
def test_malformed_partition_is_invalid_request(offsets):
    h = Harness()
    eff = h.commit(offsets={**offsets, ("ok", 0): 1})
    assert commit_codes(eff) == [Errors.INVALID_REQUEST, Errors.NONE]
    assert set(fetched(h)) == {("ok", 0)}


# -- OffsetFetch ----------------------------------------------------------------------------------------


def test_fetch_unknown_partitions_are_minus_one():
    h = Harness()
    h.commit(offsets={("t", 0): 5})
    assert fetched(h, topics={"t": [0, 1], "other": [0]}) == {
        ("t", 0): (5, 0, ""),
        ("t", 1): (-1, -1, ""),
        ("other", 0): (-1, -1, ""),
    }


def test_fetch_from_absent_group():
    h = Harness()
    assert fetched(h, topics={"t": [0]}) == {("t", 0): (-1, -1, "")}
    assert fetched(h) == {}
    assert not h.has_group()


def test_fetch_with_no_topics_returns_every_offset_and_ignores_membership():
    h = Harness()
    a, _b = h.form("a", "b")
    a.commit({("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    a.join()  # rebalancing: fetch does not care
    assert fetched(h) == {("t", 0): (1, 0, ""), ("t", 1): (2, 0, ""), ("u", 0): (3, 0, "")}


def test_fetch_with_invalid_group_id():
    h = Harness()
    resp = h.fetch("x" * 256).response
    assert code(resp) == Errors.INVALID_GROUP_ID


# -- retention and empty-group expiry -------------------------------------------------------------------

RETENTION = {"offsets_retention_ms": 100_000, "offsets_retention_check_interval_ms": 10_000}


def test_offsets_expire_retention_after_the_group_became_empty():
    h = Harness(**RETENTION)
    a, b = h.form("a", "b")
    a.commit({("t", 0): 1})
    h.run(48_000, a, b)
    a.leave()
    b.leave()  # Empty at t=48s
    assert h.group().state == EMPTY
    h.advance(142_000 - h.clock.now)  # t=142s: 142s after the commit, 94s after becoming Empty
    assert fetched(h) == {("t", 0): (1, 0, "")}
    eff = h.advance(8_000)  # t=150s check: retention passed at t=148s
    assert [type(x) for x in eff.records] == [r.OffsetsExpired, r.GroupDeleted]
    assert not h.has_group()
    assert code(h.describe_one()) == Errors.GROUP_ID_NOT_FOUND
    h.assert_replay()


def test_offsets_of_a_group_that_never_had_members_expire_per_commit():
    h = Harness(**RETENTION)
    h.commit(offsets={("t", 0): 1})
    h.advance(50_000)
    h.commit(offsets={("t", 1): 2})
    eff = h.advance(50_000)  # t=100s: the first commit is 100s old
    assert [type(x) for x in eff.records] == [r.OffsetsExpired]
    assert fetched(h) == {("t", 1): (2, 0, "")}
    eff = h.advance(49_999)
    assert eff.records == []
    eff = h.advance(1)  # t=150s
    assert [type(x) for x in eff.records] == [r.OffsetsExpired, r.GroupDeleted]
    assert not h.has_group()
    h.assert_replay()


def test_recommitted_offset_restarts_its_retention():
    h = Harness(**RETENTION)
    h.commit(offsets={("t", 0): 1})
    h.advance(60_000)
    h.commit(offsets={("t", 0): 2})
    h.advance(60_000)  # t=120s: the latest commit is 60s old
    assert fetched(h) == {("t", 0): (2, 0, "")}


def test_offsets_of_an_active_group_do_not_expire():
    h = Harness(**RETENTION)
    a, b = h.form("a", "b")
    a.commit({("t", 0): 1})
    h.run(250_000, a, b)
    assert fetched(h) == {("t", 0): (1, 0, "")}
    assert h.group().state == STABLE


def test_empty_group_without_offsets_is_removed():
    h = Harness(**RETENTION)
    (a,) = h.form("a")
    a.leave()
    assert h.group().state == EMPTY
    eff = h.advance(10_000)
    assert [type(x) for x in eff.records] == [r.GroupDeleted]
    assert not h.has_group()
    assert code(h.describe_one()) == Errors.GROUP_ID_NOT_FOUND
    assert h.list_groups().response.groups == []
    h.assert_replay()


def test_group_left_by_an_expired_pending_member_is_removed():
    h = Harness(**RETENTION)
    h.join(client_id="c")
    h.advance(20_000)
    assert not h.has_group()


def test_empty_group_with_pre_registered_instances_is_kept():
    h = Harness(**RETENTION)
    h.add_members("g", "s1")
    h.advance(500_000)
    assert h.has_group()
    assert list(h.describe_one().pending_instance_ids) == ["s1"]
