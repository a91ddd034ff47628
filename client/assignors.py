"""Partition assignors that the group leader runs, as in Kafka's classic protocol (docs/CLIENT.md).

The coordinator never looks inside assignments: the leader decodes every member's `Subscription`, picks the
assignor the group agreed on (the JoinGroup protocol name) and sends each member its `Assignment`. Every assignor
here is deterministic (sorted iteration and total-order tie breaks only, never set or hash order), so two leaders
given the same subscriptions produce the same assignment.

Partition counts come from the members: a topic has the largest count any member declares (a member with an older
view still subscribes by name), and a topic's partitions go only to members that subscribe to it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Protocol

from groupcoord.client.protocol import Assignment, Subscription, TopicPartition

EAGER, COOPERATIVE = "eager", "cooperative"


class Assignor(Protocol):
    """Maps member id -> subscription (in the leader's JoinGroup order) to member id -> assignment.

    Every member id of the input gets an entry, possibly empty, and the output keeps the input's key order.
    An assignor may declare `supported_protocols` (Kafka's `supportedProtocols()`): the rebalance protocols it is
    safe under. Without it, it supports only `EAGER`: every member gives up everything before each rejoin.
    """

    name: str

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]: ...


def topic_counts(subscriptions: dict[str, Subscription]) -> dict[str, int]:
    """Each subscribed topic's partition count: the largest any member declares."""
    counts: dict[str, int] = {}
    for sub in subscriptions.values():
        for topic, count in sub.topics.items():
            counts[topic] = max(counts.get(topic, 0), count)
    return dict(sorted(counts.items()))


def _result(subscriptions: dict[str, Subscription], held: dict[str, list[TopicPartition]]) -> dict[str, Assignment]:
    return {member: Assignment(tuple(held[member])) for member in subscriptions}


class RangeAssignor:
    """Kafka's range assignor: per topic, contiguous ranges over the subscribers sorted by member id.

    The first `count % subscribers` members get one partition more. Partition i of co-partitioned topics (same
    count, same subscribers) lands on one member, at the price of imbalance across topics: the first members get
    the extra partition of every topic.
    """

    name = "range"

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        held: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        for topic, count in topic_counts(subscriptions).items():
            members = sorted(m for m, sub in subscriptions.items() if topic in sub.topics)
            per_member, extra = divmod(count, len(members))
            start = 0
            for index, member in enumerate(members):
                size = per_member + (1 if index < extra else 0)
                held[member].extend((topic, p) for p in range(start, start + size))
                start += size
        return _result(subscriptions, held)


class RoundRobinAssignor:
    """Kafka's round-robin assignor: all (topic, partition) sorted, dealt to members sorted by id in a cycle.

    The cycle skips members not subscribed to the partition's topic and carries on from where it stopped, so
    with identical subscriptions every member's count is within 1 of the others'.
    """

    name = "roundrobin"

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        held: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        members = sorted(subscriptions)
        turn = 0
        for topic, count in topic_counts(subscriptions).items():
            for partition in range(count):
                # Terminates: the topic comes from some member's subscription.
                while topic not in subscriptions[members[turn % len(members)]].topics:
                    turn += 1
                held[members[turn % len(members)]].append((topic, partition))
                turn += 1
        return _result(subscriptions, held)


class StickyAssignor:
    """Balanced, and keeps each partition with its previous owner (`Subscription.owned`) where possible.

    1. Keep: each member keeps the partitions it owned (`owned`, else `previous`: what an eager member held before
       this rebalance) that still exist and whose topic it still subscribes to; a partition several members own
       stays with the lowest member id, and an `owned` claim goes before a `previous` one.
    2. Fill: every other partition (those with the fewest eligible members first, then in order) goes to the
       eligible member with the fewest partitions (ties: lowest id).
    3. Balance: while a member A holds a partition of a topic that member B subscribes to and A has at least two
       more partitions than B, move one such partition (preferring those A did not own before) to the least
       loaded such B from its most loaded such A. Each move lowers the sum of squared loads, so this ends.

    At the end no single move improves balance, so members with identical subscriptions are within 1 of each
    other. When all subscriptions are identical the number of kept partitions is the maximum possible: only
    members above the final ceiling lose partitions, and the extra partitions (count % members) stay with the
    members that owned the most. It is not Kafka's full cooperative-sticky algorithm (no revocation phase, and
    with differing subscriptions the balance is local rather than optimal).
    """

    name = "sticky"

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        counts = topic_counts(subscriptions)
        members = sorted(subscriptions)
        subscribers = {topic: [m for m in members if topic in subscriptions[m].topics] for topic in counts}
        kept: dict[TopicPartition, str] = {}
        for held in ("owned", "previous"):
            for member in members:
                sub = subscriptions[member]
                for topic, partition in getattr(sub, held):
                    if topic in sub.topics and partition < counts[topic]:
                        kept.setdefault((topic, partition), member)
        holdings = _Holdings(members, kept)
        for tp, member in kept.items():
            holdings.add(member, tp)

        orphans = sorted(
            ((t, p) for t, n in counts.items() for p in range(n) if (t, p) not in kept),
            key=lambda tp: (len(subscribers[tp[0]]), tp),
        )
        for tp in orphans:
            holdings.add(min(subscribers[tp[0]], key=lambda m: (holdings.load[m], m)), tp)

        while self._move_one(members, subscriptions, holdings):
            pass
        return _result(subscriptions, holdings.partitions())

    @staticmethod
    def _move_one(members: list[str], subscriptions: dict[str, Subscription], holdings: _Holdings) -> bool:
        """Makes the move that balances best (least loaded recipient, most loaded donor); False if none helps."""
        by_load = sorted(members, key=lambda m: (holdings.load[m], m))
        for recipient in by_load:
            for donor in reversed(by_load):
                if holdings.load[donor] < holdings.load[recipient] + 2:
                    break
                if holdings.move(donor, recipient, subscriptions[recipient].topics):
                    return True
        return False


class CooperativeStickyAssignor(StickyAssignor):
    """Kafka's `cooperative-sticky` (KIP-429): the sticky target, minus every partition another member still owns.

    Under the cooperative protocol members keep what they own while the group rebalances, so a partition may go to
    a new member only once its owner has given it up: this round leaves such a partition unassigned, its owner sees
    it missing from its assignment, revokes it and rejoins at once, and the next round (where nobody claims it)
    hands it over. Partitions that stay where they are are never revoked. A partition that several members claim
    (which a correct member never causes) goes to none of them this round: each gives it up, the next round
    assigns it afresh.
    """

    name = "cooperative-sticky"
    supported_protocols = (EAGER, COOPERATIVE)

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        target = super().assign(subscriptions)
        claimants: dict[TopicPartition, set[str]] = {}
        for member, sub in subscriptions.items():
            for tp in sub.owned:
                claimants.setdefault(tp, set()).add(member)
        return {
            member: Assignment(tuple(tp for tp in a.partitions if claimants.get(tp, {member}) <= {member}))
            for member, a in target.items()
        }


def supported_protocols(assignor: Assignor) -> tuple[str, ...]:
    return tuple(getattr(assignor, "supported_protocols", (EAGER,)))


def rebalance_protocol(assignors: list[Assignor]) -> str:
    """Kafka's rule: `COOPERATIVE` only if every configured assignor supports it, else `EAGER`. Listing
    `["cooperative-sticky", "range"]` is the first step of a rolling upgrade: still eager, but ready to agree on
    cooperative-sticky once no member lists range alone."""
    return COOPERATIVE if all(COOPERATIVE in supported_protocols(a) for a in assignors) else EAGER


class _Holdings:
    """Who holds what while the sticky assignor runs, indexed so that a move costs O(topics), not O(partitions).

    Each member's partitions are pooled by (previously owned by this member, topic), each pool sorted descending,
    so the preferred partition to give away (not owned before, then lowest topic and partition) is the last
    element of the first eligible pool.
    """

    def __init__(self, members: list[str], kept: dict[TopicPartition, str]) -> None:
        self._kept = kept
        self.load = dict.fromkeys(members, 0)
        self._pools: dict[str, dict[tuple[bool, str], list[int]]] = {m: {} for m in members}

    def add(self, member: str, tp: TopicPartition) -> None:
        topic, partition = tp
        pool = self._pools[member].setdefault((self._kept.get(tp) == member, topic), [])
        bisect.insort(pool, partition, key=lambda p: -p)
        self.load[member] += 1

    def move(self, donor: str, recipient: str, wanted: Mapping[str, int]) -> bool:
        """Moves donor's preferred partition of a topic in `wanted` to recipient; False if donor has none."""
        pools = self._pools[donor]
        for key in sorted(pools):
            if key[1] in wanted:
                partition = pools[key].pop()
                if not pools[key]:
                    del pools[key]
                self.load[donor] -= 1
                self.add(recipient, (key[1], partition))
                return True
        return False

    def partitions(self) -> dict[str, list[TopicPartition]]:
        return {m: [(topic, p) for (_, topic), pool in pools.items() for p in pool] for m, pools in self._pools.items()}


ASSIGNORS: dict[str, Assignor] = {
    a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor())
}


def get_assignor(name: str) -> Assignor:
    """The assignor for a JoinGroup protocol name; `ValueError` names the known ones."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown assignor {name!r}; known: {', '.join(sorted(ASSIGNORS))}") from None


def assignors_from(given: str | Assignor | Sequence[str | Assignor]) -> list[Assignor]:
    """A member's `assignor=`: one assignor or several in preference order, by name or object; the names must
    differ (the coordinator picks by name)."""
    items = [given] if isinstance(given, str) or not isinstance(given, Sequence) else list(given)
    assignors = [get_assignor(a) if isinstance(a, str) else a for a in items]
    names = [a.name for a in assignors]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"assignor: one or more assignors with distinct names, got {names}")
    return assignors
