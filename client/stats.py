"""What a member has been doing, for the application's metrics: librdkafka's stats callback, the Java consumer's
`metrics()`. `GroupMember.stats()` returns a `MemberStats` at any time; with `stats_cb` and `stats_interval_ms` the
member also hands one to the callback at that interval (off by default, as librdkafka's `statistics.interval.ms`).

Counters run from the member's start and never reset, so an exporter takes differences (Prometheus counters);
latencies are kept as count, sum and maximum per call (the mean is `sum / count`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from groupcoord.base.logfields import fields

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CallStats:
    """One kind of call to the coordinator (JoinGroup, SyncGroup, Heartbeat, OffsetCommit, ...)."""

    count: int = 0  # answered by a coordinator (any error code)
    failures: int = 0  # no answer: unreachable, timed out, the coordinator moved or was loading
    latency_sum_s: float = 0.0  # of the answered ones
    latency_max_s: float = 0.0


@dataclass(frozen=True, slots=True)
class MemberStats:
    time_ms: int  # wall clock when taken
    group_id: str
    member_id: str
    generation_id: int
    state: str  # "joining", "stable", "stopped" (an error ended it) or "closed"
    assignment: tuple[TopicPartition, ...]
    coordinator: str  # the address calls go to now ("" while none is known)
    rebalances: int  # joins completed (a first join counts)
    last_rebalance_s: float  # how long the last one took, from the revocation to the assignment (0 before any)
    retries: int  # calls made again after a failure or a retriable code
    unavailable_s: float  # how long calls have gone unanswered now (0 when the coordinator answers)
    calls: dict[str, CallStats] = field(default_factory=dict)
    # Every error code a coordinator answered with, handled or not, and transport failures by gRPC status, by name.
    errors: dict[str, int] = field(default_factory=dict)


class StatsRecorder:
    """The member's counters; the member reports to it, `snapshot` reads it."""

    def __init__(self) -> None:
        self.rebalances = 0
        self.last_rebalance_s = 0.0
        self.retries = 0
        self.errors: Counter[str] = Counter()
        self._calls: dict[str, list[float]] = {}  # method → [count, failures, latency sum, latency max]
        self._rebalance_started: float | None = None

    def answered(self, method: str, latency_s: float, error: str = "") -> None:
        entry = self._calls.setdefault(method, [0, 0, 0.0, 0.0])
        entry[0] += 1
        entry[2] += latency_s
        entry[3] = max(entry[3], latency_s)
        if error:
            self.errors[error] += 1

    def failed(self, method: str, error: str) -> None:
        self._calls.setdefault(method, [0, 0, 0.0, 0.0])[1] += 1
        self.errors[error] += 1

    def retried(self) -> None:
        self.retries += 1

    def rebalance_started(self) -> None:
        if self._rebalance_started is None:
            self._rebalance_started = time.monotonic()

    def rebalance_done(self) -> None:
        started, self._rebalance_started = self._rebalance_started, None
        self.rebalances += 1
        if started is not None:
            self.last_rebalance_s = time.monotonic() - started

    def snapshot(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        state: str,
        assignment: tuple[TopicPartition, ...],
        coordinator: str,
        unavailable_s: float,
    ) -> MemberStats:
        return MemberStats(
            time_ms=time.time_ns() // 1_000_000,
            group_id=group_id,
            member_id=member_id,
            generation_id=generation_id,
            state=state,
            assignment=assignment,
            coordinator=coordinator,
            rebalances=self.rebalances,
            last_rebalance_s=self.last_rebalance_s,
            retries=self.retries,
            unavailable_s=unavailable_s,
            calls={m: CallStats(int(c), int(f), s, x) for m, (c, f, s, x) in self._calls.items()},
            errors=dict(self.errors),
        )


StatsCallback = Callable[[MemberStats], Awaitable[None] | None]
log = logging.getLogger(__name__)


async def report_stats(
    interval_s: float,
    stats: Callable[[], MemberStats],
    callback: StatsCallback,
    log_fields: Callable[[], dict[str, Any]],
) -> None:
    """Hands `stats()` to the callback every interval; a callback that raises is logged (once) and called on."""
    logged = False
    while True:
        await asyncio.sleep(interval_s)
        try:
            result = callback(stats())
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            if not logged:
                log.exception("member.stats_cb_failed", extra=fields(**log_fields()))
                logged = True
