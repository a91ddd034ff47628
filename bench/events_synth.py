"""Deterministic synthetic schema-v1 events (docs/EVENTS.md) and the figures `groupcoord analyze` must find in them.

    .venv/bin/python bench/events_synth.py --events 1000000 --out DIR [--seed 1] [--groups 500] [--partitions 16]

Writes DIR/events.jsonl in log order, as `groupcoord events export` does, DIR/manifest.json like the export's,
and DIR/truth.json. Each partition is a Raft log: a barrier per leader (terms grow, the node may stay), index gaps
(entries that changed nothing), batches of several records. Its groups go through joins (KIP-394 pending members,
static members), rebalances that restart or complete, syncs, leaves, expirations, static replacements with and
without a rebalance, avoided-rebalance markers, and mostly offset commits. The truth is counted from the events as
they are written, by the rules the tables document, so the test compares two independent derivations.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from bisect import bisect
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from groupcoord.coordinator.events import EVENT_VERSION
from groupcoord.node.topology import partition_for

T0 = 1_750_000_020_000  # a minute boundary
NODES = (1, 2, 3)
TOPICS = ("orders", "payments", "clicks", "audit")
PREFIXES = ("orders-etl", "billing", "search-indexer", "fraud", "metrics", "mailer")
STATIC_SHARE = 0.3  # of joining members
FAILOVER_EVERY = 4000  # a partition's entries between two elections, on average
EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
# churn table column -> the event kind it counts (pipeline/tables.py CHURN)
CHURN = {"member_joined": "joins", "member_left": "leaves", "member_expired": "expirations",
         "member_replaced": "replacements", "pending_member_expired": "pending_expired"}  # fmt: skip
# A record of an entry: kind, member, generation, reason, state, details.
Rec = tuple[str, str, int | None, str, str, dict[str, Any]]


@dataclass
class Truth:
    """What the tables must report, counted while writing."""

    events: int = 0
    rebalances: int = 0
    completed: int = 0
    restarts: int = 0
    duration_ms: int = 0  # summed over the completed rebalances
    by_reason: Counter[str] = field(default_factory=Counter)
    avoided: Counter[str] = field(default_factory=Counter)
    failovers: int = 0
    window_ms: int = 0  # summed over the failovers
    commits: int = 0
    offsets: int = 0
    churn: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(CHURN.values(), 0)))

    def as_dict(self) -> dict[str, Any]:
        return {name: dict(sorted(value.items())) if isinstance(value, Counter) else value
                for name, value in vars(self).items()}  # fmt: skip


class Group:
    """One consumer group as far as its events go: members, static instances, generation, state."""

    def __init__(self, name: str, weight: float) -> None:
        self.name, self.weight = name, weight
        self.members: list[str] = []
        self.instances: dict[str, str] = {}  # member -> group_instance_id, static members only
        self.pending: list[str] = []
        self.generation = 0
        self.state = EMPTY
        self.open_since: int | None = None  # time of the open rebalance's first start
        self.offset = 0


class Simulation:
    """One partition's log: picks a group per entry, advances it one step and writes the entry's events."""

    def __init__(self, partition: int, groups: list[Group], rng: random.Random, truth: Truth, out: IO[str],
                 failover_every: int) -> None:  # fmt: skip
        self.partition, self.groups, self.rng, self.truth, self.out = partition, groups, rng, truth, out
        self.failover_every = failover_every
        self.cumulative = list(accumulate(g.weight for g in groups))
        self.skew = {node: rng.randint(-20, 20) for node in NODES}  # each leader's wall clock is a little off
        self.clock = T0 + rng.randint(0, 5000)
        self.index = rng.randint(1, 50)
        self.term, self.node = 0, 0
        self.last_ms: int | None = None
        self.serial = 0
        self.written = 0
        self.first_index: int | None = None

    def run(self, quota: int) -> None:
        """Writes `quota` events: a first barrier (an old one without a time now and then), then entries."""
        self._barrier(None if self.rng.random() < 0.25 else self.clock)
        since_barrier = 0
        while quota - self.written >= 4:
            if since_barrier and self.rng.random() * self.failover_every < 1:
                self.clock += self.rng.randint(150, 3000)  # the election
                self._barrier(self.clock)
                since_barrier = 0
                continue
            group = self.groups[bisect(self.cumulative, self.rng.random() * self.cumulative[-1])]
            self._entry(group, self._step(group))
            since_barrier += 1
        while self.written < quota:  # the last few: single-record entries
            group = self.rng.choice(self.groups)
            self._entry(group, [self._commit(group) if group.members else self._pending_added(group)])

    def _barrier(self, at: int | None) -> None:
        previous = self.term
        self.term += 1 if self.rng.random() < 0.8 else 2  # a failed election spends a term
        self.node = self.rng.choice(NODES)  # the old leader may win again
        self.index += 2  # the new leader's pysyncobj no-op has no event
        time_ms = None if at is None else at + self.skew[self.node]
        if previous and time_ms is not None and self.last_ms is not None:
            self.truth.failovers += 1
            self.truth.window_ms += time_ms - self.last_ms
        self._write(0, "", "barrier_committed", "", None, "", "", {}, time_ms)

    def _entry(self, group: Group, records: list[Rec]) -> None:
        self.clock += self.rng.randint(0, 120)
        self.index += 1 if self.rng.random() < 0.97 else self.rng.randint(2, 4)  # entries that changed nothing
        time_ms = self.clock + self.skew[self.node]
        truth = self.truth
        rebalanced = any(rec[0] == "rebalance_started" for rec in records)
        for position, (kind, member, generation, reason, state, details) in enumerate(records):
            if kind == "rebalance_started":
                if group.open_since is None:
                    group.open_since = time_ms
                    truth.rebalances += 1
                    truth.by_reason[reason] += 1
                else:
                    truth.restarts += 1
            elif kind == "generation_completed":
                assert group.open_since is not None
                truth.completed += 1
                truth.duration_ms += time_ms - group.open_since
                group.open_since = None
            elif kind == "offsets_committed":
                truth.commits += 1
                truth.offsets += details["count"]
            elif kind == "rebalance_avoided":
                truth.avoided[reason] += 1
            elif kind == "member_replaced" and state == STABLE and not rebalanced:
                truth.avoided["static_replacement"] += 1
            if kind in CHURN:
                truth.churn[CHURN[kind]] += 1
            self._write(position, group.name, kind, member, generation, reason, state, details, time_ms)

    def _write(self, position: int, group: str, kind: str, member: str, generation: int | None, reason: str,
               state: str, details: dict[str, Any], time_ms: int | None) -> None:  # fmt: skip
        event = {"v": EVENT_VERSION, "time_ms": time_ms, "partition": self.partition, "index": self.index,
                 "position": position, "term": self.term, "node": self.node, "group": group, "kind": kind,
                 "member": member, "generation": generation, "reason": reason, "state": state,
                 "details": details}  # fmt: skip
        self.out.write(json.dumps(event, separators=(",", ":")) + "\n")
        self.written += 1
        self.truth.events += 1
        if time_ms is not None:
            self.last_ms = time_ms
        if self.first_index is None:
            self.first_index = self.index

    def _new_member(self) -> str:
        self.serial += 1
        return f"consumer-{self.partition}-{self.serial}-{self.rng.getrandbits(32):08x}"

    def _step(self, group: Group) -> list[Rec]:
        """The records of the group's next entry, its state advanced."""
        roll = self.rng.random()
        if group.pending and roll < 0.02:
            return [("pending_member_expired", group.pending.pop(0), group.generation, "pending_expired", group.state,
                     {})]  # fmt: skip
        if group.state == PREPARING:
            if roll < 0.45:
                return self._complete(group)
            if roll < 0.6:
                return self._join(group)
            if roll < 0.66 and len(group.members) > 1:
                return self._leave(group, "member_left", "leave")
            return [self._commit(group)]
        if group.state == COMPLETING:
            if roll < 0.95 or len(group.members) == 1:
                group.state = STABLE
                return [("sync_completed", "", group.generation, "", STABLE, {"members": sorted(group.members)})]
            return self._leave(group, "sync_timeout", "sync_timeout")
        if not group.members:
            return self._join(group)
        if roll < 0.86:
            return [self._commit(group)]
        if roll < 0.89:
            return self._join(group)
        if roll < 0.90 and len(group.members) > 1:
            return self._leave(group, "member_left", "leave")
        if roll < 0.905 and len(group.members) > 1:
            return self._leave(group, "session_expired", "session_expired")
        if roll < 0.907 and len(group.members) > 1:
            return self._leave(group, "admin_removal", "admin_removal")
        if roll < 0.93 and group.instances:
            return self._replace(group, rebalance=roll < 0.912)
        if roll < 0.95:
            return [self._avoided(group, "restart", 1)]
        if roll < 0.97:
            return [self._avoided(group, "known_member", 0)]
        if roll < 0.975:
            return [self._started(group, "join_reason", self.rng.choice(group.members), self.rng.choice((2, 3)))]
        return [self._commit(group)]

    def _started(self, group: Group, reason: str, member: str, join_reason: int = 0) -> Rec:
        group.state = PREPARING
        details: dict[str, Any] = {"join_reason": join_reason, "members": list(group.members)}
        if member in group.instances:
            details["group_instance_id"] = group.instances[member]
        return ("rebalance_started", member, group.generation, reason, PREPARING, details)

    def _pending_added(self, group: Group) -> Rec:
        member = self._new_member()
        group.pending.append(member)
        return ("pending_member_added", member, group.generation, "", group.state, {"session_timeout_ms": 45000})

    def _join(self, group: Group) -> list[Rec]:
        """A static member, or a dynamic one's second JoinGroup (its first made it pending); a rebalance starts
        unless one is going on."""
        instance = ""
        if group.pending and self.rng.random() < 0.8:
            member = group.pending.pop(0)
            records: list[Rec] = [
                ("pending_member_removed", member, group.generation, "pending_joined", group.state, {})
            ]
        elif self.rng.random() < STATIC_SHARE:
            member = self._new_member()
            instance = f"{group.name}-instance-{len(group.instances)}"
            group.instances[member] = instance
            records = []
        else:
            return [self._pending_added(group)]
        group.members.append(member)
        host = f"/10.0.{self.partition}.{len(group.members) % 250}"
        details = {"group_instance_id": instance, "client_id": f"{group.name}-client", "client_host": host,
                   "protocols": ["range"]}  # fmt: skip
        records.append(("member_joined", member, group.generation, "", group.state, details))
        if group.state != PREPARING:
            records.append(self._started(group, "member_joined", member))
        return records

    def _leave(self, group: Group, cause: str, removal: str) -> list[Rec]:
        member = group.members.pop(self.rng.randrange(len(group.members)))
        group.instances.pop(member, None)
        kind = "member_left" if removal in ("leave", "admin_removal") else "member_expired"
        details = {"client_reason": "the consumer is closing"} if removal == "leave" else {}
        return [(kind, member, group.generation, removal, PREPARING, details), self._started(group, cause, member)]

    def _replace(self, group: Group, rebalance: bool) -> list[Rec]:
        """A static member back under a new id: no rebalance unless its protocols changed."""
        old = self.rng.choice(list(group.instances))
        new = self._new_member()
        instance = group.instances.pop(old)
        group.instances[new] = instance
        group.members[group.members.index(old)] = new
        details = {"group_instance_id": instance, "old_member_id": old, "client_id": f"{group.name}-client"}
        records: list[Rec] = [("member_replaced", new, group.generation, "", STABLE, details)]
        if rebalance:
            records.append(self._started(group, self.rng.choice(("protocol_changed", "static_member_replaced")), new))
        return records

    def _avoided(self, group: Group, reason: str, join_reason: int) -> Rec:
        member = self.rng.choice(group.members)
        details = {"join_reason": join_reason, "group_instance_id": group.instances.get(member, "")}
        return ("rebalance_avoided", member, group.generation, reason, STABLE, details)

    def _complete(self, group: Group) -> list[Rec]:
        group.generation += 1
        group.state = COMPLETING
        details = {"protocol": "range", "leader": group.members[0], "members": list(group.members)}
        return [("generation_completed", "", group.generation, "", COMPLETING, details)]

    def _commit(self, group: Group) -> Rec:
        count = self.rng.randint(1, 6)
        topic = self.rng.choice(TOPICS)
        group.offset += self.rng.randint(1, 500)
        offsets = [[topic, p, group.offset + p] for p in range(count)]
        member = self.rng.choice(group.members)
        return ("offsets_committed", member, group.generation, "", group.state, {"count": count, "offsets": offsets})


def _quotas(events: int, sizes: list[int]) -> list[int]:
    """Events per partition in proportion to its groups, summing to `events`."""
    total = sum(sizes)
    quotas = [events * n // total for n in sizes]
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k])[: events - sum(quotas)]:
        quotas[k] += 1
    return quotas


def generate(events: int, out: Path, seed: int = 1, groups: int = 500, partitions: int = 16,
             failover_every: int = FAILOVER_EVERY) -> dict[str, Any]:  # fmt: skip
    """Writes OUT/events.jsonl, OUT/manifest.json and OUT/truth.json (last: its presence means complete); the
    truth."""
    rng = random.Random(seed)
    by_partition: list[list[Group]] = [[] for _ in range(partitions)]
    for i in range(groups):
        name = f"{PREFIXES[i % len(PREFIXES)]}-{i:05d}"
        by_partition[partition_for(name, partitions)].append(Group(name, rng.paretovariate(1.5)))
    used = [k for k in range(partitions) if by_partition[k]]
    quotas = _quotas(events, [len(by_partition[k]) for k in used])
    if min(quotas) < 8:
        raise ValueError(f"{events} events are too few for {len(used)} partitions with groups")
    truth = Truth()
    manifest_partitions: dict[str, dict[str, int]] = {}
    out.mkdir(parents=True, exist_ok=True)
    (out / "truth.json").unlink(missing_ok=True)
    with (out / "events.jsonl").open("w") as f:
        for k, quota in zip(used, quotas, strict=True):
            sim = Simulation(k, by_partition[k], rng, truth, f, failover_every)
            sim.run(quota)
            assert sim.first_index is not None
            manifest_partitions[str(k)] = {"events": quota, "first_index": sim.first_index, "last_index": sim.index}
    manifest = {"version": EVENT_VERSION, "events": truth.events, "sources": [f"synthetic (seed {seed})"],
                "duplicates_dropped": 0, "bad_lines": [], "conflicts": [],
                "partitions": manifest_partitions}  # fmt: skip
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    found = {"seed": seed, "groups": groups, "partitions": partitions, **truth.as_dict()}
    (out / "truth.json").write_text(json.dumps(found, indent=2) + "\n")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, required=True, metavar="N")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--failover-every", type=int, default=FAILOVER_EVERY, metavar="ENTRIES",
                        help="a partition's entries between two elections, on average")  # fmt: skip
    args = parser.parse_args(argv)
    truth = generate(args.events, args.out, args.seed, args.groups, args.partitions, args.failover_every)
    print(json.dumps(truth, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
