"""`kafka`: the Kafka listener against the gRPC API in the same run, on one cluster started with the listener on.

Three measurements, each over Kafka (bench/kafka_client.py) and over gRPC (bench/offsets.py, bench/groups.py) one
after the other, the order turned round from one run to the next so that neither always meets a fresher cluster:

* commit latency: one single-member group, N sequential OffsetCommit of one partition, each acknowledged;
* commit throughput: K commits in flight over G single-member groups placed as `offsets.spread_names` places them;
* a join of M members into one fresh group, until every member has its assignment in one generation.

Kafka members follow the classic consumer protocol as a Kafka client does (JoinGroup v9 with its MEMBER_ID_REQUIRED
round, the leader range-assigns, SyncGroup v5, Heartbeat v4 at the gRPC bench's interval, rejoin on
REBALANCE_IN_PROGRESS); their subscriptions and assignments are the gRPC bench's bytes (client/protocol.py), which
the coordinator passes through untouched, so the leader does the same work on both sides. The ratios are taken
within a run (kafka / grpc_unary, kafka / grpc_stream), and `--runs` gives their medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import socket
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from groupcoord.base.errors import UserError
from groupcoord.bench import groups, offsets
from groupcoord.bench.cluster import BenchCluster, CpuMeter
from groupcoord.bench.kafka_client import (
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    QUICK_LANES,
    REDISCOVER,
    SYNC_GROUP,
    KafkaClient,
)
from groupcoord.bench.members import REJOIN, RETRY_S, BenchError, Member, assign, subscription, wait_stable
from groupcoord.bench.stats import summary
from groupcoord.client.assignors import RangeAssignor
from groupcoord.client.protocol import PROTOCOL_TYPE
from groupcoord.node.launcher import free_base
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors

# The targets, as ratios measured within one run.
TARGETS = {"commit_p50_kafka_to_grpc_unary": 1.1, "join_seconds_kafka_to_grpc": 1.2}
# BenchCluster's nodes (its default size of 3): the listener takes one port free on each of them.
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
# Members whose parked requests (JoinGroup, SyncGroup) share one connection: below the listener's 64 requests read
# ahead per connection (node/kafka/listener.py MAX_IN_FLIGHT), or a parked JoinGroup could go unread while the
# join phase waits for it.
MEMBERS_PER_CONNECTION = 50
SESSION_TIMEOUT_MS = 30_000  # as groups.Fleet's members
COMMIT_SESSION_TIMEOUT_MS = 300_000  # as offsets._members: the committing members do not heartbeat
WARMUP_COMMITS = 20
RETRIES = 500


@contextlib.contextmanager
def reserved_port(hosts: tuple[str, ...] = HOSTS) -> Iterator[int]:
    """A port free on every host, held bound (not listening) until the block ends, so that the ports the cluster
    picks for gRPC and Raft meanwhile (node/launcher.py's free_base, which probes by binding) cannot take it."""
    taken: set[int] = set()
    while True:
        port = free_base(hosts[0], 1, taken)
        held: list[socket.socket] = []
        try:
            for host in hosts:
                probe = socket.socket()
                held.append(probe)
                probe.bind((host, port))
        except OSError:
            for probe in held:
                probe.close()
            continue
        try:
            yield port
        finally:
            for probe in held:
                probe.close()
        return


def cluster(node_flags: list[str]) -> BenchCluster:
    """A bench cluster with every node's Kafka listener on one common port (a node tells clients the other nodes
    at their host and its own Kafka port); a `--node-flag=--kafka-port=...` given by hand comes later and wins."""
    with reserved_port() as port:
        bench = BenchCluster([f"--kafka-port={port}", *node_flags])
    listener_port(bench)  # refuses a listener turned off by hand before any node starts
    return bench


def listener_port(bench: BenchCluster) -> int:
    """The Kafka port the nodes were started with (the last --kafka-port flag wins, as on the node's command line)."""
    ports = [int(f.split("=", 1)[1]) for f in bench.node_flags if f.startswith("--kafka-port=")]
    if not ports or ports[-1] <= 0:
        raise UserError("the kafka scenario needs the nodes' Kafka listener on one port: drop --node-flag=--kafka-port")
    return ports[-1]


@dataclass
class KafkaMember(Member):
    # The connection this member's parked requests use (MEMBERS_PER_CONNECTION share one).
    lane: str = "home-0"


def _join_values(m: KafkaMember, metadata: bytes) -> dict[str, Any]:
    return {
        "group_id": m.group_id,
        "session_timeout": m.session_timeout_ms,
        "rebalance_timeout": m.rebalance_timeout_ms,
        "member_id": m.member_id,
        "group_instance_id": None,
        "protocol_type": PROTOCOL_TYPE,
        "protocols": [{"name": RangeAssignor.name, "metadata": metadata}],
        "reason": None,
    }


async def join(client: KafkaClient, m: KafkaMember, metadata: bytes) -> None:
    """JoinGroup + SyncGroup until this member has an assignment in some generation (members.join over Kafka).
    A JoinGroup without a member id is answered at once (MEMBER_ID_REQUIRED), so it goes on a quick lane; the
    JoinGroup with the id and the SyncGroup wait for the other members, so they go on the member's own lane."""
    m.joining = True
    parked_s = m.rebalance_timeout_ms / 1000 + 10
    while True:
        lane = m.lane if m.member_id else ""
        joined = await client.call(m.group_id, JOIN_GROUP, _join_values(m, metadata), lane, parked_s)
        if joined is None:
            continue
        code = int(joined.error_code)
        if code == Errors.MEMBER_ID_REQUIRED:
            m.member_id = joined.member_id
            continue
        if code in REJOIN:
            m.count_error(_name(code))
            if code == Errors.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            await asyncio.sleep(RETRY_S)
            continue
        if code != Errors.NONE:
            raise BenchError(f"JoinGroup {m.group_id}: error {code}")
        m.member_id = joined.member_id
        assignments = []
        if joined.leader == joined.member_id and not joined.skip_assignment:
            assignments = [{"member_id": a.member_id, "assignment": a.assignment} for a in assign(joined.members)]
        sync = {
            "group_id": m.group_id,
            "generation_id": joined.generation_id,
            "member_id": m.member_id,
            "group_instance_id": None,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": joined.protocol_name,
            "assignments": assignments,
        }
        synced = await client.call(m.group_id, SYNC_GROUP, sync, m.lane, parked_s)
        if synced is None:
            continue
        code = int(synced.error_code)
        if code in REJOIN:
            if code == Errors.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            continue
        if code != Errors.NONE:
            raise BenchError(f"SyncGroup {m.group_id}: error {code}")
        m.generation_id, m.assignment, m.joining = int(joined.generation_id), synced.assignment, False
        m.synced_at = time.perf_counter()
        return


async def heartbeat(client: KafkaClient, m: KafkaMember) -> int | None:
    """One Heartbeat; its error code, or None when the coordinator could not be reached."""
    values = {
        "group_id": m.group_id,
        "generation_id": m.generation_id,
        "member_id": m.member_id,
        "group_instance_id": None,
    }
    reply = await client.call(m.group_id, HEARTBEAT, values)
    if reply is None:
        m.count_error("unreachable")
        return None
    code = int(reply.error_code)
    if code == Errors.NONE:
        m.heartbeats += 1
    else:
        m.count_error(_name(code))
    return code


async def run_member(
    client: KafkaClient, m: KafkaMember, metadata: bytes, interval_s: float, stop: asyncio.Event
) -> None:
    """Join, then heartbeat every `interval_s` on the member's own schedule until `stop` (members.run_member over
    Kafka); REBALANCE_IN_PROGRESS and the like mean join again."""
    await join(client, m, metadata)
    due = time.perf_counter()
    while not stop.is_set():
        due += interval_s
        await asyncio.sleep(max(due - time.perf_counter(), 0.0))
        if stop.is_set():
            return
        if time.perf_counter() - due > interval_s:
            due = time.perf_counter()
        code = await heartbeat(client, m)
        if code in REJOIN:
            if code == Errors.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            await join(client, m, metadata)
            due = time.perf_counter()


async def leave(client: KafkaClient, members: list[KafkaMember]) -> None:
    """One batch LeaveGroup (v3+) for all of them, so that a measurement ends without session expiries."""
    identities = [{"member_id": m.member_id, "group_instance_id": None, "reason": None} for m in members if m.member_id]
    if identities:
        await client.call(members[0].group_id, LEAVE_GROUP, {"group_id": members[0].group_id, "members": identities})


async def describe(client: KafkaClient, group_id: str) -> tuple[Any, float]:
    """The group as its coordinator describes it (DescribeGroups v5), and how long the call took in ms."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sent = time.perf_counter()
        reply = await client.call(
            group_id, DESCRIBE_GROUPS, {"groups": (group_id,), "include_authorized_operations": False}
        )
        if reply is not None and int(reply.groups[0].error_code) == Errors.NONE:
            return reply.groups[0], (time.perf_counter() - sent) * 1000
        if reply is not None:
            client.forget(group_id)
            await asyncio.sleep(RETRY_S)
    raise BenchError(f"DescribeGroups {group_id}: no coordinator answered in 30 s")


def commit_values(group_id: str, generation_id: int, member_id: str, partition: int, offset: int) -> dict[str, Any]:
    """An OffsetCommit of one partition of the bench's topic, as `codec.build` takes it (bench/kafka_floor.py's too)."""
    return {
        "group_id": group_id,
        "generation_id_or_member_epoch": generation_id,
        "member_id": member_id,
        "group_instance_id": None,
        "topics": [
            {
                "name": offsets.TOPIC,
                "partitions": [
                    {
                        "partition_index": partition,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                ],
            }
        ],
    }


async def commit_once(client: KafkaClient, m: KafkaMember, partition: int, offset: int) -> float:
    """One acknowledged OffsetCommit v9 of one partition, retried at the new coordinator if the group moved; its
    latency in ms (offsets._commit_once over Kafka)."""
    values = commit_values(m.group_id, m.generation_id, m.member_id, partition, offset)
    sent = time.perf_counter()
    for _ in range(RETRIES):
        reply = await client.call(m.group_id, OFFSET_COMMIT, values)
        code = int(reply.topics[0].partitions[0].error_code) if reply is not None else Errors.COORDINATOR_NOT_AVAILABLE
        if code == Errors.NONE:
            return (time.perf_counter() - sent) * 1000
        if code not in REDISCOVER:
            raise BenchError(f"OffsetCommit {m.group_id}: {_name(code)}")
        if reply is not None:
            client.forget(m.group_id)
            await asyncio.sleep(RETRY_S)
    raise BenchError(f"OffsetCommit {m.group_id}: no coordinator after {RETRIES} tries")


async def _single_members(client: KafkaClient, names: list[str]) -> list[KafkaMember]:
    """One Stable single-member group each (each its own leader), formed over Kafka; no heartbeats needed."""
    members = [
        KafkaMember(name, session_timeout_ms=COMMIT_SESSION_TIMEOUT_MS, lane=f"home-{i // MEMBERS_PER_CONNECTION}")
        for i, name in enumerate(names)
    ]
    metadata = subscription(1)
    await asyncio.gather(*(join(client, m, metadata) for m in members))
    return members


async def commit_latency(bench: BenchCluster, client: KafkaClient, ops: int) -> dict[str, Any]:
    """One client, sequential OffsetCommit of one partition (offsets.commit_latency over Kafka)."""
    (m,) = await _single_members(client, [f"kcommit-{uuid.uuid4().hex[:8]}"])
    for offset in range(WARMUP_COMMITS):  # connections, the coordinator's first batches
        await commit_once(client, m, 0, offset)
    cpu, start = CpuMeter(bench), time.perf_counter()
    latencies = [await commit_once(client, m, 0, offset) for offset in range(ops)]
    elapsed = time.perf_counter() - start
    used = cpu.result()
    await leave(client, [m])
    return {"ops": ops, "latency": summary(latencies), "ops_per_s": round(ops / elapsed, 1), **used}


async def commit_throughput(
    bench: BenchCluster, client: KafkaClient, in_flight: int, duration_s: float, group_count: int
) -> dict[str, Any]:
    """`in_flight` commit loops over `group_count` single-member groups, each committing its own partition, for
    `duration_s` after a second of warm-up (offsets.commit_throughput over Kafka)."""
    names = offsets.spread_names(group_count, bench.leaders(), f"kcommit-{uuid.uuid4().hex[:8]}")
    members = await _single_members(client, names)
    latencies: list[list[float]] = [[] for _ in range(in_flight)]

    async def loop(worker: int, until: float) -> None:
        m, offset = members[worker % group_count], 0
        while time.perf_counter() < until:
            latencies[worker].append(await commit_once(client, m, worker, offset))
            offset += 1

    await asyncio.gather(*(loop(w, time.perf_counter() + 1.0) for w in range(in_flight)))
    latencies = [[] for _ in range(in_flight)]
    cpu, start = CpuMeter(bench), time.perf_counter()
    await asyncio.gather(*(loop(w, start + duration_s) for w in range(in_flight)))
    elapsed = time.perf_counter() - start
    used = cpu.result()
    done = [x for per in latencies for x in per]
    placement = _placement(bench, members)
    await asyncio.gather(*(leave(client, [m]) for m in members))
    return {
        "in_flight": in_flight,
        "groups": group_count,
        "seconds": round(elapsed, 3),
        "ops": len(done),
        "ops_per_s": round(len(done) / elapsed, 1),
        "latency": summary(done),
        **placement,
        **used,
    }


def _placement(bench: BenchCluster, members: list[KafkaMember]) -> dict[str, Any]:
    """Where the groups landed, as offsets.commit_throughput reports it, so that the two placements compare."""
    leaders = bench.leaders() or {}
    partitions = [partition_for(m.group_id, len(leaders)) for m in members] if leaders else []
    return {
        "groups_per_partition": sorted(Counter(partitions).values(), reverse=True),
        "groups_per_leader": sorted(Counter(leaders[p] for p in partitions).values(), reverse=True),
    }


async def join_group(bench: BenchCluster, client: KafkaClient, size: int, interval_ms: int) -> dict[str, Any]:
    """`size` members join one fresh group at once → seconds until all have an assignment in one generation and
    DescribeGroups agrees (groups.join over Kafka, the same figures)."""
    group_id = f"kjoin-{uuid.uuid4().hex[:8]}"
    members = [
        KafkaMember(group_id, session_timeout_ms=SESSION_TIMEOUT_MS, lane=f"home-{i // MEMBERS_PER_CONNECTION}")
        for i in range(size)
    ]
    metadata = subscription(2 * size)
    stop = asyncio.Event()
    cpu, start = CpuMeter(bench), time.perf_counter()
    tasks = [asyncio.create_task(run_member(client, m, metadata, interval_ms / 1000, stop)) for m in members]
    try:
        while True:
            done = await wait_stable(members, groups.FORM_TIMEOUT_S, tasks=tasks)
            group, describe_ms = await describe(client, group_id)
            # Kafka's DescribeGroups has no generation: Stable with every member is what it can confirm.
            if group.group_state == "Stable" and len(group.members) == size:
                break
            await asyncio.sleep(0.005)
        used = cpu.result()
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await leave(client, members)
    errors: dict[str, int] = {}
    for m in members:
        for what, count in m.errors.items():
            errors[what] = errors.get(what, 0) + count
    return {
        "members": size,
        "heartbeat_interval_ms": interval_ms,
        "connections_to_coordinator": math.ceil(size / MEMBERS_PER_CONNECTION) + QUICK_LANES,
        "seconds": round(done - start, 4),
        "state": group.group_state,
        "generation_id": members[0].generation_id,
        "members_described": len(group.members),
        "members_with_assignment": sum(bool(m.assignment) for m in members),
        "describe_ms": round(describe_ms, 3),
        "errors": errors,
        **used,
    }


def _name(code: int) -> str:
    """The error's name where groupcoord knows the code (Kafka's numbering), else the number."""
    try:
        return Errors(code).name
    except ValueError:
        return f"error {code}"


def _rotated(names: list[str], index: int) -> list[str]:
    shift = index % len(names)
    return names[shift:] + names[:shift]


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else math.nan


async def kafka_vs_grpc(bench: BenchCluster, args: argparse.Namespace, index: int = 0) -> dict[str, Any]:
    """One run: commit latency, commit throughput and the join, each over Kafka and gRPC, and the run's ratios."""
    port = listener_port(bench)
    client = KafkaClient([f"{address.rsplit(':', 1)[0]}:{port}" for address in bench.addresses.values()])
    commit_order = _rotated(["kafka", "grpc_unary", "grpc_stream"], index)
    join_order = _rotated(["kafka", "grpc"], index)
    interval_ms = args.heartbeat_interval_ms or groups.auto_interval_ms(args.members)
    latency: dict[str, Any] = {}
    throughput: dict[str, Any] = {}
    joined: dict[str, Any] = {}
    try:
        for name in commit_order:
            if name == "kafka":
                latency[name] = await commit_latency(bench, client, args.ops)
            else:
                latency[name] = await offsets.commit_latency(bench, args.ops, name == "grpc_stream")
        for name in commit_order:
            if name == "kafka":
                throughput[name] = await commit_throughput(bench, client, args.in_flight, args.duration, args.groups)
            else:
                throughput[name] = await offsets.commit_throughput(
                    bench, args.in_flight, args.duration, args.groups, name == "grpc_stream"
                )
        for name in join_order:
            if name == "kafka":
                joined[name] = await join_group(bench, client, args.members, interval_ms)
            else:
                grpc = await groups.join(bench, [args.members], interval_ms)
                joined[name] = grpc["sizes"][str(args.members)]
    finally:
        await client.close()
    return {
        "commit_order": ",".join(commit_order),
        "join_order": ",".join(join_order),
        "commit_latency": {name: latency[name] for name in ("kafka", "grpc_unary", "grpc_stream")},
        "commit_throughput": {name: throughput[name] for name in ("kafka", "grpc_unary", "grpc_stream")},
        "join": {name: joined[name] for name in ("kafka", "grpc")},
        "ratios": ratios(latency, throughput, joined),
    }


def ratios(latency: dict[str, Any], throughput: dict[str, Any], joined: dict[str, Any]) -> dict[str, Any]:
    """kafka / grpc_unary and kafka / grpc_stream of one run's figures (the join against the one gRPC join: its
    JoinGroup and SyncGroup are unary calls either way)."""
    out: dict[str, Any] = {}
    for grpc in ("grpc_unary", "grpc_stream"):
        k_lat, g_lat = latency["kafka"], latency[grpc]
        k_tp, g_tp = throughput["kafka"], throughput[grpc]
        out[f"kafka_to_{grpc}"] = {
            "commit_latency_p50": _ratio(k_lat["latency"]["p50_ms"], g_lat["latency"]["p50_ms"]),
            "commit_latency_p99": _ratio(k_lat["latency"]["p99_ms"], g_lat["latency"]["p99_ms"]),
            "commit_latency_ops_per_s": _ratio(k_lat["ops_per_s"], g_lat["ops_per_s"]),
            "commit_throughput_ops_per_s": _ratio(k_tp["ops_per_s"], g_tp["ops_per_s"]),
            "commit_throughput_p50": _ratio(k_tp["latency"]["p50_ms"], g_tp["latency"]["p50_ms"]),
            "commit_throughput_p99": _ratio(k_tp["latency"]["p99_ms"], g_tp["latency"]["p99_ms"]),
        }
    out["join_seconds_kafka_to_grpc"] = _ratio(joined["kafka"]["seconds"], joined["grpc"]["seconds"])
    return out


def targets(median: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets against the median ratios of the runs."""
    got = {
        "commit_p50_kafka_to_grpc_unary": median["ratios"]["kafka_to_grpc_unary"]["commit_latency_p50"],
        "join_seconds_kafka_to_grpc": median["ratios"]["join_seconds_kafka_to_grpc"],
    }
    return {
        name: {"median_ratio": got[name], "at_most": limit, "met": got[name] <= limit}
        for name, limit in TARGETS.items()
    }
