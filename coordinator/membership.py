"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and AddMembersToGroup: Kafka's classic rebalance protocol with
KIP-345 static membership, KIP-394 MEMBER_ID_REQUIRED, JoinReason and batch pre-registration (docs/PROTOCOL.md).

The structure follows Kafka's GroupCoordinator (handleJoinGroup -> doUnknownJoinGroup / doJoinGroup ->
addMemberAndRebalance). Checks are the pure functions of `validation.py`; every hard change is a record written
through `Rebalance.emit` into the call's `CoordinatorResult`.
"""

from __future__ import annotations

from groupcoord.coordinator.limits import TokenBucket
from groupcoord.coordinator.rebalance import (
    COMPLETING,
    MAX_REASON_LENGTH,
    PREPARING,
    STABLE,
    Rebalance,
    select_protocol,
)
from groupcoord.coordinator.responses import join_error, join_ok, sync_error, sync_ok
from groupcoord.coordinator.result import CoordinatorResult, Token
from groupcoord.coordinator.runtime import Runtime
from groupcoord.coordinator.state import Group
from groupcoord.coordinator.timers import SyncDeadline
from groupcoord.coordinator.validation import (
    JoinReason,
    NodeGroups,
    accepts_joining,
    generation_error,
    group_id_error,
    join_request_error,
    member_error,
    new_group_refusal,
    supports_protocols,
)
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

REBALANCING_REASONS = (JoinReason.TOPIC_METADATA_CHANGE, JoinReason.UPGRADE)


class Membership:
    """The member APIs: each checks its request, decides, and leaves the phases and timers to `Rebalance`."""

    def __init__(self, rt: Runtime, rebalance: Rebalance) -> None:
        self.rt = rt
        self.rebalance = rebalance

    def _join_wait_ms(self, group: Group) -> int:
        """JoinGroup admission: takes one of the group's tokens and returns 0, or how long to wait when none is
        left (a refusal takes nothing)."""
        cfg = self.rt.config
        if not cfg.join_rate_per_s:
            return 0
        soft = self.rt.soft_for(group.group_id)
        if soft.join_bucket is None:
            soft.join_bucket = TokenBucket(cfg.join_rate_per_s, cfg.join_burst, float(cfg.join_burst), self.rt.mono())
        return soft.join_bucket.take(self.rt.mono())

    # -- JoinGroup ------------------------------------------------------------------------------------

    def join_group(
        self, out: CoordinatorResult, req: pb.JoinGroupRequest, token: Token, client_host: str, node_groups: NodeGroups
    ) -> None:
        code = group_id_error(self.rt.config, self.rt.unloaded, req.group_id)
        message = ""
        if code == Errors.NONE:
            code, message = join_request_error(self.rt.config, req)
        if code != Errors.NONE:
            out.reply(token, join_error(code, req.member_id, message))
            return
        group = self.rt.store.get(req.group_id)
        if group is None and req.member_id:
            out.reply(token, join_error(Errors.UNKNOWN_MEMBER_ID, req.member_id, "no such group"))
            return
        if group is None and (refusal := new_group_refusal(self.rt.config, self.rt.store, req.group_id, node_groups)):
            out.reply(token, join_error(Errors.POLICY_VIOLATION, "", refusal))
            return
        if group is not None and (wait_ms := self._join_wait_ms(group)):
            message = f"over group_join_rate_per_s = {self.rt.config.join_rate_per_s}; retry in {wait_ms} ms"
            out.reply(token, join_error(Errors.THROTTLING_QUOTA_EXCEEDED, req.member_id, message, wait_ms))
            return
        if group is not None:
            soft = self.rt.soft.get(group.group_id)
            if not accepts_joining(self.rt.config, group, soft.join_waiters if soft is not None else {}, req):
                self._refuse_joining(out, group, req.member_id, token)
                return
        if not req.member_id:
            self._join_unknown(out, group, req, token, client_host)
        else:
            assert group is not None
            self._join_known(out, group, req, token, client_host)

    def _refuse_joining(self, out: CoordinatorResult, group: Group, member_id: str, token: Token) -> None:
        """GROUP_MAX_SIZE_REACHED without a member id. The refused id leaves the members and the pending members at
        once, so it never holds up the join phase, and its retry gets the same answer."""
        reason = f"group_max_size is {self.rt.config.max_size}"
        if member_id in group.members:
            self.rebalance.remove_member(out, group, member_id, r.RemovalCause.GROUP_MAX_SIZE, reason)
        elif member_id in group.pending_members:
            rec = r.PendingMemberRemoved(group.group_id, member_id, r.RemovalCause.GROUP_MAX_SIZE, self.rt.wall())
            self.rebalance.emit(out, rec)
        out.reply(token, join_error(Errors.GROUP_MAX_SIZE_REACHED, "", reason))
        self.rebalance.maybe_complete_join(out, group)

    def _join_unknown(
        self, out: CoordinatorResult, group: Group | None, req: pb.JoinGroupRequest, token: Token, host: str
    ) -> None:
        instance_id = req.group_instance_id
        # A returning static instance is checked against the others, not against its own old protocols.
        old_id = group.static_members.get(instance_id, "") if group is not None and instance_id else ""
        if not supports_protocols(group, req.protocol_type, [p.name for p in req.protocols], old_id):
            out.reply(token, join_error(Errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = f"{instance_id or req.client_id}-{self.rt.new_uuid()}"
        if group is not None and old_id:
            # A returning instance replaces its old member id: the group does not grow.
            self._replace_static(out, group, old_id, new_id, req, token, host)
            return
        if instance_id:
            self._add_member(out, group, new_id, req, token, host)
            return
        most = self.rt.config.max_pending_members
        if group is not None and len(group.pending_members) >= most:
            message = f"group_max_pending_members = {most} ids handed out, not joined yet"
            out.reply(token, join_error(Errors.GROUP_MAX_SIZE_REACHED, "", message))
            return
        self.rebalance.emit(out, r.PendingMemberAdded(req.group_id, new_id, req.session_timeout_ms, self.rt.wall()))
        out.reply(token, join_error(Errors.MEMBER_ID_REQUIRED, new_id))

    def _join_known(
        self, out: CoordinatorResult, group: Group, req: pb.JoinGroupRequest, token: Token, host: str
    ) -> None:
        rebalance = self.rebalance
        member_id = req.member_id
        names = [p.name for p in req.protocols]
        if member_id in group.pending_members:
            if req.group_instance_id:
                out.reply(token, join_error(Errors.INVALID_REQUEST, member_id, "pending ids are for dynamic members"))
            elif not supports_protocols(group, req.protocol_type, names):
                out.reply(token, join_error(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
            else:
                self._add_member(out, group, member_id, req, token, host)
            return
        code = member_error(group, member_id, req.group_instance_id)
        if code != Errors.NONE:
            out.reply(token, join_error(code, member_id))
            return
        if not supports_protocols(group, req.protocol_type, names, member_id):
            out.reply(token, join_error(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        member = group.members[member_id]
        protocols = _protocols(req)
        changed = member.protocols != protocols
        if changed or (member.session_timeout_ms, member.rebalance_timeout_ms) != _timeouts(req):
            rebalance.emit(out, r.MemberUpdated(group.group_id, member_id, *_timeouts(req), protocols, self.rt.wall()))
        reason = req.join_reason
        if group.state == PREPARING:
            rebalance.park_join(out, group, member_id, token)
            rebalance.maybe_complete_join(out, group)
        elif group.state == COMPLETING and not changed and reason not in REBALANCING_REASONS:
            # The member joined this generation but lost the response (e.g. across a failover).
            out.reply(token, join_ok(group, member_id, with_members=member_id == group.leader_id))
            rebalance.refresh_session(group, member_id)
        elif group.state == STABLE and not changed and reason == JoinReason.RESTART:
            # Seed 001: a restart of a known member, even the leader, does not rebalance.
            is_leader = member_id == group.leader_id
            self._avoided(out, group, member_id, req, r.AvoidedCause.RESTART)
            out.reply(token, join_ok(group, member_id, with_members=is_leader, skip=is_leader))
            rebalance.refresh_session(group, member_id)
        elif (
            group.state == STABLE and not changed and reason not in REBALANCING_REASONS and member_id != group.leader_id
        ):
            self._avoided(out, group, member_id, req, r.AvoidedCause.KNOWN_MEMBER)
            out.reply(token, join_ok(group, member_id, with_members=False))
            rebalance.refresh_session(group, member_id)
        else:
            if changed:
                cause = r.RebalanceCause.PROTOCOL_CHANGED
            elif reason in REBALANCING_REASONS:
                cause = r.RebalanceCause.JOIN_REASON
            else:
                cause = r.RebalanceCause.LEADER_REJOINED
            rebalance.park_join(out, group, member_id, token)
            rebalance.start_rebalance(out, group, cause, member_id, req.group_instance_id, reason, req.reason)

    def _avoided(
        self, out: CoordinatorResult, group: Group, member_id: str, req: pb.JoinGroupRequest, cause: r.AvoidedCause
    ) -> None:
        rec = r.RebalanceAvoided(
            group.group_id, member_id, req.group_instance_id, req.join_reason, cause, self.rt.wall()
        )
        self.rebalance.emit(out, rec)

    def _add_member(
        self,
        out: CoordinatorResult,
        group: Group | None,
        member_id: str,
        req: pb.JoinGroupRequest,
        token: Token,
        host: str,
    ) -> None:
        rebalance = self.rebalance
        pre_registered = group is not None and req.group_instance_id in group.registered_instances
        rec = r.MemberAdded(
            req.group_id,
            member_id,
            req.group_instance_id,
            req.client_id,
            host,
            *_timeouts(req),
            req.protocol_type,
            _protocols(req),
            self.rt.wall(),
            *_software(req),
        )
        rebalance.emit(out, rec)
        group = self.rt.store.groups[req.group_id]
        rebalance.park_join(out, group, member_id, token)
        if group.state == PREPARING:
            soft = self.rt.soft_for(group.group_id)
            if soft.initial_remaining_ms is not None:
                soft.new_member_added = True
            rebalance.maybe_complete_join(out, group)
        else:
            cause = r.RebalanceCause.PRE_REGISTERED_JOINED if pre_registered else r.RebalanceCause.MEMBER_JOINED
            rebalance.start_rebalance(out, group, cause, member_id, req.group_instance_id, req.join_reason, req.reason)

    def _replace_static(
        self,
        out: CoordinatorResult,
        group: Group,
        old_id: str,
        new_id: str,
        req: pb.JoinGroupRequest,
        token: Token,
        host: str,
    ) -> None:
        """KIP-345: the returning instance takes a new member id and the old one is fenced."""
        rebalance = self.rebalance
        rec = r.StaticMemberReplaced(
            group.group_id,
            req.group_instance_id,
            old_id,
            new_id,
            req.client_id,
            host,
            *_timeouts(req),
            _protocols(req),
            self.rt.wall(),
            *_software(req),
        )
        rebalance.emit(out, rec)
        if group.state == STABLE:
            if select_protocol(group) == group.protocol_name and req.join_reason not in REBALANCING_REASONS:
                is_leader = new_id == group.leader_id
                out.reply(token, join_ok(group, new_id, with_members=is_leader, skip=is_leader))
                return
            rebalancing = req.join_reason in REBALANCING_REASONS
            cause = r.RebalanceCause.JOIN_REASON if rebalancing else r.RebalanceCause.PROTOCOL_CHANGED
        else:
            cause = r.RebalanceCause.STATIC_MEMBER_REPLACED
        rebalance.park_join(out, group, new_id, token)
        if group.state == PREPARING:
            rebalance.maybe_complete_join(out, group)
        else:
            rebalance.start_rebalance(out, group, cause, new_id, req.group_instance_id, req.join_reason, req.reason)

    # -- SyncGroup ------------------------------------------------------------------------------------

    def sync_group(self, out: CoordinatorResult, req: pb.SyncGroupRequest, token: Token) -> None:
        rt = self.rt
        code, group = generation_error(
            rt.config, rt.unloaded, rt.store, req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        message = ""
        if code == Errors.NONE and group is not None:
            limit = rt.config.max_assignment_bytes
            if (req.protocol_type and req.protocol_type != group.protocol_type) or (
                req.protocol_name and req.protocol_name != group.protocol_name
            ):
                code = Errors.INCONSISTENT_GROUP_PROTOCOL
            elif any(len(a.assignment) > limit for a in req.assignments):
                code, message = Errors.POLICY_VIOLATION, f"an assignment exceeds group_max_assignment_bytes = {limit}"
            elif group.state == PREPARING:
                code = Errors.REBALANCE_IN_PROGRESS
            elif group.state == COMPLETING:
                self._sync_completing(out, group, req, token)
                return
            else:
                rt.soft_for(group.group_id).pending_sync.discard(req.member_id)
                self.rebalance.refresh_session(group, req.member_id)
                out.reply(token, sync_ok(group, req.member_id))
                return
        out.reply(token, sync_error(code, message))

    def _sync_completing(self, out: CoordinatorResult, group: Group, req: pb.SyncGroupRequest, token: Token) -> None:
        rebalance = self.rebalance
        soft = self.rt.soft_for(group.group_id)
        rebalance.park_sync(out, group, req.member_id, token)
        soft.pending_sync.discard(req.member_id)
        if req.member_id != group.leader_id:
            return
        given = {a.member_id: a.assignment for a in req.assignments}
        assignments = {mid: given.get(mid, b"") for mid in group.members}
        rebalance.emit(out, r.AssignmentsSynced(group.group_id, group.generation_id, assignments, self.rt.wall()))
        waiters, soft.sync_waiters = soft.sync_waiters, {}
        for mid, sync_token in waiters.items():
            out.reply(sync_token, sync_ok(group, mid))
            rebalance.refresh_session(group, mid)
        if not soft.pending_sync:
            self.rt.timers.cancel(SyncDeadline(group.group_id))

    # -- Heartbeat ------------------------------------------------------------------------------------

    def heartbeat(self, out: CoordinatorResult, req: pb.HeartbeatRequest, token: Token) -> None:
        rt = self.rt
        code, group = generation_error(
            rt.config, rt.unloaded, rt.store, req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if code == Errors.NONE and group is not None:
            self.rebalance.refresh_session(group, req.member_id)
            if group.state == PREPARING:
                code = Errors.REBALANCE_IN_PROGRESS
        out.reply(token, pb.HeartbeatResponse(error_code=code))

    # -- LeaveGroup -----------------------------------------------------------------------------------

    def leave_group(self, out: CoordinatorResult, req: pb.LeaveGroupRequest, token: Token) -> None:
        code = group_id_error(self.rt.config, self.rt.unloaded, req.group_id)
        if code == Errors.NONE and not req.members:
            out.reply(token, pb.LeaveGroupResponse(error_code=Errors.INVALID_REQUEST, error_message="no members"))
            return
        if code != Errors.NONE:
            out.reply(token, pb.LeaveGroupResponse(error_code=code))
            return
        group = self.rt.store.get(req.group_id)
        resp = pb.LeaveGroupResponse(error_code=Errors.NONE)
        for leaving in req.members:
            member_code = self._leave_one(out, group, leaving) if group is not None else Errors.UNKNOWN_MEMBER_ID
            resp.members.add(
                member_id=leaving.member_id, group_instance_id=leaving.group_instance_id, error_code=member_code
            )
        out.reply(token, resp)

    def _leave_one(self, out: CoordinatorResult, group: Group, leaving: pb.LeaveGroupRequest.MemberIdentity) -> Errors:
        rebalance = self.rebalance
        member_id, instance_id = leaving.member_id, leaving.group_instance_id
        if not member_id:
            # Administrative removal by instance id (KIP-345 batch leave).
            member_id = group.static_members.get(instance_id, "") if instance_id else ""
            if not member_id and instance_id in group.registered_instances:
                # Pre-registered and never joined: the join phase must not wait for it any longer.
                rebalance.emit(out, r.InstancesUnregistered(group.group_id, (instance_id,), self.rt.wall()))
                rebalance.maybe_complete_join(out, group)
                return Errors.NONE
            if not member_id:
                return Errors.UNKNOWN_MEMBER_ID
            cause, removal = r.RebalanceCause.ADMIN_REMOVAL, r.RemovalCause.ADMIN_REMOVAL
        elif member_id in group.pending_members and not instance_id:
            rebalance.emit(out, r.PendingMemberRemoved(group.group_id, member_id, r.RemovalCause.LEAVE, self.rt.wall()))
            rebalance.maybe_complete_join(out, group)
            return Errors.NONE
        else:
            code = member_error(group, member_id, instance_id)
            if code != Errors.NONE:
                return code
            cause, removal = r.RebalanceCause.MEMBER_LEFT, r.RemovalCause.LEAVE
        instance = group.members[member_id].group_instance_id
        rebalance.remove_member(out, group, member_id, removal, leaving.reason)
        rebalance.after_removal(out, group, cause, member_id, instance, leaving.reason)
        return Errors.NONE

    # -- AddMembersToGroup ----------------------------------------------------------------------------

    def add_members(
        self, out: CoordinatorResult, req: pb.AddMembersToGroupRequest, token: Token, node_groups: NodeGroups
    ) -> None:
        cfg = self.rt.config
        code = group_id_error(cfg, self.rt.unloaded, req.group_id)
        if code == Errors.NONE and not req.group_instance_ids:
            resp = pb.AddMembersToGroupResponse(error_code=Errors.INVALID_REQUEST, error_message="no instance ids")
            out.reply(token, resp)
            return
        if code != Errors.NONE:
            out.reply(token, pb.AddMembersToGroupResponse(error_code=code))
            return
        group = self.rt.store.get(req.group_id)
        if group is None and (refusal := new_group_refusal(cfg, self.rt.store, req.group_id, node_groups)):
            out.reply(token, pb.AddMembersToGroupResponse(error_code=Errors.POLICY_VIOLATION, error_message=refusal))
            return
        known = set(group.static_members) | set(group.registered_instances) if group else set()
        size = len(group.members) + len(group.registered_instances) if group else 0
        # An ordered set: a list's `in` made a request of n ids cost O(n^2) on the event loop.
        accepted: dict[str, None] = {}
        resp = pb.AddMembersToGroupResponse(error_code=Errors.NONE)
        for instance_id in req.group_instance_ids:
            if not instance_id or len(instance_id) > cfg.max_id_length:
                item, message = Errors.INVALID_REQUEST, "instance id is empty or too long"
            elif instance_id in known or instance_id in accepted:
                item, message = Errors.DUPLICATE_RESOURCE, "already a member, registered, or listed twice"
            elif cfg.max_size is not None and size + len(accepted) >= cfg.max_size:
                item, message = Errors.GROUP_MAX_SIZE_REACHED, f"group.max.size is {cfg.max_size}"
            else:
                item, message = Errors.NONE, ""
                accepted[instance_id] = None
            resp.results.add(group_instance_id=instance_id, error_code=item, error_message=message)
        if accepted:
            self.rebalance.emit(out, r.InstancesRegistered(req.group_id, tuple(accepted), self.rt.wall()))
        out.reply(token, resp)


def _protocols(req: pb.JoinGroupRequest) -> r.Protocols:
    return tuple((p.name, p.metadata) for p in req.protocols)


def _software(req: pb.JoinGroupRequest) -> tuple[str, str]:
    """What the client says it runs, for operators only: cut to MAX_REASON_LENGTH rather than refused."""
    return req.client_software_name[:MAX_REASON_LENGTH], req.client_software_version[:MAX_REASON_LENGTH]


def _timeouts(req: pb.JoinGroupRequest) -> tuple[int, int]:
    return req.session_timeout_ms, req.rebalance_timeout_ms or req.session_timeout_ms
