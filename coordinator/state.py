"""Hard group and topic state and the deterministic `apply` that is the only way to change it.

The same `GroupStore.apply` runs on the leader while it handles a request and on every replica when
the record commits, and again when a node replays its log; a snapshot is a plain msgpack-able
structure, and `restore(snapshot)` followed by the remaining records gives the live state back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import msgpack

from groupcoord.protocol import records as r


class GroupState(StrEnum):
    """Kafka's classic group states, with Kafka's names (ListGroups and DescribeGroups show them).

    DEAD is never stored: it is what a deleted group, or any group of an unloaded partition, looks like.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: r.Protocols
    joined_ms: int
    assignment: bytes = b""
    client_software_name: str = ""
    client_software_version: str = ""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def copy(self) -> Member:
        return Member(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.protocols,
            self.joined_ms,
            self.assignment,
            self.client_software_name,
            self.client_software_version,
        )


@dataclass(frozen=True, slots=True)
class Offset:
    """Immutable: a commit replaces it, so copies of a group may share it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_time_ms: int


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str = ""
    protocol_name: str = ""
    leader_id: str = ""
    # Insertion order matters: the first member added is the default leader.
    members: dict[str, Member] = field(default_factory=dict)
    # KIP-394 member ids handed out but not joined yet -> the session timeout they expire after.
    pending_members: dict[str, int] = field(default_factory=dict)
    # KIP-345 group_instance_id -> member_id.
    static_members: dict[str, str] = field(default_factory=dict)
    # Seed 002 pre-registered instance ids not joined yet (ordered set).
    registered_instances: dict[str, None] = field(default_factory=dict)
    offsets: dict[tuple[str, int], Offset] = field(default_factory=dict)
    state_time_ms: int = 0
    last_rebalance: r.RebalanceStarted | None = None
    # Derived from `members` (not in snapshots): how many members offer each protocol name, so a join
    # checks protocol support in O(protocols) rather than O(members).
    protocol_support: Counter[str] = field(default_factory=Counter)

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def count_protocols(self, member: Member, sign: int) -> None:
        for name in member.protocol_names():
            self.protocol_support[name] += sign
            if not self.protocol_support[name]:
                del self.protocol_support[name]

    def copy(self) -> Group:
        """An independent copy (what a new leader works on), sharing only immutable parts (offsets, records)."""
        return Group(
            self.group_id,
            self.state,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id,
            {member_id: member.copy() for member_id, member in self.members.items()},
            self.pending_members.copy(),
            self.static_members.copy(),
            self.registered_instances.copy(),
            self.offsets.copy(),
            self.state_time_ms,
            self.last_rebalance,
            self.protocol_support.copy(),
        )

    def is_empty_shell(self) -> bool:
        """True when nothing would be lost by removing the group."""
        return (
            self.state == GroupState.EMPTY
            and not self.members
            and not self.pending_members
            and not self.offsets
            and not self.registered_instances
        )


@dataclass(frozen=True, slots=True)
class Topic:
    """A registry entry (coordinator/topics.py): what Kafka's Metadata tells of a topic; immutable, so readers may
    keep one outside the store's lock."""

    name: str
    num_partitions: int
    topic_id: str


class GroupStore:
    """All groups of one coordinator partition, and the topics that hash to it; mutated only by `apply`."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.topics: dict[str, Topic] = {}
        # Each group's msgpack bytes as `snapshot()` writes them, kept until a record touches the group: the
        # replicas' digests and compaction snapshots (`packed_snapshot`) then cost O(groups changed since), not
        # O(state), on the Raft thread that must keep sending heartbeats.
        self._packed: dict[str, bytes] = {}

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def apply(self, rec: r.Record) -> bool:
        """Applies one record; False (and no change) when its precondition does not hold."""
        handler = _APPLY.get(type(rec))
        if handler is None:
            return False
        if isinstance(rec, r.GroupRecord):
            self._packed.pop(rec.group_id, None)
        return handler(self, rec)

    def copy(self) -> GroupStore:
        """An independent copy: a new leader's working state, several times cheaper than `restore(snapshot())`."""
        store = GroupStore()
        store.groups = {group_id: group.copy() for group_id, group in self.groups.items()}
        store.topics = self.topics.copy()  # Topic is immutable
        return store

    def _group(self, group_id: str, time_ms: int) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_time_ms=time_ms)
        return group

    # -- apply, one function per record type --------------------------------------------------------

    def _pending_added(self, rec: r.PendingMemberAdded) -> bool:
        group = self.groups.get(rec.group_id)
        if group is not None and (rec.member_id in group.members or rec.member_id in group.pending_members):
            return False
        self._group(rec.group_id, rec.time_ms).pending_members[rec.member_id] = rec.session_timeout_ms
        return True

    def _pending_removed(self, rec: r.PendingMemberRemoved) -> bool:
        group = self.groups.get(rec.group_id)
        return group is not None and group.pending_members.pop(rec.member_id, None) is not None

    def _member_added(self, rec: r.MemberAdded) -> bool:
        group = self.groups.get(rec.group_id)
        if group is not None and (
            rec.member_id in group.members
            or (rec.group_instance_id and rec.group_instance_id in group.static_members)
            or (group.members and group.protocol_type != rec.protocol_type)
        ):
            return False
        group = self._group(rec.group_id, rec.time_ms)
        group.protocol_type = rec.protocol_type
        group.pending_members.pop(rec.member_id, None)
        member = group.members[rec.member_id] = _member(rec.member_id, rec)
        group.count_protocols(member, +1)
        if rec.group_instance_id:
            group.static_members[rec.group_instance_id] = rec.member_id
            group.registered_instances.pop(rec.group_instance_id, None)
        if not group.leader_id:
            group.leader_id = rec.member_id
        return True

    def _member_updated(self, rec: r.MemberUpdated) -> bool:
        group = self.groups.get(rec.group_id)
        member = group.members.get(rec.member_id) if group else None
        if group is None or member is None:
            return False
        member.session_timeout_ms = rec.session_timeout_ms
        member.rebalance_timeout_ms = rec.rebalance_timeout_ms
        group.count_protocols(member, -1)
        member.protocols = rec.protocols
        group.count_protocols(member, +1)
        return True

    def _member_removed(self, rec: r.MemberRemoved) -> bool:
        group = self.groups.get(rec.group_id)
        member = group.members.pop(rec.member_id, None) if group else None
        if group is None or member is None:
            return False
        group.count_protocols(member, -1)
        if member.group_instance_id:
            group.static_members.pop(member.group_instance_id, None)
        if group.leader_id == rec.member_id:
            group.leader_id = next(iter(group.members), "")
        return True

    def _static_replaced(self, rec: r.StaticMemberReplaced) -> bool:
        group = self.groups.get(rec.group_id)
        if group is None or group.static_members.get(rec.group_instance_id) != rec.old_member_id:
            return False
        if rec.new_member_id in group.members:
            return False
        old = group.members[rec.old_member_id]
        new = _member(rec.new_member_id, rec, old.assignment)
        group.count_protocols(old, -1)
        group.count_protocols(new, +1)
        # Keep the member's position (and so its leader eligibility) and its assignment.
        group.members = {
            (rec.new_member_id if mid == rec.old_member_id else mid): (new if mid == rec.old_member_id else m)
            for mid, m in group.members.items()
        }
        group.static_members[rec.group_instance_id] = rec.new_member_id
        if group.leader_id == rec.old_member_id:
            group.leader_id = rec.new_member_id
        return True

    def _rebalance_started(self, rec: r.RebalanceStarted) -> bool:
        group = self.groups.get(rec.group_id)
        if group is None or group.state == GroupState.PREPARING_REBALANCE:
            return False
        group.state = GroupState.PREPARING_REBALANCE
        group.state_time_ms = rec.time_ms
        group.last_rebalance = rec
        for member in group.members.values():
            member.assignment = b""
        return True

    def _generation_completed(self, rec: r.GenerationCompleted) -> bool:
        group = self.groups.get(rec.group_id)
        if group is None or group.state != GroupState.PREPARING_REBALANCE:
            return False
        if rec.generation_id != group.generation_id + 1:
            return False
        if group.members and rec.leader_id not in group.members:
            return False
        group.generation_id = rec.generation_id
        group.registered_instances.clear()
        group.state_time_ms = rec.time_ms
        if group.members:
            group.state = GroupState.COMPLETING_REBALANCE
            group.protocol_name = rec.protocol_name
            group.leader_id = rec.leader_id
        else:
            group.state = GroupState.EMPTY
            group.protocol_name = ""
            group.leader_id = ""
        return True

    def _assignments_synced(self, rec: r.AssignmentsSynced) -> bool:
        group = self.groups.get(rec.group_id)
        if group is None or group.state != GroupState.COMPLETING_REBALANCE:
            return False
        if rec.generation_id != group.generation_id:
            return False
        for member_id, member in group.members.items():
            member.assignment = rec.assignments.get(member_id, b"")
        group.state = GroupState.STABLE
        group.state_time_ms = rec.time_ms
        return True

    def _offsets_committed(self, rec: r.OffsetsCommitted) -> bool:
        group = self._group(rec.group_id, rec.time_ms)
        for topic, partition, offset, epoch, metadata in rec.offsets:
            group.offsets[(topic, partition)] = Offset(offset, epoch, metadata, rec.time_ms)
        return True

    def _offsets_expired(self, rec: r.OffsetsExpired) -> bool:
        group = self.groups.get(rec.group_id)
        if group is None:
            return False
        changed = False
        for topic, partition, commit_time_ms in rec.partitions:
            current = group.offsets.get((topic, partition))
            if current is not None and current.commit_time_ms == commit_time_ms:
                del group.offsets[(topic, partition)]
                changed = True
        return changed

    def _group_deleted(self, rec: r.GroupDeleted) -> bool:
        group = self.groups.get(rec.group_id)
        if group is None or group.members or group.state != GroupState.EMPTY:
            return False
        del self.groups[rec.group_id]
        return True

    def _instances_registered(self, rec: r.InstancesRegistered) -> bool:
        group = self.groups.get(rec.group_id)
        known = (group.static_members.keys() | group.registered_instances.keys()) if group else set()
        new = [i for i in dict.fromkeys(rec.group_instance_ids) if i not in known]
        if not new:
            return False
        self._group(rec.group_id, rec.time_ms).registered_instances.update(dict.fromkeys(new))
        return True

    def _instances_unregistered(self, rec: r.InstancesUnregistered) -> bool:
        group = self.groups.get(rec.group_id)
        gone = [i for i in rec.group_instance_ids if group is not None and i in group.registered_instances]
        if group is None or not gone:
            return False
        for instance_id in gone:
            del group.registered_instances[instance_id]
        return True

    def _rebalance_avoided(self, rec: r.RebalanceAvoided) -> bool:
        """Changes nothing; true while the member is in the group, so the event is written."""
        group = self.groups.get(rec.group_id)
        return group is not None and rec.member_id in group.members

    def _topic_created(self, rec: r.TopicCreated) -> bool:
        """A topic keeps its first id: a replayed or repeated creation changes nothing."""
        if rec.topic in self.topics:
            return False
        self.topics[rec.topic] = Topic(rec.topic, rec.num_partitions, rec.topic_id)
        return True

    def _topic_deleted(self, rec: r.TopicDeleted) -> bool:
        return self.topics.pop(rec.topic, None) is not None

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A plain structure (lists, dicts, str, int, bytes) that msgpack encodes as is.

        A store without topics is written as version 1, exactly as before the registry existed: during a rolling
        upgrade older nodes can still restore it (a snapshot sent by an upgraded leader) and every replica's digest
        of it (raft/digest.py) agrees. Version 2 adds `topics`."""
        groups = [_group_to_plain(g) for g in self.groups.values()]
        if not self.topics:
            return {"version": 1, "groups": groups}
        topics = [[t.name, t.num_partitions, t.topic_id] for t in self.topics.values()]
        return {"version": SNAPSHOT_VERSION, "groups": groups, "topics": topics}

    def packed_snapshot(self) -> bytes:
        """`msgpack.packb(self.snapshot(), use_bin_type=True)`, byte for byte, from the groups' cached encodings."""
        packed = self._packed
        packer = msgpack.Packer(use_bin_type=True)
        parts = [packer.pack_map_header(3 if self.topics else 2), packer.pack("version")]
        parts.append(packer.pack(SNAPSHOT_VERSION if self.topics else 1))
        parts += (packer.pack("groups"), packer.pack_array_header(len(self.groups)))
        for group_id, group in self.groups.items():
            data = packed.get(group_id)
            if data is None:
                data = packed[group_id] = packer.pack(_group_to_plain(group))
            parts.append(data)
        if self.topics:
            parts.append(packer.pack("topics"))
            parts.append(packer.pack([[t.name, t.num_partitions, t.topic_id] for t in self.topics.values()]))
        return b"".join(parts)

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> GroupStore:
        version = snapshot.get("version")
        if version not in (1, SNAPSHOT_VERSION):
            raise ValueError(f"unsupported snapshot version {version!r}")
        store = cls()
        for plain in snapshot["groups"]:
            group = _group_from_plain(plain)
            store.groups[group.group_id] = group
        for name, num_partitions, topic_id in snapshot["topics"] if version == SNAPSHOT_VERSION else ():
            store.topics[name] = Topic(name, num_partitions, topic_id)
        return store


SNAPSHOT_VERSION = 2


def _member(member_id: str, rec: r.MemberAdded | r.StaticMemberReplaced, assignment: bytes = b"") -> Member:
    return Member(
        member_id,
        rec.group_instance_id,
        rec.client_id,
        rec.client_host,
        rec.session_timeout_ms,
        rec.rebalance_timeout_ms,
        rec.protocols,
        rec.time_ms,
        assignment,
        rec.client_software_name,
        rec.client_software_version,
    )


_APPLY: dict[type[r.Record], Callable[[GroupStore, Any], bool]] = {
    r.PendingMemberAdded: GroupStore._pending_added,
    r.PendingMemberRemoved: GroupStore._pending_removed,
    r.MemberAdded: GroupStore._member_added,
    r.MemberUpdated: GroupStore._member_updated,
    r.MemberRemoved: GroupStore._member_removed,
    r.StaticMemberReplaced: GroupStore._static_replaced,
    r.RebalanceStarted: GroupStore._rebalance_started,
    r.GenerationCompleted: GroupStore._generation_completed,
    r.AssignmentsSynced: GroupStore._assignments_synced,
    r.OffsetsCommitted: GroupStore._offsets_committed,
    r.OffsetsExpired: GroupStore._offsets_expired,
    r.GroupDeleted: GroupStore._group_deleted,
    r.InstancesRegistered: GroupStore._instances_registered,
    r.InstancesUnregistered: GroupStore._instances_unregistered,
    r.RebalanceAvoided: GroupStore._rebalance_avoided,
    r.TopicCreated: GroupStore._topic_created,
    r.TopicDeleted: GroupStore._topic_deleted,
}

_MEMBER_FIELDS = (
    "member_id",
    "group_instance_id",
    "client_id",
    "client_host",
    "session_timeout_ms",
    "rebalance_timeout_ms",
    "joined_ms",
    "assignment",
)
# Member fields added later: written only when set, so that a store without them snapshots byte for byte as older
# nodes write it (their digests agree during a rolling upgrade); absent, they take their defaults.
_MEMBER_FIELDS_SINCE_V2 = ("client_software_name", "client_software_version")


def _member_to_plain(m: Member) -> dict[str, Any]:
    plain: dict[str, Any] = {f: getattr(m, f) for f in _MEMBER_FIELDS}
    if m.client_software_name or m.client_software_version:
        plain.update((f, getattr(m, f)) for f in _MEMBER_FIELDS_SINCE_V2)
    plain["protocols"] = [list(p) for p in m.protocols]
    return plain


def _group_to_plain(group: Group) -> dict[str, Any]:
    return {
        "group_id": group.group_id,
        "state": group.state.value,
        "generation_id": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader_id": group.leader_id,
        "members": [_member_to_plain(m) for m in group.members.values()],
        "pending_members": [[mid, t] for mid, t in group.pending_members.items()],
        "registered_instances": list(group.registered_instances),
        "offsets": [
            [topic, part, o.offset, o.leader_epoch, o.metadata, o.commit_time_ms]
            for (topic, part), o in group.offsets.items()
        ],
        "state_time_ms": group.state_time_ms,
        "last_rebalance": r.encode(group.last_rebalance) if group.last_rebalance else None,
    }


def _group_from_plain(plain: dict[str, Any]) -> Group:
    members: dict[str, Member] = {}
    for pm in plain["members"]:
        protocols = tuple((name, metadata) for name, metadata in pm["protocols"])
        members[pm["member_id"]] = Member(
            **{f: pm[f] for f in _MEMBER_FIELDS},
            **{f: pm[f] for f in _MEMBER_FIELDS_SINCE_V2 if f in pm},
            protocols=protocols,
        )
    last = plain["last_rebalance"]
    last_rec = r.decode(last) if last is not None else None
    group = Group(
        group_id=plain["group_id"],
        state=GroupState(plain["state"]),
        generation_id=plain["generation_id"],
        protocol_type=plain["protocol_type"],
        protocol_name=plain["protocol_name"],
        leader_id=plain["leader_id"],
        members=members,
        pending_members={mid: t for mid, t in plain["pending_members"]},
        static_members={m.group_instance_id: m.member_id for m in members.values() if m.group_instance_id},
        registered_instances=dict.fromkeys(plain["registered_instances"]),
        offsets={
            (topic, part): Offset(offset, epoch, metadata, t)
            for topic, part, offset, epoch, metadata, t in plain["offsets"]
        },
        state_time_ms=plain["state_time_ms"],
        last_rebalance=last_rec if isinstance(last_rec, r.RebalanceStarted) else None,
    )
    for member in members.values():
        group.count_protocols(member, +1)
    return group
