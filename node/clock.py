"""The real clock behind the coordinator's injected `Clock` protocol."""

from __future__ import annotations

import time

_NS_PER_MS = 1_000_000


class SystemClock:
    """Wall time for records (retention, events); monotonic time for timers, immune to clock steps.

    `mono_ms` reads CLOCK_MONOTONIC, the clock the asyncio and uvloop loops run on, but the timer
    driver does not rely on that: it converts deadlines to delays from `mono_ms()` (see driver.py).
    """

    def wall_ms(self) -> int:
        return time.time_ns() // _NS_PER_MS

    def mono_ms(self) -> int:
        return time.monotonic_ns() // _NS_PER_MS
