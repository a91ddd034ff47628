"""`GroupMember`: a worker's membership in a group — join, sync, heartbeat, commit — with the error policy of
Kafka's classic consumer coordinator (docs/CLIENT.md#errors), with eager or cooperative (KIP-429) rebalancing.

Error policy:
* COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / unreachable node → find the coordinator again (backoff);
* COORDINATOR_LOAD_IN_PROGRESS → retry the same node (backoff);
* REBALANCE_IN_PROGRESS → rejoin with the same member id; ILLEGAL_GENERATION → the same, after giving up every
  partition (`revoke_reason` "lost");
* UNKNOWN_MEMBER_ID → the same with no member id; MEMBER_ID_REQUIRED → adopt the given id and rejoin;
* FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL and request errors → fatal: the member stops and
  `wait_failed()` (and `wait_stable()`) raise the code's `FatalError` (client/errors.py).
* GROUP_AUTHORIZATION_FAILED (the node's ACL refuses this caller the group) from any call, FindCoordinator
  included → fatal as above; `commit()` and `committed()` raise it to their caller.
* No answer from any coordinator for `coordinator_timeout_ms` (`bootstrap_timeout_ms` before the first answer),
  checked whenever the member needs a coordinator to join (so at the latest a session timeout later) → the member
  stops with `CoordinatorUnavailable` (`BootstrapUnreachable` when no node answered at all); the streak is logged
  once when it begins and once when it ends. `commit()` and `committed()` retry for at most
  `default_api_timeout_ms`, then raise the retriable error; `commit()` before the first assignment raises
  `CommitFailed`.
* THROTTLING_QUOTA_EXCEEDED on JoinGroup (the group's join rate) → wait the reply's throttle_time_ms, back off,
  join again; GROUP_MAX_SIZE_REACHED and POLICY_VIOLATION (a configured limit) → fatal, the error carries
  the node's error_message; an OffsetCommit refused as a whole gives its code for every partition.
Ownership, eager (the default): partitions are revoked (`on_revoked`) before every rejoin. Cooperative (every
assignor supports it, e.g. `assignor="cooperative-sticky"`): the member keeps its partitions while it rejoins and
declares them in its subscription; after SyncGroup `on_revoked` gets only the partitions it lost and `on_assigned`
only those it gained, and a member that lost any rejoins at once so that the next round can hand them over.
Either way the member stops believing it owns anything once a session timeout has passed since the send time of
the last heartbeat the coordinator accepted (during a cooperative rejoin heartbeats go on beside JoinGroup and
SyncGroup for that reason): no wait outlasts that deadline. `revoke_reason` says why the last revocation happened.
A static member (group_instance_id) never sends LeaveGroup on close; a dynamic one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from groupcoord.base.logfields import fields
from groupcoord.client.assignors import Assignor, assignors_from, rebalance_protocol
from groupcoord.client.calls import CoordinatorCalls
from groupcoord.client.discovery import Connections
from groupcoord.client.errors import CommitFailed, GroupcoordError, WaitTimedOut
from groupcoord.client.protocol import Assignment
from groupcoord.client.rebalance import (
    REVOKE_CLOSED,
    REVOKE_FATAL,
    REVOKE_LOST,
    REVOKE_REJOIN,
    REVOKE_SESSION_LOST,
    Callback,
    MembershipLoop,
)
from groupcoord.client.security import PLAINTEXT, ClientSecurity
from groupcoord.client.session import Session
from groupcoord.client.stats import MemberStats, StatsCallback, StatsRecorder, report_stats
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

# The revocation reasons (`GroupMember.revoke_reason`) are part of this module's API; the loop that sets them is
# client/rebalance.py's.
__all__ = [
    "REVOKE_CLOSED",
    "REVOKE_FATAL",
    "REVOKE_LOST",
    "REVOKE_REJOIN",
    "REVOKE_SESSION_LOST",
    "Callback",
    "GroupMember",
    "JoinReason",
]

log = logging.getLogger(__name__)

JoinReason = pb.JoinGroupRequest.JoinReason


class GroupMember(MembershipLoop):
    """A worker's membership in a group: `async with GroupMember(bootstrap, group_id, topics) as member`, then
    `await member.wait_stable()` for the partitions it owns, `commit()` as it makes progress. The error policy and
    the settings that bound waiting are in this module's docstring and docs/CLIENT.md."""

    def __init__(
        self,
        bootstrap: list[str],
        group_id: str,
        topics: dict[str, int],
        client_id: str = "groupcoord-client",
        group_instance_id: str = "",
        assignor: str | Assignor | Sequence[str | Assignor] = "range",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int = 3_000,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        join_reason: int = JoinReason.UNKNOWN,
        security: ClientSecurity = PLAINTEXT,
        connections: Connections | None = None,
        bootstrap_timeout_ms: int = 30_000,
        coordinator_timeout_ms: int = 300_000,
        default_api_timeout_ms: int = 60_000,
        stats_cb: StatsCallback | None = None,
        stats_interval_ms: int = 0,
    ) -> None:
        self.group_id = group_id
        self.topics = dict(topics)
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        # In preference order, all offered in JoinGroup; the coordinator picks the one every member offers.
        self.assignors = assignors_from(assignor)
        self.assignor = self.assignors[0]
        self.rebalance_protocol = rebalance_protocol(self.assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.join_reason = join_reason
        # How long the member goes on without an answer from a coordinator before it stops: before its first
        # answer (a wrong address should fail fast), and after it (a failover takes seconds, an outage longer).
        self.bootstrap_timeout_s = bootstrap_timeout_ms / 1000
        self.coordinator_timeout_s = coordinator_timeout_ms / 1000
        # How long `commit()` and `committed()` retry moves and reloads before they raise (Kafka's setting).
        self.default_api_timeout_s = default_api_timeout_ms / 1000
        self.member_id = ""
        self.generation_id = -1
        self.assignment = Assignment(())
        # Members of one process (and one event loop) may share `connections`: channels, the coordinator cache,
        # and the batches their heartbeats and commits travel in. The member closes only connections it opened.
        self._owns_connections = connections is None
        self._connections = Connections(bootstrap, security=security) if connections is None else connections
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.revoke_reason = ""
        self._stable = asyncio.Event()
        # Cooperative: set when SyncGroup took partitions away, so that the next round can hand them over.
        self._rejoin_needed = False
        # The generation heartbeats carry during a cooperative rejoin (the new one once JoinGroup answered).
        self._heartbeat_generation = -1
        self._revoking_in_rejoin = False
        # Eager: what the member held before it revoked, declared as `previous` so the sticky assignors stay sticky.
        self._previous: tuple[tuple[str, int], ...] = ()
        # client/stats.py: `stats()` at any time; `stats_cb` every `stats_interval_ms` too (0: never).
        self._stats = StatsRecorder()
        self._calls = CoordinatorCalls(
            self._connections, group_id, self._stats, self._log_fields, self.bootstrap_timeout_s,
            self.coordinator_timeout_s,
        )  # fmt: skip
        self._session = Session(self._calls, session_timeout_ms, heartbeat_interval_ms)
        self.stats_cb = stats_cb
        self.stats_interval_s = stats_interval_ms / 1000
        self._reporter: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the member was started already")
        self._calls.started()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        if self.stats_cb is not None and self.stats_interval_s > 0:
            report = report_stats(self.stats_interval_s, self.stats, self.stats_cb, self._log_fields)
            self._reporter = loop.create_task(report)

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def wait_stable(self, timeout_s: float = 30.0) -> Assignment:
        """Until the member holds an assignment of the current generation. Raises the error that stopped the
        member if it stops first, `WaitTimedOut` (a `TimeoutError`) if `timeout_s` passes first."""
        if self._task is None:
            raise RuntimeError("the member is not started")
        stable = asyncio.ensure_future(self._stable.wait())
        try:
            await asyncio.wait({stable, self._task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stable.cancel()
        if self._task.done():
            self._task.result()  # raises what stopped the member
            raise RuntimeError("the member is closed")
        if self._stable.is_set():
            return self.assignment
        raise WaitTimedOut(
            f"group {self.group_id!r} not stable within {timeout_s:g} s (member {self.member_id or '-'}, "
            f"generation {self.generation_id})"
        )

    async def wait_failed(self) -> None:
        """Raises the error that stopped the member (returns when it was closed)."""
        if self._task is not None:
            await self._task

    @property
    def last_heartbeat_ok(self) -> float:
        """time.monotonic() the member's session is proven from (client/session.py): ownership ends a session
        timeout later unless renewed."""
        return self._session.last_ok

    def stats(self) -> MemberStats:
        """What the member has done so far, and its state now (client/stats.py)."""
        if self._task is not None and self._task.done():
            stopped = not self._task.cancelled() and self._task.exception() is not None
            state = "stopped" if stopped else "closed"
        else:
            state = "closed" if self._closing else "stable" if self._stable.is_set() else "joining"
        since = self._calls.unavailable_since
        return self._stats.snapshot(
            group_id=self.group_id,
            member_id=self.member_id,
            generation_id=self.generation_id,
            state=state,
            assignment=tuple(self.assignment.partitions),
            coordinator=self._connections.known_coordinator(self.group_id),
            unavailable_s=0.0 if since is None else time.monotonic() - since,
        )

    async def close(self) -> None:
        self._closing = True
        if self._reporter is not None:
            self._reporter.cancel()
        failed = False
        if self._task is not None:
            failed = self._task.done() and not self._task.cancelled() and self._task.exception() is not None
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, GroupcoordError):
                await self._task
        await self._revoke(REVOKE_CLOSED)
        if not self.group_instance_id and self.member_id and not failed:
            # Dynamic members leave so the group rebalances at once; static ones keep their place. A member that
            # an error stopped does not: it was fenced or refused, or no coordinator answers.
            with contextlib.suppress(Exception):
                request = pb.LeaveGroupRequest(group_id=self.group_id)
                request.members.add(member_id=self.member_id, reason="closed")
                await self._calls.call("LeaveGroup", request, attempts=3, lookup_timeout_s=2.0)
        if self._owns_connections:
            await self._connections.close()

    # -- offsets --------------------------------------------------------------------------------------

    async def commit(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commits offsets of this generation; returns the error code per partition (NONE = acknowledged).

        Raises `CommitFailed` before the member's first assignment (a commit with no generation would be a
        group-less "simple" commit, which the coordinator refuses or, for an empty group, takes as an admin's)."""
        if self.generation_id < 0:
            raise CommitFailed(f"group {self.group_id!r}: the member has not joined yet (no generation to commit in)")
        request = pb.OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )
        by_topic: dict[str, Any] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            if topic not in by_topic:
                by_topic[topic] = request.topics.add(name=topic)
            by_topic[topic].partitions.add(partition_index=partition, committed_offset=offset)
        response = await self._calls.call("OffsetCommit", request, deadline=self._api_deadline())
        if response.error_code != Errors.NONE:
            # Refused as a whole by a configured limit (e.g. too many partitions): every partition gets the code.
            log.warning("member.commit_refused", extra=fields(**self._log_fields(), error=response.error_message))
            return dict.fromkeys(offsets, response.error_code)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    async def committed(self) -> dict[tuple[str, int], int]:
        request = pb.OffsetFetchRequest(group_id=self.group_id)
        response = await self._calls.call("OffsetFetch", request, deadline=self._api_deadline())
        return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}

    # -- plumbing -------------------------------------------------------------------------------------

    def _api_deadline(self) -> float:
        return time.monotonic() + self.default_api_timeout_s
