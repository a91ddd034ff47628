"""The rebalance of a classic group, shared by the member APIs and the timers: the join and sync phases, member
removal, sessions, and the soft-state consequences of every member record (Kafka's GroupMetadataManager part that
prepareRebalance / completeClassicGroupJoin / the heartbeat and join timers are).

Every member record is written through `Rebalance.emit`, which keeps the soft state in step with it: a removed or
replaced member's parked requests are answered and its session dropped, a new member's session armed. Timer
operations take a group id, not a group: they look the group up again and re-check the phase they were armed for.
"""

from __future__ import annotations

from groupcoord.coordinator.responses import join_error, join_ok, sync_error
from groupcoord.coordinator.result import CoordinatorResult, Token
from groupcoord.coordinator.runtime import Runtime
from groupcoord.coordinator.state import Group, GroupState
from groupcoord.coordinator.timers import (
    JoinDeadline,
    LoadedSessions,
    PendingMemberTimeout,
    SessionTimeout,
    SyncDeadline,
)
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors

MAX_REASON_LENGTH = 255
PREPARING, COMPLETING, STABLE, EMPTY = (
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.EMPTY,
)


def select_protocol(group: Group) -> str:
    """Each member votes for its first protocol that every member supports; most votes wins.

    Ties go to the protocol that got its first vote from the earliest member, so every replica agrees.
    """
    members = list(group.members.values())
    if not members:
        return ""
    candidates = set(members[0].protocol_names())
    for member in members[1:]:
        candidates.intersection_update(member.protocol_names())
    votes: dict[str, int] = {}
    for member in members:
        choice = next((name for name in member.protocol_names() if name in candidates), None)
        if choice is not None:
            votes[choice] = votes.get(choice, 0) + 1
    return max(votes, key=lambda name: votes[name], default="")


class Rebalance:
    """One object for what the member APIs and the timers both do, so neither reaches into the other."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    # -- member records and their soft state ----------------------------------------------------------

    def emit(self, out: CoordinatorResult, rec: r.Record) -> bool:
        """`Runtime.emit`, then what the record means for parked requests and timers."""
        if not self.rt.emit(out, rec):
            return False
        timers = self.rt.timers
        if isinstance(rec, r.MemberRemoved):
            self._forget_member(out, rec.group_id, rec.member_id, Errors.UNKNOWN_MEMBER_ID)
        elif isinstance(rec, r.StaticMemberReplaced):
            self._forget_member(out, rec.group_id, rec.old_member_id, Errors.FENCED_INSTANCE_ID)
            self.arm_session(rec.group_id, rec.new_member_id, rec.session_timeout_ms)
        elif isinstance(rec, r.MemberAdded):
            timers.cancel(PendingMemberTimeout(rec.group_id, rec.member_id))
            self.arm_session(rec.group_id, rec.member_id, rec.session_timeout_ms)
        elif isinstance(rec, r.PendingMemberAdded):
            self.arm_pending(rec.group_id, rec.member_id, self.rt.mono() + rec.session_timeout_ms)
        elif isinstance(rec, r.PendingMemberRemoved):
            timers.cancel(PendingMemberTimeout(rec.group_id, rec.member_id))
        return True

    def _forget_member(self, out: CoordinatorResult, gid: str, member_id: str, code: Errors) -> None:
        self._end_session(gid, member_id)
        soft = self.rt.soft.get(gid)
        if soft is None:
            return
        token = soft.join_waiters.pop(member_id, None)
        if token is not None:
            out.reply(token, join_error(code, member_id))
        token = soft.sync_waiters.pop(member_id, None)
        if token is not None:
            out.reply(token, sync_error(code))
        soft.pending_sync.discard(member_id)

    # -- timers ---------------------------------------------------------------------------------------

    def arm_session(self, gid: str, member_id: str, session_timeout_ms: int) -> None:
        """The member's own session timer, which replaces the one `load()` started for it, if any."""
        self._leave_loaded(gid, member_id)
        self.rt.timers.arm(
            SessionTimeout(gid, member_id),
            self.rt.mono() + session_timeout_ms,
            lambda out: self._session_expired(out, gid, member_id),
        )

    def _end_session(self, gid: str, member_id: str) -> None:
        """No session for the member: it is parked (its session paused) or gone."""
        self.rt.timers.cancel(SessionTimeout(gid, member_id))
        self._leave_loaded(gid, member_id)

    def _leave_loaded(self, gid: str, member_id: str) -> None:
        """Takes the member out of the sessions `load()` started; the group's timer skips it from then on."""
        loaded = self.rt.loaded_sessions.get(gid)
        if loaded is not None:
            loaded.pop(member_id, None)

    def _arm_loaded(self, gid: str, loaded: dict[str, int]) -> None:
        self.rt.timers.arm(LoadedSessions(gid), min(loaded.values()), lambda out: self._loaded_expired(out, gid))

    def _loaded_expired(self, out: CoordinatorResult, gid: str) -> None:
        """The sessions `load()` started that are due, earliest first (as their own timers would have run)."""
        loaded = self.rt.loaded_sessions.get(gid)
        if loaded is None:
            return
        now = self.rt.mono()
        for member_id, _ in sorted((item for item in loaded.items() if item[1] <= now), key=lambda item: item[1]):
            # An expiry's rebalance re-arms the others' sessions (`start_rebalance`): each is checked again here.
            if loaded.pop(member_id, None) is not None:
                self._session_expired(out, gid, member_id)
        if loaded:
            self._arm_loaded(gid, loaded)
        else:
            self.rt.loaded_sessions.pop(gid, None)

    def arm_pending(self, gid: str, member_id: str, deadline: int) -> None:
        self.rt.timers.arm(
            PendingMemberTimeout(gid, member_id), deadline, lambda out: self._pending_expired(out, gid, member_id)
        )

    def arm_join(self, gid: str, deadline: int) -> None:
        self.rt.timers.arm(JoinDeadline(gid), deadline, lambda out: self._join_deadline(out, gid))

    def arm_sync(self, gid: str, deadline: int) -> None:
        self.rt.timers.arm(SyncDeadline(gid), deadline, lambda out: self._sync_deadline(out, gid))

    def refresh_session(self, group: Group, member_id: str) -> None:
        """A live request of the member restarts its session, unless it is parked (its session is paused)."""
        soft = self.rt.soft.get(group.group_id)
        if soft and (member_id in soft.join_waiters or member_id in soft.sync_waiters):
            return
        self.arm_session(group.group_id, member_id, group.members[member_id].session_timeout_ms)

    def load(self, gid: str, group: Group, now: int) -> None:
        """A new leader's deadlines for one group, all starting `now`. Every member's session starts, under one timer
        for the group (a partition's takeover arms a timer per group, not per member): a member's next request arms
        its own (`arm_session`)."""
        if group.members:
            loaded = {member_id: now + m.session_timeout_ms for member_id, m in group.members.items()}
            self.rt.loaded_sessions[gid] = loaded
            self._arm_loaded(gid, loaded)
        for member_id, session_timeout_ms in group.pending_members.items():
            self.arm_pending(gid, member_id, now + session_timeout_ms)
        if group.state == PREPARING:
            self.arm_join(gid, now + group.rebalance_timeout_ms)
        elif group.state == COMPLETING:
            self.arm_sync(gid, now + group.rebalance_timeout_ms)

    # -- parking --------------------------------------------------------------------------------------

    def park_join(self, out: CoordinatorResult, group: Group, member_id: str, token: Token) -> None:
        soft = self.rt.soft_for(group.group_id)
        old = soft.join_waiters.get(member_id)
        if old is not None and old != token:
            out.reply(old, join_error(Errors.REBALANCE_IN_PROGRESS, member_id, "superseded by a newer JoinGroup"))
        soft.join_waiters[member_id] = token
        self._end_session(group.group_id, member_id)

    def park_sync(self, out: CoordinatorResult, group: Group, member_id: str, token: Token) -> None:
        soft = self.rt.soft_for(group.group_id)
        old = soft.sync_waiters.get(member_id)
        if old is not None and old != token:
            out.reply(old, sync_error(Errors.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"))
        soft.sync_waiters[member_id] = token
        self._end_session(group.group_id, member_id)

    def unload(self, out: CoordinatorResult) -> None:
        """The partition moved away: every parked request fails with COORDINATOR_NOT_AVAILABLE."""
        for soft in self.rt.soft.values():
            for member_id, token in soft.join_waiters.items():
                out.reply(token, join_error(Errors.COORDINATOR_NOT_AVAILABLE, member_id))
            for token in soft.sync_waiters.values():
                out.reply(token, sync_error(Errors.COORDINATOR_NOT_AVAILABLE))

    # -- the phases -----------------------------------------------------------------------------------

    def start_rebalance(
        self,
        out: CoordinatorResult,
        group: Group,
        cause: r.RebalanceCause,
        member_id: str = "",
        instance_id: str = "",
        join_reason: int = 0,
        reason: str = "",
    ) -> None:
        rt = self.rt
        was_empty = group.state == EMPTY
        rec = r.RebalanceStarted(
            group.group_id, cause, member_id, instance_id, join_reason, reason[:MAX_REASON_LENGTH], rt.wall()
        )
        if not self.emit(out, rec):
            return
        soft = rt.soft_for(group.group_id)
        # Un-park first: a parked member's session is paused, and refreshing it restarts it.
        waiters, soft.sync_waiters = soft.sync_waiters, {}
        for mid, sync_token in waiters.items():
            out.reply(sync_token, sync_error(Errors.REBALANCE_IN_PROGRESS))
            self.refresh_session(group, mid)
        soft.pending_sync.clear()
        rt.timers.cancel(SyncDeadline(group.group_id))
        delay = rt.config.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            first = min(delay, group.rebalance_timeout_ms)
            soft.initial_remaining_ms = max(group.rebalance_timeout_ms - first, 0)
            soft.new_member_added = False
            self.arm_join(group.group_id, rt.mono() + first)
        else:
            soft.initial_remaining_ms = None
            self.arm_join(group.group_id, rt.mono() + group.rebalance_timeout_ms)
            self.maybe_complete_join(out, group)

    def maybe_complete_join(self, out: CoordinatorResult, group: Group) -> None:
        if group.state != PREPARING:
            return
        soft = self.rt.soft_for(group.group_id)
        if soft.initial_remaining_ms is not None:
            return
        if group.pending_members or group.registered_instances:
            return
        # Only members can be parked in a join (a removed member's request is answered at once).
        if len(soft.join_waiters) == len(group.members):
            self._complete_join(out, group)

    def _join_deadline(self, out: CoordinatorResult, gid: str) -> None:
        group = self.rt.store.get(gid)
        if group is None or group.state != PREPARING:
            return
        soft = self.rt.soft_for(gid)
        if soft.initial_remaining_ms is not None:
            if soft.new_member_added and soft.initial_remaining_ms > 0:
                # Kafka's InitialDelayedJoin: new arrivals extend the wait by whole windows.
                step = min(self.rt.config.initial_rebalance_delay_ms, soft.initial_remaining_ms)
                soft.initial_remaining_ms -= step
                soft.new_member_added = False
                self.arm_join(gid, self.rt.mono() + step)
                return
            # The delay is over: from now on the phase ends as any other (everyone joined and no
            # pending member left, or the rest of the rebalance timeout).
            remaining, soft.initial_remaining_ms = soft.initial_remaining_ms, None
            if remaining > 0:
                self.arm_join(gid, self.rt.mono() + remaining)
                self.maybe_complete_join(out, group)
                return
        self._complete_join(out, group)

    def _complete_join(self, out: CoordinatorResult, group: Group) -> None:
        rt = self.rt
        gid = group.group_id
        soft = rt.soft_for(gid)
        for member in list(group.members.values()):
            if member.member_id not in soft.join_waiters and not member.group_instance_id:
                self.remove_member(out, group, member.member_id, r.RemovalCause.JOIN_TIMEOUT, "did not rejoin in time")
        joined = [mid for mid in group.members if mid in soft.join_waiters]
        if group.members and not joined:
            # Only absent static members are left: wait another round; their sessions bound the wait.
            self.arm_join(gid, rt.mono() + group.rebalance_timeout_ms)
            return
        leader = group.leader_id if group.leader_id in soft.join_waiters else (joined[0] if joined else "")
        protocol = select_protocol(group)
        self.emit(out, r.GenerationCompleted(gid, group.generation_id + 1, protocol, leader, rt.wall()))
        rt.timers.cancel(JoinDeadline(gid))
        soft.initial_remaining_ms = None
        for mid in joined:
            out.reply(soft.join_waiters.pop(mid), join_ok(group, mid, with_members=mid == leader))
            soft.pending_sync.add(mid)
            self.refresh_session(group, mid)
        if group.members:
            self.arm_sync(gid, rt.mono() + group.rebalance_timeout_ms)

    def _sync_deadline(self, out: CoordinatorResult, gid: str) -> None:
        """Dynamic members that joined but never synced are removed; a leader that never synced rebalances."""
        group = self.rt.store.get(gid)
        if group is None or group.state not in (COMPLETING, STABLE):
            return
        soft = self.rt.soft_for(gid)
        removed = False
        for mid in sorted(soft.pending_sync):
            member = group.members.get(mid)
            if member is not None and not member.group_instance_id:
                self.remove_member(out, group, mid, r.RemovalCause.SYNC_TIMEOUT, "did not sync in time")
                removed = True
        soft.pending_sync.clear()
        if group.state == COMPLETING or removed:
            self.start_rebalance(out, group, r.RebalanceCause.SYNC_TIMEOUT)

    # -- removal --------------------------------------------------------------------------------------

    def remove_member(
        self, out: CoordinatorResult, group: Group, member_id: str, cause: r.RemovalCause, reason: str
    ) -> None:
        rec = r.MemberRemoved(group.group_id, member_id, cause, reason[:MAX_REASON_LENGTH], self.rt.wall())
        self.emit(out, rec)

    def after_removal(
        self,
        out: CoordinatorResult,
        group: Group,
        cause: r.RebalanceCause,
        member_id: str,
        instance_id: str,
        reason: str,
    ) -> None:
        if group.state in (STABLE, COMPLETING):
            self.start_rebalance(out, group, cause, member_id, instance_id, 0, reason)
        else:
            self.maybe_complete_join(out, group)

    def _session_expired(self, out: CoordinatorResult, gid: str, member_id: str) -> None:
        group = self.rt.store.get(gid)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return
        self.remove_member(out, group, member_id, r.RemovalCause.SESSION_EXPIRED, "session timeout")
        self.after_removal(out, group, r.RebalanceCause.SESSION_EXPIRED, member_id, member.group_instance_id, "")

    def _pending_expired(self, out: CoordinatorResult, gid: str, member_id: str) -> None:
        group = self.rt.store.get(gid)
        if group is None:
            return
        rec = r.PendingMemberRemoved(gid, member_id, r.RemovalCause.PENDING_EXPIRED, self.rt.wall())
        if self.emit(out, rec):
            self.maybe_complete_join(out, group)
