"""Synthetic schema-v1 events (docs/EVENTS.md) and the scripted scenario the pipeline tests assert on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

T0 = 1_700_000_040_000  # 2023-11-14T22:14:00Z, a minute boundary
MINUTE = 60_000

Event = dict[str, Any]


def rec(group: str, kind: str, member: str = "", generation: int | None = None, reason: str = "", state: str = "",
        **details: Any) -> Event:  # fmt: skip
    """One record's event fields; `EventLog.entry` adds where and when it was written."""
    return {"group": group, "kind": kind, "member": member, "generation": generation, "reason": reason,
            "state": state, "details": details}  # fmt: skip


class EventLog:
    """Events as `groupcoord events export` writes them: per partition a Raft log, one call per entry."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._index: dict[int, int] = {}
        self._leader: dict[int, tuple[int, int]] = {}

    def _next(self, partition: int, step: int = 1) -> int:
        self._index[partition] = self._index.get(partition, 0) + step
        return self._index[partition]

    def leader(self, partition: int, term: int, node: int, at: int | None) -> None:
        """A new leader's barrier, after its pysyncobj no-op (an index without an event); `at` None: old data."""
        self._leader[partition] = (term, node)
        barrier = {**rec("", "barrier_committed"), "time_ms": at}
        self._append(partition, self._next(partition, 2), 0, barrier)

    def entry(self, partition: int, at: int, *records: Event) -> None:
        """One Raft entry of the current leader with its records in batch order."""
        index = self._next(partition)
        for position, record in enumerate(records):
            self._append(partition, index, position, {**record, "time_ms": at})

    def _append(self, partition: int, index: int, position: int, event: Event) -> None:
        term, node = self._leader[partition]
        where = {"partition": partition, "index": index, "position": position, "term": term, "node": node}
        self.events.append({"v": 1, **where, **event})

    def lines(self) -> list[str]:
        """JSON Lines in log order, (partition, index, position)."""
        ordered = sorted(self.events, key=lambda e: (e["partition"], e["index"], e["position"]))
        return [json.dumps(e, separators=(",", ":")) for e in ordered]


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _joined(group: str, member: str, generation: int, state: str, instance: str = "") -> Event:
    return rec(group, "member_joined", member, generation, state=state, group_instance_id=instance, client_id="c")


def _started(group: str, reason: str, member: str, generation: int, members: list[str], instance: str = "") -> Event:
    details = {"join_reason": 0, "members": members} | ({"group_instance_id": instance} if instance else {})
    return rec(group, "rebalance_started", member, generation, reason, "PreparingRebalance", **details)


def _completed(group: str, generation: int, members: list[str]) -> Event:
    details = {"protocol": "range", "leader": members[0] if members else "", "members": members}
    return rec(group, "generation_completed", "", generation, state="CompletingRebalance", **details)


def _synced(group: str, generation: int, members: list[str]) -> Event:
    return rec(group, "sync_completed", "", generation, state="Stable", members=members)


def _replaced(group: str, new: str, old: str, instance: str, generation: int) -> Event:
    details = {"group_instance_id": instance, "old_member_id": old, "client_id": "c"}
    return rec(group, "member_replaced", new, generation, state="Stable", **details)


def _committed(group: str, member: str, generation: int, count: int) -> Event:
    offsets = [["orders", p, 100 + p] for p in range(count)]
    return rec(group, "offsets_committed", member, generation, state="Stable", count=count, offsets=offsets)


def scenario() -> list[str]:
    """Groups g1 and g3 on partition 0, g2 on partition 1; times are T0 + ms (T0 a minute boundary).

    g1: m1 joins (rebalance 1000-4000, m2 joins meanwhile); static i2 comes back as m3 in Stable (avoided); m3 rejoins
    with RESTART (avoided); i2 returns as m4 with a new protocol (replaced, but a rebalance in the same entry, 20000)
    that restarts once when m1 leaves (22000) and completes at 25000; commits at 30000, 59000 and, after the
    failover of partition 0 (term 2 node 1 -> term 3 node 2, barrier at 61500), at 62000.
    g2: two join rebalances (2000-4500, 5050-8000) under an old leader whose barrier has no time; a new leader
    (term 2, node 1) at 9000; a2's session expires (65000-68000); a known member rejoins (avoided, 70000); a pending
    member expires (90000); a3 joins at 95000 and the data ends mid-rebalance.
    g3: b1 joins at 40000, the group is deleted at 41000 mid-rebalance, b1 joins a new g3 at 50000 (open at the end).
    """
    log = EventLog()
    log.leader(0, term=2, node=1, at=T0)
    log.leader(1, term=1, node=3, at=None)
    log.entry(0, T0 + 1000, _joined("g1", "m1", 0, "Empty"), _started("g1", "member_joined", "m1", 0, ["m1"]))
    log.entry(0, T0 + 1500, _joined("g1", "m2", 0, "PreparingRebalance", instance="i2"))
    log.entry(1, T0 + 2000, _joined("g2", "a1", 0, "Empty"), _started("g2", "member_joined", "a1", 0, ["a1"]))
    log.entry(0, T0 + 4000, _completed("g1", 1, ["m1", "m2"]))
    log.entry(0, T0 + 4100, _synced("g1", 1, ["m1", "m2"]))
    log.entry(1, T0 + 4500, _completed("g2", 1, ["a1"]))
    log.entry(1, T0 + 5050, _joined("g2", "a2", 1, "Stable"), _started("g2", "member_joined", "a2", 1, ["a1", "a2"]))
    log.entry(1, T0 + 8000, _completed("g2", 2, ["a1", "a2"]))
    log.leader(1, term=2, node=1, at=T0 + 9000)
    log.entry(0, T0 + 10_000, _replaced("g1", "m3", "m2", "i2", 1))
    restart = rec("g1", "rebalance_avoided", "m3", 1, "restart", "Stable", join_reason=1, group_instance_id="i2")
    log.entry(0, T0 + 12_000, restart)
    protocol_changed = _started("g1", "protocol_changed", "m4", 1, ["m1", "m4"], instance="i2")
    log.entry(0, T0 + 20_000, _replaced("g1", "m4", "m3", "i2", 1), protocol_changed)
    left = rec("g1", "member_left", "m1", 1, "leave", "PreparingRebalance")
    log.entry(0, T0 + 22_000, left, _started("g1", "member_left", "m1", 1, ["m4"]))
    log.entry(0, T0 + 25_000, _completed("g1", 2, ["m4"]))
    log.entry(0, T0 + 25_100, _synced("g1", 2, ["m4"]))
    log.entry(0, T0 + 30_000, _committed("g1", "m4", 2, 3))
    log.entry(0, T0 + 40_000, _joined("g3", "b1", 0, "Empty"), _started("g3", "member_joined", "b1", 0, ["b1"]))
    log.entry(0, T0 + 41_000, rec("g3", "group_deleted", reason="admin", state="Dead"))
    log.entry(0, T0 + 50_000, _joined("g3", "b1", 0, "Empty"), _started("g3", "member_joined", "b1", 0, ["b1"]))
    log.entry(0, T0 + 59_000, _committed("g1", "m4", 2, 2))
    log.leader(0, term=3, node=2, at=T0 + 61_500)
    log.entry(0, T0 + 62_000, _committed("g1", "m4", 2, 4))
    expired = rec("g2", "member_expired", "a2", 2, "session_expired", "PreparingRebalance")
    log.entry(1, T0 + 65_000, expired, _started("g2", "session_expired", "a2", 2, ["a1"]))
    log.entry(1, T0 + 68_000, _completed("g2", 3, ["a1"]))
    known = rec("g2", "rebalance_avoided", "a1", 3, "known_member", "Stable", join_reason=0, group_instance_id="")
    log.entry(1, T0 + 70_000, known)
    log.entry(1, T0 + 90_000, rec("g2", "pending_member_expired", "p1", 3, "pending_expired", "Stable"))
    log.entry(1, T0 + 95_000, _joined("g2", "a3", 3, "Stable"), _started("g2", "member_joined", "a3", 3, ["a1", "a3"]))
    return log.lines()
