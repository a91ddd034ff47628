"""Keyed soft timers driven by an injected clock: re-arming a key replaces its old deadline."""

from __future__ import annotations

import heapq
from collections.abc import Hashable


class Timers:
    def __init__(self) -> None:
        self._deadlines: dict[Hashable, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._deadlines

    def arm(self, key: Hashable, deadline_ms: int) -> None:
        self._seq += 1
        self._deadlines[key] = (deadline_ms, self._seq)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        # Cancelled and replaced entries stay in the heap until popped; compact when they dominate.
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadlines):
            self._heap = [(d, s, k) for k, (d, s) in self._deadlines.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        self._deadlines.pop(key, None)

    def deadline(self, key: Hashable) -> int | None:
        entry = self._deadlines.get(key)
        return entry[0] if entry else None

    def clear(self) -> None:
        self._deadlines.clear()
        self._heap.clear()

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Hashable | None:
        """Removes and returns the earliest key due at `now_ms`, or None."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._deadlines[key]
        return key

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._deadlines.get(key) == (deadline, seq):
                return
            heapq.heappop(heap)
