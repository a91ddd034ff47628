"""The run's worker fleet: which worker belongs to which group, its current process and incarnation.

Each (re)start is a new incarnation with its own history file, so a member id can be traced to exactly one
process. Exits the run did not cause are recorded (`worker_exit`, expected=false) for the checker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.chaos.history import Recorder, worker_file

STOP_WAIT_S = 15.0


@dataclass
class WorkerPlan:
    name: str
    group: str
    topics: dict[str, int]
    static: bool
    churner: bool  # restarted on purpose all along the run, so rebalances keep happening
    assignor: str = "range"
    assign_delay_ms: int = 0


@dataclass
class _Running:
    plan: WorkerPlan
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None
    expect_exit: bool = False
    reported: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)


class Fleet:
    def __init__(self, plans: list[WorkerPlan], run_dir: Path, history: Recorder, worker_args: list[str]) -> None:
        self.run_dir, self.history, self.worker_args = run_dir, history, worker_args
        self.bootstrap = ""
        self._workers = {plan.name: _Running(plan) for plan in plans}
        self._lock = threading.Lock()
        self._every: list[subprocess.Popen[bytes]] = []  # every process started, so none can outlive the run

    @property
    def plans(self) -> list[WorkerPlan]:
        return [w.plan for w in self._workers.values()]

    def start(self, name: str) -> None:
        """Starts the worker unless its process is running: a fault and the churn thread may both bring the
        same worker back, and a second process would be a member nobody tracks."""
        worker = self._workers[name]
        with worker.lock:
            if worker.proc is None or worker.proc.poll() is not None:
                self._start(worker)

    def _start(self, worker: _Running) -> None:
        plan = worker.plan
        worker.incarnation += 1
        path = worker_file(self.run_dir, plan.name, worker.incarnation)
        cmd = [
            sys.executable, "-m", "groupcoord.chaos.worker", "--history", str(path), "--worker", plan.name,
            f"--incarnation={worker.incarnation}", "--bootstrap", self.bootstrap, "--group", plan.group,
            "--assignor", plan.assignor, f"--assign-delay-ms={plan.assign_delay_ms}", *self.worker_args,
        ]  # fmt: skip
        for topic, count in plan.topics.items():
            cmd += ["--topic", f"{topic}:{count}"]
        if plan.static:
            cmd += ["--instance", plan.name]
        log = self.run_dir / "workers" / f"{plan.name}-{worker.incarnation}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        with self._lock:
            worker.proc, worker.expect_exit, worker.reported = proc, False, False
            self._every.append(proc)
        self.history.write("worker_started", worker=plan.name, incarnation=worker.incarnation, group=plan.group,
                           pid=proc.pid)  # fmt: skip

    def stop(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM: the worker closes (a dynamic one leaves its group); SIGKILL: it just vanishes."""
        worker = self._workers[name]
        with worker.lock:
            self._stop(worker, sig)

    def _stop(self, worker: _Running, sig: signal.Signals) -> None:
        proc = worker.proc
        if proc is None or proc.poll() is not None:
            return
        with self._lock:
            worker.expect_exit = True
        if sig == signal.SIGKILL:
            self.history.write("worker_killed", worker=worker.plan.name, incarnation=worker.incarnation,
                               signal=sig.name)  # fmt: skip
        os.kill(proc.pid, sig)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.history.write("worker_killed", worker=worker.plan.name, incarnation=worker.incarnation,
                               signal="SIGKILL", note=f"did not stop within {STOP_WAIT_S} s of {sig.name}")  # fmt: skip
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self.check_exits()

    def restart(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        worker = self._workers[name]
        with worker.lock:
            self._stop(worker, sig)
            self._start(worker)

    def stop_all(self, sig: signal.Signals = signal.SIGTERM) -> None:
        for name in self._workers:
            self.stop(name, sig)
        for proc in self._every:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def check_exits(self) -> None:
        with self._lock:
            for worker in self._workers.values():
                proc = worker.proc
                if proc is None or worker.reported or proc.poll() is None:
                    continue
                worker.reported = True
                self.history.write("worker_exit", worker=worker.plan.name, incarnation=worker.incarnation,
                                   returncode=proc.returncode, expected=worker.expect_exit)  # fmt: skip

    def live_members(self, group: str) -> dict[str, tuple[str, int] | None]:
        """Per live worker of `group`: (member id, generation) of the assignment it holds now, or None."""
        held: dict[str, tuple[str, int] | None] = {}
        for worker in self._workers.values():
            if worker.plan.group != group or worker.proc is None or worker.proc.poll() is not None:
                continue
            held[worker.plan.name] = _holding(worker_file(self.run_dir, worker.plan.name, worker.incarnation))
        return held


def _holding(path: Path) -> tuple[str, int] | None:
    """The worker's current assignment from the tail of its history."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event["ev"] in ("revoked", "fatal", "closed"):
            return None
        if event["ev"] == "assigned":
            return event["member"], event["generation"]
    return None
