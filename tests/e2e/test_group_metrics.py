"""Per-group series of a real node (state, members, generation, offsets, rebalances, failed rebalances), their
cardinality caps, and what counts as a failed rebalance (node/group_metrics.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from groupcoord.coordinator import GroupCoordinator
from groupcoord.coordinator.config import GroupConfig
from groupcoord.node.metrics import NodeMetrics
from groupcoord.node.partitions import PROPOSAL_FAILURES, Role
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import join_request, start_node, stop_node, sync_all
from tests.e2e.test_metrics import Scrape, metrics_address, node, scrape_until
from tests.support import FakeClock, SeqIds

FAILED = "groupcoord_rebalances_failed_total"
GROUP_FAILED = "groupcoord_group_rebalances_failed_total"
__all__ = ["node"]  # the fixture: a node that serves metrics on a port it picks, one per module


def series(scrape: Scrape, name: str, **labels: str) -> list[dict[str, str]]:
    """The label sets of every sample of `name` that carries `labels`."""
    return [
        dict(found)
        for sample, found in scrape.samples
        if sample == name and all(dict(found).get(k) == v for k, v in labels.items())
    ]


async def commit(stub: pb_grpc.GroupCoordinatorStub, group: str, offsets: dict[tuple[str, int], int], **ids) -> None:
    """OffsetCommit; without member and generation, a simple commit that creates an Empty group."""
    topics: dict[str, list[pb.OffsetCommitRequest.Partition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            pb.OffsetCommitRequest.Partition(partition_index=partition, committed_offset=offset)
        )
    request = pb.OffsetCommitRequest(
        group_id=group,
        generation_id=ids.get("generation_id", -1),
        member_id=ids.get("member_id", ""),
        topics=[pb.OffsetCommitRequest.Topic(name=t, partitions=p) for t, p in topics.items()],
    )
    reply = await stub.OffsetCommit(request)
    assert {p.error_code for t in reply.topics for p in t.partitions} == {Errors.NONE}, reply


async def test_a_group_has_its_own_series_and_a_join_timeout_fails_its_rebalance(node, stub):
    address = metrics_address(node)
    group = "per-group-labels"
    before = Scrape(address)
    # Short rebalance timeouts: the first member will not rejoin the second rebalance and is dropped after 0.5 s.
    quick = {"rebalance_timeout_ms": 500}
    pending = await stub.JoinGroup(join_request(group, **quick))
    first = await stub.JoinGroup(join_request(group, member_id=pending.member_id, **quick))
    assert (await sync_all(stub, group, [first], [""]))[0].error_code == Errors.NONE
    await commit(stub, group, {("orders", 0): 10, ("orders", 1): 11}, generation_id=1, member_id=first.member_id)

    stable = Scrape(address)
    assert series(stable, "groupcoord_group_state", group=group) == [{"group": group, "state": "Stable"}]
    assert stable.value("groupcoord_group_state", group=group, state="Stable") == 1
    assert stable.value("groupcoord_group_members", group=group) == 1
    assert stable.value("groupcoord_group_generation", group=group) == 1
    assert stable.value("groupcoord_group_committed_offset", group=group, topic="orders", partition="0") == 10
    assert stable.value("groupcoord_group_committed_offset", group=group, topic="orders", partition="1") == 11
    assert series(stable, "groupcoord_group_rebalances_total", group=group) == [
        {"group": group, "cause": "member_joined"}
    ]
    assert stable.value("groupcoord_group_rebalances_total", group=group, cause="member_joined") == 1
    assert series(stable, GROUP_FAILED, group=group) == [{"group": group}]
    assert stable.value(GROUP_FAILED, group=group) == 0
    assert stable.value("groupcoord_groups_not_exported") == 0
    assert stable.value("groupcoord_group_offsets_not_exported") == 0
    # Every reason of the node-wide counts is there from the start.
    assert {s["reason"] for s in series(before, FAILED)} == {"join_timeout", "sync_timeout", "session_expired"}
    proposals = series(before, "groupcoord_raft_proposals_failed_total")
    assert {s["reason"] for s in proposals} == {*PROPOSAL_FAILURES} >= {"abandoned", "not_applied", "queue_full"}

    # A second member starts a rebalance; the first never rejoins: dropped for join_timeout, the rebalance failed.
    second_id = (await stub.JoinGroup(join_request(group, **quick))).member_id
    second = await stub.JoinGroup(join_request(group, member_id=second_id, **quick))
    assert (second.error_code, second.generation_id, [m.member_id for m in second.members]) == (
        Errors.NONE,
        2,
        [second_id],
    )
    assert (await sync_all(stub, group, [second], [""]))[0].error_code == Errors.NONE

    after = await scrape_until(address, lambda s: s.value(GROUP_FAILED, group=group) == 1)
    assert after.value(GROUP_FAILED, group=group) == 1
    assert after.value(FAILED, reason="join_timeout") - before.value(FAILED, reason="join_timeout") == 1
    assert after.value(FAILED, reason="sync_timeout") == before.value(FAILED, reason="sync_timeout")
    assert after.value("groupcoord_group_rebalances_total", group=group, cause="member_joined") == 2
    assert after.value("groupcoord_group_generation", group=group) == 2
    assert after.value("groupcoord_group_members", group=group) == 1
    assert series(after, "groupcoord_group_state", group=group) == [{"group": group, "state": "Stable"}]


async def test_past_the_caps_groups_and_offsets_are_left_out_and_counted(tmp_path: Path):
    """Three groups over a cap of two: the two smallest ids are exported; of their offsets, those that fit three."""
    proc = start_node(tmp_path / "node.log", "--metrics-port=0", "--metrics-max-groups=2", "--metrics-max-offsets=3")
    try:
        async with grpc.aio.insecure_channel(proc.address) as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            await commit(stub, "cap-a", {("t", 0): 1, ("t", 1): 2})
            await commit(stub, "cap-b", {("t", 0): 3, ("t", 1): 4})  # two more than the one left: none exported
            await commit(stub, "cap-c", {("t", 0): 5})
        scraped = Scrape(metrics_address(proc))
    finally:
        stop_node(proc)
    assert sorted(s["group"] for s in series(scraped, "groupcoord_group_state")) == ["cap-a", "cap-b"]
    assert {s["state"] for s in series(scraped, "groupcoord_group_state")} == {"Empty"}
    assert sorted(s["group"] for s in series(scraped, "groupcoord_group_members")) == ["cap-a", "cap-b"]
    assert scraped.value("groupcoord_groups_not_exported") == 1
    offsets = series(scraped, "groupcoord_group_committed_offset")
    assert sorted((s["group"], s["partition"]) for s in offsets) == [("cap-a", "0"), ("cap-a", "1")]
    assert scraped.value("groupcoord_group_offsets_not_exported") == 2
    assert scraped.value("groupcoord_groups", state="Empty") == 3  # the totals count every group


def _value(metrics: NodeMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def started(group: str, cause: str, ms: int = 0) -> r.RebalanceStarted:
    return r.RebalanceStarted(group, cause, "m1", "", 0, "", ms)


def removed(group: str, cause: str, member: str = "m1") -> r.MemberRemoved:
    return r.MemberRemoved(group, member, cause, "", 0)


def test_what_counts_as_a_failed_rebalance():
    """In process, from committed records: once per rebalance, under its first reason; leaving is no failure."""
    metrics = NodeMetrics()
    # Everyone leaves: the rebalance ends Empty, not failed.
    metrics.on_commit(
        [removed("left", "leave"), started("left", "member_left"), r.GenerationCompleted("left", 2, "", "", 0)]
    )
    # A join timeout and then a sync-timeout restart of the same rebalance: one failure, join_timeout.
    metrics.on_commit([started("slow", "member_joined"), removed("slow", "join_timeout", "m2")])
    metrics.on_commit([r.GenerationCompleted("slow", 2, "range", "m1", 0), started("slow", "sync_timeout")])
    # A session that expires while Stable starts a rebalance (its cause); it is not a failure of one.
    metrics.on_commit([removed("idle", "session_expired"), started("idle", "session_expired")])
    # ... but one that expires during a rebalance is.
    metrics.on_commit([removed("idle", "session_expired", "m2")])
    # A leader that never sends the assignment: the restart is the failure (static members: nobody is dropped).
    metrics.on_commit([started("static", "member_joined"), r.GenerationCompleted("static", 1, "range", "m1", 0)])
    metrics.on_commit([started("static", "sync_timeout"), r.GenerationCompleted("static", 2, "range", "m1", 0)])
    metrics.on_commit([r.AssignmentsSynced("static", 2, {}, 0)])
    # A follower that never synced, dropped once the group is Stable: the rebalance that left it out failed. The
    # rebalance that follows is a new one, which completes; the one after that fails again.
    follower = "follower"
    metrics.on_commit([started(follower, "member_joined"), r.GenerationCompleted(follower, 1, "range", "m1", 0)])
    metrics.on_commit([r.AssignmentsSynced(follower, 1, {}, 0)])
    metrics.on_commit([removed(follower, "sync_timeout", "m2"), started(follower, "sync_timeout")])
    metrics.on_commit([r.GenerationCompleted(follower, 2, "range", "m1", 0), r.AssignmentsSynced(follower, 2, {}, 0)])
    metrics.on_commit([started(follower, "member_joined"), removed(follower, "join_timeout", "m3")])

    assert _value(metrics, FAILED, reason="join_timeout") == 2
    assert _value(metrics, FAILED, reason="sync_timeout") == 2
    assert _value(metrics, FAILED, reason="session_expired") == 1
    counters = metrics.group_counters
    failed = {g: c.failed for g in ("left", "slow", "idle", "static", follower) if (c := counters.get(g)) is not None}
    assert failed == {"left": 0, "slow": 1, "idle": 1, "static": 1, follower: 2}
    assert getattr(counters.get(follower), "causes", None) == {"member_joined": 2, "sync_timeout": 1}
    # A deleted group's counters go with it.
    metrics.on_commit([r.GroupDeleted("left", "empty", 0)])
    assert counters.get("left") is None


async def test_counters_of_groups_no_longer_led_are_forgotten():
    """When a partition stops being led here, the counters keep only the groups of the cores still led."""
    clock = FakeClock()
    kept = GroupCoordinator(GroupConfig(), clock, new_uuid=SeqIds())
    kept.join_group(join_request("kept"), "t1")
    cores = [kept]
    metrics = NodeMetrics()
    metrics.watch_cores(asyncio.get_running_loop(), lambda: cores)
    metrics.on_role(0, Role.FOLLOWER)
    metrics.on_role(0, Role.LEADER)
    metrics.on_commit([started("kept", "member_joined"), started("gone", "member_joined")])
    metrics.on_role(0, Role.FOLLOWER)
    assert (metrics.group_counters.get("kept") is not None, metrics.group_counters.get("gone")) == (True, None)
    assert _value(metrics, "groupcoord_group_state", group="kept", state="Empty") == 1
    assert _value(metrics, "groupcoord_group_rebalances_total", group="kept", cause="member_joined") == 1
