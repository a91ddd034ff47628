"""The safety invariants of a chaos run (the checker's rules 1-6, docs/RELIABILITY.md): one owner per partition,
sessions released in time, offsets that never go back or get lost, generations that only move forward, member ids
never reused.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from typing import Any

from groupcoord.chaos.check_context import CheckContext
from groupcoord.chaos.offsets import PartitionCommits
from groupcoord.chaos.ownership import overlapping_pairs
from groupcoord.chaos.verdict import (
    DOUBLE_OWNERSHIP,
    GENERATION_BACKWARDS,
    INCOMPLETE_RUN,
    LOST_COMMIT,
    MEMBER_ID_REUSED,
    OFFSET_BACKWARDS,
    OWNED_PAST_SESSION,
)

SESSION_LOST = "session_lost"
MEMBER_EVENTS = frozenset({"assigned", "revoked", "commit", "fetch"})


def sent_at(observe: dict[str, Any]) -> float:
    """When an observation was asked; runs recorded before `sent` existed give only the answer time."""
    sent: float = observe.get("sent", observe["t"])
    return sent


class SafetyRules(CheckContext):
    """Rules 1-6: what must never happen, whatever the faults."""

    def ownership(self) -> None:
        """Rule 1: one owner per partition, except a session-lost member within its documented window."""
        allowed: list[float] = []
        for first, second in overlapping_pairs(self.intervals):
            overlap = min(first.end, second.end) - max(first.start, second.start)
            deadline = self.deadline(first.last_heartbeat_ok, first.session_timeout_s)
            session_lost = first.end_reason == SESSION_LOST and deadline is not None
            if session_lost and deadline is not None and first.end <= deadline:
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
        # Per group, in answer order: the answer times, and the observation of the highest generation up to each.
        answered: dict[str, list[float]] = defaultdict(list)
        peaks: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for o in (o for o in self.observes if o.get("generation") is not None):
            group, generation = o.get("group", ""), o["generation"]
            highest[group] = max(generation, highest.get(group, generation))
            # Only an observation answered before this one was asked is known to be older (two may overlap).
            older = bisect_left(answered[group], sent_at(o))
            before = peaks[group][older - 1] if older else None
            if before is not None and generation < before["generation"]:
                self.flag(
                    GENERATION_BACKWARDS,
                    group,
                    o["t"],
                    f"group {group}: node {o.get('node', '?')} reported generation {generation} at "
                    f"{self.at(o['t'])} (asked at {self.at(sent_at(o))}), after node {before.get('node', '?')} "
                    f"reported generation {before['generation']} at {self.at(before['t'])}",
                )
            peak = peaks[group][-1] if peaks[group] else None
            answered[group].append(o["t"])
            peaks[group].append(o if peak is None or generation > peak["generation"] else peak)
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
            # Two observations may overlap, and then either order is right: a member is gone once an observation
            # asked after one that held it was answered without it, and back when one asked after that holds it.
            seen: dict[str, float] = {}  # member -> when an observation holding it was first answered
            gone: dict[str, dict[str, Any]] = {}  # member -> the first observation known to be after it left
            for o in observes:
                members, sent = set(o.get("members", [])), sent_at(o)
                for member in sorted(m for m in members & gone.keys() if sent > gone[m]["t"]):
                    absent = gone.pop(member)
                    self.flag(
                        MEMBER_ID_REUSED,
                        group,
                        o["t"],
                        f"group {group}: member {member} was observed again at {self.at(o['t'])} (node "
                        f"{o.get('node', '?')}, asked at {self.at(sent)}) after it had left the group (absent at "
                        f"{self.at(absent['t'])}, node {absent.get('node', '?')})",
                    )
                for member in seen.keys() - members:
                    if sent > seen[member]:
                        gone.setdefault(member, o)
                for member in members:
                    seen.setdefault(member, o["t"])
