"""Keyed soft timers on the injected monotonic clock: each key is typed and carries the closure it runs.

Kafka's CoordinatorTimer: `arm(key, deadline, operation)` schedules `operation`, re-arming a key replaces its
deadline and operation, and `cancel(key)` drops it. An operation runs later than the state it was armed in, so each
re-checks its precondition (the group and member still there, the group still in the phase) before it writes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from groupcoord.coordinator.result import CoordinatorResult


@dataclass(frozen=True, slots=True)
class SessionTimeout:
    """A member's session: it expires unless a heartbeat (or any request of it) re-arms it."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class LoadedSessions:
    """The sessions a new leader started for one group's members at load, until each is re-armed, paused or ended:
    one timer per group instead of one per member (`Rebalance.load`)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class PendingMemberTimeout:
    """A KIP-394 id handed out and not joined yet."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class JoinDeadline:
    """The end of a join phase: the rebalance timeout, or one window of the initial rebalance delay."""

    group_id: str


@dataclass(frozen=True, slots=True)
class SyncDeadline:
    """The end of a sync phase: members that joined and never synced."""

    group_id: str


@dataclass(frozen=True, slots=True)
class RetentionCheck:
    """The partition's periodic offset-retention and empty-group check."""


TimerKey = SessionTimeout | LoadedSessions | PendingMemberTimeout | JoinDeadline | SyncDeadline | RetentionCheck
TimerOperation = Callable[[CoordinatorResult], None]


class Timers:
    def __init__(self) -> None:
        self._armed: dict[TimerKey, tuple[int, int, TimerOperation]] = {}
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._armed)

    def __contains__(self, key: TimerKey) -> bool:
        return key in self._armed

    def arm(self, key: TimerKey, deadline_ms: int, operation: TimerOperation) -> None:
        self._seq += 1
        self._armed[key] = (deadline_ms, self._seq, operation)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        # Cancelled and replaced entries stay in the heap until popped; compact when they dominate.
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._armed):
            self._heap = [(d, s, k) for k, (d, s, _) in self._armed.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: TimerKey) -> None:
        self._armed.pop(key, None)

    def deadline(self, key: TimerKey) -> int | None:
        entry = self._armed.get(key)
        return entry[0] if entry else None

    def clear(self) -> None:
        self._armed.clear()
        self._heap.clear()

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> TimerOperation | None:
        """Removes the earliest timer due at `now_ms` and returns its operation, or None."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        return self._armed.pop(key)[2]

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            entry = self._armed.get(key)
            if entry is not None and entry[:2] == (deadline, seq):
                return
            heapq.heappop(heap)
