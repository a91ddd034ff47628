"""The real clock behind the coordinator's injected `Clock` protocol."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from groupcoord.base.logfields import fields

log = logging.getLogger(__name__)

_NS_PER_MS = 1_000_000
# A step of the wall clock up to this size is followed at once (NTP's corrections); a bigger one is a jump.
MAX_FOLLOWED_STEP_NS = 1_000_000_000
# At most one clock.skew line per node per this many seconds (every partition this node leads measures it).
SKEW_LOG_S = 60.0


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
        self._skew_logged_ns: int | None = None

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

    def report_skew(self, skew_ms: int) -> None:
        """This node's time differs from the voters' majority time by `skew_ms` (positive: ahead)."""
        mono = self._mono_ns()
        if self._skew_logged_ns is not None and mono - self._skew_logged_ns < SKEW_LOG_S * 1e9:
            return
        self._skew_logged_ns = mono
        log.warning(
            "clock.skew",
            extra=fields(
                seconds=round(skew_ms / 1000, 3),
                action="records and offset retention use the time most voters agree on; fix this machine's clock "
                "(NTP), then restart the node",
            ),
        )


def majority_time_ms(own_ms: int, peers_ms: list[int], voters: int) -> int:
    """The latest time that the clock of at least one voter in any majority agrees with, so that the wrong clocks of
    a minority cannot move it: with f = (voters - 1) // 2 clocks wrong at most, the (f + 1)-th latest reading is
    no later than some right clock (a minority ahead expires nothing early) and no earlier than some right clock
    unless readings are missing (a minority behind only makes retention later). With fewer than f + 1 readings, the
    earliest of them (the conservative side)."""
    readings = sorted([own_ms, *peers_ms], reverse=True)
    rank = (voters - 1) // 2
    return readings[rank] if rank < len(readings) else readings[-1]


class ClusterClock:
    """A partition leader's time for records and retention: the voters' majority time rather than its own clock.

    `SystemClock` keeps a running node from following a jump, but a node *started* with a wrong wall clock (a bad
    RTC after a reboot, a VM restored from a snapshot) would stamp records and expire offsets with it: 8 days ahead,
    it expired every group's offsets on the partitions it led. Each follower's Raft acknowledgements carry its own
    wall time (raft/transport.py); the leader takes `majority_time_ms` of its own and theirs. `peers_ms` gives the
    other voters' readings (carried forward to now) and the number of voters; a difference over a second between
    this node's own time and the result is logged (`clock.skew`)."""

    def __init__(self, clock: SystemClock, peers_ms: Callable[[], tuple[list[int], int]]) -> None:
        self._clock, self._peers_ms = clock, peers_ms

    def wall_ms(self) -> int:
        own = self._clock.wall_ms()
        peers, voters = self._peers_ms()
        agreed = majority_time_ms(own, peers, voters)
        if abs(own - agreed) * _NS_PER_MS > MAX_FOLLOWED_STEP_NS:
            self._clock.report_skew(own - agreed)
        return agreed

    def mono_ms(self) -> int:
        return self._clock.mono_ms()
