"""`GroupMember`: a worker's membership in a group — join, sync, heartbeat, commit — with the error policy of
SPEC §5 (Kafka's classic consumer coordinator, eager rebalancing).

Error policy:
* COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / unreachable node → find the coordinator again (backoff);
* COORDINATOR_LOAD_IN_PROGRESS → retry the same node (backoff);
* REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION → rejoin with the same member id;
* UNKNOWN_MEMBER_ID → rejoin with no member id; MEMBER_ID_REQUIRED → adopt the given id and rejoin;
* FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL and request errors → fatal: the member stops and
  `wait_failed()` raises.
* GROUP_AUTHORIZATION_FAILED (the node's ACL refuses this caller the group) from any call, FindCoordinator
  included → fatal as above; `commit()` and `committed()` raise it to their caller.
* THROTTLING_QUOTA_EXCEEDED on JoinGroup (the group's join rate) → wait the reply's throttle_time_ms, back off,
  join again; GROUP_MAX_SIZE_REACHED and POLICY_VIOLATION (a configured limit) → fatal, `MemberFailed` carries
  the node's error_message; an OffsetCommit refused as a whole gives its code for every partition.
Ownership: partitions are revoked (`on_revoked`) before every rejoin, and the member stops believing it
owns its assignment once a session timeout has passed without a successful heartbeat: no wait of the
heartbeat loop outlasts that deadline. `revoke_reason` says why the last revocation happened.
A static member (group_instance_id) never sends LeaveGroup on close; a dynamic one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import grpc

from groupcoord.client.assignors import Assignor, get_assignor
from groupcoord.client.batching import StreamBroken
from groupcoord.client.discovery import (
    Backoff,
    Connections,
    CoordinatorUnavailable,
    GroupAuthorizationFailed,
    InvalidGroupId,
)
from groupcoord.client.protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupcoord.client.security import PLAINTEXT, ClientSecurity
from groupcoord.logfields import fields
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)


def _installed_version() -> str:
    try:
        return version("groupcoord")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return ""


# What the member tells the coordinator it runs (DescribeGroups shows it), as a Kafka client does in ApiVersions.
SOFTWARE_NAME = "groupcoord-python"
SOFTWARE_VERSION = _installed_version()
Callback = Callable[[Assignment], Awaitable[None] | None]
REDISCOVER = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)
REJOIN = (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID)
JoinReason = pb.JoinGroupRequest.JoinReason
# Why an assignment was revoked (`GroupMember.revoke_reason`, set before `on_revoked` runs).
REVOKE_REJOIN, REVOKE_SESSION_LOST, REVOKE_FATAL, REVOKE_CLOSED = "rejoin", "session_lost", "fatal", "closed"


class MemberFailed(Exception):
    """A fatal error code: the member cannot go on (e.g. another process holds its group_instance_id)."""

    def __init__(self, code: int, where: str, message: str = "") -> None:
        name = Errors(code).name if code in Errors._value2member_map_ else str(code)
        super().__init__(f"{where}: {name}" + (f" ({message})" if message else ""))
        self.code = code


class _Moved(Exception):
    """The coordinator moved or is unreachable: rediscover."""


class GroupMember:
    def __init__(
        self,
        bootstrap: list[str],
        group_id: str,
        topics: dict[str, int],
        client_id: str = "groupcoord-client",
        group_instance_id: str = "",
        assignor: str | Assignor = "range",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int = 3_000,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        join_reason: int = JoinReason.UNKNOWN,
        security: ClientSecurity = PLAINTEXT,
        connections: Connections | None = None,
    ) -> None:
        self.group_id = group_id
        self.topics = dict(topics)
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self.assignor = get_assignor(assignor) if isinstance(assignor, str) else assignor
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.join_reason = join_reason
        self.member_id = ""
        self.generation_id = -1
        self.assignment = Assignment(())
        # Members of one process (and one event loop) may share `connections`: channels, the coordinator cache,
        # and the batches their heartbeats and commits travel in. The member closes only connections it opened.
        self._owns_connections = connections is None
        self._connections = Connections(bootstrap, security=security) if connections is None else connections
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.last_heartbeat_ok = 0.0  # time.monotonic() of the last successful heartbeat (or SyncGroup)
        self.revoke_reason = ""
        self._stable = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_stable(self, timeout_s: float = 30.0) -> Assignment:
        """Until the member holds an assignment of the current generation."""
        await asyncio.wait_for(self._stable.wait(), timeout_s)
        return self.assignment

    async def wait_failed(self) -> None:
        """Raises the fatal error that stopped the member (returns when closed normally)."""
        if self._task is not None:
            await self._task

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, MemberFailed):
                await self._task
        await self._revoke(REVOKE_CLOSED)
        if not self.group_instance_id and self.member_id:
            # Dynamic members leave so the group rebalances at once; static ones keep their place.
            with contextlib.suppress(Exception):
                request = pb.LeaveGroupRequest(group_id=self.group_id)
                request.members.add(member_id=self.member_id, reason="closed")
                await self._call("LeaveGroup", request, attempts=3, lookup_timeout_s=2.0)
        if self._owns_connections:
            await self._connections.close()

    # -- offsets --------------------------------------------------------------------------------------

    async def commit(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commits offsets of this generation; returns the error code per partition (NONE = acknowledged)."""
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
        response = await self._call("OffsetCommit", request)
        if response.error_code != Errors.NONE:
            # Refused as a whole by a configured limit (e.g. too many partitions): every partition gets the code.
            log.warning("member.commit_refused", extra=fields(group=self.group_id, error=response.error_message))
            return dict.fromkeys(offsets, response.error_code)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    async def committed(self) -> dict[tuple[str, int], int]:
        response = await self._call("OffsetFetch", pb.OffsetFetchRequest(group_id=self.group_id))
        return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}

    # -- the membership loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = Backoff()
        reason = REVOKE_REJOIN
        while not self._closing:
            try:
                await self._join_and_sync(reason)
                backoff.reset()
                reason = await self._heartbeat_until_rejoin()
            except _Moved:
                self._connections.forget(self.group_id)
                await backoff.wait()
            except MemberFailed:
                # Another process may own these partitions now (e.g. fenced): stop believing we do.
                await self._revoke(REVOKE_FATAL)
                raise
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("member.loop_failed", extra=fields(group=self.group_id, member=self.member_id))
                await backoff.wait()

    async def _join_and_sync(self, reason: str) -> None:
        await self._revoke(reason)
        self._stable.clear()
        backoff = Backoff()
        while True:
            joined = await self._join()
            assignments: dict[str, bytes] = {}
            if joined.leader == joined.member_id and not joined.skip_assignment:
                assignments = self._assign(joined.members)
            request = pb.SyncGroupRequest(
                group_id=self.group_id,
                generation_id=joined.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=joined.protocol_name,
                assignments=[pb.SyncGroupRequest.Assignment(member_id=m, assignment=a) for m, a in assignments.items()],
            )
            synced = await self._call("SyncGroup", request)
            if synced.error_code in REJOIN:
                if synced.error_code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await backoff.wait()
                continue
            self._check(synced.error_code, "SyncGroup", synced.error_message)
            self.generation_id = joined.generation_id
            self.assignment = decode_assignment(synced.assignment) if synced.assignment else Assignment(())
            self.last_heartbeat_ok = time.monotonic()
            self._stable.set()
            log.info(
                "member.assigned",
                extra=fields(group=self.group_id, member=self.member_id, generation=self.generation_id,
                             partitions=len(self.assignment.partitions)),
            )  # fmt: skip
            await self._notify(self.on_assigned, self.assignment)
            return

    def _assign(self, members: Any) -> dict[str, bytes]:
        """The leader's job; a member whose metadata does not decode gets nothing rather than failing everyone."""
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                subscriptions[m.member_id] = decode_subscription(m.metadata)
            except ValueError as exc:
                log.warning(
                    "member.bad_subscription", extra=fields(group=self.group_id, member=m.member_id, error=str(exc))
                )
        assigned = self.assignor.assign(subscriptions)
        return {m.member_id: encode_assignment(assigned.get(m.member_id, Assignment(()))) for m in members}

    async def _join(self) -> pb.JoinGroupResponse:
        backoff = Backoff()
        while True:
            metadata = encode_subscription(Subscription(self.topics, owned=self.assignment.partitions))
            request = pb.JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[pb.JoinGroupRequest.Protocol(name=self.assignor.name, metadata=metadata)],
                client_id=self.client_id,
                join_reason=self.join_reason,
                client_software_name=SOFTWARE_NAME,
                client_software_version=SOFTWARE_VERSION,
            )  # fmt: skip
            joined = await self._call("JoinGroup", request, timeout_s=self.rebalance_timeout_ms / 1000 + 10)
            if joined.error_code == Errors.MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.REBALANCE_IN_PROGRESS):
                if joined.error_code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await backoff.wait()
                continue
            if joined.error_code == Errors.THROTTLING_QUOTA_EXCEEDED:
                # The group's JoinGroup rate is used up: wait as told, then back off further each time, so
                # that many throttled members do not all come back at once.
                log.info("member.join_throttled", extra=fields(group=self.group_id, wait_ms=joined.throttle_time_ms))
                await asyncio.sleep(joined.throttle_time_ms / 1000)
                await backoff.wait()
                continue
            self._check(joined.error_code, "JoinGroup", joined.error_message)
            self.member_id = joined.member_id
            return joined

    async def _heartbeat_until_rejoin(self) -> str:
        """Heartbeats until the group needs a rejoin; returns why the assignment must be revoked.

        The assignment is kept while the coordinator may still hold our session, never longer: every sleep and
        every call is cut at the session deadline, so a coordinator that hangs cannot stretch our ownership."""
        session_s = self.session_timeout_ms / 1000
        while not self._closing:
            session_left = session_s - (time.monotonic() - self.last_heartbeat_ok)
            await asyncio.sleep(max(min(self.heartbeat_interval_s, session_left), 0))
            session_left = session_s - (time.monotonic() - self.last_heartbeat_ok)
            if session_left <= 0:
                log.warning("member.session_lost", extra=fields(group=self.group_id, member=self.member_id))
                return REVOKE_SESSION_LOST
            request = pb.HeartbeatRequest(
                group_id=self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
            try:
                reply = await asyncio.wait_for(
                    self._call(
                        "Heartbeat",
                        request,
                        attempts=1,
                        timeout_s=min(self.heartbeat_interval_s + 1, session_left),
                        lookup_timeout_s=session_left,
                    ),
                    session_left,
                )
            except (_Moved, TimeoutError):
                continue
            if reply.error_code == Errors.NONE:
                self.last_heartbeat_ok = time.monotonic()
                continue
            if reply.error_code in REJOIN:
                if reply.error_code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                return REVOKE_REJOIN
            self._check(reply.error_code, "Heartbeat", reply.error_message)
        return REVOKE_CLOSED

    # -- plumbing -------------------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        request: Any,
        attempts: int = 0,
        timeout_s: float | None = None,
        lookup_timeout_s: float = 30.0,
    ) -> Any:
        """One RPC to the group's coordinator, retried across LOAD_IN_PROGRESS and moves (`attempts`=0: forever
        until the member closes); raises `_Moved` when out of attempts or when no node names a coordinator
        within `lookup_timeout_s`."""
        backoff = Backoff()
        tries = 0
        while True:
            tries += 1
            try:
                address = await self._connections.coordinator(self.group_id, timeout_s=lookup_timeout_s)
            except InvalidGroupId as exc:
                raise MemberFailed(Errors.INVALID_GROUP_ID, str(exc)) from None
            except GroupAuthorizationFailed as exc:
                raise MemberFailed(Errors.GROUP_AUTHORIZATION_FAILED, str(exc)) from None
            except CoordinatorUnavailable:
                if attempts:
                    raise _Moved() from None
                continue
            try:
                reply = await self._send(method, address, request, timeout_s or self._connections.request_timeout_s)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise MemberFailed(Errors.INVALID_REQUEST, f"{method}: {exc.details()}") from None
                code = None
            except StreamBroken:
                code = None
            else:
                code = _first_code(reply)
                if code == Errors.GROUP_AUTHORIZATION_FAILED:
                    raise MemberFailed(code, getattr(reply, "error_message", "") or method)
                if code not in REDISCOVER and code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
                    return reply
            if code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
                self._connections.forget(self.group_id)
            if attempts and tries >= attempts:
                raise _Moved()
            await backoff.wait()

    async def _send(self, method: str, address: str, request: Any, timeout_s: float) -> Any:
        """Heartbeats and commits go in the batches of the connections' streams, every other call is a unary call."""
        if method == "Heartbeat":
            return await self._connections.heartbeats.call(address, request, timeout_s)
        if method == "OffsetCommit":
            return await self._connections.commits.call(address, request, timeout_s)
        return await getattr(self._connections.stub(address), method)(request, timeout=timeout_s)

    def _check(self, code: int, where: str, message: str = "") -> None:
        if code != Errors.NONE:
            raise MemberFailed(code, where, message)

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


def _first_code(reply: Any) -> int:
    """The code that says whether the coordinator handled the call: the whole-request code when set, else the
    first per-partition one (OffsetCommit answers "not the coordinator" per partition)."""
    code = getattr(reply, "error_code", Errors.NONE)
    if code != Errors.NONE:
        return code
    for topic in getattr(reply, "topics", ()):
        for partition in topic.partitions:
            return partition.error_code
    return Errors.NONE
