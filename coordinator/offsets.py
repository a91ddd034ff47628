"""OffsetCommit and OffsetFetch with generation fencing, OffsetDelete, and offset retention / empty-group expiry."""

from __future__ import annotations

import re

from groupcoord.coordinator.limits import exceeds
from groupcoord.coordinator.membership import Membership, NodeGroups, no_groups
from groupcoord.coordinator.runtime import Token, core_call
from groupcoord.coordinator.state import Group, GroupState
from groupcoord.protocol import records as r
from groupcoord.protocol.consumer import PROTOCOL_TYPE, subscribed_topics
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

# Kafka's legal topic names; the bound keeps an offsets_committed event line proportional to its partitions.
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class Offsets(Membership):
    @core_call
    def offset_commit(self, req: pb.OffsetCommitRequest, token: Token, node_groups: NodeGroups = no_groups) -> None:
        """`node_groups`: the groups of every partition the node leads, for `max_groups_per_node`."""
        code = self._group_id_error(req.group_id, allow_empty=True)
        most = self.config.offset_commit_max_partitions
        if code == Errors.NONE and exceeds((len(t.partitions) for t in req.topics), most):
            # Refused before any per-partition work: no response item, no record, no event line.
            message = f"more than offset_commit_max_partitions = {most} partitions"
            self._reply(token, pb.OffsetCommitResponse(error_code=Errors.POLICY_VIOLATION, error_message=message))
            return
        group = self.store.get(req.group_id)
        message = ""
        if code == Errors.NONE:
            code = self._commit_error(group, req)
        if code == Errors.NONE and group is None and (message := self._new_group_refusal(req.group_id, node_groups)):
            code = Errors.POLICY_VIOLATION
        resp = pb.OffsetCommitResponse(error_code=code if message else Errors.NONE, error_message=message)
        rows: list[r.OffsetRow] = []
        limit = self.config.offset_metadata_max_bytes
        for topic in req.topics:
            out = resp.topics.add(name=topic.name)
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
                out.partitions.add(partition_index=part.partition_index, error_code=item)
        if rows:
            rec = r.OffsetsCommitted(req.group_id, req.member_id, req.generation_id, tuple(rows), self._wall())
            self._emit(rec)
        self._reply(token, resp)
        return

    def _commit_error(self, group: Group | None, req: pb.OffsetCommitRequest) -> Errors:
        """Kafka's ClassicGroup.validateOffsetCommit (Dead, an unloaded partition, is answered before).

        A negative generation on an Empty (or absent, so new) group is a "simple" commit of an admin tool or a
        consumer without group management, accepted whatever member or instance id it carries. Anything else is
        fenced by identity, then generation: with neither id that is UNKNOWN_MEMBER_ID."""
        if req.generation_id < 0 and (group is None or group.state == GroupState.EMPTY):
            return Errors.NONE
        if group is None:
            return Errors.UNKNOWN_MEMBER_ID
        code = self._member_error(group, req.member_id, req.group_instance_id)
        if code != Errors.NONE:
            return code
        if req.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        if group.state == GroupState.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        self._refresh_session(group, req.member_id)
        return Errors.NONE

    @core_call
    def offset_fetch(self, req: pb.OffsetFetchRequest, token: Token) -> None:
        code = self._group_id_error(req.group_id, allow_empty=True)
        most = self.config.offset_fetch_max_partitions
        if code == Errors.NONE and exceeds((len(t.partition_indexes) for t in req.topics), most):
            message = f"more than offset_fetch_max_partitions = {most} partitions"
            self._reply(token, pb.OffsetFetchResponse(error_code=Errors.POLICY_VIOLATION, error_message=message))
            return
        resp = pb.OffsetFetchResponse(error_code=code)
        group = self.store.get(req.group_id) if code == Errors.NONE else None
        offsets = group.offsets if group is not None else {}
        if code == Errors.NONE and req.topics:
            for topic in req.topics:
                out = resp.topics.add(name=topic.name)
                for index in topic.partition_indexes:
                    entry = offsets.get((topic.name, index))
                    if entry is None:
                        out.partitions.add(partition_index=index, committed_offset=-1, committed_leader_epoch=-1)
                    else:
                        out.partitions.add(
                            partition_index=index,
                            committed_offset=entry.offset,
                            committed_leader_epoch=entry.leader_epoch,
                            metadata=entry.metadata,
                        )
        elif code == Errors.NONE:
            by_topic: dict[str, pb.OffsetFetchResponse.Topic] = {}
            for (name, index), entry in sorted(offsets.items()):
                out = by_topic.get(name)
                if out is None:
                    out = by_topic[name] = resp.topics.add(name=name)
                out.partitions.add(
                    partition_index=index,
                    committed_offset=entry.offset,
                    committed_leader_epoch=entry.leader_epoch,
                    metadata=entry.metadata,
                )
        self._reply(token, resp)
        return

    @core_call
    def offset_delete(self, req: pb.OffsetDeleteRequest, token: Token) -> None:
        """Kafka's OffsetMetadataManager.deleteOffsets, validated as ClassicGroup.validateOffsetDelete: a live group
        keeps what its members consume, so only an Empty group, or the unsubscribed topics of a "consumer" one, lose
        offsets. A partition with nothing committed is answered NONE too."""
        code, message = self._group_id_error(req.group_id, allow_empty=True), ""
        most = self.config.offset_commit_max_partitions  # a deletion is bounded as the commit it undoes
        if code == Errors.NONE and exceeds((len(t.partitions) for t in req.topics), most):
            code, message = Errors.POLICY_VIOLATION, f"more than offset_commit_max_partitions = {most} partitions"
        group = self.store.get(req.group_id) if code == Errors.NONE else None
        if code == Errors.NONE and group is None:
            code, message = Errors.GROUP_ID_NOT_FOUND, f"no group {req.group_id!r}"
        elif group is not None and group.state != GroupState.EMPTY and group.protocol_type != PROTOCOL_TYPE:
            code, message = Errors.NON_EMPTY_GROUP, f"group is {group.state.value} and not of protocol type consumer"
        if code != Errors.NONE or group is None:
            self._reply(token, pb.OffsetDeleteResponse(error_code=code, error_message=message))
            return
        subscribed = self._subscribed_topics(group)
        resp = pb.OffsetDeleteResponse(error_code=Errors.NONE)
        rows: dict[tuple[str, int, int], None] = {}
        for topic in req.topics:
            out = resp.topics.add(name=topic.name)
            for part in topic.partitions:
                index = part.partition_index
                if topic.name in subscribed:
                    out.partitions.add(partition_index=index, error_code=Errors.GROUP_SUBSCRIBED_TO_TOPIC)
                    continue
                offset = group.offsets.get((topic.name, index))
                if offset is not None:
                    rows[(topic.name, index, offset.commit_time_ms)] = None
                out.partitions.add(partition_index=index, error_code=Errors.NONE)
        if rows:
            self._emit(r.OffsetsExpired(group.group_id, tuple(rows), self._wall(), r.OffsetsRemovalCause.OFFSET_DELETE))
        self._reply(token, resp)

    @staticmethod
    def _subscribed_topics(group: Group) -> frozenset[str]:
        """Kafka's ClassicGroup.subscribedTopics: known only for a live "consumer" group with a chosen protocol
        (Kafka's are those of the last generation; these are the current members')."""
        if group.state == GroupState.EMPTY or group.protocol_type != PROTOCOL_TYPE or not group.protocol_name:
            return frozenset()
        return subscribed_topics(m.metadata_for(group.protocol_name) for m in group.members.values())

    def _on_retention_check(self) -> None:
        """KIP-211: a consumer group's offsets expire `retention` after it became Empty; offsets of a
        group that never had members expire `retention` after their own commit. Empty shells go."""
        now = self._wall()
        retention = self.config.offsets_retention_ms
        for group in list(self.store.groups.values()):
            if group.state != GroupState.EMPTY:
                continue
            if group.protocol_type:
                expired = group.offsets.items() if now >= group.state_time_ms + retention else ()
            else:
                expired = [(k, o) for k, o in group.offsets.items() if now >= o.commit_time_ms + retention]
            rows = tuple((topic, part, o.commit_time_ms) for (topic, part), o in expired)
            if rows:
                self._emit(r.OffsetsExpired(group.group_id, rows, now))
            if group.is_empty_shell():
                self._emit(r.GroupDeleted(group.group_id, "expired", now))
