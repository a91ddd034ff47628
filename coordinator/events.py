"""Committed changes as events (docs/EVENTS.md): what every replica writes for each record that took effect.

An event is a flat JSON-ready dict (schema version `EVENT_VERSION`, documented in docs/EVENTS.md). Every field
comes from the replicated entry or from state after the apply, so every replica derives the same event for the
same (partition, index, position) and a reader can merge and de-duplicate the files of all nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from groupcoord.coordinator.state import Group
from groupcoord.protocol import records as r

EVENT_VERSION = 1
EXPIRED = frozenset({r.RemovalCause.SESSION_EXPIRED, r.RemovalCause.JOIN_TIMEOUT, r.RemovalCause.SYNC_TIMEOUT})

Event = dict[str, Any]
Describe = Callable[[Any, Group | None], tuple[str, str, str, dict[str, Any]]]


def _pending_added(rec: r.PendingMemberAdded, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "pending_member_added", rec.member_id, "", {"session_timeout_ms": rec.session_timeout_ms}


def _pending_removed(rec: r.PendingMemberRemoved, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    kind = "pending_member_expired" if rec.cause == r.RemovalCause.PENDING_EXPIRED else "pending_member_removed"
    return kind, rec.member_id, rec.cause, {}


def _member_added(rec: r.MemberAdded, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    details = {"group_instance_id": rec.group_instance_id, "client_id": rec.client_id, "client_host": rec.client_host,
               "protocols": [name for name, _ in rec.protocols]}  # fmt: skip
    return "member_joined", rec.member_id, "", details


def _member_updated(rec: r.MemberUpdated, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "member_updated", rec.member_id, "", {"protocols": [name for name, _ in rec.protocols]}


def _member_removed(rec: r.MemberRemoved, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    kind = "member_expired" if rec.cause in EXPIRED else "member_left"
    return kind, rec.member_id, rec.cause, {"client_reason": rec.reason} if rec.reason else {}


def _replaced(rec: r.StaticMemberReplaced, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    details = {"group_instance_id": rec.group_instance_id, "old_member_id": rec.old_member_id,
               "client_id": rec.client_id}  # fmt: skip
    return "member_replaced", rec.new_member_id, "", details


def _rebalance(rec: r.RebalanceStarted, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    details: dict[str, Any] = {"join_reason": rec.join_reason, "members": _members(group)}
    if rec.group_instance_id:
        details["group_instance_id"] = rec.group_instance_id
    if rec.reason:
        details["client_reason"] = rec.reason
    return "rebalance_started", rec.member_id, rec.cause, details


def _generation(rec: r.GenerationCompleted, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    details = {"protocol": rec.protocol_name, "leader": rec.leader_id, "members": _members(group)}
    return "generation_completed", "", "", details


def _synced(rec: r.AssignmentsSynced, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "sync_completed", "", "", {"members": sorted(rec.assignments)}


def _committed(rec: r.OffsetsCommitted, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    offsets = [[topic, partition, offset] for topic, partition, offset, _epoch, _meta in rec.offsets]
    return "offsets_committed", rec.member_id, "", {"count": len(offsets), "offsets": offsets}


def _expired(rec: r.OffsetsExpired, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    if rec.cause == r.OffsetsRemovalCause.RETENTION:
        return "offsets_expired", "", rec.cause, {"count": len(rec.partitions)}
    offsets = [[topic, partition] for topic, partition, _time in rec.partitions]
    return "offsets_deleted", "", rec.cause, {"count": len(offsets), "offsets": offsets}


def _deleted(rec: r.GroupDeleted, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "group_deleted", "", rec.cause, {}


def _registered(rec: r.InstancesRegistered, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "instances_registered", "", "", {"group_instance_ids": list(rec.group_instance_ids)}


def _unregistered(rec: r.InstancesUnregistered, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "instances_unregistered", "", "", {"group_instance_ids": list(rec.group_instance_ids)}


def _avoided(rec: r.RebalanceAvoided, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    details = {"join_reason": rec.join_reason, "group_instance_id": rec.group_instance_id}
    return "rebalance_avoided", rec.member_id, rec.cause, details


def _topic_created(rec: r.TopicCreated, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "topic_created", "", "", {"topic": rec.topic, "topic_id": rec.topic_id, "num_partitions": rec.num_partitions}


def _topic_deleted(rec: r.TopicDeleted, group: Group | None) -> tuple[str, str, str, dict[str, Any]]:
    return "topic_deleted", "", "", {"topic": rec.topic}


DESCRIBE: dict[type, Describe] = {
    r.PendingMemberAdded: _pending_added,
    r.PendingMemberRemoved: _pending_removed,
    r.MemberAdded: _member_added,
    r.MemberUpdated: _member_updated,
    r.MemberRemoved: _member_removed,
    r.StaticMemberReplaced: _replaced,
    r.RebalanceStarted: _rebalance,
    r.GenerationCompleted: _generation,
    r.AssignmentsSynced: _synced,
    r.OffsetsCommitted: _committed,
    r.OffsetsExpired: _expired,
    r.GroupDeleted: _deleted,
    r.InstancesRegistered: _registered,
    r.InstancesUnregistered: _unregistered,
    r.RebalanceAvoided: _avoided,
    r.TopicCreated: _topic_created,
    r.TopicDeleted: _topic_deleted,
}


def _members(group: Group | None) -> list[str]:
    return list(group.members) if group is not None else []


def record_event(
    rec: r.Record, group: Group | None, partition: int, index: int, position: int, term: int, node: int
) -> Event:
    """The event of one record that took effect; `group` is its group after the apply (None once deleted, and for
    a topic record, whose event belongs to no group: `group` and `state` are "", as for a barrier)."""
    kind, member, reason, details = DESCRIBE[type(rec)](rec, group)
    generation = getattr(rec, "generation_id", None)
    if generation is None and group is not None:
        generation = group.generation_id
    if isinstance(rec, r.GroupRecord):
        group_id, state = rec.group_id, group.state.value if group is not None else "Dead"
    else:
        group_id, state = "", ""
    return {
        "v": EVENT_VERSION,
        "time_ms": rec.time_ms,
        "partition": partition,
        "index": index,
        "position": position,
        "term": term,
        "node": node,
        "group": group_id,
        "kind": kind,
        "member": member,
        "generation": generation,
        "reason": reason,
        "state": state,
        "details": details,
    }


def barrier_event(time_ms: int | None, partition: int, index: int, term: int, node: int) -> Event:
    """A new leader's barrier committed: from here it serves the partition (docs/EVENTS.md: a leader elected)."""
    return {
        "v": EVENT_VERSION,
        "time_ms": time_ms,
        "partition": partition,
        "index": index,
        "position": 0,
        "term": term,
        "node": node,
        "group": "",
        "kind": "barrier_committed",
        "member": "",
        "generation": None,
        "reason": "",
        "state": "",
        "details": {},
    }
