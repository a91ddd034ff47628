"""A member's session as far as the member can prove it: the basis of how long it may believe it owns partitions.

The coordinator renews a member's session when it takes a heartbeat (answered NONE, or REBALANCE_IN_PROGRESS while
the group rebalances), and ends it a session timeout later. The member cannot see when the coordinator took the
request, only when it sent it, which is no later: so the member's deadline is the send time of the last heartbeat
answered so, plus the session timeout, and it is never later than the coordinator's. A SyncGroup answered NONE
renews it from its send time too: the coordinator restarted the session when it took the request, or later, when
it answered the requests it had parked. Never from an answer's arrival: a reply can be held up for longer than a
session (a paused node, a one-way partition) while the group moves on without the member. No wait of the member
may outlast the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from groupcoord.client.calls import CoordinatorCalls, Moved
from groupcoord.client.errors import GroupcoordError
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

# A heartbeat answered so proves the coordinator held our session when it took the request.
ALIVE = (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)


class Session:
    def __init__(self, calls: CoordinatorCalls, session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self._calls = calls
        self.timeout_s = session_timeout_ms / 1000
        self.interval_s = heartbeat_interval_ms / 1000
        self.last_ok = 0.0  # time.monotonic() the proof dates from: a heartbeat's send time, a SyncGroup's answer

    def left(self) -> float:
        return self.timeout_s - (time.monotonic() - self.last_ok)

    def renewed(self, at: float | None = None) -> None:
        self.last_ok = max(self.last_ok, time.monotonic() if at is None else at)

    async def next_beat(self) -> None:
        """Sleeps a heartbeat interval, or less if the session ends sooner."""
        await asyncio.sleep(max(min(self.interval_s, self.left()), 0))

    async def beat(self, request: pb.HeartbeatRequest, bound_s: float | None = None) -> int | None:
        """One heartbeat, cut at the session's end (or after `bound_s`); its code, or None without an answer (no
        coordinator, moved, timed out). ALIVE codes renew the session from the send time."""
        left = self.left() if bound_s is None else bound_s
        if left <= 0:
            return None
        sent = time.monotonic()
        call = self._calls.call(
            "Heartbeat", request, attempts=1, timeout_s=min(self.interval_s + 1, left), lookup_timeout_s=left
        )
        try:
            reply = await asyncio.wait_for(call, left)
        except (Moved, TimeoutError):
            return None
        if reply.error_code in ALIVE:
            self.renewed(sent)
        return int(reply.error_code)

    async def hold(
        self, holding: Callable[[], bool], request: Callable[[], pb.HeartbeatRequest | None], done: asyncio.Event
    ) -> bool:
        """Heartbeats beside a rejoin's JoinGroup and SyncGroup until `done` (and cancelled: a cancellation that
        meets a call finishing can be lost in `wait_for`, the event cannot), so that the session stays proven
        while they wait (their answers say what went wrong, so other codes only fail to renew). Returns True as
        soon as the session has run out while `holding()` (partitions still owned)."""
        while not done.is_set():
            if holding() and self.left() <= 0:
                return True
            await asyncio.sleep(max(min(self.interval_s, self.left()), 0) if holding() else self.interval_s)
            if holding() and self.left() <= 0:
                return True
            beat = request()
            if beat is not None:
                with contextlib.suppress(GroupcoordError):
                    await self.beat(beat, None if holding() else self.interval_s + 1)
        return False
