"""CreateTopics, DeleteTopics and Kafka's topic auto-creation, for the replicated topic registry.

A topic is created or deleted by the leader of its coordinator partition. A Kafka client sends CreateTopics to any
broker (the controller, for older clients): the node serves the topics whose partitions it leads through the one
request layer (authorization, validation, the core), and hands the others on to their leaders (node/handon.py) for
the same caller, whom the leader authorizes again with the same ACL.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

from google.protobuf.message import Message

from groupcoord.coordinator.state import Topic
from groupcoord.node.handon import ELSEWHERE, HandOn, HandOnFailed
from groupcoord.node.kafka.common import Values
from groupcoord.node.logs import LogBudget, fields
from groupcoord.node.service import Context, GroupCoordinatorService
from groupcoord.node.topics import TopicRegistry
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

_TOPIC_AUTHORIZATION_FAILED = 29
# Log lines a second, at most, about topics auto-creation or a hand-on could not create.
FAILED_LOG_PER_S = 5


class TopicApis:
    def __init__(self, service: GroupCoordinatorService, topics: TopicRegistry, hand_on: HandOn) -> None:
        self._service = service
        self._topics = topics
        self._hand_on = hand_on
        self._failed_log = LogBudget(FAILED_LOG_PER_S)

    async def create_topics(self, version: int, request: Any, context: Context) -> Values:
        """Replica assignments and configs are accepted and ignored (groupcoord keeps no replicas and no records);
        the replication factor reported is 1, as Metadata says."""
        asked = [pb.CreateTopicsRequest.Topic(name=t.name, num_partitions=t.num_partitions) for t in request.topics]
        results = await self._create(asked, request.validate_only, context)
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
        served = cast(
            pb.DeleteTopicsResponse,
            await self._service.serve("DeleteTopics", pb.DeleteTopicsRequest(names=names), context),
        )
        if served.error_code != Errors.NONE:
            code = _topic_error(served.error_code)
            results = [pb.DeleteTopicsResponse.Result(name=n, error_code=code, error_message=served.error_message)
                       for n in names]  # fmt: skip
        else:
            results = list(served.results)
            handed = await self._hand_on_elsewhere(
                "DeleteTopics",
                names,
                [r.error_code for r in results],
                lambda indexes: pb.DeleteTopicsRequest(names=[names[i] for i in indexes]),
                lambda name, code, message: pb.DeleteTopicsResponse.Result(
                    name=name, error_code=code, error_message=message
                ),
                context,
            )
            for i, result in handed.items():
                results[i] = result
        ids = {name: topic_id for topic_id, name in by_id.items()}
        return {
            "throttle_time": 0,
            "responses": [
                {
                    "name": name or None,
                    "topic_id": ids.get(name, uuid.UUID(int=0)),
                    "error_code": r.error_code,
                    "error_message": r.error_message or None,
                }
                for name, r in zip(names, results, strict=True)
            ],
        }

    async def auto_create(self, names: list[str], context: Context) -> list[Topic]:
        """Kafka's auto-creation: the topics a Metadata request names that do not exist yet are created with the
        default partition count, as a CreateTopics of the same caller would create them (with ACLs, only an admin
        may). Failures leave the topic unknown, and the client asks again."""
        known = {t.name for t in self._topics.topics(names)}
        missing = [n for n in dict.fromkeys(names) if n and n not in known]
        if not missing:
            return []
        asked = [pb.CreateTopicsRequest.Topic(name=name, num_partitions=-1) for name in missing]
        results = await self._create(asked, False, context)
        for result in results:
            # Refusals are logged (within a budget) where the ACL judged them.
            if result.error_code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS, _TOPIC_AUTHORIZATION_FAILED):
                self._log_failed("kafka.auto_create_failed", result.name, result.error_code, result.error_message)
        return [Topic(r.name, r.num_partitions, r.topic_id) for r in results if r.error_code == Errors.NONE]

    async def _create(
        self, asked: list[pb.CreateTopicsRequest.Topic], validate_only: bool, context: Context
    ) -> list[pb.CreateTopicsResponse.Result]:
        """One result per topic asked, in order: served here, or by the leader the topic's partition has."""
        served = cast(
            pb.CreateTopicsResponse,
            await self._service.serve(
                "CreateTopics", pb.CreateTopicsRequest(topics=asked, validate_only=validate_only), context
            ),
        )
        if served.error_code != Errors.NONE:
            code = _topic_error(served.error_code)
            return [_created(t.name, code, served.error_message) for t in asked]
        results = list(served.results)
        handed = await self._hand_on_elsewhere(
            "CreateTopics",
            [t.name for t in asked],
            [r.error_code for r in results],
            lambda indexes: pb.CreateTopicsRequest(topics=[asked[i] for i in indexes], validate_only=validate_only),
            _created,
            context,
        )
        for i, result in handed.items():
            results[i] = result
        return results

    async def _hand_on_elsewhere(
        self,
        method: str,
        names: Sequence[str],
        codes: Sequence[int],
        request_for: Callable[[list[int]], Message],
        failed: Callable[[str, int, str], Any],
        context: Context,
    ) -> dict[int, Any]:
        """The results, by index, of the topics this node answered are led elsewhere, from their partitions'
        leaders: one call per partition, all at once."""
        by_partition: dict[int, list[int]] = {}
        for i, code in enumerate(codes):
            if code in ELSEWHERE:
                by_partition.setdefault(self._hand_on.partition_for(names[i]), []).append(i)
        if not by_partition:
            return {}
        caller = self._service.auth.caller(context)

        async def one(partition: int, indexes: list[int]) -> dict[int, Any]:
            try:
                reply = await self._hand_on.call(partition, method, request_for(indexes), caller, _led_elsewhere)
            except HandOnFailed as exc:
                self._log_failed("kafka.hand_on_failed", names[indexes[0]], Errors.REQUEST_TIMED_OUT, str(exc))
                return {i: failed(names[i], Errors.REQUEST_TIMED_OUT, str(exc)) for i in indexes}
            if reply.error_code != Errors.NONE:
                code = _topic_error(reply.error_code)
                return {i: failed(names[i], code, reply.error_message) for i in indexes}
            return dict(zip(indexes, reply.results, strict=True))

        answered = await asyncio.gather(*(one(p, indexes) for p, indexes in by_partition.items()))
        return {i: result for part in answered for i, result in part.items()}

    def _log_failed(self, event: str, topic: str, code: int, message: str) -> None:
        skipped = self._failed_log.take(time.monotonic())
        if skipped is not None:
            log.warning(event, extra=fields(topic=topic, error_code=code, error=message, not_logged_before=skipped))


def _led_elsewhere(reply: Any) -> bool:
    return reply.error_code in ELSEWHERE or any(r.error_code in ELSEWHERE for r in reply.results)


def _created(name: str, code: int, message: str) -> pb.CreateTopicsResponse.Result:
    return pb.CreateTopicsResponse.Result(name=name, error_code=code, error_message=message, num_partitions=-1)


def _topic_error(code: int) -> int:
    """A whole-request refusal as Kafka reports it per topic."""
    return _TOPIC_AUTHORIZATION_FAILED if code == Errors.CLUSTER_AUTHORIZATION_FAILED else code
