"""Online membership changes on real node processes (issue 21, item 8): a 3-node cluster grows to 5 and shrinks back
to 3 with `groupcoord cluster add-node` / `remove-node` and the Kubernetes hooks' `cluster join` / `leave` while a
static member heartbeats and offsets are committed; no acknowledged commit is lost and the Stable group is never
rebalanced."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from groupcoord.client.security import PLAINTEXT
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.cluster.test_storage_faults import commit, fetch_all
from tests.cluster.test_three_nodes import PARTITIONS, SECRET, Cluster, _coordinator, _rpc, _stable_static_group


class GrowingCluster(Cluster):
    """Five node slots; the first three form the cluster, the others are started as they are added."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.flags, self.size, self.security = tmp, (), 5, PLAINTEXT
        from groupcoord.node.launcher import free_base

        self.hosts = [f"127.0.0.{i + 1}" for i in range(self.size)]
        taken: set[int] = set()
        self.ports = [free_base(h, 1, taken) for h in self.hosts]
        self.raft_ports = [free_base(h, PARTITIONS, taken) for h in self.hosts]
        self.nodes = [None] * self.size
        self.peers = self.peers_of(3)
        try:
            for i in range(3):
                self.start(i)
            self.wait_serving()
        except BaseException:
            self.stop_all()
            raise

    def spec(self, i: int) -> str:
        return f"{i + 1}={self.hosts[i]}:{self.ports[i]}:{self.raft_ports[i]}"

    def peers_of(self, count: int) -> str:
        return ",".join(self.spec(i) for i in range(count))

    def wait_listening(self, i: int, timeout_s: float = 30.0) -> None:
        """Until node i's last Raft port accepts connections (add-node refuses a node that is not there yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection((self.hosts[i], self.raft_ports[i] + PARTITIONS - 1), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"node {i + 1} never listened"
                time.sleep(0.05)

    def live(self) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if node is not None]

    def cli(self, *argv: str, via: list[int] | None = None) -> subprocess.CompletedProcess[str]:
        bootstrap = ",".join(self.address(i) for i in (self.live() if via is None else via))
        return subprocess.run(
            [sys.executable, "-m", "groupcoord", "cluster", *argv, f"--bootstrap={bootstrap}", "--timeout=60"],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "GROUPCOORD_CLUSTER_SECRET": SECRET},
        )

    def hook(self, action: str, i: int, peers: str) -> subprocess.CompletedProcess[str]:
        """`cluster join` / `leave` as the Kubernetes pod's hooks run them: node i's own settings only, from its
        environment (deploy/k8s/statefulset.yaml, deploy/README.md)."""
        env = {k: v for k, v in os.environ.items() if k != "GROUPCOORD_BOOTSTRAP"}
        env.update(GROUPCOORD_CLUSTER_SECRET=SECRET, GROUPCOORD_NODE_ID=str(i + 1), GROUPCOORD_PEERS=peers)
        return subprocess.run(
            [sys.executable, "-m", "groupcoord", "cluster", action, "--timeout=60"],
            capture_output=True, text=True, timeout=90, env=env,
        )  # fmt: skip

    def describe(self, i: int) -> pb.DescribeClusterResponse:
        with grpc.insecure_channel(self.address(i)) as channel:
            return pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=10)

    def wait_voters(self, voters: list[int], timeout_s: float = 60.0) -> None:
        """Every voter sees exactly `voters` in every partition, and every partition has a leader among them. (A
        removed node that still runs is not asked: the leaders stop talking to it, so it never learns.)"""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                views = {i: self.describe(i) for i in self.live() if i + 1 in voters}
            except grpc.RpcError:  # a node just started, not listening yet
                views = {}
            if views and all(
                list(p.replica_node_ids) == voters and p.leader_node_id in voters
                for view in views.values()
                for p in view.partitions
            ):
                return
            assert time.monotonic() < deadline, f"voters never became {voters}: {views}"
            time.sleep(0.1)

    def wait_lags(self, voters: list[int], timeout_s: float = 20.0) -> None:
        """`cluster describe` reports every other voter's lag for every partition (from its leader, once leadership
        has settled after a restart)."""
        deadline = time.monotonic() + timeout_s
        while True:
            described = self.cli("describe", "--json")
            assert described.returncode == 0, described.stderr
            partitions = json.loads(described.stdout)["partitions"]
            if all(
                p["replica_node_ids"] == voters
                and {node for node, lag in p["replica_lag"] if lag >= 0} == set(voters) - {p["leader_node_id"]}
                for p in partitions
            ):
                return
            assert time.monotonic() < deadline, partitions
            time.sleep(0.2)


class Load:
    """A static member heartbeating its coordinator wherever it moves, and a committer of rising offsets."""

    def __init__(self, cluster: GrowingCluster, member: pb.JoinGroupResponse, group: str) -> None:
        self.cluster, self.member, self.group = cluster, member, group
        self.acked: dict[str, int] = {}
        self.heartbeat_errors: list[int] = []
        self.heartbeats = 0
        self._stop = asyncio.Event()

    async def heartbeat(self) -> None:
        """Asks the live nodes in turn for the coordinator, as a client with a bootstrap list does: asking only the
        first, a restart of it that took longer than the session (6 s on a loaded machine) expired the member."""
        beat = pb.HeartbeatRequest(group_id=self.group, generation_id=1, member_id=self.member.member_id)
        turn = 0
        while not self._stop.is_set():
            live = self.cluster.live()
            try:
                coordinator = await _coordinator(self.cluster, self.group, live[turn % len(live)])
                if coordinator:
                    code = (await _rpc(coordinator, "Heartbeat", beat)).error_code
                    if code == Errors.NONE:
                        self.heartbeats += 1
                    elif code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE):
                        self.heartbeat_errors.append(code)
            except grpc.aio.AioRpcError:
                turn += 1  # a node that is being stopped or started: the next one is asked at once
                await asyncio.sleep(0.1)
                continue
            await asyncio.sleep(0.5)

    async def commits(self, groups: list[str]) -> None:
        offset = 0
        while not self._stop.is_set():
            offset += 1
            for group in groups:
                await commit(self.cluster, group, offset, timeout_s=30)
                self.acked[group] = offset
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


async def _in_thread(fn, *args):
    return await asyncio.to_thread(fn, *args)


@pytest.mark.timeout(300)
async def test_three_nodes_grow_to_five_and_shrink_back_under_load(tmp_path: Path):
    cluster = GrowingCluster(tmp_path)
    try:
        group = "scaled"
        _, (member,) = await _stable_static_group(cluster, group)
        load = Load(cluster, member, group)
        groups = [f"offsets-{i}" for i in range(8)]
        tasks = [asyncio.create_task(load.heartbeat()), asyncio.create_task(load.commits(groups))]
        await asyncio.sleep(1)

        # Node 4 as a Kubernetes pod scaled up: its start hook (`cluster join`) runs beside it from the moment it
        # starts. Node 5 by hand: started with peers naming the voters and itself, then `add-node`.
        cluster.peers = cluster.peers_of(4)
        cluster.start(3)
        joined = await _in_thread(cluster.hook, "join", 3, cluster.peers_of(4))
        assert joined.returncode == 0, joined.stderr
        assert f"{cluster.spec(3)} is a voter of every partition" in joined.stdout
        await _in_thread(cluster.wait_voters, [1, 2, 3, 4])
        cluster.peers = cluster.peers_of(5)
        cluster.start(4)
        await _in_thread(cluster.wait_listening, 4)
        added = await _in_thread(cluster.cli, "add-node", cluster.spec(4))
        assert added.returncode == 0, added.stderr
        assert "is a voter of every partition" in added.stdout
        await _in_thread(cluster.wait_voters, [1, 2, 3, 4, 5])
        await _in_thread(cluster.wait_serving)  # all five serve, and leadership spreads over them
        # A voter restarted with the `peers` it was first started with learns the voters from its log.
        first = cluster.nodes[0]
        first.proc.terminate()
        first.proc.wait(10)
        cluster.peers = cluster.peers_of(3)
        cluster.start(0)
        await _in_thread(cluster.wait_voters, [1, 2, 3, 4, 5])
        await _in_thread(cluster.wait_lags, [1, 2, 3, 4, 5])
        again = await _in_thread(cluster.cli, "add-node", cluster.spec(4))
        assert again.returncode == 0 and "none, it already was" in again.stdout, again
        # The hook again, as at every start of the pod: nothing to change.
        rejoined = await _in_thread(cluster.hook, "join", 3, cluster.peers_of(4))
        assert rejoined.returncode == 0 and "none, it already was" in rejoined.stdout, rejoined
        await asyncio.sleep(2)

        for i in (4, 3):  # remove the node (it hands over what it leads), then stop it
            if i == 3:  # the scale-down step: `cluster leave` on the node itself
                removed = await _in_thread(cluster.hook, "leave", i, cluster.peers_of(4))
            else:
                removed = await _in_thread(cluster.cli, "remove-node", str(i + 1))
            assert removed.returncode == 0, removed.stderr
            await _in_thread(cluster.wait_voters, list(range(1, i + 1)))
            cluster.nodes[i].proc.terminate()
            cluster.nodes[i].proc.wait(10)
            cluster.nodes[i] = None
        await asyncio.sleep(2)
        load.stop()
        await asyncio.gather(*tasks)

        assert load.heartbeat_errors == [], "the static member was fenced or rebalanced"
        assert load.heartbeats > 10
        survivors = await fetch_all(cluster, groups)
        assert survivors == load.acked, "an acknowledged commit was lost"
        assert min(load.acked.values()) > 20
        coordinator = await _coordinator(cluster, group, 0)
        described = (await _rpc(coordinator, "DescribeGroups", pb.DescribeGroupsRequest(group_ids=[group]))).groups[0]
        assert (described.group_state, described.generation_id) == ("Stable", 1)
        print(f"membership 3->5->3: {load.heartbeats} heartbeats, {sum(load.acked.values())} commits acknowledged")
    finally:
        cluster.stop_all()


async def test_membership_changes_refuse_a_conflicting_node_and_remove_idempotently(tmp_path: Path):
    cluster = GrowingCluster(tmp_path)
    try:
        clash = f"2={cluster.hosts[3]}:{cluster.ports[3]}:{cluster.raft_ports[3]}"  # node 2's id, another address
        refused = await _in_thread(cluster.cli, "add-node", clash)
        assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr, refused
        assert "node 2 is a voter as" in refused.stderr
        absent = await _in_thread(cluster.cli, "add-node", cluster.spec(3))  # never started
        assert absent.returncode == 1 and "node 4 does not answer at" in absent.stderr, absent
        bad = await _in_thread(cluster.cli, "add-node", "not-a-node")
        assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr, bad
        gone = await _in_thread(cluster.cli, "remove-node", "9")
        assert gone.returncode == 0 and "none, it already was" in gone.stdout, gone
        await _in_thread(cluster.wait_voters, [1, 2, 3])
    finally:
        cluster.stop_all()


@pytest.mark.timeout(300)
async def test_a_dead_node_is_replaced_by_a_successor_at_a_new_address_under_load(tmp_path: Path):
    cluster = GrowingCluster(tmp_path)
    try:
        load = Load(cluster, pb.JoinGroupResponse(), "")
        groups = [f"replaced-{i}" for i in range(8)]
        committing = asyncio.create_task(load.commits(groups))
        await asyncio.sleep(1)

        # Node 3's machine dies; its successor keeps id 3 on another address (slot 4's) with an empty disk.
        cluster.kill(2)
        old = cluster.address(2)
        cluster.hosts[2], cluster.ports[2], cluster.raft_ports[2] = (
            cluster.hosts[3],
            cluster.ports[3],
            cluster.raft_ports[3],
        )
        shutil.rmtree(tmp_path / "data3")
        cluster.peers = cluster.peers_of(3)
        cluster.start(2)
        await _in_thread(cluster.wait_listening, 2)
        replaced = await _in_thread(cluster.cli, "replace-node", cluster.spec(2))
        assert replaced.returncode == 0, replaced.stderr
        assert "in place of its predecessor" in replaced.stdout and "none" not in replaced.stdout, replaced.stdout
        await _in_thread(cluster.wait_voters, [1, 2, 3])
        await _in_thread(cluster.wait_lags, [1, 2, 3])
        nodes = {n.node_id: f"{n.host}:{n.port}" for n in (await _in_thread(cluster.describe, 0)).nodes}
        assert nodes[3] == cluster.address(2) != old, nodes
        again = await _in_thread(cluster.cli, "replace-node", cluster.spec(2))
        assert again.returncode == 0 and "none, it already was" in again.stdout, again
        await _in_thread(cluster.wait_serving)  # the successor leads its partition again
        await asyncio.sleep(1)
        load.stop()
        await committing

        assert await fetch_all(cluster, groups) == load.acked, "an acknowledged commit was lost"
        assert min(load.acked.values()) > 10
    finally:
        cluster.stop_all()


@pytest.mark.timeout(300)
async def test_a_follower_whose_log_lags_a_membership_change_still_hears_the_leader_it_made(tmp_path: Path):
    """Node 3 is down while node 1 is removed and added back: its log says the voters are 2, 3, 4. Node 1 then leads
    partition 0; pysyncobj alone would never let node 3 hear it (the connection is node 3's to open, to a node its
    configuration lacks), so node 3's replica of partition 0 would lag for good. Its other partitions learn node 1
    from their leaders, and node 1 becomes that replica's guest (raft/transport.py)."""
    cluster = GrowingCluster(tmp_path)
    try:
        cluster.peers = cluster.peers_of(4)
        cluster.start(3)
        await _in_thread(cluster.wait_listening, 3)
        assert (await _in_thread(cluster.cli, "add-node", cluster.spec(3))).returncode == 0
        await _in_thread(cluster.wait_voters, [1, 2, 3, 4])
        removed = await _in_thread(cluster.cli, "remove-node", "1")
        assert removed.returncode == 0, removed.stderr
        await _in_thread(cluster.wait_voters, [2, 3, 4])
        await asyncio.sleep(1.5)  # node 3's journals record the removal as applied (a COMMIT hint, once a second)

        cluster.nodes[2].proc.terminate()  # node 3 stops with "remove node 1" as the last change in its log
        cluster.nodes[2].proc.wait(10)
        cluster.nodes[2] = None
        added = await _in_thread(lambda: cluster.cli("add-node", cluster.spec(0), via=[1]))
        assert added.returncode == 0, added.stderr
        await _in_thread(cluster.wait_voters, [1, 2, 3, 4])
        deadline = time.monotonic() + 30
        while (await _in_thread(cluster.describe, 0)).partitions[0].leader_node_id != 1:
            assert time.monotonic() < deadline, "node 1 never took partition 0 (its preferred one) back"
            await asyncio.sleep(0.1)

        cluster.start(2)
        await _in_thread(cluster.wait_voters, [1, 2, 3, 4], 30.0)  # node 3's view included
        view = await _in_thread(cluster.describe, 2)
        assert view.partitions[0].leader_node_id == 1 and list(view.partitions[0].replica_node_ids) == [1, 2, 3, 4]
        await commit(cluster, "after-lag", 5)
        assert await fetch_all(cluster, ["after-lag"]) == {"after-lag": 5}
    finally:
        cluster.stop_all()
