"""The cluster a benchmark runs against: three local node processes it starts and stops itself, or an
existing cluster named by `--bootstrap` (then nothing is started, killed or sampled for RSS/CPU).

Nodes are started by the node launcher (node/launcher.py) on 127.0.0.1-3, on ports below the ephemeral range
(`free_base`), in a temporary directory removed at the end; `stop()` always ends every node it started.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health_pb2

from groupcoord.base.errors import UserError
from groupcoord.bench.members import Router
from groupcoord.client.cli_flags import unreachable_hint
from groupcoord.client.security import PLAINTEXT, ClientSecurity, sync_channel
from groupcoord.node import launcher
from groupcoord.node.launcher import free_base
from groupcoord.node.topology import Peer
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

# Every bench cluster: the first rebalance of a fresh group is not held back 3 s for more members, and no Kafka
# listener (the benchmarks speak gRPC; its default port, 9092, may be taken). Flags given later override these.
BASE_FLAGS = ("--group-initial-rebalance-delay-ms=0", "--kafka-port=-1")
# The scenarios of many members: a bench client process parks up to thousands of members' JoinGroups on one
# connection per node, so it is not held to the default of 1,000 calls per connection (a real client process has
# one or a few members). The flood scenario measures the defaults.
MANY_MEMBERS_FLAGS = ("--max-concurrent-streams=20000",)
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0
# A --bootstrap cluster is already up: it answers at once or not at all (wrong address, TLS without --ca-file).
BOOTSTRAP_READY_S = 15.0
BALANCE_TIMEOUT_S = 20.0


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far, from /proc (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class BenchCluster:
    """Node processes on 127.0.0.1..size, or only the addresses of a cluster someone else runs."""

    def __init__(
        self,
        node_flags: list[str],
        bootstrap: list[str] | None = None,
        size: int = 3,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.node_flags = [*BASE_FLAGS, *node_flags]
        self.owned = not bootstrap
        # How the bench's clients reach a --bootstrap cluster that serves TLS or wants a token.
        self.security = security
        self.addresses: dict[int, str] = {}
        self.procs: dict[int, launcher.Proc] = {}
        self._dir: Path | None = None
        self._channels: dict[str, grpc.Channel] = {}
        if bootstrap:
            self.addresses = {i + 1: a for i, a in enumerate(bootstrap)}
            return
        taken: set[int] = set()
        self._raft: dict[int, int] = {}
        for node_id in range(1, size + 1):
            host = f"127.0.0.{node_id}"
            self.addresses[node_id] = f"{host}:{free_base(host, 1, taken)}"
            self._raft[node_id] = free_base(host, 16, taken)

    def start(self) -> None:
        """Starts the nodes and waits until every node serves and every partition has a leader."""
        if not self.owned:
            try:
                self.wait_ready(BOOTSTRAP_READY_S)
            except RuntimeError:
                where = ",".join(self.addresses.values())
                hint = unreachable_hint(self.security)
                raise UserError(
                    f"the cluster at {where} did not answer as ready in {BOOTSTRAP_READY_S:.0f} s{hint}"
                ) from None
            return
        self._dir = Path(tempfile.mkdtemp(prefix="groupcoord-bench-"))
        hosts = {i: a.rsplit(":", 1) for i, a in self.addresses.items()}
        peers = tuple(Peer(i, host, int(port), self._raft[i]) for i, (host, port) in hosts.items())
        secret = secrets.token_hex(16)
        for node_id, (host, port) in hosts.items():
            options = launcher.NodeOptions(
                host=host, port=int(port), node_id=node_id, peers=peers, data_dir=self._dir / f"node{node_id}",
                flags=tuple(self.node_flags),
            )  # fmt: skip
            self.procs[node_id] = launcher.start(options, self._dir / f"node{node_id}.log", secret)
        self.wait_ready()
        self._wait_balanced()

    def _wait_balanced(self, timeout_s: float = BALANCE_TIMEOUT_S) -> None:
        """Waits (best effort) until partition k is led by its preferred node (node/balance.py), so that a run
        does not start with the nodes' leadership transfers."""
        ids = sorted(self.addresses)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leaders = self.leaders()
            if leaders and all(leader == ids[k % len(ids)] for k, leader in leaders.items()):
                return
            time.sleep(0.1)

    def stop(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        launcher.stop_procs(self.procs.values())
        self.procs.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def kill(self, node_id: int) -> None:
        """kill -9 of a node this benchmark started."""
        if not self.owned:
            raise RuntimeError("cannot kill a node of a --bootstrap cluster")
        launcher.kill(self.procs[node_id])

    def alive(self) -> list[int]:
        return [i for i in self.addresses if not self.owned or self.procs[i].poll() is None]

    def pids(self) -> dict[int, int]:
        return {i: p.pid for i, p in self.procs.items() if p.poll() is None}

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = sync_channel(address, self.security, launcher.CHANNEL_OPTIONS)
        return self._channels[address]

    def router(self, batched: bool = True) -> Router:
        """Members' shared channels (and batch streams) to this cluster, with its security."""
        return Router(list(self.addresses.values()), batched, self.security)

    def _stub(self, address: str) -> pb_grpc.GroupCoordinatorStub:
        return pb_grpc.GroupCoordinatorStub(self._channel(address))

    def serving(self, node_id: int) -> bool:
        status = launcher.health_status(self._channel(self.addresses[node_id]), service="")
        return status == health_pb2.HealthCheckResponse.SERVING

    def leaders(self, node_id: int | None = None) -> dict[int, int] | None:
        """Partition → leader node id as `node_id` (default: the first live node) sees it."""
        asked = node_id if node_id is not None else self.alive()[0]
        try:
            reply = self._stub(self.addresses[asked]).DescribeCluster(pb.DescribeClusterRequest(), timeout=1.0)
        except grpc.RpcError:
            return None
        return {p.partition_id: p.leader_node_id for p in reply.partitions}

    def ready(self) -> bool:
        """Every live node serves and they agree that every partition has a live leader."""
        alive = self.alive()
        views = []
        for node_id in alive:
            leaders = self.leaders(node_id) if self.serving(node_id) else None
            if leaders is None or any(leader not in alive for leader in leaders.values()):
                return False
            views.append(leaders)
        return all(view == views[0] for view in views)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Seconds until `ready()`; RuntimeError (with the node logs' place) after `timeout_s`."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            dead = [i for i, p in self.procs.items() if p.poll() is not None and p.returncode != -signal.SIGKILL]
            if dead:
                raise RuntimeError(f"node {dead[0]} exited with {self.procs[dead[0]].returncode}; logs in {self._dir}")
            if self.ready():
                return time.monotonic() - start
            time.sleep(0.02)
        raise RuntimeError(f"cluster not ready after {timeout_s:.0f} s; logs in {self._dir}")

    def cpu_s(self) -> dict[int, float]:
        return {i: c for i, pid in self.pids().items() if (c := proc_cpu_s(pid)) is not None}

    def rss_mb(self) -> dict[int, float]:
        return {i: r for i, pid in self.pids().items() if (r := proc_rss_mb(pid)) is not None}


class Processes(Protocol):
    """Server processes whose CPU a `CpuMeter` reads: a groupcoord cluster's nodes, or a reference's (bench/etcd.py)."""

    def cpu_s(self) -> dict[int, float]: ...


class CpuMeter:
    """CPU of the nodes and of this client process from construction to `result()`, in % of one core."""

    def __init__(self, cluster: Processes) -> None:
        self.cluster = cluster
        self.nodes = cluster.cpu_s()
        self.client = time.process_time()
        self.start = time.perf_counter()

    def result(self) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.start
        used = {i: c - self.nodes[i] for i, c in self.cluster.cpu_s().items() if i in self.nodes}
        return {
            "nodes_cpu_percent": {str(i): round(100 * c / elapsed, 1) for i, c in used.items()},
            "client_cpu_percent": round(100 * (time.process_time() - self.client) / elapsed, 1),
        }
