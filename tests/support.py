"""Test doubles shared by the state-machine tests: a fake clock and predictable member ids."""

from __future__ import annotations

import itertools

WALL_EPOCH_MS = 1_700_000_000_000


class FakeClock:
    """Wall and monotonic time that move only when a test advances them."""

    def __init__(self) -> None:
        self.now = 0

    def wall_ms(self) -> int:
        return WALL_EPOCH_MS + self.now

    def mono_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class SeqIds:
    """new_uuid replacement: "u1", "u2", ... so member ids are predictable."""

    def __init__(self) -> None:
        self._n = itertools.count(1)

    def __call__(self) -> str:
        return f"u{next(self._n)}"
