"""The record APIs a consumer needs to run although groupcoord stores no records: ListOffsets answers offset 0,
Fetch answers empty after waiting, Produce is refused per partition with a message that says why."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from groupcoord.node.kafka.common import (
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    Values,
    partition_error,
    topic_uuid,
)
from groupcoord.node.service import Context
from groupcoord.node.topics import TopicRegistry
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import millis

PRODUCE_REFUSED = (
    "groupcoord is a group coordinator and stores no records: produce to your Kafka cluster, and use groupcoord "
    "for the consumer group"
)


class RecordApis:
    def __init__(self, topics: TopicRegistry, fetch_max_wait_ms: int) -> None:
        self._topics = topics
        self._fetch_max_wait_ms = fetch_max_wait_ms

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
                            "error_code": partition_error(known.get(t.name), p.partition_index),
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
        by_id = {topic_uuid(t.topic_id): t for t in self._topics.topics()} if version >= 13 else {}
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
                            "error_code": missing if topic is None else partition_error(topic, p.partition),
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
