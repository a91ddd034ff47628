"""The chaos run's own cluster: node processes it starts (through node/launcher.py, in network namespaces or on
loopback), signals and restarts, and the gRPC it uses to watch.

Every node process is tracked with the reason it may exit: an exit nobody asked for is recorded as
`node_exit` with expected=false, which the checker reports as a crash.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from groupcoord.chaos.history import Recorder
from groupcoord.chaos.network import Loopback, Namespaces
from groupcoord.node import launcher
from groupcoord.node.launcher import free_base
from groupcoord.node.topology import Peer
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

NETNS_PORT, NETNS_RAFT_PORT = 50051, 25051
RPC_TIMEOUT_S = 1.0
# How long a node stopped with SIGTERM has to exit before it is killed.
STOP_GRACE_S = 15.0
# How long a membership change is retried (no leader yet, a change still in flight) before the fault moves on.
VOTER_CHANGE_S = 30.0


@dataclass
class NodeProc:
    node_id: int
    host: str
    port: int
    raft_port: int
    proc: subprocess.Popen[bytes] | None = None
    expect_exit: bool = False
    paused: bool = False
    reported: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ChaosCluster:
    def __init__(
        self,
        network: Loopback | Namespaces,
        size: int,
        partitions: int,
        run_dir: Path,
        history: Recorder,
        secret: str,
        node_flags: list[str],
        disk_mb: int | None = None,
    ) -> None:
        self.network, self.size, self.partitions = network, size, partitions
        # Each node's data directory on a tmpfs of this size (root only), so that a fault can fill it.
        self.disk_mb = disk_mb if disk_mb and os.geteuid() == 0 else None
        self._mounts: list[Path] = []
        self.run_dir, self.history, self.secret, self.node_flags = run_dir, history, secret, node_flags
        self.nodes: dict[int, NodeProc] = {}
        # Nodes to start with a wrong wall clock (`--wall-clock-offset-s`), by the clock_jump fault.
        self.clock_offsets: dict[int, int] = {}
        taken: set[int] = set()
        for node_id in range(1, size + 1):
            host = network.host(node_id)
            if isinstance(network, Namespaces):
                port, raft_port = NETNS_PORT, NETNS_RAFT_PORT
            else:
                port, raft_port = free_base(host, 1, taken), free_base(host, partitions, taken)
            self.nodes[node_id] = NodeProc(node_id, host, port, raft_port)
        self.peers = tuple(Peer(n.node_id, n.host, n.port, n.raft_port) for n in self.nodes.values())
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    # -- processes ------------------------------------------------------------------------------------

    def data_dir(self, node_id: int) -> Path:
        """The node's `data_dir` (journals, snapshots, events)."""
        return self.run_dir / f"node{node_id}" / "data"

    def start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if self.disk_mb is not None and self.data_dir(node_id) not in self._mounts:
            self._mount(self.data_dir(node_id))
        offset = self.clock_offsets.get(node_id)
        options = launcher.NodeOptions(
            host=node.host,
            port=node.port,
            node_id=node_id,
            peers=self.peers,
            partitions=self.partitions,
            data_dir=self.data_dir(node_id),
            # The chaos workers speak gRPC; a flag in node_flags may still turn the Kafka listener on.
            kafka_port=-1,
            flags=(*self.node_flags, *([f"--wall-clock-offset-s={offset}"] if offset else [])),
            wrap=tuple(self.network.wrap(node_id)),
        )
        proc = launcher.start(options, self.run_dir / f"node{node_id}" / "node.log", self.secret)
        with self._lock:
            node.proc, node.expect_exit, node.paused, node.reported = proc, False, False, False
        self.history.write("node_started", node=node_id, pid=proc.pid)

    def _mount(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m", "tmpfs", str(path)], check=True)
        self._mounts.append(path)

    def unmount_all(self) -> None:
        """Unmounts the data directories' tmpfs mounts (their data goes with them)."""
        while self._mounts:
            subprocess.run(["umount", "-l", str(self._mounts.pop())], capture_output=True, check=False)

    def wait_listening(self, node_id: int, timeout_s: float) -> bool:
        """Until the node's last Raft port accepts connections (a node added as a voter must be there)."""
        node = self.nodes[node_id]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection((node.host, node.raft_port + self.partitions - 1), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def change_voters(self, via: int, add: int | None = None, remove: int | None = None) -> str:
        """AddRaftVoter or RemoveRaftVoter at node `via`, retried for a while; the error name of the last answer."""
        deadline = time.monotonic() + VOTER_CHANGE_S
        last = "no answer"
        reply: pb.AddRaftVoterResponse | pb.RemoveRaftVoterResponse
        while time.monotonic() < deadline:
            stub = self._stub(self.nodes[via].address)
            try:
                if add is not None:
                    node = self.nodes[add]
                    spec = f"{add}={node.host}:{node.port}:{node.raft_port}"
                    reply = stub.AddRaftVoter(pb.AddRaftVoterRequest(node=spec, timeout_ms=10_000), timeout=15)
                else:
                    request = pb.RemoveRaftVoterRequest(node_id=remove or 0, timeout_ms=10_000)
                    reply = stub.RemoveRaftVoter(request, timeout=15)
            except grpc.RpcError as exc:
                last = exc.code().name
                time.sleep(0.2)
                continue
            last = Errors(reply.error_code).name
            if reply.error_code == Errors.NONE:
                break
            time.sleep(0.2)
        return last

    def signal(self, node_id: int, sig: signal.Signals) -> None:
        """Sends `sig` to a node this run started; SIGKILL and SIGTERM mark its exit as expected and return once the
        node is gone (SIGTERM: killed after STOP_GRACE_S)."""
        node = self.nodes[node_id]
        if not node.alive():
            return
        assert node.proc is not None
        with self._lock:
            if sig in (signal.SIGKILL, signal.SIGTERM):
                node.expect_exit = True
            node.paused = sig == signal.SIGSTOP
        self.history.write("node_stopped" if node.expect_exit else "node_signal", node=node_id, pid=node.proc.pid,
                           signal=sig.name)  # fmt: skip
        if sig == signal.SIGKILL:
            launcher.kill(node.proc)
        elif sig == signal.SIGTERM:
            launcher.stop_procs([node.proc], STOP_GRACE_S)
        else:
            node.proc.send_signal(sig)
        if node.expect_exit:
            self.check_exits()

    def dump_stacks(self) -> list[int]:
        """Has every running node print its threads' stacks into its log (the node's SIGUSR1, docs/OPERATIONS.md)
        and returns their ids: what a cluster that did not converge was doing. A paused node prints when resumed."""
        dumped = []
        for node in self.nodes.values():
            if node.proc is not None and node.alive():
                node.proc.send_signal(signal.SIGUSR1)
                dumped.append(node.node_id)
        return dumped

    def check_exits(self) -> None:
        """Records each node exit once, saying whether the run caused it."""
        with self._lock:
            for node in self.nodes.values():
                if node.proc is None or node.reported or node.proc.poll() is None:
                    continue
                node.reported = True
                extra: dict[str, Any] = {} if node.expect_exit else {"disk": self.disk_usage(node.node_id)}
                self.history.write("node_exit", node=node.node_id, pid=node.proc.pid,
                                   returncode=node.proc.returncode, expected=node.expect_exit, **extra)  # fmt: skip

    def disk_usage(self, node_id: int) -> dict[str, object]:
        """The data directory's free space and its files' sizes: what an exit nobody asked for is read against."""
        path = self.data_dir(node_id)
        try:
            stat = os.statvfs(path)
            files = {str(f.relative_to(path)): f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()}
        except OSError as exc:
            return {"error": str(exc)}
        return {"free_bytes": stat.f_bavail * stat.f_frsize, "size_bytes": stat.f_blocks * stat.f_frsize,
                "files": files}  # fmt: skip

    def stop_all(self) -> None:
        for node_id, node in self.nodes.items():
            if node.alive():
                self.signal(node_id, signal.SIGTERM)
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    # -- watching -------------------------------------------------------------------------------------

    def _stub(self, address: str) -> pb_grpc.GroupCoordinatorStub:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc.insecure_channel(address, options=launcher.CHANNEL_OPTIONS)
        return pb_grpc.GroupCoordinatorStub(channel)

    def _reachable(self) -> list[NodeProc]:
        return [n for n in self.nodes.values() if n.alive() and not n.paused]

    def serving(self, node_id: int) -> bool:
        return launcher.health(self.nodes[node_id].address, RPC_TIMEOUT_S, service="") == "SERVING"

    def _describe_cluster(self, node_id: int) -> pb.DescribeClusterResponse | None:
        try:
            reply: pb.DescribeClusterResponse = self._stub(self.nodes[node_id].address).DescribeCluster(
                pb.DescribeClusterRequest(), timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError:
            return None
        return reply

    def leaders(self, node_id: int) -> list[int] | None:
        reply = self._describe_cluster(node_id)
        return None if reply is None else [p.leader_node_id for p in reply.partitions]

    def raft_views(self) -> dict[int, list[dict[str, object]] | None]:
        """Each reachable node's view of every partition (DescribeCluster: leader, term, commit index, voters, and
        where it leads, each voter's match index), None for a node that did not answer: where the nodes of a cluster
        that did not converge disagreed."""
        views: dict[int, list[dict[str, object]] | None] = {}
        for node in self._reachable():
            reply = self._describe_cluster(node.node_id)
            views[node.node_id] = None if reply is None else [
                {"partition": p.partition_id, "leader": p.leader_node_id, "term": p.term, "commit": p.commit_index,
                 "voters": list(p.replica_node_ids), "match": {s.node_id: s.match_index for s in p.replica_states}}
                for p in reply.partitions
            ]  # fmt: skip
        return views

    def healthy(self) -> bool:
        """Every node up and serving, and every node agrees each partition has a live leader."""
        if any(not n.alive() or n.paused for n in self.nodes.values()):
            return False
        views = []
        for node_id in self.nodes:
            leaders = self.leaders(node_id) if self.serving(node_id) else None
            if leaders is None or any(leader < 1 for leader in leaders):
                return False
            views.append(leaders)
        return all(view == views[0] for view in views)

    def wait_healthy(self, timeout_s: float) -> float | None:
        """Seconds until healthy, or None when it did not get there in time."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            self.check_exits()
            if self.healthy():
                return time.monotonic() - start
            time.sleep(0.1)
        return None

    def coordinator(self, group: str) -> int | None:
        for node in self._reachable():
            try:
                reply = self._stub(node.address).FindCoordinator(
                    pb.FindCoordinatorRequest(group_ids=[group]), timeout=RPC_TIMEOUT_S
                )
            except grpc.RpcError:
                continue
            found = reply.coordinators[0]
            if found.error_code == Errors.NONE:
                return found.node_id
        return None

    def describe(self, group: str) -> tuple[int, pb.DescribeGroupsResponse.Group] | None:
        node_id = self.coordinator(group)
        if node_id is None or not self.nodes[node_id].alive() or self.nodes[node_id].paused:
            return None
        try:
            reply = self._stub(self.nodes[node_id].address).DescribeGroups(
                pb.DescribeGroupsRequest(group_ids=[group]), timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError:
            return None
        described = reply.groups[0]
        return (node_id, described) if described.error_code == Errors.NONE else None

    def probe(self, group: str) -> list[tuple[int, int, float, float]]:
        """DescribeGroups for `group` at every running node at once: (node, coordinator epoch, sent, answered) of
        each node that answered as its coordinator. Two of them in the same stretch of time is what leases forbid."""
        sent = time.monotonic()
        calls = [
            (node.node_id, self._stub(node.address).DescribeGroups.future(
                pb.DescribeGroupsRequest(group_ids=[group]), timeout=RPC_TIMEOUT_S))
            for node in self._reachable()
        ]  # fmt: skip
        answers = []
        for node_id, call in calls:
            try:
                reply = call.result()
            except grpc.RpcError:
                continue
            described = reply.groups[0]
            if described.error_code == Errors.NONE:
                answers.append((node_id, described.coordinator_epoch, sent, time.monotonic()))
        return answers

    def commit(self, group: str, topic: str, partition: int, offset: int) -> bool:
        """A simple commit (no member, generation -1) at the group's coordinator: True once acknowledged."""
        node_id = self.coordinator(group)
        if node_id is None:
            return False
        request = pb.OffsetCommitRequest(group_id=group, generation_id=-1)
        request.topics.add(name=topic).partitions.add(partition_index=partition, committed_offset=offset)
        try:
            reply = self._stub(self.nodes[node_id].address).OffsetCommit(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError:
            return False
        return bool(reply.topics) and reply.topics[0].partitions[0].error_code == Errors.NONE

    def offsets(self, group: str) -> dict[str, int] | None:
        node_id = self.coordinator(group)
        if node_id is None:
            return None
        try:
            reply = self._stub(self.nodes[node_id].address).OffsetFetch(
                pb.OffsetFetchRequest(group_id=group), timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError:
            return None
        if reply.error_code != Errors.NONE:
            return None
        return {f"{t.name}-{p.partition_index}": p.committed_offset for t in reply.topics for p in t.partitions}
