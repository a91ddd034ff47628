"""Who answered as a group's coordinator, in which epoch: at most one node per epoch, and never an older epoch once
a newer one has answered (the checker's `two_coordinators`).

The harness asks every node about one group at a time (`coordinator_answer` events). A coordinator serves in its
partition's Raft term, and a leader answers only within its lease (docs/ARCHITECTURE.md), which ends before another
node can be elected. So if one node's answer came back before another's request was sent, the later answer's
epoch is at least the earlier's: a lower one is a deposed coordinator still answering, the same one from another
node is two leaders in one term.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any


def conflicts(answers: list[dict[str, Any]], at: Callable[[float], str]) -> Iterator[tuple[str, float, str]]:
    """(group, t, message) for each conflict, at most one per group, node and epoch; `at` formats a time."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for answer in answers:
        if answer.get("epoch"):  # 0: a node that does not report its epoch
            by_group[answer["group"]].append(answer)
    for group in sorted(by_group):
        yield from _group_conflicts(group, sorted(by_group[group], key=lambda a: a["t"]), at)


def _group_conflicts(
    group: str, answers: list[dict[str, Any]], at: Callable[[float], str]
) -> Iterator[tuple[str, float, str]]:
    reported: set[tuple[int, int]] = set()
    leader_of: dict[int, dict[str, Any]] = {}
    newest: list[dict[str, Any]] = []  # newest[i]: the answer of the highest epoch among answers[: i + 1]
    for answer in answers:
        newest.append(answer if not newest or answer["epoch"] > newest[-1]["epoch"] else newest[-1])
    answered = [a["t"] for a in answers]
    for answer in answers:
        key = (answer["node"], answer["epoch"])
        first = leader_of.setdefault(answer["epoch"], answer)
        if first["node"] != answer["node"] and key not in reported:
            reported.add(key)
            yield (
                group,
                answer["t"],
                (
                    f"nodes {first['node']} and {answer['node']} both answered as its coordinator in epoch "
                    f"{answer['epoch']}"
                ),
            )
        before = bisect.bisect_left(answered, answer["sent"])  # answers back before this one was asked
        if before and newest[before - 1]["epoch"] > answer["epoch"] and key not in reported:
            reported.add(key)
            newer = newest[before - 1]
            yield (
                group,
                answer["t"],
                (
                    f"node {answer['node']} answered as its coordinator in epoch {answer['epoch']} (asked at "
                    f"{at(answer['sent'])}) after node {newer['node']} had answered in epoch {newer['epoch']} (at "
                    f"{at(newer['t'])})"
                ),
            )
