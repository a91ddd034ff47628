"""The Kafka APIs a node serves, by api key. Each kio request becomes the gRPC API's request, goes through the one
request layer (`GroupCoordinatorService.serve`: authorization, validation, routing, the core), and its answer becomes
the response's values for the version asked (protocol/kafka/codec.py `build` keeps the fields that version has).

This module has the cluster-level APIs (ApiVersions, Metadata, FindCoordinator) and where clients are sent; groups,
offsets, topics and records each have a module of their own.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any, cast

from groupcoord.node.cluster import NodeCluster
from groupcoord.node.handon import HandOn
from groupcoord.node.kafka.common import UNKNOWN_TOPIC_OR_PARTITION, Api, Values, topic_uuid
from groupcoord.node.kafka.groups import GroupApis
from groupcoord.node.kafka.offsets import OffsetApis
from groupcoord.node.kafka.records import RecordApis
from groupcoord.node.kafka.sasl import sasl_authenticate, sasl_handshake
from groupcoord.node.kafka.topics import TopicApis
from groupcoord.node.logs import fields
from groupcoord.node.service import Context, GroupCoordinatorService
from groupcoord.node.topics import TopicRegistry
from groupcoord.node.topology import Peer
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import APIS
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

# Kafka's rule for the client software name and version of ApiVersions v3+ (ApiVersionsRequest.isValid).
SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class KafkaApis:
    def __init__(
        self,
        service: GroupCoordinatorService,
        cluster: NodeCluster,
        topics: TopicRegistry,
        hand_on: HandOn,
        fetch_max_wait_ms: int,
    ) -> None:
        self._service = service
        self._cluster = cluster
        self._topics = topics
        self._advertised = (cluster.me.client_host, 0)
        groups = GroupApis(service)
        offsets = OffsetApis(service, topics)
        records = RecordApis(topics, fetch_max_wait_ms)
        self._hand_on = hand_on
        self.topic_apis = TopicApis(service, topics, hand_on)
        self.apis: dict[int, Api] = {
            0: records.produce,
            1: records.fetch,
            2: records.list_offsets,
            3: self.metadata,
            8: offsets.offset_commit,
            9: offsets.offset_fetch,
            10: self.find_coordinator,
            11: groups.join_group,
            12: groups.heartbeat,
            13: groups.leave_group,
            14: groups.sync_group,
            15: groups.describe_groups,
            16: groups.list_groups,
            17: sasl_handshake,
            18: self.api_versions,
            19: self.topic_apis.create_topics,
            20: self.topic_apis.delete_topics,
            36: sasl_authenticate,
            42: groups.delete_groups,
            47: offsets.offset_delete,
        }
        if set(self.apis) != set(APIS):
            raise RuntimeError(f"Kafka APIs advertised without a handler, or the reverse: {set(self.apis) ^ set(APIS)}")

    async def close(self) -> None:
        await self._hand_on.close()

    # -- where clients are sent ---------------------------------------------------------------------------

    def advertise(self, bound_port: int, host: str = "", port: int = 0) -> None:
        """The address clients are told for this node, known once the listener has bound `bound_port`: `host` and
        `port` (kafka_advertised_*) where set, else this node's `@kafka=` address in `peers`, else its client host
        and the bound port."""
        me = self._cluster.me
        default_host, default_port = me.kafka or (me.client_host, bound_port)
        self._advertised = (host or default_host, port or default_port)

    def broker(self, peer: Peer) -> tuple[str, int]:
        """A node's Kafka address as clients are told it: this node's own advertised address; another node's
        `@kafka=` address in `peers`, else its client host with this node's advertised Kafka port (nodes that
        listen on one common Kafka port need no per-node address)."""
        if peer.node_id == self._cluster.node_id:
            return self._advertised
        return peer.kafka or (peer.client_host, self._advertised[1])

    def _brokers(self) -> list[Values]:
        """Every node as a Metadata broker, in node id order."""
        brokers = [(p.node_id, self.broker(p)) for p in sorted(self._cluster.peers, key=lambda p: p.node_id)]
        return [{"node_id": node_id, "host": host, "port": port, "rack": None} for node_id, (host, port) in brokers]

    # -- the cluster --------------------------------------------------------------------------------------

    async def api_versions(self, version: int, request: Any, context: Context) -> Values:
        """From v3 the client names its software; Kafka refuses names outside its pattern with INVALID_REQUEST."""
        if version >= 3 and not all(
            SOFTWARE_PATTERN.fullmatch(value or "")
            for value in (request.client_software_name, request.client_software_version)
        ):
            return {"error_code": Errors.INVALID_REQUEST, "api_keys": [], "throttle_time": 0}
        return {"error_code": Errors.NONE, "api_keys": api_keys(), "throttle_time": 0}

    async def metadata(self, version: int, request: Any, context: Context) -> Values:
        asked = request.topics
        names = None if asked is None or (version == 0 and not asked) else [t.name for t in asked]
        auto = getattr(request, "allow_auto_topic_creation", True)
        log.debug("kafka.metadata", extra=fields(topics=names, auto_create=auto))
        created = []
        if names and auto and self._topics.auto_create:
            created = await self.topic_apis.auto_create(names, context)
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
                    "topic_id": topic_uuid(topic.topic_id),
                    "is_internal": False,
                    "partitions": partitions,
                }
            )
        controller = self._cluster.leader_of(0)
        return {
            "throttle_time": 0,
            "brokers": self._brokers(),
            "cluster_id": self._cluster.cluster_id,
            "controller_id": controller.node_id if controller is not None else -1,
            "topics": topics,
            "error_code": Errors.NONE,
        }

    async def find_coordinator(self, version: int, request: Any, context: Context) -> Values:
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        key_type = getattr(request, "key_type", 0)
        entries: list[Values] = []
        if key_type != 0:
            message = f"key type {key_type}: groupcoord coordinates consumer groups only (key type 0)"
            entries = [_no_coordinator(k, Errors.INVALID_REQUEST, message) for k in keys]
        else:
            response = cast(
                pb.FindCoordinatorResponse,
                await self._service.serve("FindCoordinator", pb.FindCoordinatorRequest(group_ids=keys), context),
            )
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


def api_keys() -> list[Values]:
    return [{"api_key": key, "min_version": lo, "max_version": hi} for key, (_, lo, hi) in sorted(APIS.items())]


def _no_coordinator(key: str, code: int, message: str | None) -> Values:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}
