"""A member's calls to its group's coordinator: found through `Connections`, retried across moves and loads with
backoff until a deadline, counted in the member's stats, and a streak of unanswered calls logged once when it
begins and once when it ends.

A call without `attempts` retries until its `deadline`, then raises the last try's retriable error
(`BootstrapUnreachable` when no node answered at all); with `attempts` it raises `Moved` once they are used up (the
heartbeat loop, which keeps its own deadline). A refusal that retrying cannot change raises at once: the code's
`FatalError` (GROUP_AUTHORIZATION_FAILED; INVALID_GROUP_ID from FindCoordinator), `InvalidRequest` for a message
the node would not read. Every other answer is returned for the member to act on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from groupcoord.base.logfields import fields
from groupcoord.client.batching import StreamBroken
from groupcoord.client.discovery import Backoff, Connections
from groupcoord.client.errors import CoordinatorUnavailable, InvalidRequest, RetriableError, error_for, error_name
from groupcoord.client.stats import StatsRecorder
from groupcoord.protocol.errors import Errors

# The member's logger: these lines are about the member, whichever module writes them.
log = logging.getLogger("groupcoord.client.member")

REDISCOVER = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)


class Moved(Exception):
    """The coordinator moved or is unreachable: rediscover."""


class CoordinatorCalls:
    def __init__(
        self,
        connections: Connections,
        group_id: str,
        stats: StatsRecorder,
        log_fields: Callable[[], dict[str, Any]],
        bootstrap_timeout_s: float,
        coordinator_timeout_s: float,
    ) -> None:
        self.connections, self.group_id, self.stats = connections, group_id, stats
        self._log_fields = log_fields
        self.bootstrap_timeout_s, self.coordinator_timeout_s = bootstrap_timeout_s, coordinator_timeout_s
        self.reached = False  # a coordinator has answered once
        self.last_answer = time.monotonic()  # of the last answer from a coordinator (or of `started()`)
        self.unavailable_since: float | None = None  # a streak of unanswered calls began then (logged once)

    def started(self) -> None:
        self.last_answer = time.monotonic()

    def membership_deadline(self) -> float:
        """Joins and syncs retry until no coordinator has answered for the allowed time."""
        return self.last_answer + self._allowed_s()

    async def call(
        self,
        method: str,
        request: Any,
        attempts: int = 0,
        timeout_s: float | None = None,
        lookup_timeout_s: float = 30.0,
        deadline: float | None = None,
    ) -> Any:
        """One RPC to the group's coordinator (module docstring); `deadline` is time.monotonic(), None: forever."""
        backoff = Backoff()
        tries = 0
        while True:
            tries += 1
            if tries > 1:
                self.stats.retried()
            lookup_s = lookup_timeout_s
            if deadline is not None:
                lookup_s = max(min(lookup_s, deadline - time.monotonic()), 0.1)
            try:
                address = await self.connections.coordinator(self.group_id, timeout_s=lookup_s)
            except CoordinatorUnavailable as exc:
                self.stats.failed("FindCoordinator", error_name(exc.code))
                self._unavailable(method, exc.last_cause or str(exc))
                if attempts:
                    raise Moved() from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            sent = time.monotonic()
            try:
                reply = await self._send(method, address, request, timeout_s or self.connections.request_timeout_s)
            except grpc.aio.AioRpcError as exc:
                self.stats.failed(method, exc.code().name)
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidRequest(f"{method}: {exc.details()}") from None
                code, last = None, f"{address}: {exc.code().name}"
            except StreamBroken:
                self.stats.failed(method, "STREAM_BROKEN")
                code, last = None, f"{address}: the stream broke"
            else:
                code = _first_code(reply)
                name = error_name(code) if code != Errors.NONE else ""
                if code == Errors.GROUP_AUTHORIZATION_FAILED:
                    self.stats.answered(method, time.monotonic() - sent, name)
                    raise error_for(code, getattr(reply, "error_message", "") or method)
                if code not in REDISCOVER and code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
                    self.stats.answered(method, time.monotonic() - sent, name)
                    self._answered()
                    return reply
                self.stats.failed(method, name)
                last = f"{address}: {name}"
            if code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
                self.connections.forget(self.group_id)
            self._unavailable(method, last)
            if attempts and tries >= attempts:
                raise Moved()
            if deadline is not None and time.monotonic() >= deadline:
                raise _deadline_error(method, code, last)
            await backoff.wait()

    async def _send(self, method: str, address: str, request: Any, timeout_s: float) -> Any:
        """Heartbeats and commits go in the batches of the connections' streams, every other call is a unary call."""
        if method == "Heartbeat":
            return await self.connections.heartbeats.call(address, request, timeout_s)
        if method == "OffsetCommit":
            return await self.connections.commits.call(address, request, timeout_s)
        return await getattr(self.connections.stub(address), method)(request, timeout=timeout_s)

    def _allowed_s(self) -> float:
        return self.coordinator_timeout_s if self.reached else self.bootstrap_timeout_s

    def _answered(self) -> None:
        self.reached = True
        self.last_answer = time.monotonic()
        if self.unavailable_since is not None:
            log.info(
                "member.coordinator_available",
                extra=fields(**self._log_fields(), after_s=round(self.last_answer - self.unavailable_since, 3)),
            )
            self.unavailable_since = None

    def _unavailable(self, method: str, cause: str) -> None:
        """Logs a streak of unanswered calls once, when it begins."""
        if self.unavailable_since is not None:
            return
        self.unavailable_since = time.monotonic()
        log.warning(
            "member.coordinator_unavailable",
            extra=fields(**self._log_fields(), call=method, cause=cause, retrying_for_s=self._allowed_s()),
        )


def _deadline_error(method: str, code: int | None, last: str) -> RetriableError:
    """What a call that ran out of time raises: the coordinator's retriable code, or unavailability."""
    if code is not None:
        error = error_for(code, f"{method}: {last}")
        if isinstance(error, RetriableError):
            return error
    return CoordinatorUnavailable(f"{method}: no coordinator answered (last: {last})", last_cause=last)


def _first_code(reply: Any) -> int:
    """The code that says whether the coordinator handled the call: the whole-request code when set, else the
    first per-partition one (OffsetCommit answers "not the coordinator" per partition)."""
    code: int = getattr(reply, "error_code", Errors.NONE)
    if code != Errors.NONE:
        return code
    for topic in getattr(reply, "topics", ()):
        for partition in topic.partitions:
            return int(partition.error_code)
    return Errors.NONE
