"""Each Kafka API served: the kio request becomes the gRPC API's request, goes through the one request layer
(`GroupCoordinatorService.serve`: authorization, validation, routing, the core), and its answer becomes the
response's values for the version asked (protocol/kafka/codec.py `build` keeps the fields that version has).

Version rules follow Kafka's: a JoinGroup below v4 never sees MEMBER_ID_REQUIRED (the listener rejoins with the
id at once, as Kafka's coordinator does for old clients); DescribeGroups below v6 reports an unknown group as Dead
with no error; OffsetCommit and OffsetFetch below v2 carry a whole-request error on every partition.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from groupcoord.client.admin import Admin, AdminError
from groupcoord.coordinator.state import Topic
from groupcoord.node.cluster import NodeCluster
from groupcoord.node.logs import fields
from groupcoord.node.service import Context, GroupCoordinatorService
from groupcoord.node.topics import TopicRegistry
from groupcoord.node.topology import Peer
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import APIS, millis
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

# How long a Metadata request waits for the topics it creates (Kafka's auto-creation) before it answers without.
AUTO_CREATE_DEADLINE_S = 5.0
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_ID = 100
# What Kafka sends for "authorized operations were not asked for".
NO_OPERATIONS = -(2**31)
PRODUCE_REFUSED = (
    "groupcoord is a group coordinator and stores no records: produce to your Kafka cluster, and use groupcoord "
    "for the consumer group"
)

Values = dict[str, Any]
Api = Callable[[int, Any, Context], Awaitable[Values | None]]


class KafkaApis:
    def __init__(
        self,
        service: GroupCoordinatorService,
        cluster: NodeCluster,
        topics: TopicRegistry,
        fetch_max_wait_ms: int,
    ) -> None:
        self._service = service
        self._cluster = cluster
        self._topics = topics
        self._advertised = (cluster.me.client_host, 0)
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._admin: Admin | None = None
        self.apis: dict[int, Api] = {
            0: self.produce,
            1: self.fetch,
            2: self.list_offsets,
            3: self.metadata,
            8: self.offset_commit,
            9: self.offset_fetch,
            10: self.find_coordinator,
            11: self.join_group,
            12: self.heartbeat,
            13: self.leave_group,
            14: self.sync_group,
            15: self.describe_groups,
            16: self.list_groups,
            18: self.api_versions,
            42: self.delete_groups,
        }
        if set(self.apis) != set(APIS):
            raise RuntimeError(f"Kafka APIs advertised without a handler, or the reverse: {set(self.apis) ^ set(APIS)}")

    # -- where clients are sent ---------------------------------------------------------------------------

    def advertise(self, host: str, port: int) -> None:
        """The address clients are told for this node, known once the listener has bound its port."""
        self._advertised = (host, port)

    def broker(self, peer: Peer) -> tuple[str, int]:
        """A node's Kafka address as clients are told it: this node's own advertised address; another node's client
        host with this node's advertised Kafka port (every node of a cluster listens on the same Kafka port)."""
        if peer.node_id == self._cluster.node_id:
            return self._advertised
        return peer.client_host, self._advertised[1]

    def _brokers(self) -> list[Values]:
        return [
            {"node_id": p.node_id, "host": self.broker(p)[0], "port": self.broker(p)[1], "rack": None}
            for p in sorted(self._cluster.peers, key=lambda p: p.node_id)
        ]

    # -- the cluster --------------------------------------------------------------------------------------

    async def api_versions(self, version: int, request: Any, context: Context) -> Values:
        return {"error_code": Errors.NONE, "api_keys": api_keys(), "throttle_time": 0}

    async def metadata(self, version: int, request: Any, context: Context) -> Values:
        asked = request.topics
        names = None if asked is None or (version == 0 and not asked) else [t.name for t in asked]
        auto = getattr(request, "allow_auto_topic_creation", True)
        log.debug("kafka.metadata", extra=fields(topics=names, auto_create=auto))
        created = await self._auto_create(names) if names and auto and self._topics.auto_create else []
        # A topic just created on another node may not have reached this node's replica yet.
        listed = {t.name: t for t in [*created, *self._topics.topics(names)]}
        alive = sorted((p.node_id for p in self._cluster.peers if self._cluster.alive(p)), key=int)
        alive = alive or [self._cluster.node_id]
        topics: list[Values] = []
        for name in listed if names is None else names:
            topic = listed.get(name)
            if topic is None:
                topics.append(
                    {
                        "error_code": UNKNOWN_TOPIC_OR_PARTITION,
                        "name": name,
                        "topic_id": uuid.UUID(int=0),
                        "partitions": [],
                    }
                )
                continue
            partitions = []
            for index in range(topic.num_partitions):
                leader = alive[index % len(alive)]
                partitions.append(
                    {
                        "error_code": Errors.NONE,
                        "partition_index": index,
                        "leader_id": leader,
                        "leader_epoch": 0,
                        "replica_nodes": (leader,),
                        "isr_nodes": (leader,),
                        "offline_replicas": (),
                    }
                )
            topics.append(
                {
                    "error_code": Errors.NONE,
                    "name": topic.name,
                    "topic_id": _topic_uuid(topic.topic_id),
                    "is_internal": False,
                    "partitions": partitions,
                }
            )
        leader = self._cluster.leader_of(0)
        return {
            "throttle_time": 0,
            "brokers": self._brokers(),
            "cluster_id": self._cluster.cluster_id,
            "controller_id": leader.node_id if leader is not None else -1,
            "topics": topics,
            "error_code": Errors.NONE,
        }

    async def _auto_create(self, names: list[str]) -> list[Topic]:
        """Kafka's auto-creation: the topics a Metadata request names that do not exist yet are created with the
        default partition count. A topic is created by the leader of its coordinator partition, so this goes
        through the gRPC API as any admin client would (the Admin finds each topic's coordinator): the same
        validation and authorization, no second path into the core. Failures leave the topic unknown, and the
        client asks again."""
        known = {t.name for t in self._topics.topics(names)}
        missing = [n for n in dict.fromkeys(names) if n and n not in known]
        if not missing:
            return []
        if self._admin is None:
            self._admin = Admin([self._cluster.me.address], deadline_s=AUTO_CREATE_DEADLINE_S)
        try:
            results = await self._admin.create_topics([(name, -1) for name in missing])
        except AdminError as exc:
            log.warning("kafka.auto_create_failed", extra=fields(topics=missing, error=str(exc)))
            return []
        for result in results:
            if result.error_code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning(
                    "kafka.auto_create_failed",
                    extra=fields(topic=result.name, error_code=result.error_code, error=result.error_message),
                )
        return [Topic(r.name, r.num_partitions, r.topic_id) for r in results if r.error_code == Errors.NONE]

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    async def find_coordinator(self, version: int, request: Any, context: Context) -> Values:
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        key_type = getattr(request, "key_type", 0)
        entries: list[Values] = []
        if key_type != 0:
            message = f"key type {key_type}: groupcoord coordinates consumer groups only (key type 0)"
            entries = [_no_coordinator(k, Errors.INVALID_REQUEST, message) for k in keys]
        else:
            response = await self._service.serve("FindCoordinator", pb.FindCoordinatorRequest(group_ids=keys), context)
            by_id = {p.node_id: p for p in self._cluster.peers}
            for entry in response.coordinators:
                peer = by_id.get(entry.node_id)
                if entry.error_code != Errors.NONE or peer is None:
                    code = entry.error_code or Errors.COORDINATOR_NOT_AVAILABLE
                    entries.append(_no_coordinator(entry.group_id, code, entry.error_message or None))
                else:
                    host, port = self.broker(peer)
                    entries.append(
                        {
                            "key": entry.group_id,
                            "node_id": peer.node_id,
                            "host": host,
                            "port": port,
                            "error_code": Errors.NONE,
                            "error_message": None,
                        }
                    )
        if version >= 4:
            return {"throttle_time": 0, "coordinators": entries}
        return {"throttle_time": 0, **entries[0]}

    # -- membership ---------------------------------------------------------------------------------------

    async def join_group(self, version: int, request: Any, context: Context) -> Values:
        session_ms = millis(request.session_timeout)
        join = pb.JoinGroupRequest(
            group_id=request.group_id,
            session_timeout_ms=session_ms,
            # v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms=millis(request.rebalance_timeout) if version >= 1 else session_ms,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None) or "",
            protocol_type=request.protocol_type,
            protocols=[pb.JoinGroupRequest.Protocol(name=p.name, metadata=p.metadata) for p in request.protocols],
            reason=getattr(request, "reason", None) or "",
            client_id=getattr(context, "client_id", "") or "",
        )
        response = await self._service.serve("JoinGroup", join, context)
        if version < 4 and response.error_code == Errors.MEMBER_ID_REQUIRED:
            join.member_id = response.member_id
            response = await self._service.serve("JoinGroup", join, context)
        return {
            "throttle_time": response.throttle_time_ms,
            "error_code": response.error_code,
            "generation_id": response.generation_id if response.error_code == Errors.NONE else -1,
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name or (None if version >= 7 else ""),
            "leader": response.leader,
            "skip_assignment": response.skip_assignment,
            "member_id": response.member_id,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id or None, "metadata": m.metadata}
                for m in response.members
            ],
        }

    async def sync_group(self, version: int, request: Any, context: Context) -> Values:
        sync = pb.SyncGroupRequest(
            **_member(request, request.generation_id),
            protocol_type=getattr(request, "protocol_type", None) or "",
            protocol_name=getattr(request, "protocol_name", None) or "",
            assignments=[
                pb.SyncGroupRequest.Assignment(member_id=a.member_id, assignment=a.assignment)
                for a in request.assignments
            ],
        )
        response = await self._service.serve("SyncGroup", sync, context)
        return {
            "throttle_time": 0,
            "error_code": response.error_code,
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name or None,
            "assignment": response.assignment,
        }

    async def heartbeat(self, version: int, request: Any, context: Context) -> Values:
        beat = pb.HeartbeatRequest(**_member(request, request.generation_id))
        response = await self._service.serve("Heartbeat", beat, context)
        return {"throttle_time": 0, "error_code": response.error_code}

    async def leave_group(self, version: int, request: Any, context: Context) -> Values:
        if version >= 3:
            members = [
                pb.LeaveGroupRequest.MemberIdentity(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id or "",
                    reason=getattr(m, "reason", None) or "",
                )
                for m in request.members
            ]
        else:
            members = [pb.LeaveGroupRequest.MemberIdentity(member_id=request.member_id)]
        response = await self._service.serve(
            "LeaveGroup", pb.LeaveGroupRequest(group_id=request.group_id, members=members), context
        )
        code = response.error_code
        if version < 3 and code == Errors.NONE and response.members:
            code = response.members[0].error_code
        # Kafka's rule: a request-level error comes with no member entries.
        answered = response.members if response.error_code == Errors.NONE else ()
        return {
            "throttle_time": 0,
            "error_code": code,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id or None, "error_code": m.error_code}
                for m in answered
            ],
        }

    # -- offsets ------------------------------------------------------------------------------------------

    async def offset_commit(self, version: int, request: Any, context: Context) -> Values:
        commit = pb.OffsetCommitRequest(
            **_member(request, request.generation_id_or_member_epoch),
            topics=[
                pb.OffsetCommitRequest.Topic(
                    name=t.name,
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
                for t in request.topics
            ],
        )
        response = await self._service.serve("OffsetCommit", commit, context)
        codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": codes.get((t.name, p.partition_index), response.error_code),
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

    async def offset_fetch(self, version: int, request: Any, context: Context) -> Values:
        if version >= 8:
            groups = await asyncio.gather(
                *(self._fetch_group(g.group_id, g.topics, request.require_stable, context) for g in request.groups)
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

    async def _fetch_group(self, group_id: str, topics: Any, require_stable: bool, context: Context) -> Values:
        fetch = pb.OffsetFetchRequest(
            group_id=group_id,
            topics=[
                pb.OffsetFetchRequest.Topic(name=t.name, partition_indexes=list(t.partition_indexes))
                for t in topics or ()
            ],
            require_stable=require_stable,
        )
        response = await self._service.serve("OffsetFetch", fetch, context)
        answered = {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}
        if topics is None:
            asked = [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics]
        else:
            asked = [(t.name, list(t.partition_indexes)) for t in topics]
        out = []
        for name, indexes in asked:
            partitions = []
            for index in indexes:
                p = answered.get((name, index))
                partitions.append(
                    {
                        "partition_index": index,
                        "committed_offset": p.committed_offset if p is not None else -1,
                        "committed_leader_epoch": p.committed_leader_epoch if p is not None else -1,
                        "metadata": p.metadata if p is not None else "",
                        "error_code": p.error_code if p is not None else Errors.NONE,
                    }
                )
            out.append({"name": name, "partitions": partitions})
        return {"group_id": group_id, "topics": out, "error_code": response.error_code}

    # -- administration -----------------------------------------------------------------------------------

    async def describe_groups(self, version: int, request: Any, context: Context) -> Values:
        response = await self._service.serve(
            "DescribeGroups", pb.DescribeGroupsRequest(group_ids=list(request.groups)), context
        )
        groups = []
        for g in response.groups:
            code = g.error_code
            if code == Errors.GROUP_ID_NOT_FOUND and version < 6:
                code = Errors.NONE  # Kafka's older versions describe an unknown group as Dead, without an error
            groups.append(
                {
                    "error_code": code,
                    "group_id": g.group_id,
                    "group_state": g.group_state,
                    "protocol_type": g.protocol_type,
                    "protocol_data": g.protocol_data,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id or None,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.member_metadata,
                            "member_assignment": m.member_assignment,
                        }
                        for m in g.members
                    ],
                    "authorized_operations": NO_OPERATIONS,
                }
            )
        return {"throttle_time": 0, "groups": groups}

    async def list_groups(self, version: int, request: Any, context: Context) -> Values:
        """Kafka's admin clients ask every broker and merge: each node lists the groups it coordinates."""
        states = list(getattr(request, "states_filter", ()))
        response = await self._service.serve(
            "ListGroups", pb.ListGroupsRequest(states_filter=states, coordinated_only=True), context
        )
        return {
            "throttle_time": 0,
            "error_code": response.error_code,
            "groups": [
                {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.group_state}
                for g in response.groups
            ],
        }

    async def delete_groups(self, version: int, request: Any, context: Context) -> Values:
        response = await self._service.serve(
            "DeleteGroups", pb.DeleteGroupsRequest(group_ids=list(request.groups_names)), context
        )
        return {
            "throttle_time": 0,
            "results": [{"group_id": r.group_id, "error_code": r.error_code} for r in response.results],
        }

    # -- records: none are stored -------------------------------------------------------------------------

    async def list_offsets(self, version: int, request: Any, context: Context) -> Values:
        known = {t.name: t for t in self._topics.topics([t.name for t in request.topics])}
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": _partition_error(known.get(t.name), p.partition_index),
                            "timestamp": -1,
                            "offset": 0,
                            "leader_epoch": 0,
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

    async def fetch(self, version: int, request: Any, context: Context) -> Values:
        """Always empty, after waiting as long as the client allows (up to `kafka_fetch_max_wait_ms`): a Fetch
        answered at once would have the client ask again at once, a core spinning."""
        by_id = {_topic_uuid(t.topic_id): t for t in self._topics.topics()} if version >= 13 else {}
        by_name = {} if version >= 13 else {t.name: t for t in self._topics.topics([t.topic for t in request.topics])}
        await asyncio.sleep(min(max(millis(request.max_wait), 0), self._fetch_max_wait_ms) / 1000)
        responses = []
        for t in request.topics:
            topic = by_id.get(t.topic_id) if version >= 13 else by_name.get(t.topic)
            missing = UNKNOWN_TOPIC_ID if version >= 13 else UNKNOWN_TOPIC_OR_PARTITION
            responses.append(
                {
                    "topic": getattr(t, "topic", ""),
                    "topic_id": getattr(t, "topic_id", uuid.UUID(int=0)),
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": missing if topic is None else _partition_error(topic, p.partition),
                            "high_watermark": 0,
                            "last_stable_offset": 0,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "records": b"",
                        }
                        for p in t.partitions
                    ],
                }
            )
        return {"throttle_time": 0, "error_code": Errors.NONE, "session_id": 0, "responses": responses}

    async def produce(self, version: int, request: Any, context: Context) -> Values | None:
        if request.acks == 0:
            return None  # a producer with acks=0 reads no response
        return {
            "throttle_time": 0,
            "responses": [
                {
                    "name": t.name,
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": Errors.POLICY_VIOLATION,
                            "base_offset": -1,
                            "record_errors": (),
                            "error_message": PRODUCE_REFUSED,
                        }
                        for p in t.partition_data
                    ],
                }
                for t in request.topic_data
            ],
        }


def _member(request: Any, generation_id: int) -> Values:
    """The member identity every in-group request carries, in the gRPC API's fields."""
    return {
        "group_id": request.group_id,
        "generation_id": generation_id,
        "member_id": request.member_id,
        "group_instance_id": getattr(request, "group_instance_id", None) or "",
    }


def api_keys() -> list[Values]:
    return [{"api_key": key, "min_version": lo, "max_version": hi} for key, (_, lo, hi) in sorted(APIS.items())]


def _no_coordinator(key: str, code: int, message: str | None) -> Values:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


def _partition_error(topic: Any, index: int) -> int:
    if topic is None or not 0 <= index < topic.num_partitions:
        return UNKNOWN_TOPIC_OR_PARTITION
    return Errors.NONE


def _topic_uuid(topic_id: Any) -> uuid.UUID:
    return topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))
