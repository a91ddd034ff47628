"""A node started with a wrong wall clock, on real node processes (issue 21, items 6 and 7): it leads a partition,
yet expires no offsets early and stamps no records with its own time, because a leader's time is the one most of
the partition's voters agree on (node/clock.py). The wrong clock is the node's injected one
(`--wall-clock-offset-s`): libfaketime makes Python's time.sleep fail when the monotonic clock is left unfaked."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_storage_faults import commit, events, fetch_all, groups_on, no_tracebacks
from tests.cluster.test_three_nodes import Cluster, _rpc

DAYS_8_S = 8 * 86_400
# Partition 2 prefers node 3 (k % 3 + 1, node/balance.py), the node whose clock is wrong.
SKEWED, PARTITION = 2, 2
# Retention of an hour, checked five times a second: a clock 8 days off expires offsets at once if it is used.
FLAGS = ("--offsets-retention-minutes=60", "--offsets-retention-check-interval-ms=200")
CHECKS_S = 2.0  # ten retention checks


async def restart_with_offset(cluster: Cluster, offset_s: int) -> None:
    cluster.kill(SKEWED)
    cluster.flags = (*FLAGS, f"--wall-clock-offset-s={offset_s}")
    cluster.start(SKEWED)
    await asyncio.to_thread(cluster.wait_serving)  # every node serving, and node 3 leads its partition again


async def leader_of(cluster: Cluster, partition: int) -> int:
    described = await _rpc(cluster.address(0), "DescribeCluster", pb.DescribeClusterRequest())
    return described.partitions[partition].leader_node_id


async def test_a_node_started_with_a_wrong_clock_expires_nothing_early(tmp_path: Path):
    cluster = Cluster(tmp_path, *FLAGS)
    try:
        groups = groups_on(PARTITION, 4, "skew")
        for group in groups:
            await commit(cluster, group, 100)

        # 8 days ahead: leading the partition, its own clock would expire every offset committed an hour "ago".
        await restart_with_offset(cluster, DAYS_8_S)
        assert await leader_of(cluster, PARTITION) == SKEWED + 1
        await asyncio.sleep(CHECKS_S)
        assert await fetch_all(cluster, groups) == {group: 100 for group in groups}
        skews = events(cluster, SKEWED, "clock.skew")
        assert skews and abs(skews[0]["seconds"] - DAYS_8_S) < 5, skews

        # 8 days behind: its own clock would stamp new commits 8 days old, and the next leader (a right clock)
        # would expire them at its first check.
        await restart_with_offset(cluster, -DAYS_8_S)
        assert await leader_of(cluster, PARTITION) == SKEWED + 1
        for group in groups:
            await commit(cluster, group, 200)
        await asyncio.sleep(CHECKS_S)
        cluster.kill(SKEWED)  # a node with a right clock takes the partition over
        deadline = time.monotonic() + 20
        while await leader_of(cluster, PARTITION) not in (1, 2):
            assert time.monotonic() < deadline, "nobody took partition 2 over"
            await asyncio.sleep(0.1)
        await asyncio.sleep(CHECKS_S)
        assert await fetch_all(cluster, groups) == {group: 200 for group in groups}
    finally:
        cluster.stop_all()
    no_tracebacks(tmp_path)
