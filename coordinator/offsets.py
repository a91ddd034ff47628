"""OffsetCommit and OffsetFetch with generation fencing, OffsetDelete, and offset retention / empty-group expiry
(Kafka's OffsetMetadataManager)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from groupcoord.coordinator.limits import exceeds
from groupcoord.coordinator.rebalance import Rebalance
from groupcoord.coordinator.result import CoordinatorResult, Token
from groupcoord.coordinator.runtime import Runtime
from groupcoord.coordinator.state import Group, GroupState, Offset
from groupcoord.coordinator.timers import RetentionCheck
from groupcoord.coordinator.validation import (
    NodeGroups,
    group_id_error,
    is_simple_commit,
    new_group_refusal,
    offset_commit_error,
)
from groupcoord.protocol import records as r
from groupcoord.protocol.consumer import PROTOCOL_TYPE, subscribed_topics
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

# Kafka's legal topic names; the bound keeps an offsets_committed event line proportional to its partitions.
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class Offsets:
    """Offsets need the rebalance only to refresh a committing member's session; retention is their own timer."""

    def __init__(self, rt: Runtime, rebalance: Rebalance) -> None:
        self.rt = rt
        self.rebalance = rebalance

    def offset_commit(
        self, out: CoordinatorResult, req: pb.OffsetCommitRequest, token: Token, node_groups: NodeGroups
    ) -> None:
        """`node_groups`: the groups of every partition the node leads, for `max_groups_per_node`."""
        rt = self.rt
        code = group_id_error(rt.config, rt.unloaded, req.group_id, allow_empty=True)
        most = rt.config.offset_commit_max_partitions
        if code == Errors.NONE and exceeds((len(t.partitions) for t in req.topics), most):
            # Refused before any per-partition work: no response item, no record, no event line.
            message = f"more than offset_commit_max_partitions = {most} partitions"
            out.reply(token, pb.OffsetCommitResponse(error_code=Errors.POLICY_VIOLATION, error_message=message))
            return
        group = rt.store.get(req.group_id)
        message = ""
        if code == Errors.NONE:
            code = offset_commit_error(group, req)
            if code == Errors.NONE and group is not None and not is_simple_commit(group, req):
                # A member's commit is a sign of life, as a heartbeat.
                self.rebalance.refresh_session(group, req.member_id)
        if code == Errors.NONE and group is None:
            message = new_group_refusal(rt.config, rt.store, req.group_id, node_groups)
            code = Errors.POLICY_VIOLATION if message else code
        resp = pb.OffsetCommitResponse(error_code=code if message else Errors.NONE, error_message=message)
        rows: list[r.OffsetRow] = []
        limit = rt.config.offset_metadata_max_bytes
        for topic in req.topics:
            answer = resp.topics.add(name=topic.name)
            legal = TOPIC_NAME.fullmatch(topic.name) is not None
            for part in topic.partitions:
                item = code
                if item == Errors.NONE:
                    if not legal or part.partition_index < 0 or part.committed_offset < 0:
                        item = Errors.INVALID_REQUEST
                    elif len(part.committed_metadata.encode()) > limit:
                        item = Errors.OFFSET_METADATA_TOO_LARGE
                    else:
                        rows.append(
                            (
                                topic.name,
                                part.partition_index,
                                part.committed_offset,
                                part.committed_leader_epoch,
                                part.committed_metadata,
                            )
                        )
                answer.partitions.add(partition_index=part.partition_index, error_code=item)
        if rows:
            rec = r.OffsetsCommitted(req.group_id, req.member_id, req.generation_id, tuple(rows), rt.wall())
            rt.emit(out, rec)
        out.reply(token, resp)

    def offset_fetch(self, out: CoordinatorResult, req: pb.OffsetFetchRequest, token: Token) -> None:
        code = group_id_error(self.rt.config, self.rt.unloaded, req.group_id, allow_empty=True)
        most = self.rt.config.offset_fetch_max_partitions
        if code == Errors.NONE and exceeds((len(t.partition_indexes) for t in req.topics), most):
            message = f"more than offset_fetch_max_partitions = {most} partitions"
            out.reply(token, pb.OffsetFetchResponse(error_code=Errors.POLICY_VIOLATION, error_message=message))
            return
        resp = pb.OffsetFetchResponse(error_code=code)
        group = self.rt.store.get(req.group_id) if code == Errors.NONE else None
        offsets = group.offsets if group is not None else {}
        if code == Errors.NONE and req.topics:
            for topic in req.topics:
                answer = resp.topics.add(name=topic.name)
                for index in topic.partition_indexes:
                    entry = offsets.get((topic.name, index))
                    if entry is None:
                        answer.partitions.add(partition_index=index, committed_offset=-1, committed_leader_epoch=-1)
                    else:
                        answer.partitions.add(
                            partition_index=index,
                            committed_offset=entry.offset,
                            committed_leader_epoch=entry.leader_epoch,
                            metadata=entry.metadata,
                        )
        elif code == Errors.NONE:
            by_topic: dict[str, pb.OffsetFetchResponse.Topic] = {}
            for (name, index), entry in sorted(offsets.items()):
                if name not in by_topic:
                    by_topic[name] = resp.topics.add(name=name)
                by_topic[name].partitions.add(
                    partition_index=index,
                    committed_offset=entry.offset,
                    committed_leader_epoch=entry.leader_epoch,
                    metadata=entry.metadata,
                )
        out.reply(token, resp)

    def offset_delete(self, out: CoordinatorResult, req: pb.OffsetDeleteRequest, token: Token) -> None:
        """Kafka's OffsetMetadataManager.deleteOffsets, validated as ClassicGroup.validateOffsetDelete: a live group
        keeps what its members consume, so only an Empty group, or the unsubscribed topics of a "consumer" one, lose
        offsets. A partition with nothing committed is answered NONE too."""
        rt = self.rt
        code, message = group_id_error(rt.config, rt.unloaded, req.group_id, allow_empty=True), ""
        most = rt.config.offset_commit_max_partitions  # a deletion is bounded as the commit it undoes
        if code == Errors.NONE and exceeds((len(t.partitions) for t in req.topics), most):
            code, message = Errors.POLICY_VIOLATION, f"more than offset_commit_max_partitions = {most} partitions"
        group = rt.store.get(req.group_id) if code == Errors.NONE else None
        if code == Errors.NONE and group is None:
            code, message = Errors.GROUP_ID_NOT_FOUND, f"no group {req.group_id!r}"
        elif group is not None and group.state != GroupState.EMPTY and group.protocol_type != PROTOCOL_TYPE:
            code, message = Errors.NON_EMPTY_GROUP, f"group is {group.state.value} and not of protocol type consumer"
        if code != Errors.NONE or group is None:
            out.reply(token, pb.OffsetDeleteResponse(error_code=code, error_message=message))
            return
        subscribed = _subscribed_topics(group)
        resp = pb.OffsetDeleteResponse(error_code=Errors.NONE)
        rows: dict[tuple[str, int, int], None] = {}
        for topic in req.topics:
            answer = resp.topics.add(name=topic.name)
            for part in topic.partitions:
                index = part.partition_index
                if topic.name in subscribed:
                    answer.partitions.add(partition_index=index, error_code=Errors.GROUP_SUBSCRIBED_TO_TOPIC)
                    continue
                offset = group.offsets.get((topic.name, index))
                if offset is not None:
                    rows[(topic.name, index, offset.commit_time_ms)] = None
                answer.partitions.add(partition_index=index, error_code=Errors.NONE)
        if rows:
            rec = r.OffsetsExpired(group.group_id, tuple(rows), rt.wall(), r.OffsetsRemovalCause.OFFSET_DELETE)
            rt.emit(out, rec)
        out.reply(token, resp)

    def arm_retention(self, deadline: int) -> None:
        self.rt.timers.arm(RetentionCheck(), deadline, self._retention_check)

    def _retention_check(self, out: CoordinatorResult) -> None:
        """KIP-211: a consumer group's offsets expire `retention` after it became Empty; offsets of a group that
        never had members expire `retention` after their own commit. Empty shells go. Then the next check."""
        rt = self.rt
        now = rt.wall()
        retention = rt.config.offsets_retention_ms
        for group in list(rt.store.groups.values()):
            if group.state != GroupState.EMPTY:
                continue
            expired: Iterable[tuple[tuple[str, int], Offset]]
            if group.protocol_type:
                expired = group.offsets.items() if now >= group.state_time_ms + retention else ()
            else:
                expired = [(k, o) for k, o in group.offsets.items() if now >= o.commit_time_ms + retention]
            rows = tuple((topic, part, o.commit_time_ms) for (topic, part), o in expired)
            if rows:
                rt.emit(out, r.OffsetsExpired(group.group_id, rows, now))
            if group.is_empty_shell():
                rt.emit(out, r.GroupDeleted(group.group_id, "expired", now))
        self.arm_retention(rt.mono() + rt.config.offsets_retention_check_interval_ms)


def _subscribed_topics(group: Group) -> frozenset[str]:
    """Kafka's ClassicGroup.subscribedTopics: known only for a live "consumer" group with a chosen protocol
    (Kafka's are those of the last generation; these are the current members')."""
    if group.state == GroupState.EMPTY or group.protocol_type != PROTOCOL_TYPE or not group.protocol_name:
        return frozenset()
    return subscribed_topics(m.metadata_for(group.protocol_name) for m in group.members.values())
