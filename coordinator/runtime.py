"""The plumbing every handler shares: effects, record emission, soft state and timers.

A public call returns `Effects`: the records it wrote (already applied to `self.store`, in order) and
the replies it produced, each addressed by the opaque token of the request it answers. A parked
request's reply comes out of a later call (another request, or `tick()` when a timer fires). The
caller must not send a reply before the records produced up to that reply are committed.

Soft state (parked requests, session deadlines, join/sync deadlines, the initial-delay window) is
never replicated: `load()` rebuilds it from the hard state with fresh deadlines, as a new leader must.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from groupcoord.coordinator.config import GroupConfig
from groupcoord.coordinator.limits import TokenBucket
from groupcoord.coordinator.state import Group, GroupState, GroupStore
from groupcoord.coordinator.timers import Timers
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

Token = Hashable
Message = Any


class Clock(Protocol):
    """Wall time goes into records (retention, events); monotonic time drives timers."""

    def wall_ms(self) -> int: ...

    def mono_ms(self) -> int: ...


@dataclass(slots=True)
class Effects:
    records: list[r.Record] = field(default_factory=list)
    replies: list[tuple[Token, Message]] = field(default_factory=list)
    token: Token | None = None

    @property
    def response(self) -> Message | None:
        """The reply to the call's own request, or None when it was parked."""
        return self.reply_for(self.token)

    def reply_for(self, token: Token) -> Message | None:
        for t, message in self.replies:
            if t == token:
                return message
        return None


class CoreCallFailed(Exception):
    """A call raised half-way. `effects` holds what it did before: records already applied to the store
    (the caller must still replicate them, or replicas diverge) and replies already due to other requests."""

    def __init__(self, effects: Effects) -> None:
        super().__init__("coordinator call failed")
        self.effects = effects


R = TypeVar("R", bound="Runtime")
P = ParamSpec("P")


def core_call(method: Callable[Concatenate[R, Any, Token, P], None]) -> Callable[..., Effects]:
    """Wraps a public call: `call(request, token=None, ...)` returns the `Effects` the body produced."""

    @functools.wraps(method)
    def wrapper(self: R, request: Any = None, token: Token | None = None, *args: P.args, **kwargs: P.kwargs) -> Effects:
        token = self._begin(token)
        try:
            method(self, request, token, *args, **kwargs)
        except Exception as exc:
            raise CoreCallFailed(self._end()) from exc
        return self._end()

    return wrapper


@dataclass(slots=True)
class GroupSoft:
    """Leader-local state of one group."""

    join_waiters: dict[str, Token] = field(default_factory=dict)
    sync_waiters: dict[str, Token] = field(default_factory=dict)
    # Members answered at the end of the join phase that have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    # Not None while the first rebalance of an Empty group waits out group.initial.rebalance.delay.ms.
    initial_remaining_ms: int | None = None
    new_member_added: bool = False
    # JoinGroup admission (`GroupConfig.join_rate_per_s`); created at the group's first counted JoinGroup.
    join_bucket: TokenBucket | None = None


SESSION, PENDING, JOIN, SYNC, RETENTION = "session", "pending", "join", "sync", "retention"


class Runtime:
    def __init__(
        self,
        config: GroupConfig,
        clock: Clock,
        new_uuid: Callable[[], str],
        store: GroupStore | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.new_uuid = new_uuid
        self.store = store if store is not None else GroupStore()
        self.timers = Timers()
        self.soft: dict[str, GroupSoft] = {}
        self.unloaded = False
        self._out = Effects()
        self.load()

    # -- effects ------------------------------------------------------------------------------------

    def _begin(self, token: Token | None) -> Token:
        if token is None:
            token = object()
        self._out = Effects(token=token)
        return token

    def _end(self) -> Effects:
        out, self._out = self._out, Effects()
        return out

    def _reply(self, token: Token, message: Message) -> None:
        self._out.replies.append((token, message))

    def _emit(self, rec: r.Record) -> bool:
        """Applies a record to the store and keeps it for replication; False if it changed nothing."""
        if not self.store.apply(rec):
            return False
        self._out.records.append(rec)
        self._on_applied(rec)
        return True

    def _on_applied(self, rec: r.Record) -> None:
        """Soft-state consequences of records written from several places (topic records have none)."""
        if not isinstance(rec, r.GroupRecord):
            return
        gid = rec.group_id
        if isinstance(rec, r.MemberRemoved):
            self._forget_member(gid, rec.member_id, Errors.UNKNOWN_MEMBER_ID)
        elif isinstance(rec, r.StaticMemberReplaced):
            self._forget_member(gid, rec.old_member_id, Errors.FENCED_INSTANCE_ID)
            self._arm_session(gid, rec.new_member_id, rec.session_timeout_ms)
        elif isinstance(rec, r.MemberAdded):
            self.timers.cancel((PENDING, gid, rec.member_id))
            self._arm_session(gid, rec.member_id, rec.session_timeout_ms)
        elif isinstance(rec, r.PendingMemberAdded):
            self.timers.arm((PENDING, gid, rec.member_id), self._mono() + rec.session_timeout_ms)
        elif isinstance(rec, r.PendingMemberRemoved):
            self.timers.cancel((PENDING, gid, rec.member_id))
        elif isinstance(rec, r.GroupDeleted):
            self.timers.cancel((JOIN, gid))
            self.timers.cancel((SYNC, gid))
            self.soft.pop(gid, None)

    def _forget_member(self, gid: str, member_id: str, code: Errors) -> None:
        self.timers.cancel((SESSION, gid, member_id))
        soft = self.soft.get(gid)
        if soft is None:
            return
        token = soft.join_waiters.pop(member_id, None)
        if token is not None:
            self._reply(token, join_error(code, member_id))
        token = soft.sync_waiters.pop(member_id, None)
        if token is not None:
            self._reply(token, sync_error(code))
        soft.pending_sync.discard(member_id)

    # -- soft state ---------------------------------------------------------------------------------

    def _soft(self, gid: str) -> GroupSoft:
        soft = self.soft.get(gid)
        if soft is None:
            soft = self.soft[gid] = GroupSoft()
        return soft

    def _mono(self) -> int:
        return self.clock.mono_ms()

    def _wall(self) -> int:
        return self.clock.wall_ms()

    def _arm_session(self, gid: str, member_id: str, session_timeout_ms: int) -> None:
        self.timers.arm((SESSION, gid, member_id), self._mono() + session_timeout_ms)

    def _refresh_session(self, group: Group, member_id: str) -> None:
        soft = self.soft.get(group.group_id)
        if soft and (member_id in soft.join_waiters or member_id in soft.sync_waiters):
            return
        self._arm_session(group.group_id, member_id, group.members[member_id].session_timeout_ms)

    def _park_join(self, group: Group, member_id: str, token: Token) -> None:
        soft = self._soft(group.group_id)
        old = soft.join_waiters.get(member_id)
        if old is not None and old != token:
            self._reply(old, join_error(Errors.REBALANCE_IN_PROGRESS, member_id, "superseded by a newer JoinGroup"))
        soft.join_waiters[member_id] = token
        self.timers.cancel((SESSION, group.group_id, member_id))

    def _park_sync(self, group: Group, member_id: str, token: Token) -> None:
        soft = self._soft(group.group_id)
        old = soft.sync_waiters.get(member_id)
        if old is not None and old != token:
            self._reply(old, sync_error(Errors.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"))
        soft.sync_waiters[member_id] = token
        self.timers.cancel((SESSION, group.group_id, member_id))

    # -- lifecycle ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuilds soft state from the hard state: every deadline starts afresh (a new leader's view)."""
        self.timers.clear()
        self.soft.clear()
        self.unloaded = False
        now = self._mono()
        for gid, group in self.store.groups.items():
            for member in group.members.values():
                self.timers.arm((SESSION, gid, member.member_id), now + member.session_timeout_ms)
            for member_id, session_timeout_ms in group.pending_members.items():
                self.timers.arm((PENDING, gid, member_id), now + session_timeout_ms)
            if group.state == GroupState.PREPARING_REBALANCE:
                self.timers.arm((JOIN, gid), now + group.rebalance_timeout_ms)
            elif group.state == GroupState.COMPLETING_REBALANCE:
                self.timers.arm((SYNC, gid), now + group.rebalance_timeout_ms)
        self.timers.arm((RETENTION,), now + self.config.offsets_retention_check_interval_ms)

    @core_call
    def unload(self, _request: None, _token: Token) -> None:
        """The partition moved away: every parked request fails with COORDINATOR_NOT_AVAILABLE."""
        for soft in self.soft.values():
            for member_id, token in soft.join_waiters.items():
                self._reply(token, join_error(Errors.COORDINATOR_NOT_AVAILABLE, member_id))
            for token in soft.sync_waiters.values():
                self._reply(token, sync_error(Errors.COORDINATOR_NOT_AVAILABLE))
        self.soft.clear()
        self.timers.clear()
        self.unloaded = True

    def next_deadline(self) -> int | None:
        """Monotonic time at which `tick()` has work to do."""
        return None if self.unloaded else self.timers.next_deadline()

    @core_call
    def tick(self, _request: None, _token: Token) -> None:
        """Fires every timer that is due."""
        if not self.unloaded:
            now = self._mono()
            while (key := self.timers.pop_due(now)) is not None:
                self._fire(key)  # type: ignore[arg-type]

    def _fire(self, key: tuple[str, ...]) -> None:
        raise NotImplementedError

    def parked_count(self) -> int:
        return sum(len(s.join_waiters) + len(s.sync_waiters) for s in self.soft.values())


def join_error(code: Errors, member_id: str = "", message: str = "", throttle_ms: int = 0) -> pb.JoinGroupResponse:
    return pb.JoinGroupResponse(
        error_code=code, generation_id=-1, member_id=member_id, error_message=message, throttle_time_ms=throttle_ms
    )


def sync_error(code: Errors, message: str = "") -> pb.SyncGroupResponse:
    return pb.SyncGroupResponse(error_code=code, error_message=message)
