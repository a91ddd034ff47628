"""The invariants of a chaos run, checked against its recorded history (see chaos/history.py).

`check` is pure (no I/O), so the report, the command line and the tests share one verdict. Times in messages are
seconds since the run started (the `run` event), with 3 decimals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from groupcoord.chaos.coordinators import conflicts
from groupcoord.chaos.history import History
from groupcoord.chaos.offsets import Commit, PartitionCommits, index_commits
from groupcoord.chaos.ownership import Interval, build_intervals, load_workers, overlapping_pairs

DOUBLE_OWNERSHIP = "double_ownership"
OWNED_PAST_SESSION = "owned_past_session"
OFFSET_BACKWARDS = "offset_backwards"
LOST_COMMIT = "lost_commit"
INCOMPLETE_RUN = "incomplete_run"
GENERATION_BACKWARDS = "generation_backwards"
MEMBER_ID_REUSED = "member_id_reused"
NOT_CONVERGED = "not_converged"
SLOW_CONVERGENCE = "slow_convergence"
NODE_CRASHED = "node_crashed"
WORKER_CRASHED = "worker_crashed"
PENDING_GROWTH = "pending_growth"
HISTORY_CORRUPT = "history_corrupt"
VACUOUS = "vacuous"
REPLICA_DIVERGENCE = "replica_divergence"
TWO_COORDINATORS = "two_coordinators"
KINDS = (
    REPLICA_DIVERGENCE,
    TWO_COORDINATORS,
    DOUBLE_OWNERSHIP,
    OWNED_PAST_SESSION,
    OFFSET_BACKWARDS,
    LOST_COMMIT,
    GENERATION_BACKWARDS,
    MEMBER_ID_REUSED,
    NOT_CONVERGED,
    SLOW_CONVERGENCE,
    NODE_CRASHED,
    WORKER_CRASHED,
    PENDING_GROWTH,
    HISTORY_CORRUPT,
    INCOMPLETE_RUN,
    VACUOUS,
)

NODE_FAULTS = frozenset(
    {"kill_node", "pause_node", "restart_node", "partition_node", "restart_cluster", "wipe_node", "damage_journal",
     "one_way_partition", "replace_node", "fill_disk", "clock_jump"}
)  # fmt: skip
DEFAULT_TOLERANCE_S = 0.5
SESSION_LOST = "session_lost"
MEMBER_EVENTS = frozenset({"assigned", "revoked", "commit", "fetch"})


@dataclass
class Violation:
    """One broken invariant, with the figures a person needs to find it in the history."""

    kind: str
    group: str
    message: str
    t: float  # monotonic, like the history


@dataclass
class Result:
    """The verdict of one run: what broke, what was measured, and the run event to replay it."""

    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """A run passes only if nothing broke, including "nothing was exercised" (`vacuous`)."""
        return not self.violations


def check(history: History) -> Result:
    """Every invariant over one history; a run that exercised nothing fails too (`vacuous`)."""
    return _Checker(history).result()


class _Checker:
    """Shared indexes (workers, intervals, commits, observations) built once, then one method per invariant."""

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

    def result(self) -> Result:
        """Runs the checks in a fixed order so reports of one history are identical."""
        if not self.run:
            self.flag(INCOMPLETE_RUN, "", self.t0, "no run event: seed and settings unknown")
        self.ownership()
        self.sessions()
        self.offsets_backwards()
        self.lost_commits()
        self.generations()
        self.member_ids()
        self.convergence()
        self.harness_events()
        self.coordinators()
        self.corrupt_and_vacuous()
        self.violations.sort(key=lambda v: v.t)
        return Result(self.violations, self.stats, self.run)

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

    def ownership(self) -> None:
        """Rule 1: one owner per partition, except a session-lost member within its documented window."""
        allowed: list[float] = []
        for first, second in overlapping_pairs(self.intervals):
            overlap = min(first.end, second.end) - max(first.start, second.start)
            deadline = self.deadline(first.last_heartbeat_ok, first.session_timeout_s)
            session_lost = first.end_reason == SESSION_LOST and deadline is not None
            if session_lost and first.end <= deadline:
                allowed.append(overlap)
                continue
            late = f"; {first.member} released it after losing its session, past its deadline {self.at(deadline)}"
            self.flag(
                DOUBLE_OWNERSHIP,
                first.group,
                max(first.start, second.start),
                f"partition {first.partition} of group {first.group} was owned by {self.holder(first)} from "
                f"{self.at(first.start)} to {self.at(first.end)} ({first.end_reason}) and by {self.holder(second)} "
                f"from {self.at(second.start)} to {self.at(second.end)} ({second.end_reason}): "
                f"{overlap:.3f}s of overlap{late if session_lost else ''}",
            )
        self.stats["ownership_intervals"] = len(self.intervals)
        self.stats["allowed_overlaps"] = {"count": len(allowed), "max_s": round(max(allowed, default=0.0), 3)}

    def sessions(self) -> None:
        """Rule 2: a member that lost its session released what it held within its own session timeout."""
        releases = 0
        for w in self.workers:
            for e in w.events:
                if e["ev"] != "revoked" or e.get("reason") != SESSION_LOST:
                    continue
                releases += 1
                heartbeat = e.get("last_heartbeat_ok")
                deadline = self.deadline(heartbeat, w.session_timeout_s)
                if deadline is not None and e["t"] > deadline:
                    self.flag(
                        OWNED_PAST_SESSION,
                        w.group,
                        e["t"],
                        f"member {e.get('member', '')} of {w.stem} released {', '.join(e.get('partitions', []))} at "
                        f"{self.at(e['t'])} after losing its session, {e['t'] - deadline:.3f}s past its last "
                        f"heartbeat {self.at(heartbeat)} + session timeout {w.session_timeout_s:.3f}s + tolerance "
                        f"{self.tolerance:.3f}s",
                    )
        self.stats["session_lost_releases"] = releases

    def offsets_backwards(self) -> None:
        """Rule 3: a commit sent after another was acknowledged never moves the partition back."""
        for (group, partition), log in sorted(self.commits.items()):
            for c in log.commits:
                prior = log.highest_before(c.sent)
                if prior is not None and prior.offset > c.offset:
                    self.flag(
                        OFFSET_BACKWARDS,
                        group,
                        c.t,
                        f"group {group} partition {partition}: {self.committer(c)} committed {c.offset} (sent "
                        f"{self.at(c.sent)}, acknowledged {self.at(c.t)}) below {prior.offset}, which "
                        f"{self.committer(prior)} had committed, acknowledged at {self.at(prior.t)}",
                    )
        self.stats["commits_acked"] = sum(1 for w in self.workers for e in w.events if e["ev"] == "commit")
        self.stats["commits_rejected"] = sum(1 for w in self.workers for e in w.events if e["ev"] == "commit_rejected")

    def lost_commits(self) -> None:
        """Rule 4: what was acknowledged is what later reads (fetches, the final state) see, or more."""
        by_group: dict[str, list[tuple[str, PartitionCommits]]] = defaultdict(list)
        for (group, partition), log in sorted(self.commits.items()):
            by_group[group].append((partition, log))
        fetches = 0
        for w in self.workers:
            for e in w.events:
                if e["ev"] != "fetch":
                    continue
                fetches += 1
                sent, offsets = e.get("sent", e["t"]), e.get("offsets", {})
                for partition, log in by_group.get(w.group, []):
                    prior, read = log.highest_before(sent), offsets.get(partition, -1)
                    if prior is not None and read < prior.offset:
                        self.flag(
                            LOST_COMMIT,
                            w.group,
                            e["t"],
                            f"group {w.group} partition {partition}: OffsetFetch by member {e.get('member', '')} "
                            f"of {w.stem} sent at {self.at(sent)} read {read}, but {self.committer(prior)} had "
                            f"committed {prior.offset}, acknowledged at {self.at(prior.t)}",
                        )
        self.stats["fetches"] = fetches
        final = next((e for e in reversed(self.history.harness) if e["ev"] == "final"), None)
        if final is None:
            self.flag(INCOMPLETE_RUN, "", self.end, "no final event: the offsets left after the run were not checked")
            return
        for group, logs in sorted(by_group.items()):
            offsets = (final.get("offsets") or {}).get(group, {})
            if offsets is None:
                self.flag(INCOMPLETE_RUN, group, final["t"], f"the final offsets of group {group} could not be read")
                continue
            for partition, log in logs:
                top, read = log.highest(), offsets.get(partition, -1)
                if read < top.offset:
                    self.flag(
                        LOST_COMMIT,
                        group,
                        final["t"],
                        f"group {group} partition {partition}: the final offset is {read}, but "
                        f"{self.committer(top)} had committed {top.offset}, acknowledged at {self.at(top.t)}",
                    )

    def generations(self) -> None:
        """Rule 5: generations only move forward, for each member and in the coordinator's answers."""
        highest: dict[str, int] = {}
        for w in self.workers:
            previous: dict[str, Any] | None = None
            for e in (e for e in w.events if e["ev"] == "assigned"):
                generation = e.get("generation", -1)
                highest[w.group] = max(generation, highest.get(w.group, generation))
                # The same generation again is fine: a known member rejoining a Stable group with unchanged
                # metadata (or a static one after losing its session) gets the current generation back.
                if previous is not None and generation < previous.get("generation", -1):
                    self.flag(
                        GENERATION_BACKWARDS,
                        w.group,
                        e["t"],
                        f"{w.stem} (member {e.get('member', '')}) was assigned generation {generation} at "
                        f"{self.at(e['t'])}, after generation {previous.get('generation', -1)} at "
                        f"{self.at(previous['t'])}",
                    )
                previous = e
        last: dict[str, dict[str, Any]] = {}
        for o in (o for o in self.observes if o.get("generation") is not None):
            group, generation = o.get("group", ""), o["generation"]
            highest[group] = max(generation, highest.get(group, generation))
            before = last.get(group)
            if before is not None and generation < before["generation"]:
                self.flag(
                    GENERATION_BACKWARDS,
                    group,
                    o["t"],
                    f"group {group}: node {o.get('node', '?')} reported generation {generation} at "
                    f"{self.at(o['t'])}, after node {before.get('node', '?')} reported generation "
                    f"{before['generation']} at {self.at(before['t'])}",
                )
            last[group] = o
        self.stats["max_generation_by_group"] = dict(sorted(highest.items()))

    def member_ids(self) -> None:
        """Rule 6: a member id names one membership; seeing it again means the coordinator resurrected one."""
        first_file: dict[str, str] = {}
        for w in self.workers:
            current, retired, reported = "", set(), set()
            for e in w.events:
                member = e.get("member", "")
                if e["ev"] not in MEMBER_EVENTS or not member:
                    continue
                owner = first_file.setdefault(member, w.stem)
                if owner != w.stem and ("file", member) not in reported:
                    reported.add(("file", member))
                    self.flag(
                        MEMBER_ID_REUSED,
                        w.group,
                        e["t"],
                        f"member id {member} of {owner} was used again by {w.stem} at {self.at(e['t'])}",
                    )
                if member != current:
                    if member in retired and ("back", member) not in reported:
                        reported.add(("back", member))
                        self.flag(
                            MEMBER_ID_REUSED,
                            w.group,
                            e["t"],
                            f"{w.stem} went back to member id {member} at {self.at(e['t'])} after using {current}",
                        )
                    retired.add(current)
                    current = member
        by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for o in self.observes:
            by_group[o.get("group", "")].append(o)
        for group, observes in sorted(by_group.items()):
            seen: set[str] = set()
            gone: dict[str, float] = {}
            for o in observes:
                members = set(o.get("members", []))
                for member in sorted(members & gone.keys()):
                    self.flag(
                        MEMBER_ID_REUSED,
                        group,
                        o["t"],
                        f"group {group}: member {member} was observed again at {self.at(o['t'])} after it had "
                        f"left the group (absent at {self.at(gone.pop(member))})",
                    )
                for member in seen - members:
                    gone.setdefault(member, o["t"])
                seen |= members

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
