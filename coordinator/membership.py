"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and AddMembersToGroup: Kafka's classic rebalance protocol
with KIP-345 static membership, KIP-394 MEMBER_ID_REQUIRED, JoinReason and batch pre-registration (docs/PROTOCOL.md).

The structure follows Kafka's GroupCoordinator (handleJoinGroup -> doUnknownJoinGroup / doJoinGroup ->
addMemberAndRebalance); every hard change is a record written through `_emit`.
"""

from __future__ import annotations

from collections.abc import Callable

from groupcoord.coordinator.limits import TokenBucket
from groupcoord.coordinator.runtime import JOIN, SYNC, Runtime, Token, core_call, join_error, sync_error
from groupcoord.coordinator.state import Group, GroupState
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

JoinReason = pb.JoinGroupRequest.JoinReason
# The groups of every partition the node leads, for `max_groups_per_node`: counted only for a request that would
# create a group (the count sums over the node's partitions).
NodeGroups = Callable[[], int]


def no_groups() -> int:
    return 0


REBALANCING_REASONS = (JoinReason.TOPIC_METADATA_CHANGE, JoinReason.UPGRADE)
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


class Membership(Runtime):
    # -- validation shared by every member API ------------------------------------------------------

    def _group_id_error(self, group_id: str, allow_empty: bool = False) -> Errors:
        if (not group_id and not allow_empty) or len(group_id) > self.config.max_id_length:
            return Errors.INVALID_GROUP_ID
        if self.unloaded:
            return Errors.COORDINATOR_NOT_AVAILABLE
        return Errors.NONE

    @staticmethod
    def _member_error(group: Group, member_id: str, instance_id: str) -> Errors:
        """Identity order (docs/PROTOCOL.md#validation-order): instance mapped elsewhere -> fenced; unmapped or
        unknown id -> unknown."""
        if instance_id:
            mapped = group.static_members.get(instance_id)
            if mapped is None:
                return Errors.UNKNOWN_MEMBER_ID
            if mapped != member_id:
                return Errors.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return Errors.UNKNOWN_MEMBER_ID
        return Errors.NONE

    @staticmethod
    def _supports(group: Group | None, protocol_type: str, names: list[str], member_id: str = "") -> bool:
        """Kafka's supportsProtocols, not counting the joining member's own current protocols."""
        if group is None or not group.members:
            return True
        if protocol_type != group.protocol_type:
            return False
        own = set(group.members[member_id].protocol_names()) if member_id in group.members else set()
        others = len(group.members) - (member_id in group.members)
        return any(group.protocol_support[name] - (name in own) == others for name in names)

    def _join_request_error(self, req: pb.JoinGroupRequest) -> tuple[Errors, str]:
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return Errors.INVALID_SESSION_TIMEOUT, (
                f"session_timeout_ms must be within [{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}]"
            )
        if req.rebalance_timeout_ms < 0:
            return Errors.INVALID_REQUEST, "rebalance_timeout_ms must not be negative"
        if req.join_reason not in JoinReason.values():
            return Errors.INVALID_REQUEST, f"unknown join_reason {req.join_reason}"
        if len(req.group_instance_id) > cfg.max_id_length or len(req.client_id) > cfg.max_id_length:
            return Errors.INVALID_REQUEST, f"group_instance_id and client_id are limited to {cfg.max_id_length} chars"
        if len(req.protocols) > cfg.max_protocols:
            return Errors.INVALID_REQUEST, f"at most {cfg.max_protocols} protocols"
        names = [p.name for p in req.protocols]
        if len(set(names)) != len(names) or any(len(n) > cfg.max_id_length for n in names):
            return Errors.INVALID_REQUEST, "protocol names must be unique and not too long"
        if sum(len(p.metadata) for p in req.protocols) > cfg.max_member_metadata_bytes:
            return Errors.INVALID_REQUEST, f"protocol metadata exceeds {cfg.max_member_metadata_bytes} bytes"
        if not req.protocol_type or not req.protocols or not all(names):
            return Errors.INCONSISTENT_GROUP_PROTOCOL, "protocol_type and named protocols are required"
        return Errors.NONE, ""

    # -- resource limits ----------------------------------------------------------------------------

    def _new_group_refusal(self, group_id: str, node_groups: NodeGroups) -> str:
        """Why a request that would create `group_id` is refused, or "". `node_groups()` is what the node counts
        in the partitions it leads (this one included), asked only then; existing groups are never refused."""
        cfg = self.config
        if group_id in self.store.groups:
            return ""
        if cfg.max_groups_per_partition and len(self.store.groups) >= cfg.max_groups_per_partition:
            return f"this coordinator partition holds max_groups_per_partition = {cfg.max_groups_per_partition} groups"
        if cfg.max_groups_per_node and node_groups() >= cfg.max_groups_per_node:
            return f"the partitions this node leads hold max_groups_per_node = {cfg.max_groups_per_node} groups"
        return ""

    def _join_wait_ms(self, group: Group) -> int:
        """Takes one JoinGroup token of `group`: 0, or how long to wait when none is left."""
        cfg = self.config
        if not cfg.join_rate_per_s:
            return 0
        soft = self._soft(group.group_id)
        if soft.join_bucket is None:
            soft.join_bucket = TokenBucket(cfg.join_rate_per_s, cfg.join_burst, float(cfg.join_burst), self._mono())
        return soft.join_bucket.take(self._mono())

    # -- JoinGroup ----------------------------------------------------------------------------------

    @core_call
    def join_group(
        self, req: pb.JoinGroupRequest, token: Token, client_host: str = "", node_groups: NodeGroups = no_groups
    ) -> None:
        """`node_groups`: the groups of every partition the node leads, for `max_groups_per_node`."""
        code = self._group_id_error(req.group_id)
        message = ""
        if code == Errors.NONE:
            code, message = self._join_request_error(req)
        if code != Errors.NONE:
            self._reply(token, join_error(code, req.member_id, message))
        else:
            self._join(req, token, client_host, node_groups)
        return

    def _join(self, req: pb.JoinGroupRequest, token: Token, client_host: str, node_groups: NodeGroups) -> None:
        group = self.store.get(req.group_id)
        if group is None and req.member_id:
            self._reply(token, join_error(Errors.UNKNOWN_MEMBER_ID, req.member_id, "no such group"))
            return
        if group is None and (refusal := self._new_group_refusal(req.group_id, node_groups)):
            self._reply(token, join_error(Errors.POLICY_VIOLATION, "", refusal))
            return
        if group is not None and (wait_ms := self._join_wait_ms(group)):
            message = f"over group_join_rate_per_s = {self.config.join_rate_per_s}; retry in {wait_ms} ms"
            self._reply(token, join_error(Errors.THROTTLING_QUOTA_EXCEEDED, req.member_id, message, wait_ms))
            return
        if group is not None and not self._accept_joining(group, req):
            self._refuse_joining(group, req.member_id, token)
            return
        if not req.member_id:
            self._join_unknown(group, req, token, client_host)
        else:
            assert group is not None
            self._join_known(group, req, token, client_host)

    def _accept_joining(self, group: Group, req: pb.JoinGroupRequest) -> bool:
        """Kafka's acceptJoiningMember (group.max.size), checked before member identity
        (docs/PROTOCOL.md#validation-order). During a rebalance it counts the members waiting in the join phase: the
        group may be over a lowered limit, and the last to rejoin are the ones turned away. A returning static
        instance is a known member (KIP-345)."""
        max_size = self.config.max_size
        if max_size is None or group.state == EMPTY:
            return True
        member_id = req.member_id or group.static_members.get(req.group_instance_id, "")
        if group.state == PREPARING:
            soft = self.soft.get(group.group_id)
            waiters = soft.join_waiters if soft is not None else {}
            return member_id in waiters or len(waiters) < max_size
        return member_id in group.members or len(group.members) < max_size

    def _refuse_joining(self, group: Group, member_id: str, token: Token) -> None:
        """GROUP_MAX_SIZE_REACHED without a member id. The refused id leaves the members and the pending members at
        once, so it never holds up the join phase, and its retry gets the same answer."""
        reason = f"group_max_size is {self.config.max_size}"
        if member_id in group.members:
            self._remove_member(group, member_id, r.RemovalCause.GROUP_MAX_SIZE, reason)
        elif member_id in group.pending_members:
            self._emit(r.PendingMemberRemoved(group.group_id, member_id, r.RemovalCause.GROUP_MAX_SIZE, self._wall()))
        self._reply(token, join_error(Errors.GROUP_MAX_SIZE_REACHED, "", reason))
        self._maybe_complete_join(group)

    def _join_unknown(self, group: Group | None, req: pb.JoinGroupRequest, token: Token, host: str) -> None:
        instance_id = req.group_instance_id
        # A returning static instance is checked against the others, not against its own old protocols.
        old_id = group.static_members.get(instance_id, "") if group is not None and instance_id else ""
        if not self._supports(group, req.protocol_type, [p.name for p in req.protocols], old_id):
            self._reply(token, join_error(Errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = f"{instance_id or req.client_id}-{self.new_uuid()}"
        if group is not None and old_id:
            # A returning instance replaces its old member id: the group does not grow.
            self._replace_static(group, old_id, new_id, req, token, host)
            return
        if instance_id:
            self._add_member(group, new_id, req, token, host)
            return
        if group is not None and len(group.pending_members) >= self.config.max_pending_members:
            message = f"group_max_pending_members = {self.config.max_pending_members} ids handed out, not joined yet"
            self._reply(token, join_error(Errors.GROUP_MAX_SIZE_REACHED, "", message))
            return
        self._emit(r.PendingMemberAdded(req.group_id, new_id, req.session_timeout_ms, self._wall()))
        self._reply(token, join_error(Errors.MEMBER_ID_REQUIRED, new_id))

    def _join_known(self, group: Group, req: pb.JoinGroupRequest, token: Token, host: str) -> None:
        member_id = req.member_id
        names = [p.name for p in req.protocols]
        if member_id in group.pending_members:
            if req.group_instance_id:
                self._reply(token, join_error(Errors.INVALID_REQUEST, member_id, "pending ids are for dynamic members"))
            elif not self._supports(group, req.protocol_type, names):
                self._reply(token, join_error(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
            else:
                self._add_member(group, member_id, req, token, host)
            return
        code = self._member_error(group, member_id, req.group_instance_id)
        if code != Errors.NONE:
            self._reply(token, join_error(code, member_id))
            return
        if not self._supports(group, req.protocol_type, names, member_id):
            self._reply(token, join_error(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        member = group.members[member_id]
        protocols = _protocols(req)
        changed = member.protocols != protocols
        if changed or (member.session_timeout_ms, member.rebalance_timeout_ms) != _timeouts(req):
            self._emit(r.MemberUpdated(group.group_id, member_id, *_timeouts(req), protocols, self._wall()))
        reason = req.join_reason
        if group.state == PREPARING:
            self._park_join(group, member_id, token)
            self._maybe_complete_join(group)
        elif group.state == COMPLETING and not changed and reason not in REBALANCING_REASONS:
            # The member joined this generation but lost the response (e.g. across a failover).
            self._reply(token, self._join_ok(group, member_id, with_members=member_id == group.leader_id))
            self._refresh_session(group, member_id)
        elif group.state == STABLE and not changed and reason == JoinReason.RESTART:
            # Seed 001: a restart of a known member, even the leader, does not rebalance.
            is_leader = member_id == group.leader_id
            self._avoided(group, member_id, req, r.AvoidedCause.RESTART)
            self._reply(token, self._join_ok(group, member_id, with_members=is_leader, skip=is_leader))
            self._refresh_session(group, member_id)
        elif (
            group.state == STABLE and not changed and reason not in REBALANCING_REASONS and member_id != group.leader_id
        ):
            self._avoided(group, member_id, req, r.AvoidedCause.KNOWN_MEMBER)
            self._reply(token, self._join_ok(group, member_id, with_members=False))
            self._refresh_session(group, member_id)
        else:
            if changed:
                cause = r.RebalanceCause.PROTOCOL_CHANGED
            elif reason in REBALANCING_REASONS:
                cause = r.RebalanceCause.JOIN_REASON
            else:
                cause = r.RebalanceCause.LEADER_REJOINED
            self._park_join(group, member_id, token)
            self._start_rebalance(group, cause, member_id, req.group_instance_id, reason, req.reason)

    def _avoided(self, group: Group, member_id: str, req: pb.JoinGroupRequest, cause: r.AvoidedCause) -> None:
        self._emit(
            r.RebalanceAvoided(group.group_id, member_id, req.group_instance_id, req.join_reason, cause, self._wall())
        )

    def _add_member(
        self, group: Group | None, member_id: str, req: pb.JoinGroupRequest, token: Token, host: str
    ) -> None:
        pre_registered = group is not None and req.group_instance_id in group.registered_instances
        self._emit(
            r.MemberAdded(
                req.group_id,
                member_id,
                req.group_instance_id,
                req.client_id,
                host,
                *_timeouts(req),
                req.protocol_type,
                _protocols(req),
                self._wall(),
                *_software(req),
            )
        )
        group = self.store.groups[req.group_id]
        self._park_join(group, member_id, token)
        if group.state == PREPARING:
            soft = self._soft(group.group_id)
            if soft.initial_remaining_ms is not None:
                soft.new_member_added = True
            self._maybe_complete_join(group)
        else:
            cause = r.RebalanceCause.PRE_REGISTERED_JOINED if pre_registered else r.RebalanceCause.MEMBER_JOINED
            self._start_rebalance(group, cause, member_id, req.group_instance_id, req.join_reason, req.reason)

    def _replace_static(
        self, group: Group, old_id: str, new_id: str, req: pb.JoinGroupRequest, token: Token, host: str
    ) -> None:
        """KIP-345: the returning instance takes a new member id and the old one is fenced."""
        protocols = _protocols(req)
        self._emit(
            r.StaticMemberReplaced(
                group.group_id,
                req.group_instance_id,
                old_id,
                new_id,
                req.client_id,
                host,
                *_timeouts(req),
                protocols,
                self._wall(),
                *_software(req),
            )
        )
        if group.state == STABLE:
            if select_protocol(group) == group.protocol_name and req.join_reason not in REBALANCING_REASONS:
                is_leader = new_id == group.leader_id
                self._reply(token, self._join_ok(group, new_id, with_members=is_leader, skip=is_leader))
                return
            rebalancing = req.join_reason in REBALANCING_REASONS
            cause = r.RebalanceCause.JOIN_REASON if rebalancing else r.RebalanceCause.PROTOCOL_CHANGED
        else:
            cause = r.RebalanceCause.STATIC_MEMBER_REPLACED
        self._park_join(group, new_id, token)
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        else:
            self._start_rebalance(group, cause, new_id, req.group_instance_id, req.join_reason, req.reason)

    def _join_ok(self, group: Group, member_id: str, with_members: bool, skip: bool = False) -> pb.JoinGroupResponse:
        resp = pb.JoinGroupResponse(
            error_code=Errors.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id,
            skip_assignment=skip,
            member_id=member_id,
        )
        if with_members:
            resp.members.extend(
                pb.JoinGroupResponse.Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata_for(group.protocol_name),
                )
                for m in group.members.values()
            )
        return resp

    # -- rebalance phases ---------------------------------------------------------------------------

    def _start_rebalance(
        self,
        group: Group,
        cause: r.RebalanceCause,
        member_id: str = "",
        instance_id: str = "",
        join_reason: int = 0,
        reason: str = "",
    ) -> None:
        was_empty = group.state == EMPTY
        rec = r.RebalanceStarted(
            group.group_id, cause, member_id, instance_id, join_reason, reason[:MAX_REASON_LENGTH], self._wall()
        )
        if not self._emit(rec):
            return
        soft = self._soft(group.group_id)
        # Un-park first: a parked member's session is paused, and refreshing it restarts it.
        waiters, soft.sync_waiters = soft.sync_waiters, {}
        for mid, sync_token in waiters.items():
            self._reply(sync_token, sync_error(Errors.REBALANCE_IN_PROGRESS))
            self._refresh_session(group, mid)
        soft.pending_sync.clear()
        self.timers.cancel((SYNC, group.group_id))
        delay = self.config.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            first = min(delay, group.rebalance_timeout_ms)
            soft.initial_remaining_ms = max(group.rebalance_timeout_ms - first, 0)
            soft.new_member_added = False
            self.timers.arm((JOIN, group.group_id), self._mono() + first)
        else:
            soft.initial_remaining_ms = None
            self.timers.arm((JOIN, group.group_id), self._mono() + group.rebalance_timeout_ms)
            self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        soft = self._soft(group.group_id)
        if soft.initial_remaining_ms is not None:
            return
        if group.pending_members or group.registered_instances:
            return
        # Only members can be parked in a join (a removed member's request is answered at once).
        if len(soft.join_waiters) == len(group.members):
            self._complete_join(group)

    def _on_join_deadline(self, group: Group) -> None:
        soft = self._soft(group.group_id)
        if soft.initial_remaining_ms is not None:
            if soft.new_member_added and soft.initial_remaining_ms > 0:
                # Kafka's InitialDelayedJoin: new arrivals extend the wait by whole windows.
                step = min(self.config.initial_rebalance_delay_ms, soft.initial_remaining_ms)
                soft.initial_remaining_ms -= step
                soft.new_member_added = False
                self.timers.arm((JOIN, group.group_id), self._mono() + step)
                return
            # The delay is over: from now on the phase ends as any other (everyone joined and no
            # pending member left, or the rest of the rebalance timeout).
            remaining, soft.initial_remaining_ms = soft.initial_remaining_ms, None
            if remaining > 0:
                self.timers.arm((JOIN, group.group_id), self._mono() + remaining)
                self._maybe_complete_join(group)
                return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        gid = group.group_id
        soft = self._soft(gid)
        for member in list(group.members.values()):
            if member.member_id not in soft.join_waiters and not member.group_instance_id:
                self._remove_member(group, member.member_id, r.RemovalCause.JOIN_TIMEOUT, "did not rejoin in time")
        joined = [mid for mid in group.members if mid in soft.join_waiters]
        if group.members and not joined:
            # Only absent static members are left: wait another round; their sessions bound the wait.
            self.timers.arm((JOIN, gid), self._mono() + group.rebalance_timeout_ms)
            return
        leader = group.leader_id if group.leader_id in soft.join_waiters else (joined[0] if joined else "")
        protocol = select_protocol(group)
        self._emit(r.GenerationCompleted(gid, group.generation_id + 1, protocol, leader, self._wall()))
        self.timers.cancel((JOIN, gid))
        soft.initial_remaining_ms = None
        for mid in joined:
            self._reply(soft.join_waiters.pop(mid), self._join_ok(group, mid, with_members=mid == leader))
            soft.pending_sync.add(mid)
            self._refresh_session(group, mid)
        if group.members:
            self.timers.arm((SYNC, gid), self._mono() + group.rebalance_timeout_ms)

    def _on_sync_deadline(self, group: Group) -> None:
        """Dynamic members that joined but never synced are removed; a leader that never synced rebalances."""
        if group.state not in (COMPLETING, STABLE):
            return
        soft = self._soft(group.group_id)
        removed = False
        for mid in sorted(soft.pending_sync):
            member = group.members.get(mid)
            if member is not None and not member.group_instance_id:
                self._remove_member(group, mid, r.RemovalCause.SYNC_TIMEOUT, "did not sync in time")
                removed = True
        soft.pending_sync.clear()
        if group.state == COMPLETING or removed:
            self._start_rebalance(group, r.RebalanceCause.SYNC_TIMEOUT)

    def _remove_member(self, group: Group, member_id: str, cause: r.RemovalCause, reason: str) -> None:
        self._emit(r.MemberRemoved(group.group_id, member_id, cause, reason[:MAX_REASON_LENGTH], self._wall()))

    def _after_removal(
        self, group: Group, cause: r.RebalanceCause, member_id: str, instance_id: str, reason: str
    ) -> None:
        if group.state in (STABLE, COMPLETING):
            self._start_rebalance(group, cause, member_id, instance_id, 0, reason)
        else:
            self._maybe_complete_join(group)

    def _on_session_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        self._remove_member(group, member_id, r.RemovalCause.SESSION_EXPIRED, "session timeout")
        self._after_removal(group, r.RebalanceCause.SESSION_EXPIRED, member_id, member.group_instance_id, "")

    def _on_pending_expired(self, group: Group, member_id: str) -> None:
        if self._emit(r.PendingMemberRemoved(group.group_id, member_id, r.RemovalCause.PENDING_EXPIRED, self._wall())):
            self._maybe_complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------------------

    @core_call
    def sync_group(self, req: pb.SyncGroupRequest, token: Token) -> None:
        code, group = self._generation_check(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
        message = ""
        if code == Errors.NONE and group is not None:
            limit = self.config.max_assignment_bytes
            if (req.protocol_type and req.protocol_type != group.protocol_type) or (
                req.protocol_name and req.protocol_name != group.protocol_name
            ):
                code = Errors.INCONSISTENT_GROUP_PROTOCOL
            elif any(len(a.assignment) > limit for a in req.assignments):
                code, message = Errors.POLICY_VIOLATION, f"an assignment exceeds group_max_assignment_bytes = {limit}"
            elif group.state == PREPARING:
                code = Errors.REBALANCE_IN_PROGRESS
            elif group.state == COMPLETING:
                self._sync_completing(group, req, token)
                return
            else:
                self._soft(group.group_id).pending_sync.discard(req.member_id)
                self._refresh_session(group, req.member_id)
                self._reply(token, self._sync_ok(group, req.member_id))
                return
        self._reply(token, sync_error(code, message))
        return

    def _generation_check(
        self, group_id: str, member_id: str, instance_id: str, generation_id: int
    ) -> tuple[Errors, Group | None]:
        """Group id, then identity, then generation (docs/PROTOCOL.md#validation-order)."""
        code = self._group_id_error(group_id)
        if code != Errors.NONE:
            return code, None
        group = self.store.get(group_id)
        if group is None:
            return Errors.UNKNOWN_MEMBER_ID, None
        code = self._member_error(group, member_id, instance_id)
        if code == Errors.NONE and generation_id != group.generation_id:
            code = Errors.ILLEGAL_GENERATION
        return code, group

    def _sync_completing(self, group: Group, req: pb.SyncGroupRequest, token: Token) -> None:
        soft = self._soft(group.group_id)
        self._park_sync(group, req.member_id, token)
        soft.pending_sync.discard(req.member_id)
        if req.member_id != group.leader_id:
            return
        given = {a.member_id: a.assignment for a in req.assignments}
        assignments = {mid: given.get(mid, b"") for mid in group.members}
        self._emit(r.AssignmentsSynced(group.group_id, group.generation_id, assignments, self._wall()))
        waiters, soft.sync_waiters = soft.sync_waiters, {}
        for mid, sync_token in waiters.items():
            self._reply(sync_token, self._sync_ok(group, mid))
            self._refresh_session(group, mid)
        if not soft.pending_sync:
            self.timers.cancel((SYNC, group.group_id))

    @staticmethod
    def _sync_ok(group: Group, member_id: str) -> pb.SyncGroupResponse:
        return pb.SyncGroupResponse(
            error_code=Errors.NONE,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=group.members[member_id].assignment,
        )

    # -- Heartbeat ----------------------------------------------------------------------------------

    @core_call
    def heartbeat(self, req: pb.HeartbeatRequest, token: Token) -> None:
        code, group = self._generation_check(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
        if code == Errors.NONE and group is not None:
            self._refresh_session(group, req.member_id)
            if group.state == PREPARING:
                code = Errors.REBALANCE_IN_PROGRESS
        self._reply(token, pb.HeartbeatResponse(error_code=code))
        return

    # -- LeaveGroup ---------------------------------------------------------------------------------

    @core_call
    def leave_group(self, req: pb.LeaveGroupRequest, token: Token) -> None:
        code = self._group_id_error(req.group_id)
        if code == Errors.NONE and not req.members:
            self._reply(token, pb.LeaveGroupResponse(error_code=Errors.INVALID_REQUEST, error_message="no members"))
            return
        if code != Errors.NONE:
            self._reply(token, pb.LeaveGroupResponse(error_code=code))
            return
        group = self.store.get(req.group_id)
        resp = pb.LeaveGroupResponse(error_code=Errors.NONE)
        for leaving in req.members:
            member_code = self._leave_one(group, leaving) if group is not None else Errors.UNKNOWN_MEMBER_ID
            resp.members.add(
                member_id=leaving.member_id, group_instance_id=leaving.group_instance_id, error_code=member_code
            )
        self._reply(token, resp)
        return

    def _leave_one(self, group: Group, leaving: pb.LeaveGroupRequest.MemberIdentity) -> Errors:
        member_id, instance_id = leaving.member_id, leaving.group_instance_id
        if not member_id:
            # Administrative removal by instance id (KIP-345 batch leave).
            member_id = group.static_members.get(instance_id, "") if instance_id else ""
            if not member_id and instance_id in group.registered_instances:
                # Pre-registered and never joined: the join phase must not wait for it any longer.
                self._emit(r.InstancesUnregistered(group.group_id, (instance_id,), self._wall()))
                self._maybe_complete_join(group)
                return Errors.NONE
            if not member_id:
                return Errors.UNKNOWN_MEMBER_ID
            cause, removal = r.RebalanceCause.ADMIN_REMOVAL, r.RemovalCause.ADMIN_REMOVAL
        elif member_id in group.pending_members and not instance_id:
            self._emit(r.PendingMemberRemoved(group.group_id, member_id, r.RemovalCause.LEAVE, self._wall()))
            self._maybe_complete_join(group)
            return Errors.NONE
        else:
            code = self._member_error(group, member_id, instance_id)
            if code != Errors.NONE:
                return code
            cause, removal = r.RebalanceCause.MEMBER_LEFT, r.RemovalCause.LEAVE
        instance = group.members[member_id].group_instance_id
        self._remove_member(group, member_id, removal, leaving.reason)
        self._after_removal(group, cause, member_id, instance, leaving.reason)
        return Errors.NONE

    # -- AddMembersToGroup --------------------------------------------------------------------------

    @core_call
    def add_members(self, req: pb.AddMembersToGroupRequest, token: Token, node_groups: NodeGroups = no_groups) -> None:
        code = self._group_id_error(req.group_id)
        if code == Errors.NONE and not req.group_instance_ids:
            self._reply(
                token, pb.AddMembersToGroupResponse(error_code=Errors.INVALID_REQUEST, error_message="no instance ids")
            )
            return
        if code != Errors.NONE:
            self._reply(token, pb.AddMembersToGroupResponse(error_code=code))
            return
        group = self.store.get(req.group_id)
        if group is None and (refusal := self._new_group_refusal(req.group_id, node_groups)):
            self._reply(token, pb.AddMembersToGroupResponse(error_code=Errors.POLICY_VIOLATION, error_message=refusal))
            return
        known = set(group.static_members) | set(group.registered_instances) if group else set()
        size = len(group.members) + len(group.registered_instances) if group else 0
        # An ordered set: a list's `in` made a request of n ids cost O(n^2) on the event loop.
        accepted: dict[str, None] = {}
        resp = pb.AddMembersToGroupResponse(error_code=Errors.NONE)
        for instance_id in req.group_instance_ids:
            if not instance_id or len(instance_id) > self.config.max_id_length:
                item, message = Errors.INVALID_REQUEST, "instance id is empty or too long"
            elif instance_id in known or instance_id in accepted:
                item, message = Errors.DUPLICATE_RESOURCE, "already a member, registered, or listed twice"
            elif self.config.max_size is not None and size + len(accepted) >= self.config.max_size:
                item, message = Errors.GROUP_MAX_SIZE_REACHED, f"group.max.size is {self.config.max_size}"
            else:
                item, message = Errors.NONE, ""
                accepted[instance_id] = None
            resp.results.add(group_instance_id=instance_id, error_code=item, error_message=message)
        if accepted:
            self._emit(r.InstancesRegistered(req.group_id, tuple(accepted), self._wall()))
        self._reply(token, resp)
        return


def _protocols(req: pb.JoinGroupRequest) -> r.Protocols:
    return tuple((p.name, p.metadata) for p in req.protocols)


def _software(req: pb.JoinGroupRequest) -> tuple[str, str]:
    """What the client says it runs, for operators only: cut to MAX_REASON_LENGTH rather than refused."""
    return req.client_software_name[:MAX_REASON_LENGTH], req.client_software_version[:MAX_REASON_LENGTH]


def _timeouts(req: pb.JoinGroupRequest) -> tuple[int, int]:
    return req.session_timeout_ms, req.rebalance_timeout_ms or req.session_timeout_ms
