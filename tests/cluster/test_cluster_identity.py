"""Cluster identity on real node processes (issue 21, item 1): a cluster mints its id once and every node learns it;
a node that brings another cluster's data (a volume mixed up, with the same secret) is refused, logged and counted,
and changes nothing in the cluster it was pointed at."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_storage_faults import commit, events, fetch_all, metrics_address
from tests.cluster.test_three_nodes import Cluster, _rpc
from tests.e2e.test_metrics import Scrape


async def cluster_id(cluster: Cluster, timeout_s: float = 20.0) -> str:
    """The id every running node reports, once they all report the same one."""
    deadline = time.monotonic() + timeout_s
    while True:
        ids = set()
        for i, node in enumerate(cluster.nodes):
            if node is not None:
                ids.add((await _rpc(cluster.address(i), "DescribeCluster", pb.DescribeClusterRequest())).cluster_id)
        if len(ids) == 1 and "" not in ids:
            return ids.pop()
        assert time.monotonic() < deadline, f"the nodes never agreed on a cluster id: {ids}"
        await asyncio.sleep(0.1)


async def test_a_node_with_another_clusters_data_is_refused_and_changes_nothing(tmp_path: Path):
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours = Cluster(tmp_path / "ours", "--metrics-port=0")
    theirs = None
    try:
        our_id = await cluster_id(ours)
        stored = json.loads((ours.tmp / "data1" / "cluster.json").read_text())
        assert stored["cluster_id"] == our_id
        groups = [f"identity-{i}" for i in range(6)]
        for group in groups:
            await commit(ours, group, 100)

        theirs = Cluster(tmp_path / "theirs")
        their_id = await cluster_id(theirs)
        assert their_id != our_id
        for group in groups:
            await commit(theirs, group, 7)
        theirs.stop_all()

        # Our node 3 comes back with their node 3's data directory (and the same secret).
        ours.kill(2)
        shutil.rmtree(ours.tmp / "data3")
        shutil.copytree(theirs.tmp / "data3", ours.tmp / "data3")
        ours.start(2)
        deadline = time.monotonic() + 20
        while not (events(ours, 0, "raft.foreign_cluster") or events(ours, 1, "raft.foreign_cluster")):
            assert time.monotonic() < deadline, "nobody logged the foreign node"
            await asyncio.sleep(0.1)
        refused = (events(ours, 0, "raft.foreign_cluster") + events(ours, 1, "raft.foreign_cluster"))[0]
        assert (refused["their_cluster_id"], refused["cluster_id"]) == (their_id, our_id)
        counted = sum(
            Scrape(metrics_address(ours.nodes[i])).value("groupcoord_raft_foreign_messages_total") for i in (0, 1)
        )
        assert counted > 0
        # Our two nodes still serve every partition with our data, and take new commits.
        assert await fetch_all(ours, groups) == {group: 100 for group in groups}
        for group in groups:
            await commit(ours, group, 101)
        assert await fetch_all(ours, groups) == {group: 101 for group in groups}
        # The foreign node keeps its own cluster's id and data: it neither joined nor was overwritten.
        assert json.loads((ours.tmp / "data3" / "cluster.json").read_text())["cluster_id"] == their_id
        assert (await _rpc(ours.address(2), "DescribeCluster", pb.DescribeClusterRequest())).cluster_id == their_id
    finally:
        ours.stop_all()
        if theirs is not None:
            theirs.stop_all()


async def incarnations(cluster: Cluster, via: int) -> dict[int, str]:
    described = await _rpc(cluster.address(via), "DescribeCluster", pb.DescribeClusterRequest())
    return {n.node_id: n.incarnation for n in described.nodes}


async def test_a_wiped_node_comes_back_as_a_new_incarnation(tmp_path: Path):
    """Each data directory has its own incarnation id (cluster.json), carried on every Raft message: the others
    report it, and a node id that comes back with a new one is logged (`raft.new_incarnation`)."""
    cluster = Cluster(tmp_path)
    try:
        deadline = time.monotonic() + 20
        while "" in (seen := await incarnations(cluster, 0)).values() or len(seen) != 3:
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.1)
        assert len(set(seen.values())) == 3
        for i in range(3):
            stored = json.loads((cluster.tmp / f"data{i + 1}" / "cluster.json").read_text())["incarnation"]
            assert seen[i + 1] == stored
        cluster.kill(2)
        shutil.rmtree(cluster.tmp / "data3")  # a lost volume
        cluster.start(2)
        await asyncio.to_thread(cluster.wait_serving)
        while (now := await incarnations(cluster, 0))[3] == seen[3]:
            assert time.monotonic() < deadline + 20, now
            await asyncio.sleep(0.1)
        assert now[3] == json.loads((cluster.tmp / "data3" / "cluster.json").read_text())["incarnation"]
        assert (now[1], now[2]) == (seen[1], seen[2])
        [said] = events(cluster, 0, "raft.new_incarnation")
        assert (said["node"], said["previous"], said["incarnation"]) == (3, seen[3], now[3])
    finally:
        cluster.stop_all()
