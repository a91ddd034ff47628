"""Runs the pure coordinator core on the event loop: calls, reply delivery, timers, and the commit seam.

The core answers a call with `Effects`: records (already applied) and replies addressed by token. A reply
may answer a request parked by an earlier call (JoinGroup waiting for the join phase, SyncGroup waiting
for the leader), so every reply of every Effects resolves the future of its token. A token whose caller
went away (cancelled, deadline) has no future any more and its reply is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Hashable, Iterable

from google.protobuf.message import Message

from groupcoord.coordinator import Clock, Effects, GroupCoordinator
from groupcoord.coordinator.runtime import CoreCallFailed
from groupcoord.node.logs import fields
from groupcoord.node.metrics import NodeMetrics
from groupcoord.protocol import records as r

log = logging.getLogger(__name__)

Token = int


class CoreDriver:
    """The only code that touches the core; everything runs on the loop thread, so no locks."""

    def __init__(
        self, core: GroupCoordinator, clock: Clock, loop: asyncio.AbstractEventLoop, metrics: NodeMetrics | None = None
    ) -> None:
        self._core = core
        self._metrics = metrics
        self._clock = clock
        self._loop = loop
        self._tokens = itertools.count(1)
        self._waiting: dict[Hashable, asyncio.Future[Message]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        # What DescribeCluster reports as the commit index until the Raft log exists.
        self.batches_committed = 0

    async def call(self, invoke: Callable[[Token], Effects]) -> Message:
        """Runs one core call with a fresh token and waits for that token's reply, however late it comes."""
        token = next(self._tokens)
        future: asyncio.Future[Message] = self._loop.create_future()
        self._waiting[token] = future
        try:
            self._run(lambda: invoke(token))
            return await future
        finally:
            self._waiting.pop(token, None)

    def unload(self) -> None:
        """Answers every parked request (COORDINATOR_NOT_AVAILABLE) and stops the timers: the node is leaving."""
        self._run(self._core.unload)

    def _run(self, invoke: Callable[[], Effects]) -> None:
        """A call that fails half-way still commits and delivers what it did before failing, then raises."""
        failure: CoreCallFailed | None = None
        try:
            effects = invoke()
        except CoreCallFailed as exc:
            failure, effects = exc, exc.effects
        finally:
            self._rearm()
        self._commit(effects.records)
        self._deliver(effects.replies)
        if failure is not None:
            raise failure.__cause__ or failure

    def _commit(self, records: list[r.Record]) -> None:
        """The replication seam: the records are applied in the core; replies wait until this returns.

        With Raft (next issue) this appends the batch to the partition's log and replies go out on commit.
        """
        if not records:
            return
        self.batches_committed += 1
        if self._metrics is not None:
            self._metrics.on_commit(records)
        if log.isEnabledFor(logging.DEBUG):
            for rec in records:
                log.debug("record", extra=fields(type=type(rec).__name__, group_id=rec.group_id, record=rec))

    def _deliver(self, replies: Iterable[tuple[Hashable, Message]]) -> None:
        for token, message in replies:
            future = self._waiting.pop(token, None)
            if future is not None and not future.done():
                future.set_result(message)

    # -- timers -------------------------------------------------------------------------------------

    def _rearm(self) -> None:
        """Keeps exactly one loop timer, at the core's earliest deadline.

        The core's deadlines are `Clock.mono_ms()` values. They are turned into a delay from `mono_ms()`
        now and anchored at `loop.time()`, so nothing assumes the two clocks share an epoch (they do on
        Linux: both CLOCK_MONOTONIC, uvloop's cached at millisecond resolution). A timer that fires a
        little early finds nothing due, and the same deadline is simply armed again.
        """
        deadline = self._core.next_deadline()
        if deadline == self._timer_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is not None:
            delay_s = max(deadline - self._clock.mono_ms(), 0) / 1000
            self._timer = self._loop.call_at(self._loop.time() + delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = None
        try:
            self._run(self._core.tick)
        except Exception:
            log.exception("timer.failed")
