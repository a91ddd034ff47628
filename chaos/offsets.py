"""Acknowledged commits per partition, indexed so "the highest offset acknowledged before t" is a bisect."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from groupcoord.chaos.ownership import WorkerFile


@dataclass(frozen=True, slots=True)
class Commit:
    """One partition's offset in one acknowledged OffsetCommit."""

    t: float  # acknowledged
    sent: float
    offset: int
    member: str
    stem: str


class PartitionCommits:
    """The commits of one partition by acknowledgement time, with the running maximum of their offsets."""

    def __init__(self, commits: list[Commit]) -> None:
        self.commits = sorted(commits, key=lambda c: c.t)
        self.acks = [c.t for c in self.commits]
        self.best: list[Commit] = []
        top = self.commits[0]
        for c in self.commits:
            if c.offset > top.offset:
                top = c
            self.best.append(top)

    def highest_before(self, t: float) -> Commit | None:
        """A request sent at `t` must see at least this: everything acknowledged strictly before it."""
        k = bisect_left(self.acks, t)
        return self.best[k - 1] if k else None

    def highest(self) -> Commit:
        """What the group's final committed offset must still reach."""
        return self.best[-1]


def index_commits(
    workers: list[WorkerFile], harness: Sequence[dict[str, Any]] = ()
) -> dict[tuple[str, str], PartitionCommits]:
    """(group, partition) -> its acknowledged commits, from every worker file of the group and the harness's own
    simple commits to the idle groups (`idle_commit`, no member)."""
    raw: dict[tuple[str, str], list[Commit]] = defaultdict(list)
    for e in harness:
        if e["ev"] == "idle_commit":
            for partition, offset in e.get("offsets", {}).items():
                raw[e["group"], partition].append(Commit(e["t"], e.get("sent", e["t"]), offset, "", "harness"))
    for w in workers:
        for e in w.events:
            if e["ev"] == "commit":
                sent, member = e.get("sent", e["t"]), e.get("member", "")
                for partition, offset in e.get("offsets", {}).items():
                    raw[w.group, partition].append(Commit(e["t"], sent, offset, member, w.stem))
    return {key: PartitionCommits(commits) for key, commits in raw.items()}
