"""Who held which partition when: worker processes' lifetimes and the ownership intervals their files record."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from groupcoord.chaos.history import WORKER_PREFIX, History

EXIT_EVENTS = frozenset({"closed", "fatal"})
KILLED, EXITED, RUNNING = "killed", "exited", "running"


@dataclass
class WorkerFile:
    """One worker process (one file): its events in time order and when the process stopped."""

    stem: str
    worker: str
    incarnation: str
    group: str
    session_timeout_s: float
    events: list[dict[str, Any]]
    killed_at: float | None  # the harness's `worker_killed` (SIGKILL)
    exited_at: float | None  # the worker's own first `closed` / `fatal`
    reaped_at: float | None  # the harness's `worker_exit`: it saw the process gone, whatever the cause

    def alive_at(self, t: float) -> bool:
        """Between its first event and its kill or exit the process can own partitions and be a member."""
        if not self.events or self.events[0]["t"] > t:
            return False
        return all(end is None or end > t for end in (self.killed_at, self.exited_at, self.reaped_at))

    def member_at(self, t: float) -> str | None:
        """The member id the worker believed it had at `t`: the one of its last assignment."""
        assigned = [e for e in self.events if e["ev"] == "assigned" and e["t"] <= t]
        return assigned[-1].get("member", "") if assigned else None

    def end_of_life(self, harness_end: float) -> tuple[float, str]:
        """Where ownership the file never released ends: a SIGKILL writes nothing, so the harness says when."""
        if self.killed_at is not None:
            return self.killed_at, KILLED
        if self.exited_at is not None:
            return self.events[-1]["t"], EXITED
        if self.reaped_at is not None:
            return max(self.reaped_at, self.events[-1]["t"] if self.events else self.reaped_at), EXITED
        return max(harness_end, self.events[-1]["t"] if self.events else harness_end), RUNNING


@dataclass
class Interval:
    """One partition held by one worker file from an `assigned` to its release (or the end of the process)."""

    stem: str
    group: str
    partition: str
    member: str
    generation: int
    start: float
    session_timeout_s: float
    end: float = 0.0
    end_reason: str = ""  # a `revoked` reason, or KILLED / EXITED / RUNNING
    last_heartbeat_ok: float | None = None


def _key(worker: Any, incarnation: Any) -> tuple[str, str]:
    """Harness and worker may spell an incarnation as int or str; they must still match."""
    return str(worker), str(incarnation)


def load_workers(history: History) -> list[WorkerFile]:
    """Joins each worker file with what the harness knows of its process (group, kill)."""
    run = history.run()
    killed: dict[tuple[str, str], float] = {}
    exited: dict[tuple[str, str], float] = {}
    started: dict[tuple[str, str], dict[str, Any]] = {}
    for e in history.harness:
        key = _key(e.get("worker"), e.get("incarnation"))
        if e["ev"] == "worker_killed":
            killed[key] = min(e["t"], killed.get(key, e["t"]))
        elif e["ev"] == "worker_exit":
            exited[key] = min(e["t"], exited.get(key, e["t"]))
        elif e["ev"] == "worker_started":
            started[key] = e
    files = []
    for stem, raw in sorted(history.workers.items()):
        events = sorted(raw, key=lambda e: e["t"])
        start = next((e for e in events if e["ev"] == "start"), None)
        if start is not None:
            key = _key(start.get("worker"), start.get("incarnation"))
        else:
            name, _, incarnation = stem.removeprefix(WORKER_PREFIX).rpartition("-")
            key = _key(name, incarnation)
        known = start or started.get(key, {})
        timeout_ms = known.get("session_timeout_ms", run.get("session_timeout_ms", 0))
        exits = [e["t"] for e in events if e["ev"] in EXIT_EVENTS]
        files.append(
            WorkerFile(
                stem=stem,
                worker=key[0],
                incarnation=key[1],
                group=known.get("group", ""),
                session_timeout_s=timeout_ms / 1000,
                events=events,
                killed_at=killed.get(key),
                exited_at=min(exits, default=None),
                reaped_at=exited.get(key),
            )
        )
    return files


def build_intervals(workers: list[WorkerFile], harness_end: float) -> list[Interval]:
    """`assigned` opens, the next `revoked` listing the partition closes: under the eager protocol each lists the
    whole assignment, under the cooperative one only what changed, and a partition kept through a rebalance stays
    in one interval."""
    intervals = []
    for w in workers:
        held: dict[str, Interval] = {}
        for e in w.events:
            if e["ev"] == "assigned":
                for p in e.get("partitions", []):
                    member, generation = e.get("member", ""), e.get("generation", -1)
                    held.setdefault(p, Interval(w.stem, w.group, p, member, generation, e["t"], w.session_timeout_s))
            elif e["ev"] == "revoked":
                for p in e.get("partitions", []):
                    interval = held.pop(p, None)
                    if interval is not None:
                        interval.end, interval.end_reason = e["t"], e.get("reason", "")
                        interval.last_heartbeat_ok = e.get("last_heartbeat_ok")
                        intervals.append(interval)
        end, reason = w.end_of_life(harness_end)
        for interval in held.values():
            interval.end, interval.end_reason = max(end, interval.start), reason
            intervals.append(interval)
    return intervals


def overlapping_pairs(intervals: list[Interval]) -> Iterator[tuple[Interval, Interval]]:
    """Pairs of different files holding one partition at once, earlier start first; a sweep, not all pairs."""
    by_partition: dict[tuple[str, str], list[Interval]] = defaultdict(list)
    for interval in intervals:
        by_partition[interval.group, interval.partition].append(interval)
    for key in sorted(by_partition):
        active: list[Interval] = []
        for interval in sorted(by_partition[key], key=lambda i: (i.start, i.end)):
            active = [a for a in active if a.end > interval.start]
            for a in active:
                if a.stem != interval.stem and a.start < interval.end:
                    yield a, interval
            active.append(interval)
