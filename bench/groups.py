"""`join`, `rebalance` and `failover`: how long groups take to become Stable, and to carry on after a leave or
a kill -9 of their coordinator, with members that follow the real protocol (bench/members.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from groupcoord.bench.cluster import BenchCluster, CpuMeter
from groupcoord.bench.members import (
    Member,
    Router,
    describe,
    leave,
    run_member,
    subscription,
    wait_stable,
)
from groupcoord.bench.stats import summary

FORM_TIMEOUT_S = 120.0


def auto_interval_ms(members: int) -> int:
    """Heartbeat interval of a scenario's members: 200 ms for small groups, longer for big ones so that the
    client sends at most ~2,000 heartbeats/s (one Python process; it shares the 2 cores with the nodes)."""
    return max(200, members // 2)


class Fleet:
    """The members of some groups, each a task of `run_member`, stopped together."""

    def __init__(self, router: Router, interval_ms: int) -> None:
        self.router = router
        self.interval_s = interval_ms / 1000
        self.stop = asyncio.Event()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.groups: dict[str, list[Member]] = {}

    def start(self, group_id: str, count: int, static: bool = False, session_timeout_ms: int = 30_000) -> list[Member]:
        members = [
            Member(group_id, f"{group_id}-i{i}" if static else "", session_timeout_ms=session_timeout_ms)
            for i in range(count)
        ]
        metadata = subscription(2 * count)
        self.groups[group_id] = members
        for m in members:
            self.tasks[id(m)] = asyncio.create_task(run_member(self.router, m, metadata, lambda: self.interval_s,
                                                               self.stop))  # fmt: skip
        return members

    async def drop(self, m: Member) -> None:
        """Ends one member's task without a word to the coordinator (it leaves or dies on its own)."""
        task = self.tasks.pop(id(m))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def close(self, leave_groups: bool = True) -> None:
        self.stop.set()
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        if leave_groups:
            await asyncio.gather(*(leave(self.router, ms) for ms in self.groups.values()), return_exceptions=True)


T = TypeVar("T")


async def _with_fleet(cluster: BenchCluster, interval_ms: int, body: Callable[[Fleet], Awaitable[T]]) -> T:
    router = cluster.router()
    fleet = Fleet(router, interval_ms)
    try:
        return await body(fleet)
    finally:
        await fleet.close()
        await router.close()


def _group_result(group: Any, members: list[Member], describe_ms: float) -> dict[str, Any]:
    return {
        "state": group.group_state,
        "generation_id": group.generation_id,
        "members_described": len(group.members),
        "members_with_assignment": sum(bool(m.assignment) for m in members),
        "describe_ms": round(describe_ms, 3),
    }


async def _stable_described(
    fleet: Fleet, members: list[Member], start: float, above_generation: int = 0
) -> dict[str, Any]:
    """Waits until the members are stable and DescribeGroups agrees (Stable, same generation, every member)."""
    while True:
        done = await wait_stable(members, FORM_TIMEOUT_S, above_generation, tasks=fleet.tasks.values())
        group, describe_ms = await describe(fleet.router, members[0].group_id)
        if group.group_state == "Stable" and group.generation_id == members[0].generation_id:
            return {"seconds": round(done - start, 4), **_group_result(group, members, describe_ms)}
        await asyncio.sleep(0.005)


async def join(cluster: BenchCluster, sizes: list[int], interval_ms: int | None) -> dict[str, Any]:
    """N members join one fresh group at once → seconds until all are Stable with an assignment."""
    results: dict[str, Any] = {}
    for size in sizes:
        interval = interval_ms or auto_interval_ms(size)

        async def body(fleet: Fleet, size: int = size, interval: int = interval) -> dict[str, Any]:
            cpu, start = CpuMeter(cluster), time.perf_counter()
            members = fleet.start(f"join-{uuid.uuid4().hex[:8]}", size)
            result = await _stable_described(fleet, members, start)
            return {"members": size, "heartbeat_interval_ms": interval, **result, **cpu.result()}

        results[str(size)] = await _with_fleet(cluster, interval, body)
    return {"sizes": results}


async def rebalance(cluster: BenchCluster, sizes: list[int], interval_ms: int | None) -> dict[str, Any]:
    """A Stable group of N; one (non-leader) member sends LeaveGroup → seconds until the rest are Stable again."""
    results: dict[str, Any] = {}
    for size in sizes:
        interval = interval_ms or auto_interval_ms(size)

        async def body(fleet: Fleet, size: int = size, interval: int = interval) -> dict[str, Any]:
            members = fleet.start(f"rebalance-{uuid.uuid4().hex[:8]}", size)
            await _stable_described(fleet, members, time.perf_counter())
            await asyncio.sleep(1.0)
            generation = members[0].generation_id
            leaving = members[-1]
            await fleet.drop(leaving)
            rest = members[:-1]
            cpu, start = CpuMeter(cluster), time.perf_counter()
            await leave(fleet.router, [leaving])
            result = await _stable_described(fleet, rest, start, above_generation=generation)
            result.update(cpu.result())
            return {"members": size, "heartbeat_interval_ms": interval, "generation_before": generation, **result}

        results[str(size)] = await _with_fleet(cluster, interval, body)
    return {"sizes": results}


async def failover(cluster: BenchCluster, groups: int, per_group: int, interval_ms: int) -> dict[str, Any]:
    """G Stable groups (half static, half dynamic); kill -9 of the node coordinating most of them → per group,
    seconds until each of its members has had a heartbeat accepted at the new coordinator, and generation bumps."""

    async def body(fleet: Fleet) -> dict[str, Any]:
        for g in range(groups):
            static = g % 2 == 0
            fleet.start(f"failover-{'s' if static else 'd'}{g}-{uuid.uuid4().hex[:6]}", per_group, static=static)
        for members in fleet.groups.values():
            await wait_stable(members, FORM_TIMEOUT_S, tasks=fleet.tasks.values())
        await asyncio.sleep(2 * interval_ms / 1000)
        before = {g: ms[0].generation_id for g, ms in fleet.groups.items()}
        by_address = {a: i for i, a in cluster.addresses.items()}
        coordinators = {g: by_address[await fleet.router.coordinator(g)] for g in fleet.groups}
        victim, _ = Counter(coordinators.values()).most_common(1)[0]
        for ms in fleet.groups.values():
            for m in ms:
                m.record = True
        cluster.kill(victim)
        cpu, killed = CpuMeter(cluster), time.perf_counter()
        moved = [g for g, node in coordinators.items() if node == victim]
        times = await _first_heartbeats(fleet, moved, killed)
        used = cpu.result()
        for members in fleet.groups.values():
            await wait_stable(members, FORM_TIMEOUT_S, tasks=fleet.tasks.values())
        described = [await describe(fleet.router, g) for g in fleet.groups]
        bumped = [d.group_id for d, _ in described if d.generation_id != before[d.group_id]]
        return {
            "groups": groups,
            "members_per_group": per_group,
            "heartbeat_interval_ms": interval_ms,
            "killed_node": victim,
            "groups_moved": len(moved),
            "groups_moved_static": sum("-s" in g for g in moved),
            "all_heartbeating_s": summary(t * 1000 for t in times.values()),
            "generation_bumps": len(bumped),
            "generation_bumps_moved": len(set(bumped) & set(moved)),
            "stable_at_end": sum(d.group_state == "Stable" and len(d.members) == per_group for d, _ in described),
            **used,
        }

    return await _with_fleet(cluster, interval_ms, body)


async def _first_heartbeats(fleet: Fleet, moved: list[str], killed: float, timeout_s: float = 30.0) -> dict[str, Any]:
    """Per moved group, seconds from the kill until every member has had a heartbeat accepted after it."""
    deadline = time.monotonic() + timeout_s
    times: dict[str, float] = {}
    while len(times) < len(moved) and time.monotonic() < deadline:
        for g in moved:
            if g in times:
                continue
            firsts = [next((t for t, _ in m.latencies if t > killed), None) for m in fleet.groups[g]]
            seen = [t for t in firsts if t is not None]
            if len(seen) == len(firsts):  # every member has had one
                times[g] = max(seen) - killed
        await asyncio.sleep(0.01)
    if len(times) < len(moved):
        missing = len(moved) - len(times)
        raise RuntimeError(f"{missing} groups had no heartbeat accepted {timeout_s:.0f} s after the kill")
    return times
