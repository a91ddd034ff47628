"""CreateTopics, DeleteTopics and Kafka's topic auto-creation, for the replicated topic registry.

A topic is created or deleted by the leader of its coordinator partition. A Kafka client sends CreateTopics to any
broker (the controller, for older clients): the node serves the topics whose partitions it leads through the one
request layer (authorization, validation, the core), and hands the others on to their leaders through the gRPC API,
as an admin client would. The hand-on carries no identity of the Kafka caller: only a caller the request layer let
through locally gets that far (with ACLs on, the anonymous Kafka caller is refused first).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from groupcoord.client.admin import Admin, AdminError
from groupcoord.coordinator.state import Topic
from groupcoord.node.cluster import NodeCluster
from groupcoord.node.kafka.common import Values
from groupcoord.node.logs import fields
from groupcoord.node.service import Context, GroupCoordinatorService
from groupcoord.node.topics import TopicRegistry
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

# How long a request waits for the topics another node creates or deletes before it answers without them.
HAND_ON_DEADLINE_S = 5.0
# Answered by a node for a topic whose partition another node leads: the topic is handed on to that node.
_ELSEWHERE = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)
_TOPIC_AUTHORIZATION_FAILED = 29


class TopicApis:
    def __init__(self, service: GroupCoordinatorService, cluster: NodeCluster, topics: TopicRegistry) -> None:
        self._service = service
        self._cluster = cluster
        self._topics = topics
        self._admin_client: Admin | None = None

    @property
    def _admin(self) -> Admin:
        if self._admin_client is None:
            self._admin_client = Admin([self._cluster.me.address], deadline_s=HAND_ON_DEADLINE_S)
        return self._admin_client

    async def create_topics(self, version: int, request: Any, context: Context) -> Values:
        """Replica assignments and configs are accepted and ignored (groupcoord keeps no replicas and no records);
        the replication factor reported is 1, as Metadata says."""
        asked = [pb.CreateTopicsRequest.Topic(name=t.name, num_partitions=t.num_partitions) for t in request.topics]
        served = await self._service.serve(
            "CreateTopics", pb.CreateTopicsRequest(topics=asked, validate_only=request.validate_only), context
        )
        results: list[Any] = list(served.results) or [None] * len(asked)
        if served.error_code != Errors.NONE:
            code = _topic_error(served.error_code)
            results = [_created(t.name, code, served.error_message) for t in asked]
        handed = [i for i, r in enumerate(results) if r.error_code in _ELSEWHERE]
        if handed:
            try:
                answers = await self._admin.create_topics(
                    [(asked[i].name, asked[i].num_partitions) for i in handed], validate_only=request.validate_only
                )
            except AdminError as exc:
                answers = [_created(asked[i].name, exc.code, exc.message) for i in handed]
            for i, answer in zip(handed, answers, strict=True):
                results[i] = answer
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": r.name,
                    "topic_id": uuid.UUID(r.topic_id)
                    if r.error_code == Errors.NONE and r.topic_id
                    else uuid.UUID(int=0),
                    "error_code": r.error_code,
                    "error_message": r.error_message or None,
                    "topic_config_error_code": 0,
                    "num_partitions": r.num_partitions if r.error_code == Errors.NONE else -1,
                    "replication_factor": 1 if r.error_code == Errors.NONE else -1,
                    "configs": [],
                }
                for r in results
            ],
        }

    async def delete_topics(self, version: int, request: Any, context: Context) -> Values:
        """By name; from v6 a topic may be named by its id instead."""
        by_id = {uuid.UUID(str(t.topic_id)): t.name for t in self._topics.topics()}
        if version >= 6:
            names = [t.name or by_id.get(t.topic_id, "") for t in request.topics]
        else:
            names = list(request.topic_names)
        served = await self._service.serve("DeleteTopics", pb.DeleteTopicsRequest(names=names), context)
        codes = [r.error_code for r in served.results] or [_topic_error(served.error_code)] * len(names)
        messages = [r.error_message for r in served.results] or [served.error_message] * len(names)
        handed = [i for i, code in enumerate(codes) if code in _ELSEWHERE]
        if handed:
            try:
                answers = await self._admin.delete_topics([names[i] for i in handed])
            except AdminError as exc:
                answers = {names[i]: exc.code for i in handed}
            for i in handed:
                codes[i], messages[i] = answers[names[i]], ""
        ids = {name: topic_id for topic_id, name in by_id.items()}
        return {
            "throttle_time": 0,
            "responses": [
                {
                    "name": name or None,
                    "topic_id": ids.get(name, uuid.UUID(int=0)),
                    "error_code": code,
                    "error_message": message or None,
                }
                for name, code, message in zip(names, codes, messages, strict=True)
            ],
        }

    async def auto_create(self, names: list[str]) -> list[Topic]:
        """Kafka's auto-creation: the topics a Metadata request names that do not exist yet are created with the
        default partition count. A topic is created by the leader of its coordinator partition, so this goes
        through the gRPC API as any admin client would (the Admin finds each topic's coordinator): the same
        validation and authorization, no second path into the core. Failures leave the topic unknown, and the
        client asks again."""
        known = {t.name for t in self._topics.topics(names)}
        missing = [n for n in dict.fromkeys(names) if n and n not in known]
        if not missing:
            return []
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
        if self._admin_client is not None:
            await self._admin_client.close()
            self._admin_client = None


def _created(name: str, code: int, message: str) -> pb.CreateTopicsResponse.Result:
    return pb.CreateTopicsResponse.Result(name=name, error_code=code, error_message=message, num_partitions=-1)


def _topic_error(code: int) -> int:
    """A whole-request refusal as Kafka reports it per topic."""
    return _TOPIC_AUTHORIZATION_FAILED if code == Errors.CLUSTER_AUTHORIZATION_FAILED else code
