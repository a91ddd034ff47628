"""What the coordinator reads of a "consumer" group's member metadata: the topics the members subscribe to.

The coordinator treats protocol metadata as opaque bytes except for OffsetDelete, which keeps the offsets of
subscribed topics (Kafka's ClassicGroup.computeSubscribedTopics). Two encodings arrive under protocol type
"consumer": Kafka's ConsumerProtocolSubscription from Kafka clients (read here through kio's class for its
version 0, the prefix of every version, as Kafka reads it) and the SDK's msgpack Subscription (client/protocol.py:
`{"version": 1, "topics": {topic: count}, ...}`; its format is restated here so that the core does not import the
SDK and grpc with it).
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Iterable

import msgpack
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.serial import entity_reader

# Kafka's ConsumerProtocol.PROTOCOL_TYPE.
PROTOCOL_TYPE = "consumer"
# The int16 version every ConsumerProtocolSubscription starts with.
_VERSION = struct.Struct(">h")
_read_v0 = entity_reader(ConsumerProtocolSubscription)


def subscribed_topics(metadata: Iterable[bytes]) -> frozenset[str]:
    """The topics of every member's subscription; none at all when one member's cannot be read, as Kafka (its
    coordinator is then "not aware of the subscribed topics")."""
    topics: set[str] = set()
    for data in metadata:
        member = _kafka_topics(data)
        if member is None:
            member = _sdk_topics(data)
        if member is None:
            return frozenset()
        topics.update(member)
    return frozenset(topics)


def _kafka_topics(data: bytes) -> Collection[str] | None:
    if len(data) < _VERSION.size:
        return None
    try:
        subscription, _ = _read_v0(data, _VERSION.size)
    except Exception:  # hostile bytes: kio raises several unrelated types (underflow, UTF-8, negative length)
        return None
    return subscription.topics


def _sdk_topics(data: bytes) -> Collection[str] | None:
    try:
        fields = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception:  # msgpack, too, raises several unrelated types for garbage
        return None
    if not isinstance(fields, dict):
        return None
    version, topics = fields.get("version"), fields.get("topics")
    if type(version) is not int or version < 1 or not isinstance(topics, dict):
        return None
    if not all(isinstance(topic, str) for topic in topics):
        return None
    return topics.keys()
