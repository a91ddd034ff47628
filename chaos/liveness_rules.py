"""The liveness and health invariants of a chaos run (the checker's rules 7-11, docs/RELIABILITY.md, and one
coordinator per group): groups converge after the faults, nodes and workers stop only when told, join queues stay
bounded, and a history that cannot be read or exercised nothing proves nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from groupcoord.chaos.check_context import CheckContext
from groupcoord.chaos.coordinators import conflicts
from groupcoord.chaos.verdict import (
    HISTORY_CORRUPT,
    INCOMPLETE_RUN,
    NODE_CRASHED,
    NOT_CONVERGED,
    PENDING_GROWTH,
    REPLICA_DIVERGENCE,
    SLOW_CONVERGENCE,
    TWO_COORDINATORS,
    VACUOUS,
    WORKER_CRASHED,
)

NODE_FAULTS = frozenset(
    {"kill_node", "pause_node", "restart_node", "partition_node", "restart_cluster", "wipe_node", "damage_journal",
     "one_way_partition", "replace_node", "fill_disk", "clock_jump"}
)  # fmt: skip


class LivenessRules(CheckContext):
    """Rule 7 and on: what must happen in time, and what a run must have exercised to prove anything."""

    def convergence(self) -> None:
        """Rule 7 (liveness): after the last fault every group settles on exactly its live members, in time."""
        self.stats["convergence_s"] = None
        self.stats["convergence_by_group"] = {}
        quiesce = next((e for e in reversed(self.history.harness) if e["ev"] == "quiesce"), None)
        self.after_faults(quiesce["t"] if quiesce else self.end)
        if quiesce is None:
            self.flag(INCOMPLETE_RUN, "", self.end, "no quiesce event: convergence after the faults was not measured")
            return
        start = quiesce["t"]
        verdict = next(
            (e for e in self.history.harness if e["ev"] in ("converged", "not_converged") and e["t"] >= start), None
        )
        until = verdict["t"] if verdict else max([o["t"] for o in self.observes if o["t"] >= start], default=start)
        expected = {g: self.live_members(g, until) for g in self.groups}
        settled = dict.fromkeys(self.groups, False)
        by_group: dict[str, float] = {}
        overall: float | None = None
        for o in (o for o in self.observes if start <= o["t"] <= until):
            group = o.get("group", "")
            settled[group] = self.settled(o, expected[group])
            if settled[group]:
                by_group.setdefault(group, round(o["t"] - start, 6))
            if overall is None and all(settled.values()):
                overall = round(o["t"] - start, 6)
        self.stats["convergence_s"] = overall
        self.stats["convergence_by_group"] = by_group
        stuck = [g for g in self.groups if g not in by_group]
        for group in stuck:
            last = next((o for o in reversed(self.observes) if o.get("group") == group and o["t"] <= until), None)
            seen = (
                f"{last.get('state', '?')} generation {last.get('generation', '?')} with "
                f"[{', '.join(sorted(last.get('members', [])))}] at {self.at(last['t'])}"
                if last
                else "never observed"
            )
            want = f"Stable with [{', '.join(expected[group])}]" if expected[group] else "Empty"
            self.flag(
                NOT_CONVERGED,
                group,
                until,
                f"group {group} did not converge between quiesce at {self.at(start)} and {self.at(until)}: last "
                f"{seen}, expected {want}",
            )
        if overall is None and not stuck and self.groups:
            self.flag(
                NOT_CONVERGED,
                "",
                until,
                f"every group settled between quiesce at {self.at(start)} and {self.at(until)}, but never all at once",
            )
        if verdict is not None and verdict["ev"] == "not_converged":
            others = sorted(set(verdict.get("groups", {})) - set(stuck))
            if others:
                self.flag(
                    NOT_CONVERGED,
                    "" if len(others) > 1 else others[0],
                    verdict["t"],
                    f"the harness found groups {', '.join(others)} not converged at {self.at(verdict['t'])}",
                )
        bound = self.run.get("convergence_bound_s")
        if overall is not None and bound is not None and overall > bound:
            slowest = max(by_group, key=by_group.__getitem__)
            self.flag(
                SLOW_CONVERGENCE,
                "",
                start + overall,
                f"groups converged {overall:.3f}s after quiesce at {self.at(start)}, over the bound of {bound:.3f}s "
                f"(slowest: group {slowest}, {by_group[slowest]:.3f}s)",
            )

    def after_faults(self, quiesce_t: float) -> None:
        """Liveness after every earlier fault too: the harness waits for convergence after each one."""
        waits = [e for e in self.history.harness if e["ev"] in ("converged", "not_converged") and e["t"] < quiesce_t]
        seconds = sorted(e["seconds"] for e in waits if e["ev"] == "converged" and "seconds" in e)
        since = sorted(e["since_fault_s"] for e in waits if e["ev"] == "converged" and e.get("since_fault_s"))
        self.stats["convergence_after_faults"] = {
            "count": len(seconds),
            "median_s": seconds[len(seconds) // 2] if seconds else None,
            "max_s": seconds[-1] if seconds else None,
            "since_injection_median_s": since[len(since) // 2] if since else None,
            "since_injection_max_s": since[-1] if since else None,
        }
        for e in (e for e in waits if e["ev"] == "not_converged"):
            groups = sorted(e.get("groups", {}))
            self.flag(
                NOT_CONVERGED,
                "" if len(groups) != 1 else groups[0],
                e["t"],
                f"after the {e.get('fault', '?')} fault, groups {', '.join(groups)} did not converge "
                f"by {self.at(e['t'])}",
            )

    def live_members(self, group: str, t: float) -> list[str]:
        """The members the group must hold at `t`: its live workers' ids (a placeholder if never assigned)."""
        members = []
        for w in (w for w in self.workers if w.group == group and w.alive_at(t)):
            member = w.member_at(t)
            members.append(f"<{w.stem} never assigned>" if member is None else member)
        return sorted(members)

    @staticmethod
    def settled(observe: dict[str, Any], expected: list[str]) -> bool:
        """Stable with exactly the live members; a group whose workers are all gone settles as Empty."""
        members = sorted(observe.get("members", []))
        if not expected:
            return observe.get("state") == "Empty" and not members
        return observe.get("state") == "Stable" and members == expected

    def coordinators(self) -> None:
        """At most one coordinator per group at a time, by the epochs nodes answered in (chaos/coordinators.py)."""
        answers = [e for e in self.history.harness if e["ev"] == "coordinator_answer"]
        self.stats["coordinator_answers"] = len(answers)
        for group, t, message in conflicts(answers, self.at):
            self.flag(TWO_COORDINATORS, group, t, message)

    def harness_events(self) -> None:
        """Rules 8 and 9: nodes only stop when told to, and join queues stay bounded."""
        for e in (e for e in self.history.harness if e["ev"] == "node_exit" and e.get("expected") is not True):
            self.flag(
                NODE_CRASHED,
                "",
                e["t"],
                f"node {e.get('node', '?')} (pid {e.get('pid', '?')}) exited with code {e.get('returncode', '?')} "
                f"at {self.at(e['t'])} although nobody stopped it{_disk_note(e.get('disk'))}",
            )
        for e in (e for e in self.history.harness if e["ev"] == "node_alarm"):
            self.flag(
                REPLICA_DIVERGENCE,
                "",
                e["t"],
                f"node {e.get('node', '?')} logged {e.get('event')}: its replica of partition "
                f"{e.get('partition', '?')} differs from another replica's state at log index {e.get('index', '?')}",
            )
        for e in (e for e in self.history.harness if e["ev"] == "worker_exit" and e.get("expected") is False):
            self.flag(
                WORKER_CRASHED,
                "",
                e["t"],
                f"worker {e.get('worker', '?')} incarnation {e.get('incarnation', '?')} exited with code "
                f"{e.get('returncode', '?')} at {self.at(e['t'])} although nobody stopped it",
            )
        bound = self.run.get("pending_bound")
        for o in self.observes:
            if bound is not None and o.get("pending", 0) > bound:
                self.flag(
                    PENDING_GROWTH,
                    o.get("group", ""),
                    o["t"],
                    f"group {o.get('group', '')}: node {o.get('node', '?')} had {o['pending']} pending members at "
                    f"{self.at(o['t'])}, over the bound of {bound}",
                )
        faults = Counter(e.get("kind", "?") for e in self.history.harness if e["ev"] == "fault")
        self.stats["faults_by_kind"] = dict(sorted(faults.items()))
        self.stats["node_faults"] = sum(n for kind, n in faults.items() if kind in NODE_FAULTS)
        self.stats["max_pending"] = max((o.get("pending", 0) for o in self.observes), default=0)
        self.stats["workers_killed"] = sum(1 for w in self.workers if w.killed_at is not None)
        self.stats["worker_exits_unexpected"] = sum(
            1 for e in self.history.harness if e["ev"] == "worker_exit" and e.get("expected") is False
        )

    def corrupt_and_vacuous(self) -> None:
        """Rules 10 and 11: a history that cannot be read, or that exercised nothing, proves nothing."""
        for line in self.history.bad_lines:
            self.flag(HISTORY_CORRUPT, "", self.end, f"unreadable history line {line}")
        observations = len(self.observes)
        empty = [
            name
            for name, count in (
                ("ownership intervals", len(self.intervals)),
                ("acknowledged commits", self.stats["commits_acked"]),
                ("observations", observations),
            )
            if not count
        ]
        if empty:
            self.flag(VACUOUS, "", self.end, f"the run checked nothing: no {', no '.join(empty)}")
        self.stats.update(
            groups=len(self.groups),
            worker_files=len(self.workers),
            observations=observations,
            duration_s=round(self.end - self.t0, 3),
            start_t=self.t0,
        )


def _disk_note(disk: object) -> str:
    """The data directory as the harness found it after the exit: a full disk is the usual reason a node cannot
    start (its history line has every file's size)."""
    if not isinstance(disk, dict) or "free_bytes" not in disk:
        return ""
    files = disk.get("files") or {}
    biggest = max(files.items(), key=lambda item: item[1], default=None) if isinstance(files, dict) else None
    note = f"; its data directory had {disk['free_bytes']} of {disk['size_bytes']} bytes free"
    return note + (f", the biggest file {biggest[0]} ({biggest[1]} bytes)" if biggest else "")
