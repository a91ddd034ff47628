"""Quiescence on a real 3-node cluster (raft/quiescence.py): idle partitions go quiet (the metric says so), a quiet
partition serves the next request, and a kill -9 of the node leading quiet partitions is a normal failover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_three_nodes import PARTITIONS, Cluster, _coordinator, _node_index, _rpc
from tests.e2e.test_metrics import Scrape, metrics_address

QUIET = "groupcoord_raft_quiet_partitions"
DROPPED = "groupcoord_node_heartbeats_dropped_total"
QUIESCE_AFTER_MS = 500


@pytest.fixture(params=["partition", "node"])
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Both of `raft_threads`' models: a thread per replica, and one driver per node (raft/driver.py)."""
    c = Cluster(
        tmp_path, "--metrics-port=0", f"--raft-quiesce-after-ms={QUIESCE_AFTER_MS}", f"--raft-threads={request.param}"
    )
    yield c
    c.stop_all()


def _quiet(cluster: Cluster) -> float:
    return sum(
        Scrape(metrics_address(node)).value(QUIET) for node in cluster.nodes if node is not None and node.alive()
    )


def _wait_all_quiet(cluster: Cluster, partitions: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _quiet(cluster) != partitions:
        assert time.monotonic() < deadline, f"{_quiet(cluster)} of {partitions} partitions quiet"
        time.sleep(0.2)


def _commit(group: str, offset: int) -> pb.OffsetCommitRequest:
    partition = pb.OffsetCommitRequest.Partition(partition_index=0, committed_offset=offset)
    return pb.OffsetCommitRequest(
        group_id=group,
        generation_id=-1,
        topics=[pb.OffsetCommitRequest.Topic(name="orders", partitions=[partition])],
    )


def _fetch(group: str) -> pb.OffsetFetchRequest:
    topic = pb.OffsetFetchRequest.Topic(name="orders", partition_indexes=[0])
    return pb.OffsetFetchRequest(group_id=group, topics=[topic])


async def _commit_until_ok(cluster: Cluster, group: str, offset: int, via: int, timeout_s: float = 15.0) -> float:
    start = time.monotonic()
    while True:
        coordinator = await _coordinator(cluster, group, via)
        try:
            reply = await _rpc(coordinator, "OffsetCommit", _commit(group, offset)) if coordinator else None
        except grpc.aio.AioRpcError:  # the killed node, named until the survivors elect
            reply = None
        if reply is not None and reply.topics[0].partitions[0].error_code == Errors.NONE:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout_s, f"no commit of {group} within {timeout_s} s"
        await asyncio.sleep(0.05)


async def test_idle_partitions_go_quiet_and_serve_the_next_request(cluster: Cluster):
    cluster.wait_serving()
    _wait_all_quiet(cluster, PARTITIONS)
    assert await _commit_until_ok(cluster, "quiet-group", 42, via=0) < 15
    fetch = _fetch("quiet-group")
    coordinator = await _coordinator(cluster, "quiet-group", 0)
    reply = await _rpc(coordinator, "OffsetFetch", fetch)
    assert reply.topics[0].partitions[0].committed_offset == 42
    # quiet again once nothing needs it, and no node dropped a heartbeat of its own cluster
    _wait_all_quiet(cluster, PARTITIONS)
    assert all(Scrape(metrics_address(n)).value(DROPPED) == 0 for n in cluster.nodes if n is not None)


async def test_a_kill_of_the_node_leading_quiet_partitions_fails_them_over(cluster: Cluster):
    cluster.wait_serving()
    assert await _commit_until_ok(cluster, "kept", 7, via=0) < 15
    _wait_all_quiet(cluster, PARTITIONS)
    victim = _node_index(cluster, await _coordinator(cluster, "kept", 0))
    cluster.kill(victim)
    via = (victim + 1) % cluster.size
    # a new leader for every partition, elected by the followers' timers (no AppendEntries came before the kill)
    assert await _commit_until_ok(cluster, "kept", 8, via=via) < 15
    coordinator = await _coordinator(cluster, "kept", via)
    fetch = _fetch("kept")
    assert (await _rpc(coordinator, "OffsetFetch", fetch)).topics[0].partitions[0].committed_offset == 8
