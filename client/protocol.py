"""The "consumer" protocol payloads: groupcoord's equivalent of Kafka's ConsumerProtocol.

The coordinator treats JoinGroup protocol metadata and SyncGroup assignments as opaque bytes; clients agree on
their content here. There are no brokers, so a member declares the virtual topics it wants to share together with
their partition counts, what it owns now (a claim: cooperative-sticky gives nobody else a partition someone
claims), and what an eager member held before it gave everything up for this rejoin (`previous`: no claim, only
what keeps the sticky assignors sticky, like the previous assignment in the user data of Kafka's StickyAssignor).

Wire format: a msgpack map with an integer `version` (1 today) and named fields:

    Subscription: {"version": 1, "topics": {topic: count}, "owned": {topic: [partition, ...]}, "user_data": bin,
                   "previous": {topic: [partition, ...]}}   (previous: only when not empty)
    Assignment:   {"version": 1, "partitions": {topic: [partition, ...]}, "user_data": bin}

A newer client adds fields and bumps `version`; a decoder ignores fields it does not know, so an older leader
still assigns for newer members. Encoding is canonical (sorted topics and partitions) so that equal payloads are
equal bytes: the coordinator compares metadata byte for byte to decide whether a rejoin changed the protocols.

Anything that is not a valid v1+ payload raises `ValueError`, and only `ValueError`: the payloads come from
other processes, and a leader must be able to reject one member's garbage without crashing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

PROTOCOL_TYPE = "consumer"
VERSION = 1
# Bounds a partition count (and so every partition number) so that a hostile payload cannot make the leader
# build millions of partitions.
MAX_PARTITIONS = 1_000_000

TopicPartition = tuple[str, int]


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic name must be a non-empty string, got {topic!r}")
    return topic


def _check_int(value: object, what: str, upper: int) -> int:
    # bool is an int subclass; True is never a meaningful count or partition.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= upper:
        raise ValueError(f"{what} must be an integer in [0, {upper}], got {value!r}")
    return value


def _check_bytes(value: object, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError(f"{what} must be bytes, got {type(value).__name__}")
    return value


def _partitions(items: object, what: str) -> tuple[TopicPartition, ...]:
    """Validated, sorted, duplicate-free (topic, partition) pairs."""
    if not isinstance(items, (tuple, list)):
        raise ValueError(f"{what} must be a sequence of (topic, partition) pairs, got {type(items).__name__}")
    pairs: list[TopicPartition] = []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"{what}: expected (topic, partition) pairs, got {item!r}")
        pairs.append((_check_topic(item[0]), _check_int(item[1], f"{what}: partition", MAX_PARTITIONS - 1)))
    result = tuple(sorted(set(pairs)))
    if len(result) != len(pairs):
        raise ValueError(f"{what}: duplicate partitions")
    return result


@dataclass(frozen=True)
class Subscription:
    """What a member sends in JoinGroup: the topics it shares (with partition counts) and what it owns now.

    Construction validates and normalises (topics sorted by name, `owned` sorted), raising `ValueError`.
    """

    # Left out of the hash (a dict is unhashable) so that a Subscription stays hashable like its peers.
    topics: dict[str, int] = field(hash=False)
    owned: tuple[TopicPartition, ...] = ()
    user_data: bytes = b""
    previous: tuple[TopicPartition, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.topics, Mapping):
            raise ValueError(f"topics must be a map of topic to partition count, got {type(self.topics).__name__}")
        topics = sorted(
            (_check_topic(t), _check_int(n, f"partition count of {t!r}", MAX_PARTITIONS))
            for t, n in self.topics.items()
        )
        object.__setattr__(self, "topics", dict(topics))
        object.__setattr__(self, "owned", _partitions(self.owned, "owned"))
        object.__setattr__(self, "previous", _partitions(self.previous, "previous"))
        _check_bytes(self.user_data, "user_data")


@dataclass(frozen=True)
class Assignment:
    """What the leader gives one member in SyncGroup. Construction sorts `partitions` and validates them."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _partitions(self.partitions, "partitions"))
        _check_bytes(self.user_data, "user_data")


def _group(pairs: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, []).append(partition)
    return grouped


def _ungroup(grouped: object, what: str) -> list[TopicPartition]:
    if not isinstance(grouped, dict):
        raise ValueError(f"{what} must be a map of topic to partition list")
    pairs: list[TopicPartition] = []
    for topic, partitions in grouped.items():
        if not isinstance(partitions, (tuple, list)):
            raise ValueError(f"{what}: partitions of {topic!r} must be a list")
        pairs.extend((topic, p) for p in partitions)
    return pairs


def _pack(fields: dict[str, Any]) -> bytes:
    return msgpack.packb({"version": VERSION, **fields}, use_bin_type=True)


def _unpack(data: bytes) -> dict[str, Any]:
    """The top-level map of a v1+ payload; its unknown fields are left for the caller to ignore."""
    try:
        fields = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage; callers get one.
        raise ValueError(f"not valid msgpack ({str(exc) or type(exc).__name__})") from None
    if not isinstance(fields, dict):
        raise ValueError(f"expected a msgpack map, got {type(fields).__name__}")
    version = fields.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"no valid version (expected an integer >= 1, got {version!r})")
    return fields


def _required(fields: dict[str, Any], name: str) -> Any:
    if name not in fields:
        raise ValueError(f"the {name!r} field is missing")
    return fields[name]


def encode_subscription(subscription: Subscription) -> bytes:
    fields = {"topics": subscription.topics, "owned": _group(subscription.owned), "user_data": subscription.user_data}
    if subscription.previous:
        fields["previous"] = _group(subscription.previous)
    return _pack(fields)


def decode_subscription(data: bytes) -> Subscription:
    """Decodes JoinGroup metadata; raises `ValueError` for anything that is not a valid v1+ subscription."""
    try:
        fields = _unpack(data)
        return Subscription(
            topics=_required(fields, "topics"),
            owned=tuple(_ungroup(fields.get("owned", {}), "owned")),
            user_data=fields.get("user_data", b""),
            previous=tuple(_ungroup(fields.get("previous", {}), "previous")),
        )
    except ValueError as exc:
        raise ValueError(f"malformed subscription payload: {exc}") from None


def encode_assignment(assignment: Assignment) -> bytes:
    return _pack({"partitions": _group(assignment.partitions), "user_data": assignment.user_data})


def decode_assignment(data: bytes) -> Assignment:
    """Decodes a SyncGroup assignment; raises `ValueError` for anything that is not a valid v1+ assignment."""
    try:
        fields = _unpack(data)
        pairs = _ungroup(_required(fields, "partitions"), "partitions")
        return Assignment(partitions=tuple(pairs), user_data=fields.get("user_data", b""))
    except ValueError as exc:
        raise ValueError(f"malformed assignment payload: {exc}") from None
