"""`etcd`: the reference of issue 23. A 3-node etcd (Debian's `etcd-server`) on 127.0.0.1-3 next to the bench's
groupcoord cluster, the same three workloads against both from this one Python process in the same client style
(grpc.aio: `aetcd` for etcd, the bench's router for groupcoord), in one run, and the ratios groupcoord/etcd:

* sequential writes: one client, etcd puts of one key at its leader vs OffsetCommit of one partition (unary, and
  over the SDK's batch stream) → p50/p99 and server CPU per write;
* 64 in flight for a while: puts over 8 keys, one connection per node, vs commits over 8 single-member groups →
  ops/s, CPU per write;
* 200 registrations: 200 members each grant a lease and put a key under one prefix, seen all by a watch, vs 200
  members joining one fresh group until all are Stable with an assignment → seconds.

etcd fsyncs every write; groupcoord runs with its default durability (fsync) unless --node-flag says otherwise.
Next to both, the same sequential and in-flight calls go to a gRPC server that only echoes (bench/grpc_floor.py):
the floor of the node's transport, and the `floor_*` ratios floor/etcd say how much of a goal that floor leaves.
The cluster runs its Kafka listener too, and the three workloads are measured again over Kafka's protocol (the
`kafka` scenario's client, bench/kafka_client.py): groupcoord's users are Kafka clients as much as the SDK, and
the `kafka_*` ratios are theirs; the Kafka listener's floor is measured likewise (bench/kafka_floor.py: a server
on the listener's stack that answers every OffsetCommit with one prepared body), its ratios `kafka_floor_*`.
It is for people comparing, not for CI: without an etcd binary it says so and runs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from groupcoord.base.errors import UserError
from groupcoord.bench import groups, grpc_floor, kafka_bench, kafka_floor, offsets, workloads
from groupcoord.bench.cluster import BenchCluster, CpuMeter, proc_cpu_s
from groupcoord.bench.kafka_client import KafkaClient
from groupcoord.node.launcher import free_base

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
START_TIMEOUT_S = 30.0
STOP_WAIT_S = 10.0
MISSING = (
    "the etcd reference needs an etcd binary (Debian: apt-get install etcd-server; or --etcd PATH): nothing was run"
)


def etcd_binary(asked: str | None) -> str:
    """The etcd to run; UserError when there is none, or no etcd client library (the scenario is optional: what
    it lacks is said, not hidden)."""
    found = shutil.which(asked or "etcd")
    if found is None:
        raise UserError(MISSING)
    try:
        import aetcd  # noqa: F401 - only whether it is there
    except ImportError:
        raise UserError("the etcd reference needs the aetcd client: pip install 'groupcoord[dev]'") from None
    return found


class EtcdCluster:
    """Three etcd members on loopback, in a temporary directory, stopped (by pid) at the end."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        taken: set[int] = set()
        self.client_ports = [free_base(h, 1, taken) for h in HOSTS]
        self.peer_ports = [free_base(h, 1, taken) for h in HOSTS]
        self.procs: list[subprocess.Popen[bytes]] = []
        self._dir = Path(tempfile.mkdtemp(prefix="groupcoord-bench-etcd-"))

    def endpoints(self) -> list[tuple[str, int]]:
        return list(zip(HOSTS, self.client_ports, strict=True))

    def start(self) -> None:
        peers = zip(HOSTS, self.peer_ports, strict=True)
        initial = ",".join(f"e{i + 1}=http://{host}:{port}" for i, (host, port) in enumerate(peers))
        for i, host in enumerate(HOSTS):
            client, peer = f"http://{host}:{self.client_ports[i]}", f"http://{host}:{self.peer_ports[i]}"
            cmd = [
                self.binary, f"--name=e{i + 1}", f"--data-dir={self._dir / f'e{i + 1}'}",
                f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={initial}", "--initial-cluster-state=new",
                "--initial-cluster-token=groupcoord-bench", "--logger=zap", "--log-level=error",
            ]  # fmt: skip
            log = (self._dir / f"e{i + 1}.log").open("wb")
            self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    async def wait_ready(self) -> tuple[str, int]:
        """Waits until a leader is elected and every member answers; the leader's client endpoint."""
        import aetcd

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                leaders = set()
                for host, port in self.endpoints():
                    async with aetcd.Client(host, port, timeout=1) as client:
                        status = await client.status()
                        if status.leader is not None:
                            leaders.add(status.leader.client_urls[0])
                if len(leaders) == 1:
                    host, port = leaders.pop().removeprefix("http://").rsplit(":", 1)
                    return host, int(port)
            except aetcd.exceptions.ClientError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "\n".join(p.read_text()[-2000:] for p in sorted(self._dir.glob("*.log")))
                raise RuntimeError(f"etcd did not come up in {START_TIMEOUT_S:.0f} s:\n{logs}")
            await asyncio.sleep(0.2)

    def cpu_s(self) -> dict[int, float]:
        return {i + 1: c for i, p in enumerate(self.procs) if (c := proc_cpu_s(p.pid)) is not None}

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


async def _sequential(etcd: EtcdCluster, leader: tuple[str, int], ops: int) -> dict[str, Any]:
    import aetcd

    async with aetcd.Client(*leader) as client:
        return await workloads.sequential(etcd, lambda i: client.put(b"bench/sequential", str(i).encode()), ops)


async def _in_flight(etcd: EtcdCluster, in_flight: int, duration_s: float, keys: int) -> dict[str, Any]:
    import aetcd

    clients = [aetcd.Client(host, port) for host, port in etcd.endpoints()]
    try:
        return await workloads.in_flight(
            etcd,
            lambda worker: clients[worker % len(clients)].put(f"bench/in-flight/{worker % keys}".encode(), b"x"),
            in_flight,
            duration_s,
        )
    finally:
        for client in clients:
            await client.close()


async def _registrations(etcd: EtcdCluster, members: int) -> dict[str, Any]:
    """`members` registrations (a lease and a key under the lease each, over one connection per node) → seconds
    until a watch of the prefix has seen them all."""
    import aetcd

    prefix = f"bench/members/{time.monotonic_ns()}/".encode()
    clients = [aetcd.Client(host, port) for host, port in etcd.endpoints()]
    watcher = aetcd.Client(*etcd.endpoints()[0])
    try:
        events = await watcher.watch_prefix(prefix)
        seen: set[bytes] = set()

        async def watch() -> None:
            async for event in events:
                seen.add(event.kv.key)
                if len(seen) == members:
                    return

        async def register(i: int) -> None:
            client = clients[i % len(clients)]
            lease = await client.lease(60)
            await client.put(prefix + str(i).encode(), b"member", lease=lease)

        watching = asyncio.create_task(watch())
        cpu, start = CpuMeter(etcd), time.perf_counter()
        await asyncio.gather(*(register(i) for i in range(members)))
        await asyncio.wait_for(watching, 60)
        seconds = time.perf_counter() - start
        used = cpu.result()
        await events.cancel()
    finally:
        for client in [*clients, watcher]:
            await client.close()
    return {"members": members, "seconds_all_seen": round(seconds, 3), **used}


async def etcd_vs_groupcoord(cluster: BenchCluster, args: argparse.Namespace, index: int) -> dict[str, Any]:
    """One run: both clusters up at once, each workload against etcd then groupcoord (the other way round on odd
    runs, so that neither always goes first)."""
    etcd = EtcdCluster(etcd_binary(args.etcd))
    floor, kafka_echo = grpc_floor.EchoServer(), kafka_floor.KafkaEchoServer()
    port = kafka_bench.listener_port(cluster)
    kafka = KafkaClient([f"{address.rsplit(':', 1)[0]}:{port}" for address in cluster.addresses.values()])
    etcd.start()
    floor.start()
    kafka_echo.start()
    try:
        leader = await etcd.wait_ready()
        await floor.wait_ready()
        await kafka_echo.wait_ready()
        pairs: dict[str, tuple[Callable[[], Awaitable[dict[str, Any]]], Callable[[], Awaitable[dict[str, Any]]]]] = {
            "sequential": (
                lambda: _sequential(etcd, leader, args.ops),
                lambda: offsets.commit_latency(cluster, args.ops, batched=False),
            ),
            "in_flight": (
                lambda: _in_flight(etcd, args.in_flight, args.duration, args.groups),
                lambda: offsets.commit_throughput(cluster, args.in_flight, args.duration, args.groups, batched=False),
            ),
            "registrations": (
                lambda: _registrations(etcd, args.members),
                lambda: groups.join(cluster, [args.members], None),
            ),
        }
        result: dict[str, Any] = {}
        for name, (on_etcd, on_groupcoord) in pairs.items():
            if index % 2:
                theirs, ours = await on_groupcoord(), await on_etcd()
            else:
                ours, theirs = await on_etcd(), await on_groupcoord()
            result[name] = {"etcd": ours, "groupcoord": theirs}
        result["sequential"]["groupcoord_stream"] = await offsets.commit_latency(cluster, args.ops, batched=True)
        result["in_flight"]["groupcoord_stream"] = await offsets.commit_throughput(
            cluster, args.in_flight, args.duration, args.groups, batched=True
        )
        result["sequential"]["groupcoord_kafka"] = await kafka_bench.commit_latency(cluster, kafka, args.ops)
        result["in_flight"]["groupcoord_kafka"] = await kafka_bench.commit_throughput(
            cluster, kafka, args.in_flight, args.duration, args.groups
        )
        interval_ms = groups.auto_interval_ms(args.members)
        kafka_join = await kafka_bench.join_group(cluster, kafka, args.members, interval_ms)
        result["registrations"]["groupcoord_kafka"] = {"sizes": {str(args.members): kafka_join}}
        result["sequential"]["grpc_floor"] = await grpc_floor.sequential(floor, args.ops)
        result["in_flight"]["grpc_floor"] = await grpc_floor.in_flight(floor, args.in_flight, args.duration)
        result["sequential"]["kafka_floor"] = await kafka_floor.sequential(kafka_echo, args.ops)
        result["in_flight"]["kafka_floor"] = await kafka_floor.in_flight(kafka_echo, args.in_flight, args.duration)
    finally:
        await kafka.close()
        floor.stop()
        kafka_echo.stop()
        etcd.stop()
    for name in ("sequential", "in_flight"):
        for figures in result[name].values():
            figures["cpu_us_per_write"] = _cpu(figures)
    result["ratios"] = ratios(result)
    return result


def ratios(result: dict[str, Any]) -> dict[str, float]:
    """groupcoord / etcd for each figure of the issue's goals (below 1: groupcoord is faster or cheaper, except
    for ops/s, where above 1 is better); `kafka_*`: the same over the Kafka listener; `floor_*`: the gRPC echo
    server's / etcd's, what no gRPC node can go below; `kafka_floor_*`: the same for the Kafka listener's stack."""
    seq, flight, reg = result["sequential"], result["in_flight"], result["registrations"]
    size = str(reg["etcd"]["members"])
    joined, kafka_joined = reg["groupcoord"]["sizes"][size], reg["groupcoord_kafka"]["sizes"][size]
    out = {
        "sequential_p50": seq["groupcoord"]["latency"]["p50_ms"] / seq["etcd"]["latency"]["p50_ms"],
        "sequential_p99": seq["groupcoord"]["latency"]["p99_ms"] / seq["etcd"]["latency"]["p99_ms"],
        "sequential_stream_p50": seq["groupcoord_stream"]["latency"]["p50_ms"] / seq["etcd"]["latency"]["p50_ms"],
        "in_flight_ops_per_s_unary": flight["groupcoord"]["ops_per_s"] / flight["etcd"]["ops_per_s"],
        "in_flight_ops_per_s_stream": flight["groupcoord_stream"]["ops_per_s"] / flight["etcd"]["ops_per_s"],
        "cpu_per_write_unary": flight["groupcoord"]["cpu_us_per_write"] / flight["etcd"]["cpu_us_per_write"],
        "cpu_per_write_stream": flight["groupcoord_stream"]["cpu_us_per_write"] / flight["etcd"]["cpu_us_per_write"],
        "registrations_seconds": joined["seconds"] / reg["etcd"]["seconds_all_seen"],
        "kafka_sequential_p50": seq["groupcoord_kafka"]["latency"]["p50_ms"] / seq["etcd"]["latency"]["p50_ms"],
        "kafka_sequential_p99": seq["groupcoord_kafka"]["latency"]["p99_ms"] / seq["etcd"]["latency"]["p99_ms"],
        "kafka_in_flight_ops_per_s": flight["groupcoord_kafka"]["ops_per_s"] / flight["etcd"]["ops_per_s"],
        "kafka_cpu_per_write": flight["groupcoord_kafka"]["cpu_us_per_write"] / flight["etcd"]["cpu_us_per_write"],
        "kafka_registrations_seconds": kafka_joined["seconds"] / reg["etcd"]["seconds_all_seen"],
        "floor_sequential_p50": seq["grpc_floor"]["latency"]["p50_ms"] / seq["etcd"]["latency"]["p50_ms"],
        "floor_in_flight_ops_per_s": flight["grpc_floor"]["ops_per_s"] / flight["etcd"]["ops_per_s"],
        "floor_cpu_per_write": flight["grpc_floor"]["cpu_us_per_write"] / flight["etcd"]["cpu_us_per_write"],
        "kafka_floor_sequential_p50": seq["kafka_floor"]["latency"]["p50_ms"] / seq["etcd"]["latency"]["p50_ms"],
        "kafka_floor_in_flight_ops_per_s": flight["kafka_floor"]["ops_per_s"] / flight["etcd"]["ops_per_s"],
        "kafka_floor_cpu_per_write": flight["kafka_floor"]["cpu_us_per_write"] / flight["etcd"]["cpu_us_per_write"],
    }
    return {k: round(v, 3) for k, v in out.items()}


def _cpu(figures: dict[str, Any]) -> float:
    """Server CPU (all nodes) per acknowledged write, in µs."""
    ops_per_s = figures["ops_per_s"]
    return round(sum(figures["nodes_cpu_percent"].values()) / 100 / ops_per_s * 1e6, 1) if ops_per_s else math.nan
