"""OffsetCommit and OffsetFetch: gRPC requests through the one request layer. Below v2 a whole-request error is
carried on every partition; from v8 one OffsetFetch asks for several groups, each answered on its own; from v10 both
name topics by topic id (the registry's), an id the registry does not know being UNKNOWN_TOPIC_ID. Offsets are
kept by topic name, as the gRPC API has them, so a topic deleted and created again under the same name finds the
old offsets: the registry keeps no history of ids."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

from groupcoord.node.kafka.common import UNKNOWN_TOPIC_ID, Values, member_identity, topic_uuid
from groupcoord.node.service import Context, GroupCoordinatorService
from groupcoord.node.topics import TopicRegistry
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


class OffsetApis:
    def __init__(self, service: GroupCoordinatorService, topics: TopicRegistry) -> None:
        self._service = service
        self._topics = topics

    def _names(self) -> dict[uuid.UUID, str]:
        return {topic_uuid(t.topic_id): t.name for t in self._topics.topics()}

    async def offset_commit(self, version: int, request: Any, context: Context) -> Values:
        by_id = self._names() if version >= 10 else {}
        names = [by_id.get(t.topic_id, "") if version >= 10 else t.name for t in request.topics]
        commit = pb.OffsetCommitRequest(
            **member_identity(request, request.generation_id_or_member_epoch),
            topics=[
                pb.OffsetCommitRequest.Topic(
                    name=name,
                    partitions=[
                        pb.OffsetCommitRequest.Partition(
                            partition_index=p.partition_index,
                            committed_offset=p.committed_offset,
                            committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                            committed_metadata=p.committed_metadata or "",
                        )
                        for p in t.partitions
                    ],
                )
                for t, name in zip(request.topics, names, strict=True)
                if name
            ],
        )
        response = cast(pb.OffsetCommitResponse, await self._service.serve("OffsetCommit", commit, context))
        codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": name,
                    "topic_id": getattr(t, "topic_id", None),
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": codes.get((name, p.partition_index), response.error_code)
                            if name
                            else UNKNOWN_TOPIC_ID,
                        }
                        for p in t.partitions
                    ],
                }
                for t, name in zip(request.topics, names, strict=True)
            ],
        }

    async def offset_fetch(self, version: int, request: Any, context: Context) -> Values:
        if version >= 8:
            by_id = self._names() if version >= 10 else None
            groups = await asyncio.gather(
                *(
                    self._fetch_group(g.group_id, g.topics, request.require_stable, context, by_id)
                    for g in request.groups
                )
            )
            return {"throttle_time": 0, "groups": list(groups)}
        group = await self._fetch_group(
            request.group_id, request.topics, getattr(request, "require_stable", False), context
        )
        if version < 2 and group["error_code"] != Errors.NONE:
            for topic in group["topics"]:
                for partition in topic["partitions"]:
                    partition["error_code"] = group["error_code"]
        return {"throttle_time": 0, "topics": group["topics"], "error_code": group["error_code"]}

    async def _fetch_group(
        self,
        group_id: str,
        topics: Any,
        require_stable: bool,
        context: Context,
        by_id: dict[uuid.UUID, str] | None = None,
    ) -> Values:
        """One group's offsets; `by_id` (v10) names the topics by id, in the request and in the answer."""
        named: list[tuple[str, uuid.UUID | None, list[int]]] | None
        if topics is None:
            named = None

        elif by_id is None:
            named = [(t.name, None, list(t.partition_indexes)) for t in topics]
        else:
            named = [(by_id.get(t.topic_id, ""), t.topic_id, list(t.partition_indexes)) for t in topics]
        fetch = pb.OffsetFetchRequest(
            group_id=group_id,
            topics=[pb.OffsetFetchRequest.Topic(name=n, partition_indexes=i) for n, _, i in named or () if n],
            require_stable=require_stable,
        )
        response = cast(pb.OffsetFetchResponse, await self._service.serve("OffsetFetch", fetch, context))
        answered = {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}
        if named is None:
            ids = {name: topic_id for topic_id, name in (by_id or {}).items()}
            # By id, a topic the registry does not name cannot be told: its offsets are left out.
            named = [
                (t.name, ids.get(t.name), [p.partition_index for p in t.partitions])
                for t in response.topics
                if by_id is None or t.name in ids
            ]
        out = []
        for name, topic_id, indexes in named:
            partitions = []
            for index in indexes:
                p = answered.get((name, index))
                partitions.append(
                    {
                        "partition_index": index,
                        "committed_offset": p.committed_offset if p is not None else -1,
                        "committed_leader_epoch": p.committed_leader_epoch if p is not None else -1,
                        "metadata": p.metadata if p is not None else "",
                        "error_code": p.error_code if p is not None else (Errors.NONE if name else UNKNOWN_TOPIC_ID),
                    }
                )
            out.append({"name": name, "topic_id": topic_id, "partitions": partitions})
        return {"group_id": group_id, "topics": out, "error_code": response.error_code}

    async def offset_delete(self, version: int, request: Any, context: Context) -> Values:
        """Kafka's rules (the core's `offset_delete`): a whole-request error comes with no topics; otherwise each
        partition is NONE, or GROUP_SUBSCRIBED_TO_TOPIC for a topic a member of a live group consumes."""
        delete = pb.OffsetDeleteRequest(
            group_id=request.group_id,
            topics=[
                pb.OffsetDeleteRequest.Topic(
                    name=t.name,
                    partitions=[
                        pb.OffsetDeleteRequest.Partition(partition_index=p.partition_index) for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )
        response = cast(pb.OffsetDeleteResponse, await self._service.serve("OffsetDelete", delete, context))
        return {
            "error_code": response.error_code,
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": p.error_code} for p in t.partitions
                    ],
                }
                for t in response.topics
            ],
        }
