"""Synthetic chaos histories: builders that write events the way the harness and the workers do, and one clean run.

Times given to the builders are seconds since the run started; events carry monotonic times (T0 + t) as real
histories do, so a checker that forgets to subtract the run start shows it in its messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupcoord.chaos.history import HARNESS_FILE, History, Recorder

T0 = 5000.0
SESSION_TIMEOUT_MS = 3000
RUN_SETTINGS: dict[str, Any] = {
    "seed": 42,
    "nodes": 3,
    "partitions": 8,
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "rebalance_timeout_ms": 10_000,
    "ownership_tolerance_s": 0.5,
    "convergence_bound_s": 10.0,
    "pending_bound": 5,
    "argv": ["groupcoord", "chaos", "--seed", "42", "--faults", "6"],
}


class WorkerLog:
    """One worker file; remembers the member id and generation of the last assignment, as the worker does."""

    def __init__(self, builder: HistoryBuilder, name: str, incarnation: int, group: str, member: str) -> None:
        self.builder, self.name, self.incarnation, self.group = builder, name, incarnation, group
        self.stem = f"worker-{name}-{incarnation}"
        self.member, self.generation = member, -1
        self.events: list[dict[str, Any]] = builder.history.workers.setdefault(self.stem, [])

    def event(self, ev: str, t: float, **data: Any) -> dict[str, Any]:
        event = {"ev": ev, "t": T0 + t, "member": self.member, "generation": self.generation, **data}
        self.events.append(event)
        return event

    def assigned(self, t: float, generation: int, *partitions: str, member: str | None = None) -> None:
        self.member = member or self.member
        self.generation = generation
        self.event("assigned", t, partitions=list(partitions))

    def revoked(self, t: float, *partitions: str, reason: str = "rejoin", heartbeat: float | None = None) -> None:
        last_ok = T0 + (t - 0.1 if heartbeat is None else heartbeat)
        self.event("revoked", t, partitions=list(partitions), reason=reason, last_heartbeat_ok=last_ok)

    def commit(self, t: float, offsets: dict[str, int], sent: float | None = None) -> None:
        self.event("commit", t, sent=T0 + (t - 0.01 if sent is None else sent), offsets=offsets)

    def fetch(self, t: float, offsets: dict[str, int], sent: float | None = None) -> None:
        self.event("fetch", t, sent=T0 + (t - 0.01 if sent is None else sent), offsets=offsets)

    def closed(self, t: float, *partitions: str) -> None:
        """A SIGTERM: the worker releases what it holds, then leaves."""
        if partitions:
            self.revoked(t, *partitions, reason="closed")
        self.event("closed", t, reason="closed")

    def find(self, ev: str, **match: Any) -> dict[str, Any]:
        """The first event of this kind with these fields, for tests that move one."""
        return next(e for e in self.events if e["ev"] == ev and all(e.get(k) == v for k, v in match.items()))


@dataclass
class HistoryBuilder:
    """A History under construction, with the harness's event helpers."""

    history: History = field(default_factory=History)
    workers: dict[str, WorkerLog] = field(default_factory=dict)

    def event(self, ev: str, t: float, **data: Any) -> dict[str, Any]:
        event = {"ev": ev, "t": T0 + t, **data}
        self.history.harness.append(event)
        return event

    def coordinator_answer(self, t: float, group: str, node: int, epoch: int, sent: float) -> None:
        self.event("coordinator_answer", t, group=group, node=node, epoch=epoch, sent=T0 + sent)

    def start_run(self, groups: dict[str, dict[str, Any]], **settings: Any) -> None:
        self.event("run", 0.0, groups=groups, **{**RUN_SETTINGS, **settings})

    def worker(self, name: str, incarnation: int, group: str, t: float, member: str) -> WorkerLog:
        """A worker process: the harness starts it, its file begins with `start`."""
        log = WorkerLog(self, name, incarnation, group, member)
        self.workers[log.stem] = log
        self.event("worker_started", t, worker=name, incarnation=incarnation, group=group, pid=1000 + len(self.workers))
        log.events.append(
            {
                "ev": "start",
                "t": T0 + t + 0.05,
                "worker": name,
                "incarnation": incarnation,
                "group": group,
                "instance": "",
                "pid": 1000 + len(self.workers),
                "session_timeout_ms": SESSION_TIMEOUT_MS,
            }
        )
        return log

    def kill(self, worker: WorkerLog, t: float) -> None:
        self.event("worker_killed", t, worker=worker.name, incarnation=worker.incarnation, signal="SIGKILL")

    def fault(self, t: float, kind: str, **data: Any) -> None:
        self.event("fault", t, kind=kind, **data)

    def observe(
        self,
        t: float,
        group: str,
        state: str,
        generation: int,
        members: list[str],
        pending: int = 0,
        sent: float | None = None,
    ) -> dict[str, Any]:
        """An observation answered at `t`, asked at `sent` (just before `t` when not given)."""
        return self.event(
            "observe", t, group=group, node=1, state=state, generation=generation, members=members, pending=pending,
            sent=T0 + (t - 0.001 if sent is None else sent),
        )  # fmt: skip

    def remove(self, ev: str) -> None:
        self.history.harness = [e for e in self.history.harness if e["ev"] != ev]

    def write(self, run_dir: Path) -> Path:
        """The files a real run leaves, written with the real Recorder."""
        recorders = [(HARNESS_FILE, self.history.harness)]
        recorders += [(f"{stem}.jsonl", events) for stem, events in self.history.workers.items()]
        for name, events in recorders:
            recorder = Recorder(run_dir / name)
            for e in events:
                recorder.write(e["ev"], t=e["t"], **{k: v for k, v in e.items() if k not in ("ev", "t")})
            recorder.close()
        return run_dir


# What the clean run below must measure.
CLEAN_INTERVALS = 18
CLEAN_COMMITS = 11
CLEAN_FETCHES = 4
CLEAN_CONVERGENCE_S = 1.0
CLEAN_CONVERGENCE_BY_GROUP = {"g1": 0.2, "g2": 1.0}
CLEAN_ALLOWED_OVERLAP_S = 0.1


def clean_run() -> HistoryBuilder:
    """Two groups through handoffs, a SIGKILLed worker, a node kill and a network partition, all correct.

    g1 (orders-0..3): a, b, c; c-1 is SIGKILLed at 5.0 and restarted as c-2, which takes orders-3 over at 8.3.
    g2 (events-0..1): d, e; e is cut off from its coordinator at 6.0 (last heartbeat), the coordinator gives
    events-1 to d at 9.1 and e releases it at 9.2 for session_lost: inside its window (6.0 + 3.0 + 0.5), so the
    0.1 s overlap is allowed. e rejoins with a new member id and gets events-1 back at 11.8.
    Quiesce at 11.0; g1 is settled at 11.2, g2 at 12.0.
    """
    b = HistoryBuilder()
    b.start_run({"g1": {"workers": 3, "static": 0}, "g2": {"workers": 2, "static": 0}})
    a, bw, c1 = (b.worker(n, 1, "g1", 0.5, f"{n}1") for n in ("a", "b", "c"))
    d, e = (b.worker(n, 1, "g2", 0.5, f"{n}1") for n in ("d", "e"))

    a.assigned(1.0, 1, "orders-0", "orders-1")
    bw.assigned(1.0, 1, "orders-2", "orders-3")
    d.assigned(1.0, 1, "events-0")
    e.assigned(1.0, 1, "events-1")
    a.fetch(1.1, {})
    e.commit(2.0, {"events-1": 5})
    a.revoked(2.0, "orders-0", "orders-1")
    bw.revoked(2.0, "orders-2", "orders-3")
    a.assigned(2.2, 2, "orders-0", "orders-1")
    bw.assigned(2.2, 2, "orders-2")
    c1.assigned(2.2, 2, "orders-3")
    b.observe(3.0, "g1", "Stable", 2, ["a1", "b1", "c1"])
    b.observe(3.0, "g2", "Stable", 1, ["d1", "e1"])
    a.commit(3.0, {"orders-0": 10, "orders-1": 4})
    c1.commit(3.0, {"orders-3": 10})
    bw.commit(3.5, {"orders-2": 7})
    a.commit(4.0, {"orders-0": 20})
    c1.commit(4.0, {"orders-3": 20})

    b.fault(5.0, "kill_worker", worker="c", group="g1", phase="Stable")
    b.kill(c1, 5.0)
    b.fault(5.1, "restart_worker", worker="c", group="g1", phase="Stable")
    c2 = b.worker("c", 2, "g1", 5.1, "c2")
    a.commit(6.0, {"orders-0": 30})

    b.fault(6.0, "partition_node", node=2, group="g2", phase="Stable")
    a.revoked(8.1, "orders-0", "orders-1")
    bw.revoked(8.1, "orders-2")
    b.observe(8.2, "g1", "PreparingRebalance", 2, ["a1", "b1", "c2"], pending=1)
    a.assigned(8.3, 3, "orders-0", "orders-1")
    bw.assigned(8.3, 3, "orders-2")
    c2.assigned(8.3, 3, "orders-3")
    c2.fetch(8.4, {"orders-0": 30, "orders-1": 4, "orders-2": 7, "orders-3": 20}, sent=8.35)
    c2.commit(8.6, {"orders-3": 21})

    d.revoked(9.0, "events-0")
    d.assigned(9.1, 2, "events-0", "events-1")
    b.observe(9.15, "g2", "Stable", 2, ["d1"])
    e.revoked(9.2, "events-1", reason="session_lost", heartbeat=6.0)
    d.fetch(9.2, {"events-1": 5}, sent=9.15)
    d.commit(9.5, {"events-0": 3, "events-1": 8}, sent=9.4)
    # g1's coordinator: node 1 in epoch 3, killed at 9.0; node 2 takes over in epoch 4 (its first answer was asked
    # while node 1's last was still under way: concurrent, so no conflict); node 1 leads again in epoch 6.
    for node, epoch, sent, answered in ((1, 3, 1.0, 1.01), (1, 3, 5.0, 5.01), (1, 3, 8.9, 9.1), (2, 4, 9.0, 9.05),
                                        (2, 4, 9.5, 9.52), (1, 6, 12.0, 12.01), (2, 0, 12.1, 12.11)):  # fmt: skip
        b.coordinator_answer(answered, "g1", node, epoch, sent)
    b.fault(9.0, "kill_node", node=1, group="g1", phase="Stable")
    b.event("node_exit", 9.05, node=1, pid=77, returncode=-9, expected=True)
    b.fault(10.0, "restart_node", node=1, group="g1", phase="Stable")
    b.fault(10.0, "heal_partition", node=2, group="g2", phase="Stable")
    b.event("quiesce", 11.0)

    d.revoked(11.2, "events-0", "events-1")
    b.observe(11.2, "g1", "Stable", 3, ["a1", "b1", "c2"])
    b.observe(11.3, "g2", "PreparingRebalance", 2, ["d1", "e1b"], pending=2)
    d.assigned(11.8, 3, "events-0")
    e.assigned(11.8, 3, "events-1", member="e1b")
    e.fetch(11.9, {"events-0": 3, "events-1": 8}, sent=11.85)
    b.observe(12.0, "g2", "Stable", 3, ["d1", "e1b"])
    b.event("converged", 12.1, groups={"g1": 3, "g2": 3}, seconds=1.1)
    e.commit(12.5, {"events-1": 9})
    a.commit(12.5, {"orders-0": 31, "orders-1": 5})

    a.closed(13.1, "orders-0", "orders-1")
    bw.closed(13.1, "orders-2")
    c2.closed(13.1, "orders-3")
    d.closed(13.1, "events-0")
    e.closed(13.1, "events-1")
    final = {"orders-0": 31, "orders-1": 5, "orders-2": 7, "orders-3": 21}
    b.event("final", 13.5, offsets={"g1": final, "g2": {"events-0": 3, "events-1": 9}})
    return b
