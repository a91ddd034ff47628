"""The metrics endpoints of a real 3-node cluster across a kill -9 of a coordinator: request counters per node,
partition leadership (partitions led, role gauges, leader changes), barrier time, Raft commit latency and peer round
trips."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.node.metrics import NodeMetrics, error_label
from groupcoord.node.partitions import Role
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_three_nodes import PARTITIONS, SESSION_MS, Cluster, _rpc
from tests.e2e.support import join_request
from tests.e2e.test_metrics import REQUESTS, Scrape, metrics_address

LED = "groupcoord_partitions_led"
ROLE = "groupcoord_partition_role"
CHANGES = "groupcoord_leader_changes_total"
BARRIERS = "groupcoord_barrier_seconds_count"
COMMITS = "groupcoord_raft_commit_latency_seconds_count"
ROUND_TRIPS = "groupcoord_raft_peer_round_trip_seconds_count"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, "--metrics-port=0")
    yield c
    c.stop_all()


class Calls:
    """Sends RPCs to the cluster's nodes and counts each answer per node, API and error code, as the node does."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sent: collections.Counter[tuple[int, str, str]] = collections.Counter()

    async def call(self, node: int, api: str, request, code_of=lambda reply: reply.error_code):
        reply = await _rpc(self.cluster.address(node), api, request)
        self.sent[node, api, error_label(code_of(reply))] += 1
        return reply

    async def coordinator(self, group: str, via: int) -> pb.FindCoordinatorResponse.Coordinator:
        found = await self.call(
            via, "FindCoordinator", pb.FindCoordinatorRequest(group_ids=[group]), lambda m: m.coordinators[0].error_code
        )
        return found.coordinators[0]

    def check_counted(self, before: dict[int, Scrape], after: dict[int, Scrape]) -> None:
        """Each node's request counters grew by exactly the answers it gave since `before`."""
        for (node, api, code), count in self.sent.items():
            labels = {"api": api, "error_code": code}
            assert after[node].value(REQUESTS, **labels) - before[node].value(REQUESTS, **labels) == count, labels


def role(scrape: Scrape, partition: int, name: str) -> float:
    return scrape.value(ROLE, partition=str(partition), role=name)


async def scrape_led(addresses: dict[int, str], timeout_s: float = 5.0) -> dict[int, Scrape]:
    """Scrapes of these nodes once they lead every partition between them (or at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        scrapes = {i: await asyncio.to_thread(Scrape, a) for i, a in addresses.items()}
        if sum(s.value(LED) for s in scrapes.values()) == PARTITIONS or time.monotonic() > deadline:
            return scrapes
        await asyncio.sleep(0.05)


def check_leadership(scrapes: dict[int, Scrape]) -> None:
    """Every partition led by exactly one of these nodes; each node's gauges agree with its counters."""
    assert sum(s.value(LED) for s in scrapes.values()) == PARTITIONS
    for k in range(PARTITIONS):
        assert sum(role(s, k, "leader") for s in scrapes.values()) == 1, k
        for s in scrapes.values():
            assert sum(role(s, k, r) for r in ("follower", "loading", "leader")) == 1, k
    for s in scrapes.values():
        assert sum(role(s, k, "leader") for k in range(PARTITIONS)) == s.value(LED)
        assert s.value(CHANGES, event="gained") - s.value(CHANGES, event="lost") == s.value(LED)


async def test_metrics_follow_requests_and_partition_leadership_across_a_failover(cluster: Cluster):
    start = time.monotonic()
    addresses = {i: metrics_address(cluster.nodes[i]) for i in range(3)}
    before = await scrape_led(addresses)
    check_leadership(before)
    assert sum(s.value(BARRIERS) for s in before.values()) >= 1

    calls = Calls(cluster)
    group = "metrics-failover"
    found = [await calls.coordinator(group, i) for i in range(3)]
    assert {(c.error_code, c.node_id, c.partition) for c in found} == {
        (Errors.NONE, found[0].node_id, found[0].partition)
    }
    dead, partition = found[0].node_id - 1, found[0].partition
    assert role(before[dead], partition, "leader") == 1
    survivors = [i for i in range(3) if i != dead]
    join = pb.JoinGroupRequest(
        group_id=group,
        group_instance_id="a",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=3_000,
        protocol_type="consumer",
        protocols=[pb.JoinGroupRequest.Protocol(name="range", metadata=b"t")],
    )
    joined = await calls.call(dead, "JoinGroup", join)
    assert (joined.error_code, joined.generation_id) == (Errors.NONE, 1)
    synced = await calls.call(
        dead,
        "SyncGroup",
        pb.SyncGroupRequest(
            group_id=group,
            generation_id=1,
            member_id=joined.member_id,
            assignments=[pb.SyncGroupRequest.Assignment(member_id=joined.member_id, assignment=b"p0")],
        ),
    )
    assert synced.error_code == Errors.NONE
    beat = pb.HeartbeatRequest(group_id=group, generation_id=1, member_id=joined.member_id)
    assert (await calls.call(dead, "Heartbeat", beat)).error_code == Errors.NONE
    refused = await calls.call(survivors[0], "JoinGroup", join_request(group))
    assert refused.error_code == Errors.COORDINATOR_NOT_AVAILABLE

    served = {i: Scrape(a) for i, a in addresses.items()}
    calls.check_counted(before, served)
    # At least the join's and the sync's record batches committed through Raft on the coordinator.
    assert served[dead].value(COMMITS) - before[dead].value(COMMITS) >= 2
    # Their acknowledgements gave the coordinator round trips to each other node, labelled by node id.
    for peer in survivors:
        assert served[dead].value(ROUND_TRIPS, peer=str(peer + 1)) >= 1, peer

    cluster.kill(dead)
    killed = time.monotonic()
    calls.sent.clear()
    while True:
        assert time.monotonic() - killed < 10, "no survivor served the group"
        entry = await calls.coordinator(group, survivors[0])
        if entry.error_code == Errors.NONE and entry.node_id - 1 in survivors:
            reply = await calls.call(entry.node_id - 1, "Heartbeat", beat)
            if reply.error_code == Errors.NONE:
                break
        await asyncio.sleep(0.02)
    new = entry.node_id - 1
    failover_s = time.monotonic() - killed

    # The dead node's other partitions may still be electing: wait until the survivors lead them all.
    after = await scrape_led({i: addresses[i] for i in survivors})
    check_leadership(after)
    # The leader gauge moved: the group's partition is now led by the new coordinator, which gained it.
    assert (role(before[new], partition, "leader"), role(after[new], partition, "leader")) == (0, 1)
    assert after[new].value(CHANGES, event="gained") > before[new].value(CHANGES, event="gained")
    assert after[new].value(BARRIERS) > before[new].value(BARRIERS)
    assert sum(after[i].value(LED) - before[i].value(LED) for i in survivors) == before[dead].value(LED)
    # The requests sent after the failover are counted by the survivors that answered them.
    calls.check_counted(served, after)
    assert calls.sent[new, "Heartbeat", "NONE"] == 1
    print(f"metrics failover: served again {failover_s:.2f} s after kill -9, test {time.monotonic() - start:.1f} s")


def test_role_reports_drive_the_leadership_metrics():
    """In process: the observer side of `PartitionHost`'s reports, including a load that never finishes."""
    metrics = NodeMetrics()

    def value(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    metrics.on_role(0, Role.FOLLOWER)
    metrics.on_role(1, Role.FOLLOWER)
    assert [value(ROLE, partition="0", role=r.value) for r in Role] == [1, 0, 0]
    for role_ in (Role.LOADING, Role.LEADER, Role.LEADER):  # a repeated report changes nothing
        metrics.on_role(0, role_)
    metrics.on_role(1, Role.LOADING)
    metrics.on_role(1, Role.FOLLOWER)  # the barrier failed: not a leader change, no barrier time
    assert (value(LED), value(CHANGES, event="gained"), value(CHANGES, event="lost"), value(BARRIERS)) == (1, 1, 0, 1)
    assert [value(ROLE, partition="0", role=r.value) for r in Role] == [0, 0, 1]
    assert [value(ROLE, partition="1", role=r.value) for r in Role] == [1, 0, 0]
    metrics.on_role(0, Role.FOLLOWER)
    assert (value(LED), value(CHANGES, event="gained"), value(CHANGES, event="lost")) == (0, 1, 1)
    metrics.on_commit_latency(0.002)
    assert value(COMMITS) == 1
