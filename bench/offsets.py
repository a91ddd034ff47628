"""`commit-latency` and `commit-throughput`: OffsetCommit by members of real groups, answered once committed on a
majority; sent as the SDK sends them (over one OffsetCommitStream per node, in batches) or as unary calls."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from typing import Any

from groupcoord.bench.cluster import BenchCluster, CpuMeter
from groupcoord.bench.members import REDISCOVER, RETRY_S, BenchError, Member, Router, join, leave, subscription
from groupcoord.bench.stats import summary
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

TOPIC = "orders"
RETRIES = 500


def _commit(m: Member, partition: int, offset: int) -> pb.OffsetCommitRequest:
    return pb.OffsetCommitRequest(
        group_id=m.group_id,
        generation_id=m.generation_id,
        member_id=m.member_id,
        group_instance_id=m.group_instance_id,
        topics=[
            pb.OffsetCommitRequest.Topic(
                name=TOPIC, partitions=[pb.OffsetCommitRequest.Partition(partition_index=partition,
                                                                          committed_offset=offset)]
            )
        ],
    )  # fmt: skip


async def _commit_once(router: Router, m: Member, partition: int, offset: int) -> float:
    """One acknowledged commit, retried at the new coordinator if the partition moved; its latency in ms."""
    sent = time.perf_counter()
    for _ in range(RETRIES):
        address = await router.coordinator(m.group_id)
        reply = await router.call(m.group_id, "OffsetCommit", _commit(m, partition, offset))
        code = reply.topics[0].partitions[0].error_code if reply is not None else Errors.COORDINATOR_NOT_AVAILABLE
        if code == Errors.NONE:
            return (time.perf_counter() - sent) * 1000
        if code not in REDISCOVER:
            raise BenchError(f"OffsetCommit {m.group_id}: {Errors(code).name}")
        router.forget(m.group_id, address)
        await asyncio.sleep(RETRY_S)
    raise BenchError(f"OffsetCommit {m.group_id}: no coordinator after {RETRIES} tries")


async def _members(router: Router, names: list[str]) -> list[Member]:
    """One Stable single-member group each; the members do not heartbeat (5-minute sessions outlast the run)."""
    members = [Member(name, session_timeout_ms=300_000) for name in names]
    metadata = subscription(1)
    await asyncio.gather(*(join(router, m, metadata) for m in members))
    return members


def spread_names(groups: int, leaders: dict[int, int] | None, prefix: str) -> list[str]:
    """Group names that put each group on its own partition (while there are partitions left), with the
    partitions' leaders as evenly loaded as can be: the same placement in every run, so that runs compare.
    Without the partitions (an ACL shows them to admins only) the names are `prefix-g` and land where they land."""
    if not leaders:
        return [f"{prefix}-{g}" for g in range(groups)]
    per_partition: Counter[int] = Counter()
    per_leader: Counter[int] = Counter()
    names = []
    for g in range(groups):
        target = min(leaders, key=lambda p: (per_partition[p], per_leader[leaders[p]], p))
        name = next(
            name
            for name in (f"{prefix}-{g}-{i}" for i in itertools.count())
            if partition_for(name, len(leaders)) == target
        )
        per_partition[target] += 1
        per_leader[leaders[target]] += 1
        names.append(name)
    return names


async def commit_latency(cluster: BenchCluster, ops: int, batched: bool = True) -> dict[str, Any]:
    """One client, sequential OffsetCommit of one partition."""
    router = cluster.router(batched)
    try:
        (m,) = await _members(router, [f"commit-{uuid.uuid4().hex[:8]}"])
        for offset in range(20):  # warm-up: connections, the coordinator's first batches
            await _commit_once(router, m, 0, offset)
        cpu, start = CpuMeter(cluster), time.perf_counter()
        latencies = [await _commit_once(router, m, 0, offset) for offset in range(ops)]
        elapsed = time.perf_counter() - start
        used = cpu.result()
        await leave(router, [m])
        return {
            "ops": ops,
            "latency": summary(latencies),
            "ops_per_s": round(ops / elapsed, 1),
            **used,
        }
    finally:
        await router.close()


async def commit_throughput(
    cluster: BenchCluster, in_flight: int, duration_s: float, groups: int, batched: bool = True
) -> dict[str, Any]:
    """`in_flight` commit loops spread over `groups` single-member groups (so over the partitions and their
    leaders, as `spread_names` places them), each committing its own partition, for `duration_s`."""
    router = cluster.router(batched)
    try:
        members = await _members(router, spread_names(groups, cluster.leaders(), f"commit-{uuid.uuid4().hex[:8]}"))
        latencies: list[list[float]] = [[] for _ in range(in_flight)]

        async def loop(worker: int, until: float) -> None:
            m, offset = members[worker % groups], 0
            while time.perf_counter() < until:
                latencies[worker].append(await _commit_once(router, m, worker, offset))
                offset += 1

        await asyncio.gather(*(loop(w, time.perf_counter() + 1.0) for w in range(in_flight)))  # warm-up
        latencies = [[] for _ in range(in_flight)]
        cpu, start = CpuMeter(cluster), time.perf_counter()
        await asyncio.gather(*(loop(w, start + duration_s) for w in range(in_flight)))
        elapsed = time.perf_counter() - start
        used = cpu.result()
        done = [x for per in latencies for x in per]
        placement = _placement(cluster, members)
        await asyncio.gather(*(leave(router, [m]) for m in members))
        return {
            "in_flight": in_flight,
            "groups": groups,
            "seconds": round(elapsed, 3),
            "ops": len(done),
            "ops_per_s": round(len(done) / elapsed, 1),
            "latency": summary(done),
            **placement,
            **used,
        }
    finally:
        await router.close()


def _placement(cluster: BenchCluster, members: list[Member]) -> dict[str, Any]:
    """Where the groups landed, largest first, as the leaders are at the end of the run: only the calls of one
    partition share its Raft entries."""
    leaders = cluster.leaders() or {}
    if not leaders:  # an ACL shows the partitions to admins only
        return {}
    partitions = [partition_for(m.group_id, len(leaders)) for m in members]
    return {
        "groups_per_partition": sorted(Counter(partitions).values(), reverse=True),
        "groups_per_leader": sorted(Counter(leaders[p] for p in partitions).values(), reverse=True),
    }
