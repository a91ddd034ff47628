"""`heartbeats` and `scale`: many members over many groups, formed by several client processes
(bench/worker.py) so that one Python process is not the bottleneck."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
import uuid
from collections import Counter
from typing import Any

import grpc

from groupcoord.bench.cluster import BenchCluster, proc_cpu_s
from groupcoord.bench.members import REDISCOVER, RETRY_S, BenchError, Router, describe
from groupcoord.bench.stats import summary
from groupcoord.bench.worker import TOKEN_ENV
from groupcoord.client.admin import Admin
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

CLIENT_CALLS_PER_S = 3000  # what one client process sustains, roughly, next to the nodes on 2 cores
# Forming waits this long, plus FORM_S_PER_GROUP for each group: 100,000 groups form at about 120 a second on a
# 2-core machine, so a fixed wait would end a big run that is only slow, not stuck.
READY_TIMEOUT_S = 600.0
FORM_S_PER_GROUP = 0.02
# Members of `scale` stop heartbeating once formed: their sessions must outlast forming every group and the
# measurements after it. The default group_max_session_timeout_ms (30 minutes) did not: 100,000 groups took 26-38
# minutes to form on 2 cores, and the groups formed first had expired by the kill. Its nodes allow two hours.
SCALE_SESSION_TIMEOUT_MS = 7_200_000
NODE_FLAGS = (f"--group-max-session-timeout-ms={SCALE_SESSION_TIMEOUT_MS}",)
DESCRIBE_BATCH = 100
IDLE_SAMPLE_S = 3.0
SETTLE_POLL_S = 0.5
SETTLE_TIMEOUT_S = 60.0
# A worker's answer is one JSON line with every latency it measured (~20 bytes each): well above asyncio's 64 KiB.
WORKER_LINE_LIMIT = 256 * 1024 * 1024


class Workers:
    """Client processes, each forming a slice of the groups."""

    def __init__(self, cluster: BenchCluster, groups: list[str], clients: int, per_group: int,
                 interval_ms: int, session_timeout_ms: int, rpc: str = "batched") -> None:  # fmt: skip
        self.procs: list[asyncio.subprocess.Process] = []
        self.groups = groups
        security = cluster.security
        # The token goes through the environment: a command line shows in `ps`.
        self.env = {**os.environ, TOKEN_ENV: security.token} if security.token else None
        self.configs = [
            {
                "bootstrap": list(cluster.addresses.values()),
                "tls": [security.ca_file, security.cert_file, security.key_file],
                "groups": groups[i::clients],
                "members_per_group": per_group,
                "interval_ms": interval_ms,
                "session_timeout_ms": session_timeout_ms,
                "concurrency": 50,
                "rpc": rpc,
            }
            for i in range(clients)
        ]

    async def start(self) -> list[dict[str, Any]]:
        """Starts them; their ready lines once every group is Stable."""
        for config in self.configs:
            cmd = [sys.executable, "-m", "groupcoord.bench.worker"]
            pipe = asyncio.subprocess.PIPE
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=pipe, stdout=pipe, limit=WORKER_LINE_LIMIT, env=self.env
            )
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(config).encode() + b"\n")
            self.procs.append(proc)
        groups = len(self.groups)
        timeout_s = READY_TIMEOUT_S + FORM_S_PER_GROUP * groups
        try:
            return await asyncio.wait_for(asyncio.gather(*(self._line(p) for p in self.procs)), timeout_s)
        except TimeoutError:
            raise BenchError(f"{groups} groups were not all Stable after {timeout_s:.0f} s") from None

    async def ask(self, line: str) -> list[dict[str, Any]]:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(line.encode() + b"\n")
        return await asyncio.gather(*(self._line(p) for p in self.procs))

    @staticmethod
    async def _line(p: asyncio.subprocess.Process) -> dict[str, Any]:
        assert p.stdout is not None
        line = await p.stdout.readline()
        if not line:
            raise RuntimeError(f"bench worker {p.pid} exited with {await p.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def close(self, leave_groups: bool) -> None:
        """Ends every worker: after their groups leave, or at once (EOF); killed if one hangs."""
        for p in self.procs:
            if p.returncode is None and p.stdin is not None:
                if leave_groups:
                    p.stdin.write(b"leave\n")
                p.stdin.close()
        for p in self.procs:
            try:
                await asyncio.wait_for(p.wait(), 60)
            except TimeoutError:
                p.kill()
                await p.wait()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _nodes_cpu(cluster: BenchCluster) -> float:
    return sum(cluster.cpu_s().values())


async def _leaders(admin: Admin) -> dict[int, tuple[int, int]]:
    """Each partition's (leader node, term)."""
    described = await admin.describe_cluster()
    return {p.partition_id: (p.leader_node_id, p.term) for p in described.partitions}


async def _settle(admin: Admin, at_least_s: float, quiet_s: float, timeout_s: float = SETTLE_TIMEOUT_S) -> float:
    """Seconds waited: at least `at_least_s`, and until no partition has changed leader or term for `quiet_s`
    (forming thousands of members can cost elections, and the leader balancer moves leaders back after them),
    but at most `timeout_s`: the window then measures a steady cluster, and counts what changes during it."""
    start = time.perf_counter()
    leaders, quiet_since = await _leaders(admin), start
    while True:
        now = time.perf_counter()
        if (now - start >= at_least_s and now - quiet_since >= quiet_s) or now - start >= timeout_s:
            return round(now - start, 1)
        await asyncio.sleep(SETTLE_POLL_S)
        current = await _leaders(admin)
        if current != leaders:
            leaders, quiet_since = current, time.perf_counter()


async def _heartbeat_step(
    cluster: BenchCluster, args: argparse.Namespace, wanted: int, idle_cpu: float
) -> dict[str, Any]:
    """One step of M members; node CPU per heartbeat is above the nodes' idle CPU (`idle_cpu` s/s)."""
    per_group = args.members_per_group
    groups = max(wanted // per_group, 1)
    members = groups * per_group
    rate = members / (args.interval_ms / 1000)
    clients = args.clients or max(1, math.ceil(rate / CLIENT_CALLS_PER_S))
    tag = uuid.uuid4().hex[:6]
    workers = Workers(cluster, [f"hb-{tag}-{g}" for g in range(groups)], clients, per_group, args.interval_ms,
                      max(30_000, 3 * args.interval_ms), args.rpc)  # fmt: skip
    interval_s = args.interval_ms / 1000
    try:
        ready = await workers.start()
        async with Admin(list(cluster.addresses.values()), security=cluster.security) as admin:
            settle_s = await _settle(admin, interval_s if args.warmup is None else args.warmup, interval_s)
            leaders_before = await _leaders(admin)
            nodes_before, start = _nodes_cpu(cluster), time.perf_counter()
            results = await workers.ask(f"go {args.window}")
            elapsed = time.perf_counter() - start
            nodes_cpu = _nodes_cpu(cluster) - nodes_before
            leaders_after = await _leaders(admin)
        busy_cpu = max(nodes_cpu - idle_cpu * elapsed, 0.0)
    finally:
        await workers.close(leave_groups=True)
    latencies = [x for r in results for x in r["latencies_ms"]]
    count = len(latencies)
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
    client_cpu = sum(r["cpu_s"] for r in results)
    stats = summary(latencies)
    return {
        "members": members,
        "groups": groups,
        "clients": clients,
        "form_s": max(r["form_s"] for r in ready),
        "settle_s": settle_s,
        "leader_changes": sum(leaders_after.get(k) != v for k, v in leaders_before.items()),
        "heartbeats": count,
        "heartbeats_per_s": round(count / elapsed, 1),
        "latency": stats,
        "errors": dict(errors),
        "held": bool(count) and stats["p99_ms"] < args.p99_limit_ms and not errors,
        "nodes_cpu_percent": round(100 * nodes_cpu / elapsed, 1),
        "nodes_idle_cpu_percent": round(100 * idle_cpu, 1),
        "clients_cpu_percent": round(100 * client_cpu / elapsed, 1),
        "nodes_cpu_us_per_heartbeat": round(1e6 * busy_cpu / count, 1) if count else math.nan,
        "clients_cpu_us_per_heartbeat": round(1e6 * client_cpu / count, 1) if count else math.nan,
    }


async def heartbeats(cluster: BenchCluster, args: argparse.Namespace) -> dict[str, Any]:
    """Steps M up until heartbeat p99 passes the limit (or an error shows); the largest M that held."""
    before, start = _nodes_cpu(cluster), time.perf_counter()
    await asyncio.sleep(IDLE_SAMPLE_S)
    idle = (_nodes_cpu(cluster) - before) / (time.perf_counter() - start)
    steps: dict[str, Any] = {}
    for wanted in args.members:
        step = await _heartbeat_step(cluster, args, wanted, idle)
        steps[str(wanted)] = step
        if not step["held"]:
            break
    held = [s["members"] for s in steps.values() if s["held"]]
    return {"largest_members_held": max(held, default=0), "steps": steps}


async def _stable_count(router: Router, groups: list[str], per_group: int, timeout_s: float = 60.0) -> int:
    """Groups their coordinator describes as Stable with every member (one call per 100 groups per coordinator);
    groups whose coordinator is gone or moved are asked again at the new one, any other answer counts (a group
    whose members expired is Dead, not Stable)."""
    deadline = time.monotonic() + timeout_s
    left, stable = list(groups), 0
    while left:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(left)} groups not described after {timeout_s:.0f} s")
        await router.find(left)
        by_coordinator: dict[str, list[str]] = {}
        for g in left:
            by_coordinator.setdefault(await router.coordinator(g), []).append(g)
        left = []
        for address, ids in by_coordinator.items():
            for start in range(0, len(ids), DESCRIBE_BATCH):
                batch = ids[start : start + DESCRIBE_BATCH]
                try:
                    reply = await router.stub(address).DescribeGroups(pb.DescribeGroupsRequest(group_ids=batch),
                                                                      timeout=30)  # fmt: skip
                except grpc.aio.AioRpcError:
                    answered = []
                else:
                    answered = [g for g in reply.groups if g.error_code not in REDISCOVER]
                    stable += sum(g.group_state == "Stable" and len(g.members) == per_group for g in answered)
                done = {g.group_id for g in answered}
                for g in batch:
                    if g not in done:
                        router.forget(g, address)
                        left.append(g)
        if left:
            await asyncio.sleep(RETRY_S)
    return stable


async def _list_groups(router: Router, address: str) -> tuple[int, float]:
    sent = time.perf_counter()
    reply = await router.stub(address).ListGroups(pb.ListGroupsRequest(), timeout=30)
    return len(reply.groups), (time.perf_counter() - sent) * 1000


async def _admin_list_groups(cluster: BenchCluster, times: int) -> tuple[int, list[float]]:
    """`Admin.list_groups` (every node lists the partitions it coordinates, merged) `times` times; ms each."""
    async with Admin(list(cluster.addresses.values()), security=cluster.security) as admin:
        await admin.describe_cluster()  # connected before the clock starts
        latencies, count = [], 0
        for _ in range(times):
            sent = time.perf_counter()
            count = len(await admin.list_groups())
            latencies.append((time.perf_counter() - sent) * 1000)
    return count, latencies


async def scale(cluster: BenchCluster, args: argparse.Namespace) -> dict[str, Any]:
    """G static groups formed, members then silent (two-hour sessions): memory, admin latency, failover."""
    per_group = args.members_per_group
    names = [f"scale-{uuid.uuid4().hex[:6]}-{g}" for g in range(args.groups)]
    workers = Workers(cluster, names, args.clients, per_group, 0, SCALE_SESSION_TIMEOUT_MS)
    start = time.perf_counter()
    try:
        await workers.start()
        form_s = time.perf_counter() - start
        clients_cpu = sum(c for pid in workers.pids() if (c := proc_cpu_s(pid)) is not None)
    finally:
        await workers.close(leave_groups=False)
    router = cluster.router()
    try:
        rss = cluster.rss_mb()
        sample = random.sample(names, min(args.samples, len(names)))
        describe_ms = [(await describe(router, g))[1] for g in sample]
        listed = [await _list_groups(router, a) for a in cluster.addresses.values() for _ in range(5)]
        admin_listed, admin_ms = await _admin_list_groups(cluster, 5)
        stable_before = await _stable_count(router, names, per_group)
        leaders = cluster.leaders() or {}
        victim = Counter(leaders.values()).most_common(1)[0][0]
        cluster.kill(victim)
        killed = time.perf_counter()
        serving_s = await asyncio.to_thread(cluster.wait_ready, 60.0)
        stable_after = await _stable_count(router, names, per_group)
        all_described_s = time.perf_counter() - killed
        return {
            "groups": args.groups,
            "members": args.groups * per_group,
            "form_s": round(form_s, 2),
            "form_groups_per_s": round(args.groups / form_s, 1),
            "clients": args.clients,
            "clients_cpu_s": round(clients_cpu, 1),
            "rss_mb": {str(i): round(v, 1) for i, v in rss.items()},
            "describe_groups": summary(describe_ms),
            "list_groups": {"groups_listed": listed[0][0], **summary(ms for _, ms in listed)},
            "admin_list_groups": {"groups_listed": admin_listed, **summary(admin_ms)},
            "stable_before_kill": stable_before,
            "killed_node": victim,
            "partitions_moved": sum(v == victim for v in leaders.values()),
            "new_leaders_serving_s": round(serving_s, 3),
            "all_groups_described_s": round(all_described_s, 3),
            "stable_after_kill": stable_after,
        }
    finally:
        await router.close()
