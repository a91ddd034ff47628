"""The membership loop under `GroupMember` (client/member.py): join, sync, heartbeat, and the revocations and
callbacks around them, eager or cooperative (KIP-429). The error policy it follows is client/member.py's docstring.

Its own base class so that `GroupMember` holds what an application calls (lifecycle, waits, offsets, stats) and
this the protocol rounds; the state both use is declared here and set by `GroupMember.__init__`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from groupcoord.base.logfields import fields
from groupcoord.client.assignors import COOPERATIVE, EAGER, Assignor
from groupcoord.client.calls import CoordinatorCalls, Moved
from groupcoord.client.discovery import Backoff, Connections
from groupcoord.client.errors import GroupcoordError, error_for
from groupcoord.client.protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupcoord.client.session import Session
from groupcoord.client.stats import StatsRecorder
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

# The member's log lines, wherever in the SDK they are written, under the logger applications configure for it.
log = logging.getLogger("groupcoord.client.member")


def _installed_version() -> str:
    """The SDK's distribution (groupcoord-client), or the development install of the whole tree (groupcoord)."""
    for distribution in ("groupcoord-client", "groupcoord"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return ""  # run from a source tree that was never installed


# What the member tells the coordinator it runs (DescribeGroups shows it), as a Kafka client does in ApiVersions.
SOFTWARE_NAME = "groupcoord-python"
SOFTWARE_VERSION = _installed_version()
Callback = Callable[[Assignment], Awaitable[None] | None]
REJOIN = (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID)
# Why an assignment was revoked (`GroupMember.revoke_reason`, set before `on_revoked` runs). "lost": the
# coordinator no longer knows our member id or generation (Kafka's onPartitionsLost).
REVOKE_REJOIN, REVOKE_SESSION_LOST, REVOKE_FATAL, REVOKE_CLOSED = "rejoin", "session_lost", "fatal", "closed"
REVOKE_LOST = "lost"


class MembershipLoop:
    """The rounds of a member's membership: `_run` until closed or stopped by a fatal error."""

    group_id: str
    topics: dict[str, int]
    client_id: str
    group_instance_id: str
    assignors: list[Assignor]
    rebalance_protocol: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    on_assigned: Callback | None
    on_revoked: Callback | None
    join_reason: int
    member_id: str
    generation_id: int
    assignment: Assignment
    revoke_reason: str
    _closing: bool
    _stable: asyncio.Event
    _rejoin_needed: bool
    _heartbeat_generation: int
    _revoking_in_rejoin: bool
    _previous: tuple[tuple[str, int], ...]
    _stats: StatsRecorder
    _calls: CoordinatorCalls
    _session: Session
    _connections: Connections

    async def _run(self) -> None:
        backoff = Backoff()
        reason = REVOKE_REJOIN
        while not self._closing:
            try:
                await self._join_and_sync(reason)
                backoff.reset()
                reason = await self._heartbeat_until_rejoin()
            except Moved:
                self._connections.forget(self.group_id)
                await backoff.wait()
            except GroupcoordError:
                # Fatal, or no coordinator for longer than allowed: another process may own these partitions
                # now (e.g. fenced), so stop believing we do.
                await self._revoke(REVOKE_FATAL)
                raise
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("member.loop_failed", extra=fields(**self._log_fields()))
                await backoff.wait()

    async def _join_and_sync(self, reason: str) -> None:
        self._stats.rebalance_started()
        if self.rebalance_protocol == EAGER or reason != REVOKE_REJOIN:
            if self.rebalance_protocol == EAGER and self.assignment.partitions:
                self._previous = self.assignment.partitions
            await self._revoke(reason)
        self._rejoin_needed = False
        self._stable.clear()
        self._heartbeat_generation = self.generation_id
        done = asyncio.Event()
        keeper = asyncio.ensure_future(self._keep_session(done))
        try:
            joined, synced, sync_sent = await self._rejoin()
        finally:
            done.set()
            if self._revoking_in_rejoin:
                await keeper  # never cut a user's on_revoked short
            else:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
        self.generation_id = joined.generation_id
        self._session.renewed(sync_sent)
        if self._session.left() <= 0:
            # The answer came too late to prove anything: the group may have gone on without us.
            log.warning("member.session_lost", extra=fields(**self._log_fields(), during="sync"))
            await self._revoke(REVOKE_SESSION_LOST)
            self._rejoin_needed = True
            return
        assigned = decode_assignment(synced.assignment) if synced.assignment else Assignment(())
        if self.rebalance_protocol == COOPERATIVE:
            await self._take_cooperative(assigned)
        else:
            self.assignment = assigned
            self._synced()
            await self._notify(self.on_assigned, self.assignment)

    async def _rejoin(self) -> tuple[pb.JoinGroupResponse, pb.SyncGroupResponse, float]:
        """JoinGroup then SyncGroup, until a round completes for us; also when the SyncGroup was sent."""
        backoff = Backoff()
        while True:
            joined = await self._join()
            self._heartbeat_generation = joined.generation_id
            assignments: dict[str, bytes] = {}
            if joined.leader == joined.member_id and not joined.skip_assignment:
                assignments = self._assign(joined.protocol_name, joined.members)
            request = pb.SyncGroupRequest(
                group_id=self.group_id,
                generation_id=joined.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=joined.protocol_name,
                assignments=[pb.SyncGroupRequest.Assignment(member_id=m, assignment=a) for m, a in assignments.items()],
            )
            sync_sent = time.monotonic()
            synced = await self._calls.call("SyncGroup", request, deadline=self._calls.membership_deadline())
            if synced.error_code in REJOIN:
                if synced.error_code != Errors.REBALANCE_IN_PROGRESS:
                    await self._revoke(REVOKE_LOST)
                if synced.error_code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await backoff.wait()
                continue
            self._check(synced.error_code, "SyncGroup", synced.error_message)
            return joined, synced, sync_sent

    async def _take_cooperative(self, assigned: Assignment) -> None:
        """KIP-429's second half: give up what the leader took away, then take what it added; rejoin at once if
        anything was given up, so that the next round can hand it to its new owner."""
        owned, target = set(self.assignment.partitions), set(assigned.partitions)
        revoked, added = Assignment(tuple(owned - target)), Assignment(tuple(target - owned))
        if revoked.partitions:
            self.revoke_reason = REVOKE_REJOIN
            self.assignment = Assignment(tuple(owned & target))
            self._rejoin_needed = True
            await self._notify(self.on_revoked, revoked)
        self.assignment = assigned
        if not self._rejoin_needed:
            self._synced()
        await self._notify(self.on_assigned, added)

    def _synced(self) -> None:
        self._stable.set()
        self._stats.rebalance_done()
        log.info(
            "member.assigned",
            extra=fields(**self._log_fields(), partitions=len(self.assignment.partitions),
                         took_s=round(self._stats.last_rebalance_s, 3)),
        )  # fmt: skip

    async def _keep_session(self, done: asyncio.Event) -> None:
        """Heartbeats go on beside JoinGroup and SyncGroup (client/session.py), so that the session stays proven
        while they wait: a cooperative member keeps its partitions through them, and a SyncGroup parked longer than
        a session would otherwise leave no proof. If the session runs out while partitions are still owned, they
        are revoked, as in the heartbeat loop."""
        if await self._session.hold(lambda: bool(self.assignment.partitions), self._heartbeat_request, done):
            log.warning("member.session_lost", extra=fields(**self._log_fields(), during="rejoin"))
            self._revoking_in_rejoin = True
            try:
                await self._revoke(REVOKE_SESSION_LOST)
            finally:
                self._revoking_in_rejoin = False

    def _heartbeat_request(self) -> pb.HeartbeatRequest | None:
        # During a rejoin: the generation of the round under way once JoinGroup has answered; none without an id.
        if not self.member_id:
            return None
        return pb.HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self._heartbeat_generation,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )

    def _assign(self, protocol_name: str, members: Any) -> dict[str, bytes]:
        """The leader's job, with the assignor the group agreed on; a member whose metadata does not decode gets
        nothing rather than failing everyone."""
        assignor = next((a for a in self.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise error_for(Errors.INCONSISTENT_GROUP_PROTOCOL, f"the group chose {protocol_name!r}, not offered")
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                subscriptions[m.member_id] = decode_subscription(m.metadata)
            except ValueError as exc:
                log.warning(
                    "member.bad_subscription", extra=fields(group=self.group_id, member=m.member_id, error=str(exc))
                )
        assigned = assignor.assign(subscriptions)
        return {m.member_id: encode_assignment(assigned.get(m.member_id, Assignment(()))) for m in members}

    async def _join(self) -> pb.JoinGroupResponse:
        backoff = Backoff()
        while True:
            # Eager members revoked everything before this; cooperative ones declare what they keep.
            metadata = encode_subscription(
                Subscription(self.topics, owned=self.assignment.partitions, previous=self._previous)
            )
            protocols = [pb.JoinGroupRequest.Protocol(name=a.name, metadata=metadata) for a in self.assignors]
            request = pb.JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=protocols,
                client_id=self.client_id,
                join_reason=self.join_reason,  # type: ignore[arg-type]  # an int of JoinReason's, as GroupMember takes it
                client_software_name=SOFTWARE_NAME,
                client_software_version=SOFTWARE_VERSION,
            )  # fmt: skip
            joined: pb.JoinGroupResponse = await self._calls.call(
                "JoinGroup",
                request,
                timeout_s=self.rebalance_timeout_ms / 1000 + 10,
                deadline=self._calls.membership_deadline(),
            )
            if joined.error_code == Errors.MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.REBALANCE_IN_PROGRESS):
                if joined.error_code == Errors.UNKNOWN_MEMBER_ID:
                    await self._revoke(REVOKE_LOST)
                    self.member_id = ""
                await backoff.wait()
                continue
            if joined.error_code == Errors.THROTTLING_QUOTA_EXCEEDED:
                # The group's JoinGroup rate is used up: wait as told, then back off further each time, so
                # that many throttled members do not all come back at once.
                log.info("member.join_throttled", extra=fields(**self._log_fields(), wait_ms=joined.throttle_time_ms))
                await asyncio.sleep(joined.throttle_time_ms / 1000)
                await backoff.wait()
                continue
            self._check(joined.error_code, "JoinGroup", joined.error_message)
            self.member_id = joined.member_id
            return joined

    async def _heartbeat_until_rejoin(self) -> str:
        """Heartbeats until the group needs a rejoin; returns why the assignment must be revoked.

        The assignment is kept while the coordinator may still hold our session, never longer: every sleep and
        every call is cut at the session deadline (client/session.py), so a coordinator that hangs cannot stretch
        our ownership."""
        self._heartbeat_generation = self.generation_id
        while not self._closing:
            if self._rejoin_needed:
                return REVOKE_REJOIN
            await self._session.next_beat()
            if self._session.left() <= 0:
                log.warning("member.session_lost", extra=fields(**self._log_fields()))
                return REVOKE_SESSION_LOST
            request = self._heartbeat_request()
            if request is None:
                return REVOKE_LOST
            code = await self._session.beat(request)
            if code is None or code == Errors.NONE:
                continue
            if code == Errors.REBALANCE_IN_PROGRESS:
                return REVOKE_REJOIN
            if code in REJOIN:
                if code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                return REVOKE_LOST
            self._check(code, "Heartbeat")
        return REVOKE_CLOSED

    # -- plumbing -------------------------------------------------------------------------------------

    def _log_fields(self) -> dict[str, Any]:
        """What every log line of the member says it is about."""
        return {"group": self.group_id, "member": self.member_id, "generation": self.generation_id}

    def _check(self, code: int, where: str, message: str = "") -> None:
        if code != Errors.NONE:
            raise error_for(code, f"{where}: {message}" if message else where)

    async def _revoke(self, reason: str) -> None:
        if self.assignment.partitions:
            self.revoke_reason = reason
            lost, self.assignment = self.assignment, Assignment(())
            await self._notify(self.on_revoked, lost)

    @staticmethod
    async def _notify(callback: Callback | None, assignment: Assignment) -> None:
        if callback is not None:
            result = callback(assignment)
            if asyncio.iscoroutine(result):
                await result
