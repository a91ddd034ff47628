"""The real clock behind the coordinator's injected `Clock` protocol."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from groupcoord.logfields import fields

log = logging.getLogger(__name__)

_NS_PER_MS = 1_000_000
# A step of the wall clock up to this size is followed at once (NTP's corrections); a bigger one is a jump.
MAX_FOLLOWED_STEP_NS = 1_000_000_000


class SystemClock:
    """Wall time for records (retention, events); monotonic time for timers, immune to clock steps.

    The wall time is the wall clock as it was when the node started, carried forward by the monotonic clock, so a
    wall clock that jumps while the node runs (set by hand, a broken time source) moves neither the records'
    times nor the offsets' expiry: an 8-day jump forward would otherwise expire every group's offsets on the
    partitions this node leads, and the expiry would be replicated. Steps up to `MAX_FOLLOWED_STEP_NS` are followed
    (NTP's corrections); a bigger one is logged once (`clock.jump`) and not followed until the node restarts.

    `mono_ms` reads CLOCK_MONOTONIC, the clock the asyncio and uvloop loops run on, but the timer
    driver does not rely on that: it converts deadlines to delays from `mono_ms()` (see driver.py).
    """

    def __init__(
        self, wall_ns: Callable[[], int] = time.time_ns, mono_ns: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._wall_ns, self._mono_ns = wall_ns, mono_ns
        self._offset = wall_ns() - mono_ns()  # wall minus monotonic, as followed
        self._reported = self._offset  # the wall clock's offset last logged as a jump

    def wall_ms(self) -> int:
        mono = self._mono_ns()
        actual = self._wall_ns() - mono
        if abs(actual - self._offset) <= MAX_FOLLOWED_STEP_NS:
            self._offset = self._reported = actual
        elif abs(actual - self._reported) > MAX_FOLLOWED_STEP_NS:
            self._reported = actual
            log.warning(
                "clock.jump",
                extra=fields(
                    seconds=round((actual - self._offset) / 1e9, 3),
                    action="the node keeps its own time (the wall clock at its start, carried forward by the "
                    "monotonic clock) until it restarts",
                ),
            )
        return (mono + self._offset) // _NS_PER_MS

    def mono_ms(self) -> int:
        return self._mono_ns() // _NS_PER_MS
