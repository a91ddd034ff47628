"""`scale-out`: a Stable group of N SDK members gains one, eager against cooperative (KIP-429) rebalancing.

Both protocols run the same sticky target (`sticky` eager, `cooperative-sticky` cooperative), so the difference is
the protocol alone. Ownership is followed through the members' own callbacks, as an application sees it: a
partition is unowned from the `on_revoked` that gives it up to the `on_assigned` that hands it out again. From the
newcomer's start, per protocol: how many partitions were unowned at some moment, the most at once, the partition
seconds spent unowned, and the seconds until the group is Stable again with every partition owned. The members are
real `GroupMember`s of one process sharing one `Connections` (channels and batch streams), as an application with
many consumers would run them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from groupcoord.bench.cluster import BenchCluster, CpuMeter
from groupcoord.client.discovery import Connections
from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment, TopicPartition

TOPIC = "scale-out"
FORM_TIMEOUT_S = 120.0
SESSION_TIMEOUT_MS = 30_000
PROTOCOLS = {"eager": "sticky", "cooperative": "cooperative-sticky"}


class Ownership:
    """Who owns each partition as the callbacks say; gaps are counted from `since` on."""

    def __init__(self, partitions: int) -> None:
        self.owner: dict[TopicPartition, str | None] = dict.fromkeys(((TOPIC, p) for p in range(partitions)), None)
        self.unowned_from: dict[TopicPartition, float] = {}
        self.since = float("inf")
        self.gaps: list[tuple[TopicPartition, float]] = []  # (partition, unowned seconds) after `since`
        self.peak = 0
        self.doubly_owned = 0  # assigned while another member still held it: must stay 0

    def revoked(self, member: str, assignment: Assignment) -> None:
        now = time.monotonic()
        for tp in assignment.partitions:
            if self.owner.get(tp) == member:
                self.owner[tp] = None
                self.unowned_from[tp] = now
        if now >= self.since:
            self.peak = max(self.peak, sum(1 for o in self.owner.values() if o is None))

    def assigned(self, member: str, assignment: Assignment) -> None:
        now = time.monotonic()
        for tp in assignment.partitions:
            if self.owner.get(tp) not in (None, member):
                self.doubly_owned += 1
            self.owner[tp] = member
            start = self.unowned_from.pop(tp, None)
            if start is not None and now > self.since:
                self.gaps.append((tp, now - max(start, self.since)))

    def complete(self) -> bool:
        return all(o is not None for o in self.owner.values())


def _member(connections: Connections, group: str, name: str, protocol: str, partitions: int, interval_ms: int,
            ownership: Ownership) -> GroupMember:  # fmt: skip
    member: GroupMember

    def on_revoked(assignment: Assignment) -> None:
        ownership.revoked(name, assignment)

    def on_assigned(assignment: Assignment) -> None:
        ownership.assigned(name, assignment)

    member = GroupMember(
        connections.bootstrap, group, {TOPIC: partitions}, client_id=name, assignor=PROTOCOLS[protocol],
        session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=interval_ms, on_assigned=on_assigned, on_revoked=on_revoked, connections=connections,
    )  # fmt: skip
    return member


async def _settled(members: list[GroupMember], ownership: Ownership, interval_s: float) -> float:
    """Until every member is Stable in one generation, every partition owned, and no round follows within two
    heartbeat intervals; returns when that state was first reached."""
    deadline = time.monotonic() + FORM_TIMEOUT_S
    while True:
        while not (
            all(m._stable.is_set() for m in members)
            and len({m.generation_id for m in members}) == 1
            and ownership.complete()
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(members)} members did not settle within {FORM_TIMEOUT_S:g} s")
            await asyncio.sleep(0.01)
        reached, generation = time.monotonic(), members[0].generation_id
        await asyncio.sleep(2 * interval_s)
        if all(m._stable.is_set() and m.generation_id == generation for m in members):
            return reached


async def _one(cluster: BenchCluster, size: int, protocol: str, partitions: int, interval_ms: int) -> dict[str, Any]:
    connections = Connections(list(cluster.addresses.values()), security=cluster.security)
    group = f"scale-out-{protocol}-{uuid.uuid4().hex[:8]}"
    ownership = Ownership(partitions)
    members = [_member(connections, group, f"m{i}", protocol, partitions, interval_ms, ownership) for i in range(size)]
    try:
        # Started over one heartbeat interval, so that their heartbeats are spread as a fleet's are, not in step.
        for m in members:
            await m.start()
            await asyncio.sleep(interval_ms / 1000 / size)
        await _settled(members, ownership, interval_ms / 1000)
        before = dict(ownership.owner)
        newcomer = _member(connections, group, "newcomer", protocol, partitions, interval_ms, ownership)
        members.append(newcomer)
        cpu = CpuMeter(cluster)
        ownership.since = start = time.monotonic()
        await newcomer.start()
        reached = await _settled(members, ownership, interval_ms / 1000)
        moved = sum(1 for tp, owner in ownership.owner.items() if owner != before[tp])
        unowned = {tp for tp, _ in ownership.gaps}
        return {
            "protocol": protocol,
            "assignor": PROTOCOLS[protocol],
            "members_before": size,
            "partitions": partitions,
            "heartbeat_interval_ms": interval_ms,
            "partitions_unowned": len(unowned),
            "partitions_moved": moved,
            "unowned_at_once_max": ownership.peak,
            "unowned_partition_s": round(sum(s for _, s in ownership.gaps), 3),
            "stable_after_s": round(reached - start, 3),
            "doubly_owned": ownership.doubly_owned,
            **cpu.result(),
        }
    finally:
        await asyncio.gather(*(m.close() for m in members), return_exceptions=True)
        await connections.close()


async def scale_out(cluster: BenchCluster, sizes: list[int], per_member: int, interval_ms: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size in sizes:
        partitions = per_member * size
        by_protocol = {p: await _one(cluster, size, p, partitions, interval_ms) for p in PROTOCOLS}
        eager, coop = by_protocol["eager"], by_protocol["cooperative"]
        unowned = coop["partitions_unowned"] / max(eager["partitions_unowned"], 1)
        stable = coop["stable_after_s"] / max(eager["stable_after_s"], 1e-9)
        results[f"{size}->{size + 1}"] = {
            **by_protocol,
            "ratio_unowned_cooperative_eager": round(unowned, 3),
            "ratio_stable_after_cooperative_eager": round(stable, 3),
        }
    return {"sizes": results}
