"""Resource limits of the pure core (issue 9): each refusal's code and message, that it writes nothing, that
other groups are unaffected, and that records written under a limit replay without it."""

from __future__ import annotations

import argparse

import pytest

from groupcoord.coordinator import GroupConfig
from groupcoord.coordinator.limits import TokenBucket, exceeds
from groupcoord.node import config as node_config
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.harness import STABLE, Harness, code, records_of


def commit_req(group_id: str, partitions: int, topic: str = "t", topics: int = 1) -> pb.OffsetCommitRequest:
    """A "simple" commit (no member, generation -1) of `partitions` partitions in each of `topics` topics."""
    req = pb.OffsetCommitRequest(group_id=group_id, generation_id=-1)
    for k in range(topics):
        out = req.topics.add(name=f"{topic}{k}" if topics > 1 else topic)
        out.partitions.extend(pb.OffsetCommitRequest.Partition(partition_index=p) for p in range(partitions))
    return req


# -- defaults ---------------------------------------------------------------------------------------------


def test_defaults_are_bounded_and_let_a_full_group_form():
    cfg = GroupConfig()
    assert cfg.max_size == 10_000
    # A full group forms (MEMBER_ID_REQUIRED, then a JoinGroup with the id) and rejoins once within the burst.
    assert cfg.join_burst >= 3 * cfg.max_size
    assert cfg.max_pending_members >= 5_000
    assert cfg.max_groups_per_partition and cfg.max_groups_per_node
    assert cfg.offset_commit_max_partitions == 5_000 and cfg.offset_fetch_max_partitions == 10_000


def test_node_settings_default_to_the_core_defaults_and_set_every_limit():
    parser = argparse.ArgumentParser()
    node_config.add_arguments(parser)
    assert node_config.load(parser.parse_args([]), {}).group == GroupConfig()
    flags = [
        "--group-max-assignment-bytes=1",
        "--max-groups-per-partition=2",
        "--max-groups-per-node=3",
        "--group-join-rate-per-s=4",
        "--group-join-burst=5",
        "--offset-commit-max-partitions=6",
        "--offset-fetch-max-partitions=7",
        "--group-max-pending-members=8",
        "--group-max-member-metadata-bytes=9",
    ]
    group = node_config.load(parser.parse_args(flags), {}).group
    assert (
        group.max_assignment_bytes,
        group.max_groups_per_partition,
        group.max_groups_per_node,
        group.join_rate_per_s,
        group.join_burst,
        group.offset_commit_max_partitions,
        group.offset_fetch_max_partitions,
        group.max_pending_members,
        group.max_member_metadata_bytes,
    ) == (1, 2, 3, 4, 5, 6, 7, 8, 9)


def test_invalid_limits_are_refused():
    with pytest.raises(ValueError, match="join_burst"):
        GroupConfig(join_rate_per_s=10, join_burst=0)
    with pytest.raises(ValueError, match="offset_commit_max_partitions"):
        GroupConfig(offset_commit_max_partitions=0)


# -- member metadata and assignment size ------------------------------------------------------------------


def test_member_metadata_over_the_limit_is_invalid_request():
    h = Harness(max_member_metadata_bytes=100)
    eff = h.join(protocols=(("range", b"x" * 101),))
    assert code(eff.response) == Errors.INVALID_REQUEST
    assert "100 bytes" in eff.response.error_message
    assert eff.records == []
    assert code(h.join(protocols=(("range", b"x" * 100),)).response) == Errors.MEMBER_ID_REQUIRED


def test_oversized_assignment_is_refused_and_the_group_waits_for_a_good_one():
    h = Harness(max_assignment_bytes=10)
    a, b = h.form("a", "b", sync=False)
    eff = a.sync({a.member_id: b"x" * 11, b.member_id: b""})
    assert code(eff.response) == Errors.POLICY_VIOLATION
    assert eff.response.error_message == "an assignment exceeds group_max_assignment_bytes = 10"
    assert eff.records == []
    assert h.parked_syncs() == set()
    b.sync()
    assert b.sync_reply() is None  # still waiting for the leader
    a.sync({a.member_id: b"x" * 10, b.member_id: b"y"})
    assert h.group().state == STABLE
    assert (a.assignment, code(b.sync_reply())) == (b"x" * 10, Errors.NONE)
    h.assert_replay()


# -- members and pending members per group ----------------------------------------------------------------


def test_group_max_size_names_the_limit():
    h = Harness(max_size=1)
    h.form("a")
    eff = h.join(client_id="b")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert eff.response.error_message == "group_max_size is 1"


def test_pending_members_over_the_limit_get_group_max_size_reached():
    h = Harness(max_pending_members=2)
    for _ in range(2):
        assert code(h.join(client_id="x").response) == Errors.MEMBER_ID_REQUIRED
    eff = h.join(client_id="x")
    assert code(eff.response) == Errors.GROUP_MAX_SIZE_REACHED
    assert "group_max_pending_members = 2" in eff.response.error_message
    assert eff.records == []
    # Another group is not affected.
    assert code(h.join(group_id="other").response) == Errors.MEMBER_ID_REQUIRED


# -- groups per partition and per node --------------------------------------------------------------------


def test_new_groups_beyond_the_partition_limit_are_refused_existing_ones_keep_working():
    h = Harness(max_groups_per_partition=2)
    (a,) = h.form("a", group_id="g1")
    assert code(h.commit("g2").response.topics[0].partitions[0]) == Errors.NONE
    eff = h.join(group_id="g3")
    assert code(eff.response) == Errors.POLICY_VIOLATION
    assert eff.response.error_message == "this coordinator partition holds max_groups_per_partition = 2 groups"
    assert eff.records == [] and not h.has_group("g3")
    eff = h.join(group_id="g3", instance_id="s1")
    assert code(eff.response) == Errors.POLICY_VIOLATION and not h.has_group("g3")
    eff = h.commit("g3")
    assert (code(eff.response), eff.response.error_message) == (
        Errors.POLICY_VIOLATION,
        "this coordinator partition holds max_groups_per_partition = 2 groups",
    )
    assert code(eff.response.topics[0].partitions[0]) == Errors.POLICY_VIOLATION
    eff = h.add_members("g3", "i1")
    assert code(eff.response) == Errors.POLICY_VIOLATION and not h.has_group("g3")
    # Existing groups: a new member, commits, heartbeats.
    assert code(h.join(group_id="g1", client_id="b").response) == Errors.MEMBER_ID_REQUIRED
    assert code(h.commit("g2", offsets={("t", 1): 5}).response.topics[0].partitions[0]) == Errors.NONE
    assert code(a.heartbeat().response) in (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)
    h.assert_replay()


def test_a_deleted_group_frees_its_slot():
    h = Harness(max_groups_per_partition=1)
    (a,) = h.form("a", group_id="g1")
    assert code(h.join(group_id="g2").response) == Errors.POLICY_VIOLATION
    a.leave()
    assert code(h.delete("g1").response.results[0]) == Errors.NONE
    assert code(h.join(group_id="g2").response) == Errors.MEMBER_ID_REQUIRED
    h.assert_replay()


def test_node_limit_counts_what_the_node_reports():
    h = Harness(max_groups_per_node=10)
    eff = h.absorb(h.core.join_group(h.join_req(group_id="new"), token="t-node", node_groups=lambda: 10))
    assert code(eff.response) == Errors.POLICY_VIOLATION
    assert eff.response.error_message == "the partitions this node leads hold max_groups_per_node = 10 groups"
    eff = h.absorb(h.core.offset_commit(commit_req("new", 1), token="t-commit", node_groups=lambda: 10))
    assert code(eff.response) == Errors.POLICY_VIOLATION
    eff = h.absorb(
        h.core.add_members(
            pb.AddMembersToGroupRequest(group_id="new", group_instance_ids=["i"]), node_groups=lambda: 10
        )
    )
    assert code(eff.response) == Errors.POLICY_VIOLATION
    assert not h.has_group("new")
    eff = h.absorb(h.core.join_group(h.join_req(group_id="new"), token="t-room", node_groups=lambda: 9))
    assert code(eff.response) == Errors.MEMBER_ID_REQUIRED
    # The group exists now: a full node does not refuse it.
    eff = h.absorb(h.core.join_group(h.join_req(group_id="new"), token="t-full", node_groups=lambda: 50))
    assert code(eff.response) == Errors.MEMBER_ID_REQUIRED


def test_group_limits_are_checked_on_requests_not_on_replay():
    """Records committed under a larger limit (or by another leader) still apply to a store over the limit."""
    h = Harness()
    for k in range(3):
        h.commit(f"g{k}")
    fresh = Harness(max_groups_per_partition=1)
    for rec in h.records:
        assert fresh.core.store.apply(rec)
    assert len(fresh.core.store.groups) == 3


# -- JoinGroup rate per group -----------------------------------------------------------------------------


def test_token_bucket_refills_at_its_rate_up_to_its_burst():
    bucket = TokenBucket(rate_per_s=10, burst=2, tokens=2.0, updated_ms=0)
    assert [bucket.take(0), bucket.take(0)] == [0, 0]
    assert bucket.take(0) == 100  # one token every 100 ms
    assert bucket.take(40) == 60  # a refusal takes nothing
    assert bucket.take(100) == 0
    assert bucket.take(10_000) == 0 and bucket.tokens == 1.0  # never more than the burst


def test_join_rate_throttles_one_group_with_a_retry_hint():
    h = Harness(join_rate_per_s=10, join_burst=3)
    first = h.join().response  # creates the group: not counted
    assert code(first) == Errors.MEMBER_ID_REQUIRED
    for _ in range(3):
        assert code(h.join().response) == Errors.MEMBER_ID_REQUIRED
    eff = h.join(member_id=first.member_id)
    resp = eff.response
    assert code(resp) == Errors.THROTTLING_QUOTA_EXCEEDED
    assert (resp.throttle_time_ms, resp.member_id, resp.generation_id) == (100, first.member_id, -1)
    assert resp.error_message == "over group_join_rate_per_s = 10; retry in 100 ms"
    assert eff.records == []
    # Other groups have buckets of their own.
    assert code(h.join(group_id="other").response) == Errors.MEMBER_ID_REQUIRED
    h.clock.advance(resp.throttle_time_ms)
    assert h.join(member_id=first.member_id).response is None  # admitted: parked in the join phase
    h.assert_replay()


def test_join_rate_is_soft_state_a_new_leader_starts_full():
    h = Harness(join_rate_per_s=1, join_burst=1)
    h.join()
    h.join()
    assert code(h.join().response) == Errors.THROTTLING_QUOTA_EXCEEDED
    h.core.load()  # what a new leader does
    assert code(h.join().response) == Errors.MEMBER_ID_REQUIRED


def test_zero_join_rate_means_no_limit():
    h = Harness(join_rate_per_s=0, join_burst=1)
    assert all(code(h.join().response) == Errors.MEMBER_ID_REQUIRED for _ in range(20))


def test_deleting_a_group_drops_its_bucket():
    h = Harness(join_rate_per_s=1, join_burst=5)
    (a,) = h.form("a")
    assert "g" in h.core.runtime.soft and h.core.runtime.soft["g"].join_bucket is not None
    a.leave()
    h.delete("g")
    assert "g" not in h.core.runtime.soft


# -- offset metadata, partitions per OffsetCommit / OffsetFetch -------------------------------------------


def test_offset_metadata_over_the_limit_is_refused_per_partition():
    h = Harness(offset_metadata_max_bytes=4)
    eff = h.commit(offsets={("t", 0): (1, "abcd"), ("t", 1): (1, "abcde")})
    assert [code(p) for p in eff.response.topics[0].partitions] == [Errors.NONE, Errors.OFFSET_METADATA_TOO_LARGE]
    (rec,) = records_of(eff, r.OffsetsCommitted)
    assert [row[1] for row in rec.offsets] == [0]


def test_commit_over_the_partition_limit_is_refused_whole_without_a_record():
    h = Harness(offset_commit_max_partitions=10)
    eff = h.absorb(h.core.offset_commit(commit_req("g", 11)))
    assert code(eff.response) == Errors.POLICY_VIOLATION
    assert eff.response.error_message == "more than offset_commit_max_partitions = 10 partitions"
    assert list(eff.response.topics) == []
    assert eff.records == [] and not h.has_group()
    # Topics without partitions count too.
    assert code(h.absorb(h.core.offset_commit(commit_req("g", 0, topics=11))).response) == Errors.POLICY_VIOLATION
    eff = h.absorb(h.core.offset_commit(commit_req("g", 10)))
    assert eff.response.error_code == Errors.NONE
    assert {code(p) for p in eff.response.topics[0].partitions} == {Errors.NONE}
    (rec,) = records_of(eff, r.OffsetsCommitted)
    assert len(rec.offsets) == 10


def test_a_commit_far_over_the_limit_costs_no_more_than_one_just_over():
    counted: list[int] = []

    def counts():
        for n in [1] * 1_000_000:
            counted.append(n)
            yield n

    assert exceeds(counts(), 10)
    assert len(counted) == 11


@pytest.mark.parametrize("topic", ["", "a b", "t/1", "é", "x" * 250, "\x00"])
def test_commit_to_an_illegal_topic_name_is_invalid_request(topic):
    h = Harness()
    eff = h.commit(offsets={(topic, 0): 1})
    assert code(eff.response.topics[0].partitions[0]) == Errors.INVALID_REQUEST
    assert eff.records == []


def test_commit_with_kafka_topic_names_is_accepted():
    h = Harness()
    eff = h.commit(offsets={("orders.v2_EU-1", 0): 1, ("x" * 249, 0): 2})
    assert {code(p) for t in eff.response.topics for p in t.partitions} == {Errors.NONE}


def test_fetch_over_the_partition_limit_is_refused():
    h = Harness(offset_fetch_max_partitions=5)
    h.commit()
    eff = h.fetch(topics={"t": list(range(6))})
    assert code(eff.response) == Errors.POLICY_VIOLATION
    assert eff.response.error_message == "more than offset_fetch_max_partitions = 5 partitions"
    assert list(eff.response.topics) == []
    assert code(h.fetch(topics={"t": list(range(5))}).response) == Errors.NONE
    # Fetching every offset names no partition: not limited by this setting.
    assert code(h.fetch().response) == Errors.NONE


def test_a_full_group_forms_and_rejoins_within_the_default_join_burst():
    """`groupcoord bench join --members 5000` and a group of `group_max_size` members are never throttled."""
    h = Harness()
    size = GroupConfig().max_size
    assert size is not None
    members = h.form(*(f"m{i}" for i in range(size)))
    assert len(h.group().members) == size
    members[0].join()  # the leader rejoins: everyone rejoins once more
    for m in members[1:]:
        eff = m.join()
        assert eff.response is None or code(eff.response) == Errors.NONE, eff.response
    assert h.group().generation_id == 2
