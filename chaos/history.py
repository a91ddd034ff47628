"""The history files a chaos run writes, and reading them back.

A run directory holds `harness.jsonl` (the harness: run settings, faults, node and worker lifecycle,
coordinator observations, convergence, final state) and one `worker-<name>-<incarnation>.jsonl` per worker
process. Every line is one JSON object with `ev` (the kind) and `t`, a CLOCK_MONOTONIC time in seconds,
comparable across the processes of one machine. Each line is written with a single `write` and flushed, so a
process killed with SIGKILL leaves whole lines only.

Worker events (all but `start` carry `member` and `generation`):
* `start`: worker, incarnation, group, instance ("" = dynamic), pid, session_timeout_ms.
* `assigned`: partitions (["topic-p", ...]) acquired at `t` (a cooperative member lists only those it gained).
* `revoked`: partitions released at `t` (a cooperative member lists only those it lost); reason (rejoin |
  session_lost | lost | fatal | closed); last_heartbeat_ok (send time of the last heartbeat the coordinator
  accepted; a SyncGroup counts as one when it answers).
* `fetch`: offsets ({"topic-p": offset}) read by OffsetFetch sent at `sent`, answered at `t`.
* `commit`: offsets acknowledged (error NONE) by an OffsetCommit sent at `sent`, answered at `t`.
* `commit_rejected`: codes ({"topic-p": error code}) of partitions the coordinator did not accept.
* `fatal`: error. `closed`: the worker left cleanly.

Harness events:
* `run`: seed, nodes, partitions, groups ({group: {"workers": n, "static": n, "topics": {...}}}),
  session_timeout_ms, rebalance_timeout_ms, ownership_tolerance_s, convergence_bound_s, pending_bound, argv.
* `node_started` / `node_stopped` (node, pid, signal: SIGKILL or SIGTERM) / `node_signal` (SIGSTOP, SIGCONT) /
  `node_exit` (node, pid, returncode, expected: false when nobody stopped it; then also disk: the data
  directory's free_bytes, size_bytes and files {path: bytes allocated}, to read the exit against).
* `worker_started` (worker, incarnation, group, pid) / `worker_killed` (worker, incarnation, signal) /
  `worker_exit` (worker, incarnation, returncode, expected: false when nobody stopped it).
* `fault`: kind (kill_node | pause_node | resume_node | restart_node | partition_node | heal_partition |
  restart_cluster | kill_worker | restart_worker), node / worker, group, phase (the group state seen just before).
* `observe`: group, node (the coordinator asked), state, generation, members ([member ids]), pending (count), sent
  (when it was asked; `t` is when the answer came back).
* `coordinator_answer`: group, node, epoch (the Raft term its coordinator serves in), sent; `t` is when the
  node's answer as the group's coordinator came back (every node is asked at once, one group at a time).
* `recovered`: kind, seconds until every node served and agreed on a leader for every partition after it.
* `quiesce`: the last fault has ended; liveness is measured from here.
* `converged`: fault (the one it follows, or "start"), seconds (waited), since_fault_s (since it struck), groups
  ({group: generation}) when every group was Stable with exactly its live members; `not_converged`: fault,
  groups ({group: last observation}), raft ({node: every partition's leader, term, commit index, voters and, where it
  leads, match indexes, as that node sees them}), stacks_in_logs (the nodes told to print their threads' stacks into
  their logs).
* `final`: offsets ({group: {"topic-p": offset}}) read after every worker stopped.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HARNESS_FILE = "harness.jsonl"
WORKER_PREFIX = "worker-"


class Recorder:
    """Appends events to one history file; safe to share between threads of one process."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, ev: str, t: float | None = None, **data: Any) -> float:
        now = time.monotonic() if t is None else t
        line = json.dumps({"ev": ev, "t": now, **data}, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())
        return now

    def close(self) -> None:
        os.close(self._fd)


@dataclass
class History:
    harness: list[dict[str, Any]] = field(default_factory=list)
    workers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # file stem -> events
    bad_lines: list[str] = field(default_factory=list)  # "file:line: why"

    def run(self) -> dict[str, Any]:
        return next((e for e in self.harness if e["ev"] == "run"), {})


def worker_file(run_dir: Path, worker: str, incarnation: int) -> Path:
    return run_dir / f"{WORKER_PREFIX}{worker}-{incarnation}.jsonl"


def _read(path: Path, bad: list[str]) -> list[dict[str, Any]]:
    events = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append(f"{path.name}:{number}: {exc.msg}")
            continue
        if not isinstance(event, dict) or "ev" not in event or not isinstance(event.get("t"), int | float):
            bad.append(f"{path.name}:{number}: not an event")
            continue
        events.append(event)
    return events


def read_history(run_dir: Path) -> History:
    history = History()
    harness = run_dir / HARNESS_FILE
    if harness.exists():
        history.harness = _read(harness, history.bad_lines)
    for path in sorted(run_dir.glob(f"{WORKER_PREFIX}*.jsonl")):
        history.workers[path.stem] = _read(path, history.bad_lines)
    return history
