"""What every check of a chaos run reads: the history's indexes (workers, ownership intervals, commits, observations),
built once, and the helpers that word a violation so that a person can find it in the history files.
"""

from __future__ import annotations

from typing import Any

from groupcoord.chaos.history import History
from groupcoord.chaos.offsets import Commit, index_commits
from groupcoord.chaos.ownership import Interval, build_intervals, load_workers
from groupcoord.chaos.verdict import Violation

DEFAULT_TOLERANCE_S = 0.5


class CheckContext:
    """Shared indexes (workers, intervals, commits, observations) and the run's bounds; the rules are subclasses'."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.run = history.run()
        harness_times = [e["t"] for e in history.harness]
        worker_times = [e["t"] for events in history.workers.values() for e in events[:1] + events[-1:]]
        self.t0: float = self.run.get("t", min(harness_times + worker_times, default=0.0))
        self.end: float = max(harness_times, default=max(worker_times, default=self.t0))
        self.tolerance: float = self.run.get("ownership_tolerance_s", DEFAULT_TOLERANCE_S)
        self.workers = load_workers(history)
        self.intervals = build_intervals(self.workers, self.end)
        self.commits = index_commits(self.workers, history.harness)
        self.observes = sorted((e for e in history.harness if e["ev"] == "observe"), key=lambda e: e["t"])
        observed = {o.get("group", "") for o in self.observes}
        self.groups = sorted(set(self.run.get("groups", {})) | {w.group for w in self.workers} | observed)
        self.violations: list[Violation] = []
        self.stats: dict[str, Any] = {}

    def at(self, t: float | None) -> str:
        """Run-relative seconds: monotonic times mean nothing to a reader."""
        return "?" if t is None else f"{t - self.t0:.3f}s"

    def flag(self, kind: str, group: str, t: float, message: str) -> None:
        """Checks keep going after a violation: one run should show every broken invariant at once."""
        self.violations.append(Violation(kind, group, message, t))

    def deadline(self, last_heartbeat_ok: float | None, session_timeout_s: float) -> float | None:
        """The latest a member cut off from its coordinator may still believe it owns its partitions."""
        return None if last_heartbeat_ok is None else last_heartbeat_ok + session_timeout_s + self.tolerance

    @staticmethod
    def holder(interval: Interval) -> str:
        """Names an owner so it can be found in its worker file."""
        return f"member {interval.member} of {interval.stem} (generation {interval.generation})"

    @staticmethod
    def committer(commit: Commit) -> str:
        """Names a committer so it can be found in its worker file."""
        return f"member {commit.member} of {commit.stem}"
