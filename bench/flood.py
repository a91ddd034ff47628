"""`flood`: hostile clients against one node — thousands of idle HTTP/2 connections, then thousands of streams on one
connection — while a well-behaved client keeps calling on a channel of its own. Measured: that client's latency and
failures before, during and after each flood, and the node's RSS and open fds (peak, and how far RSS comes back).

Each flood runs in a child process (`python -m groupcoord.bench.flood_wire CONFIG`, bench/flood_wire.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from groupcoord.base.errors import UserError
from groupcoord.bench.cluster import BenchCluster, proc_cpu_s, proc_rss_mb
from groupcoord.bench.flood_wire import KINDS
from groupcoord.bench.stats import summary
from groupcoord.client.security import PLAINTEXT, ClientSecurity, aio_channel
from groupcoord.node.launcher import CHANNEL_OPTIONS
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

# -- the parent's side -----------------------------------------------------------------------------------------------


class FloodProcess:
    """One flood in a child process of its own (the protocol is in the module docstring)."""

    def __init__(
        self, host: str, port: int, kind: str, count: int, sources: int = 1, open_timeout_s: float = 60.0
    ) -> None:
        self.config: dict[str, Any] = {
            "host": host, "port": port, "kind": kind, "count": count, "sources": sources,
            "open_timeout_s": open_timeout_s,
        }  # fmt: skip
        self.proc: asyncio.subprocess.Process | None = None

    async def open(self) -> dict[str, Any]:
        """Starts the child; its opened line once everything is open."""
        pipe = asyncio.subprocess.PIPE
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "groupcoord.bench.flood_wire", json.dumps(self.config), stdin=pipe, stdout=pipe
        )
        return await self._line(self.config["open_timeout_s"] + 10)

    async def close(self) -> dict[str, Any]:
        """Tells the child to close everything; what the server sent, once it has."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"close\n")
        await self.proc.stdin.drain()
        closed = await self._line(30)
        await self.proc.wait()
        return closed

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def _line(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        if not line:
            raise RuntimeError(f"flood process {self.proc.pid} exited with {await self.proc.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class NodeSampler:
    """The node's RSS and open fds every SAMPLE_S; the peaks since `reset()`."""

    SAMPLE_S = 0.1

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_mb = 0.0
        self.peak_fds = 0
        self._task: asyncio.Task[None] | None = None

    def rss_mb(self) -> float:
        rss = proc_rss_mb(self.pid)
        if rss is None:
            raise RuntimeError(f"node process {self.pid} is gone")
        return rss

    def reset(self) -> None:
        self.peak_rss_mb, self.peak_fds = self.rss_mb(), fd_count(self.pid) or 0

    def start(self) -> None:
        self.reset()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.SAMPLE_S)
            self.peak_rss_mb = max(self.peak_rss_mb, proc_rss_mb(self.pid) or 0.0)
            self.peak_fds = max(self.peak_fds, fd_count(self.pid) or 0)


class GoodClient:
    """A well-behaved member: a static member of a group the flooded node coordinates, on a channel of its own that
    is connected before any flood, calling Heartbeat and OffsetFetch one after the other with a short pause. Every
    latency and failure (an RPC error or an error code) is kept under the phase its call started in."""

    PAUSE_S = 0.01
    CALL_TIMEOUT_S = 10.0
    INSTANCE_ID = "flood-good"

    def __init__(self, address: str, security: ClientSecurity = PLAINTEXT) -> None:
        self.address = address
        self.channel = aio_channel(address, security, CHANNEL_OPTIONS)
        self.stub = pb_grpc.GroupCoordinatorStub(self.channel)
        self.phase = "warmup"
        self.latencies_ms: dict[str, list[float]] = {}
        self.failures: dict[str, Counter[str]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float = 30.0) -> None:
        """Joins its group (a static member, generation 1 at once) and starts calling."""
        async with asyncio.timeout(timeout_s):
            group_id = await self._own_group()
            joined = await self.stub.JoinGroup(
                pb.JoinGroupRequest(
                    group_id=group_id, group_instance_id=self.INSTANCE_ID, session_timeout_ms=30_000,
                    rebalance_timeout_ms=10_000, protocol_type="consumer",
                    protocols=[pb.JoinGroupRequest.Protocol(name="range", metadata=b"")],
                )
            )  # fmt: skip
            if joined.error_code != Errors.NONE:
                raise RuntimeError(f"good client JoinGroup: {Errors(joined.error_code).name}")
            synced = await self.stub.SyncGroup(
                pb.SyncGroupRequest(
                    group_id=group_id, generation_id=joined.generation_id, member_id=joined.member_id,
                    group_instance_id=self.INSTANCE_ID,
                    assignments=[pb.SyncGroupRequest.Assignment(member_id=joined.member_id, assignment=b"")],
                )
            )  # fmt: skip
            if synced.error_code != Errors.NONE:
                raise RuntimeError(f"good client SyncGroup: {Errors(synced.error_code).name}")
        heartbeat = pb.HeartbeatRequest(
            group_id=group_id, generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=self.INSTANCE_ID,
        )  # fmt: skip
        fetch = pb.OffsetFetchRequest(
            group_id=group_id, topics=[pb.OffsetFetchRequest.Topic(name="t", partition_indexes=[0])]
        )
        self._task = asyncio.get_running_loop().create_task(self._loop(heartbeat, fetch))

    async def _own_group(self) -> str:
        """A group id that hashes to a partition the node at `address` leads."""
        candidates = [f"flood-good-{i}" for i in range(64)]
        while True:
            reply = await self.stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=candidates))
            for c in reply.coordinators:
                if c.error_code == Errors.NONE and f"{c.host}:{c.port}" == self.address:
                    return c.group_id
            await asyncio.sleep(0.1)

    async def _loop(self, heartbeat: pb.HeartbeatRequest, fetch: pb.OffsetFetchRequest) -> None:
        calls: tuple[tuple[str, Callable[[], Awaitable[Any]]], ...] = (
            ("Heartbeat", lambda: self.stub.Heartbeat(heartbeat, timeout=self.CALL_TIMEOUT_S)),
            ("OffsetFetch", lambda: self.stub.OffsetFetch(fetch, timeout=self.CALL_TIMEOUT_S)),
        )
        while True:
            for name, call in calls:
                phase, started = self.phase, time.perf_counter()
                try:
                    code = (await call()).error_code
                    failure = None if code == Errors.NONE else f"{name} {Errors(code).name}"
                except grpc.aio.AioRpcError as exc:
                    failure = f"{name} {exc.code().name}"
                self.latencies_ms.setdefault(phase, []).append((time.perf_counter() - started) * 1000)
                if failure is not None:
                    self.failures.setdefault(phase, Counter())[failure] += 1
            await asyncio.sleep(self.PAUSE_S)

    def report(self, phase: str) -> dict[str, Any]:
        """count, p50, p99, max in ms and the failures of the calls started in `phase` (their number, then each kind:
        the table leaves out an empty mapping)."""
        failures = self.failures.get(phase, Counter())
        return {
            **summary(self.latencies_ms.get(phase, [])),
            "failed": sum(failures.values()),
            "failures": dict(failures),
        }

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.channel.close()


@dataclass
class FloodPlan:
    """What one series of floods does; `after_s`: seconds watched after each flood ends, with RSS read at
    RSS_CHECKPOINTS_S and until it is back within `rss_band` of baseline (then, if `stop_when_back`, no longer)."""

    connections: int = 2000
    sources: int = 1
    streams: int = 10_000
    kinds: tuple[str, ...] = KINDS
    baseline_s: float = 5.0
    hold_s: float = 5.0
    after_s: float = 15.0
    rss_band: float = 0.10
    stop_when_back: bool = False


RSS_CHECKPOINTS_S = (1.0, 5.0, 15.0)
AFTER_POLL_S = 0.5


async def _watch_after(client: GoodClient, sampler: NodeSampler, baseline_mb: float, plan: FloodPlan) -> dict[str, Any]:
    """RSS at the checkpoints after a flood, and how long until it is back within the band of baseline."""
    ended = time.monotonic()
    checkpoints = [s for s in RSS_CHECKPOINTS_S if s < plan.after_s] + [plan.after_s]
    rss_after: dict[str, float] = {}
    back_s: float | None = None
    while True:
        elapsed = time.monotonic() - ended
        rss = sampler.rss_mb()
        if back_s is None and rss <= baseline_mb * (1 + plan.rss_band):
            back_s = round(elapsed, 2)
        while checkpoints and elapsed >= checkpoints[0]:
            rss_after[f"{checkpoints.pop(0):g}s"] = round(rss, 1)
        if not checkpoints or (plan.stop_when_back and back_s is not None):
            break
        await asyncio.sleep(AFTER_POLL_S)
    return {
        "good_client_after": client.report(client.phase),
        "rss_after_mb": rss_after,
        "rss_last_vs_baseline_percent": round(100 * (rss / baseline_mb - 1), 1),
        f"rss_within_{round(100 * plan.rss_band)}_percent_after_s": back_s,
        "fds_after": fd_count(sampler.pid),
    }


async def one_flood(
    kind: str, host: str, port: int, client: GoodClient, sampler: NodeSampler, baseline_mb: float, plan: FloodPlan
) -> dict[str, Any]:
    """One flood: open, hold `plan.hold_s`, close; then watch the node come back."""
    count = plan.connections if kind == "connections" else plan.streams
    flood = FloodProcess(host, port, kind, count, plan.sources if kind == "connections" else 1)
    sampler.reset()
    rss_before, cpu_before, started = sampler.rss_mb(), proc_cpu_s(sampler.pid) or 0.0, time.monotonic()
    client.phase = f"{kind}-during"
    try:
        opened = await flood.open()
        await asyncio.sleep(plan.hold_s)
        fds_held = fd_count(sampler.pid)
        closed = await flood.close()
    finally:
        await flood.kill()
    elapsed = time.monotonic() - started
    cpu = (proc_cpu_s(sampler.pid) or 0.0) - cpu_before
    client.phase = f"{kind}-after"
    during = {
        "count": count,
        **opened,
        **closed,
        "good_client_during": client.report(f"{kind}-during"),
        "node_cpu_percent_during": round(100 * cpu / elapsed, 1),
        "rss_before_mb": round(rss_before, 1),
        "rss_peak_mb": round(sampler.peak_rss_mb, 1),
        "fds_held": fds_held,
        "fds_peak": sampler.peak_fds,
    }
    return {**during, **await _watch_after(client, sampler, baseline_mb, plan)}


async def run_floods(address: str, pid: int, plan: FloodPlan, security: ClientSecurity = PLAINTEXT) -> dict[str, Any]:
    """The good client's baseline, then each flood of `plan.kinds` in turn against the node at `address` (process
    `pid`)."""
    host, port = address.rsplit(":", 1)
    sampler = NodeSampler(pid)
    client = GoodClient(address, security)
    try:
        await client.start()
        await asyncio.sleep(1.0)  # the channel and the node's first calls warm up, unmeasured
        sampler.start()
        client.phase = "baseline"
        await asyncio.sleep(plan.baseline_s)
        baseline: dict[str, Any] = {
            "good_client": client.report("baseline"),
            "rss_mb": round(sampler.rss_mb(), 1),
            "fds": fd_count(pid),
        }
        result: dict[str, Any] = {"node_pid": pid, "baseline": baseline}
        for kind in plan.kinds:
            result[kind] = await one_flood(kind, host, int(port), client, sampler, baseline["rss_mb"], plan)
        return result
    finally:
        await sampler.stop()
        await client.close()


async def flood(cluster: BenchCluster, args: argparse.Namespace) -> dict[str, Any]:
    """The bench scenario: the floods against node 1 of the cluster it started."""
    if not cluster.owned:
        raise UserError("flood reads the node's RSS and fds from /proc: it needs a cluster of its own (no --bootstrap)")
    plan = FloodPlan(
        connections=args.connections, sources=args.sources, streams=args.streams, kinds=tuple(args.floods),
        baseline_s=args.baseline_s,
        hold_s=args.hold_s, after_s=args.after_s,
    )  # fmt: skip
    return {"node": 1, **await run_floods(cluster.addresses[1], cluster.pids()[1], plan, cluster.security)}
