"""The coordinator's records: the only way hard state changes, and the format of the replicated log.

Each record is encoded as the msgpack array `[type_id, version, {field: value}]`. Type ids are fixed
forever; a record type evolves by adding fields with defaults and bumping its version, so an old log
always replays. A decoder that meets a type id it does not know logs it and skips the record (a newer
node wrote it), which is what keeps a mixed-version cluster from crashing on replay.

Records are facts with preconditions that `coordinator.state.GroupStore.apply` re-checks: applying a
record whose precondition no longer holds changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

import msgpack

log = logging.getLogger(__name__)

Protocols = tuple[tuple[str, bytes], ...]
# (topic, partition, offset, leader_epoch, metadata)
OffsetRow = tuple[str, int, int, int, str]


class RebalanceCause(StrEnum):
    """Why a group entered PreparingRebalance (JoinReason: every rebalance records why)."""

    MEMBER_JOINED = "member_joined"
    PROTOCOL_CHANGED = "protocol_changed"
    LEADER_REJOINED = "leader_rejoined"
    JOIN_REASON = "join_reason"
    MEMBER_LEFT = "member_left"
    ADMIN_REMOVAL = "admin_removal"
    SESSION_EXPIRED = "session_expired"
    SYNC_TIMEOUT = "sync_timeout"
    STATIC_MEMBER_REPLACED = "static_member_replaced"
    PRE_REGISTERED_JOINED = "pre_registered_joined"
    GROUP_MAX_SIZE = "group_max_size"


class RemovalCause(StrEnum):
    """Why a member or pending member left the group."""

    LEAVE = "leave"
    ADMIN_REMOVAL = "admin_removal"
    SESSION_EXPIRED = "session_expired"
    JOIN_TIMEOUT = "join_timeout"
    SYNC_TIMEOUT = "sync_timeout"
    GROUP_MAX_SIZE = "group_max_size"
    PENDING_EXPIRED = "pending_expired"
    PENDING_JOINED = "pending_joined"


class OffsetsRemovalCause(StrEnum):
    """Why committed offsets were removed (OffsetsExpired)."""

    RETENTION = "retention"
    OFFSET_DELETE = "offset_delete"


class Record:
    """Base of all record types; subclasses are frozen dataclasses registered with `@record`."""

    TYPE: ClassVar[int]
    VERSION: ClassVar[int]
    time_ms: int


class GroupRecord(Record):
    """A change to one group: `group_id` keys its soft state, metrics and events."""

    group_id: str


class TopicRecord(Record):
    """A change to the topic registry (`GroupStore.topics`): a namespace of its own in the same partitions, so
    topic records touch no group, no soft state and no timer."""

    topic: str


_REGISTRY: dict[int, type[Record]] = {}
_FIELDS: dict[type[Record], tuple[str, ...]] = {}


R = TypeVar("R", bound="Record")


def record(type_id: int, version: int = 1) -> Callable[[type[R]], type[R]]:
    """Registers a record class under a type id that must never be reused."""

    def wrap(cls: type[R]) -> type[R]:
        if type_id in _REGISTRY:
            raise ValueError(f"record type id {type_id} used twice")
        cls.TYPE = type_id
        cls.VERSION = version
        _REGISTRY[type_id] = cls
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # every record class is a dataclass
        _FIELDS[cls] = tuple(f.name for f in fields)
        return cls

    return wrap


@record(1)
@dataclass(frozen=True, slots=True)
class PendingMemberAdded(GroupRecord):
    """KIP-394: a dynamic member was handed a member id with MEMBER_ID_REQUIRED."""

    group_id: str
    member_id: str
    session_timeout_ms: int
    time_ms: int


@record(2)
@dataclass(frozen=True, slots=True)
class PendingMemberRemoved(GroupRecord):
    group_id: str
    member_id: str
    cause: str
    time_ms: int


@record(3, version=2)
@dataclass(frozen=True, slots=True)
class MemberAdded(GroupRecord):
    """The client software fields were added in version 2 (a node of version 1 drops them)."""

    group_id: str
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    time_ms: int
    client_software_name: str = ""
    client_software_version: str = ""


@record(4)
@dataclass(frozen=True, slots=True)
class MemberUpdated(GroupRecord):
    """A known member rejoined with other protocols or timeouts."""

    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: Protocols
    time_ms: int


@record(5)
@dataclass(frozen=True, slots=True)
class MemberRemoved(GroupRecord):
    group_id: str
    member_id: str
    cause: str
    reason: str
    time_ms: int


@record(6, version=2)
@dataclass(frozen=True, slots=True)
class StaticMemberReplaced(GroupRecord):
    """KIP-345: a static instance came back under a new member id; the old id is fenced. The client software
    fields were added in version 2."""

    group_id: str
    group_instance_id: str
    old_member_id: str
    new_member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: Protocols
    time_ms: int
    client_software_name: str = ""
    client_software_version: str = ""


@record(7)
@dataclass(frozen=True, slots=True)
class RebalanceStarted(GroupRecord):
    group_id: str
    cause: str
    member_id: str
    group_instance_id: str
    join_reason: int
    reason: str
    time_ms: int


@record(8)
@dataclass(frozen=True, slots=True)
class GenerationCompleted(GroupRecord):
    """The join phase ended: the current members form `generation_id` (Empty if there are none)."""

    group_id: str
    generation_id: int
    protocol_name: str
    leader_id: str
    time_ms: int


@record(9)
@dataclass(frozen=True, slots=True)
class AssignmentsSynced(GroupRecord):
    """The leader's SyncGroup: the group becomes Stable with these assignments."""

    group_id: str
    generation_id: int
    assignments: dict[str, bytes]
    time_ms: int


@record(10)
@dataclass(frozen=True, slots=True)
class OffsetsCommitted(GroupRecord):
    group_id: str
    member_id: str
    generation_id: int
    offsets: tuple[OffsetRow, ...]
    time_ms: int


@record(11, version=2)
@dataclass(frozen=True, slots=True)
class OffsetsExpired(GroupRecord):
    """Offsets removed, by retention or by OffsetDelete (`cause`, added in version 2: a node of version 1 applies an
    OffsetDelete's removal as it applies retention's, so replicas agree during a rolling upgrade). Each (topic,
    partition) is removed only if it was last committed at `commit_time_ms`."""

    group_id: str
    partitions: tuple[tuple[str, int, int], ...]
    time_ms: int
    cause: str = OffsetsRemovalCause.RETENTION


@record(12)
@dataclass(frozen=True, slots=True)
class GroupDeleted(GroupRecord):
    group_id: str
    cause: str
    time_ms: int


@record(13)
@dataclass(frozen=True, slots=True)
class InstancesRegistered(GroupRecord):
    """AddMembersToGroup: the next join phase waits for these static instances."""

    group_id: str
    group_instance_ids: tuple[str, ...]
    time_ms: int


@record(14)
@dataclass(frozen=True, slots=True)
class RebalanceAvoided(GroupRecord):
    """A known member rejoined a Stable group and was answered without a rebalance: a RESTART rejoin (JoinReason,
    even by the leader) or a follower's plain rejoin. A marker that changes no state: it makes the rebalance
    that did not happen visible in the event stream (docs/EVENTS.md)."""

    group_id: str
    member_id: str
    group_instance_id: str
    join_reason: int
    cause: str  # AvoidedCause
    time_ms: int


@record(15)
@dataclass(frozen=True, slots=True)
class TopicCreated(TopicRecord):
    """CreateTopics: the topic exists from here on with this id, for good (a re-created topic gets a new id)."""

    topic: str
    num_partitions: int
    topic_id: str  # a UUID in its string form, from the leader's id source
    time_ms: int


@record(16)
@dataclass(frozen=True, slots=True)
class TopicDeleted(TopicRecord):
    topic: str
    time_ms: int


@record(17)
@dataclass(frozen=True, slots=True)
class InstancesUnregistered(GroupRecord):
    """LeaveGroup by instance id of pre-registered instances that never joined: the join phase stops waiting for
    them (without it, only the rebalance timeout ended the wait)."""

    group_id: str
    group_instance_ids: tuple[str, ...]
    time_ms: int


class AvoidedCause(StrEnum):
    RESTART = "restart"
    KNOWN_MEMBER = "known_member"


@dataclass(slots=True)
class DecodeReport:
    """What a decode skipped; callers log or count it."""

    unknown_types: list[int] = field(default_factory=list)


def _to_wire(rec: Record) -> list[Any]:
    cls = type(rec)
    return [cls.TYPE, cls.VERSION, {name: getattr(rec, name) for name in _FIELDS[cls]}]


def _from_wire(item: Sequence[Any], report: DecodeReport) -> Record | None:
    if not isinstance(item, (list, tuple)) or len(item) != 3 or not isinstance(item[2], dict):
        raise ValueError(f"malformed record envelope: {item!r:.80}")
    type_id, version, fields = item
    if type(type_id) is not int or type(version) is not int:
        raise ValueError(f"malformed record envelope: type {type_id!r:.20} version {version!r:.20}")
    cls = _REGISTRY.get(type_id)
    if cls is None:
        log.warning("skipping record of unknown type %r (written by a newer version?)", type_id)
        report.unknown_types.append(type_id)
        return None
    # Fields a newer version added are ignored; fields an older version lacked take their defaults.
    known = {name: fields[name] for name in _FIELDS[cls] if name in fields}
    try:
        return cls(**known)
    except TypeError as exc:
        raise ValueError(f"malformed {cls.__name__} record: {exc}") from None


def encode(rec: Record) -> bytes:
    return msgpack.packb(_to_wire(rec), use_bin_type=True)


def encode_batch(records: Iterable[Record]) -> bytes:
    """One replicated entry: the records one request produced, applied together in order."""
    return msgpack.packb([_to_wire(r) for r in records], use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True)


def decode(data: bytes, report: DecodeReport | None = None) -> Record | None:
    """Decodes one record; None (and an entry in `report`) for a type this version does not know."""
    return _from_wire(_unpack(data), report or DecodeReport())


def decode_batch(data: bytes, report: DecodeReport | None = None) -> list[Record]:
    items = _unpack(data)
    if not isinstance(items, (list, tuple)):
        raise ValueError("malformed record batch: not an array")
    rep = report or DecodeReport()
    return [r for r in (_from_wire(item, rep) for item in items) if r is not None]
