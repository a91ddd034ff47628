"""What `Admin` returns: frozen dataclasses of plain values (no protobuf), and their decoding from the replies."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.client.protocol import decode_assignment
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    # Decoded from the consumer protocol's assignment; empty when the group is not Stable or not "consumer".
    partitions: tuple[TopicPartition, ...] = ()
    # The client library and version the member's client named (Kafka's ApiVersions v3+, or the SDK); "" if none.
    client_software_name: str = ""
    client_software_version: str = ""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error_code: int
    error_message: str = ""
    state: str = ""
    protocol_type: str = ""
    protocol: str = ""
    generation_id: int = -1
    leader_id: str = ""
    coordinator_node_id: int = -1
    coordinator_partition: int = -1
    members: tuple[MemberDescription, ...] = ()
    pending_instance_ids: tuple[str, ...] = ()
    pending_member_count: int = 0
    last_rebalance_cause: str = ""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    num_partitions: int
    topic_id: str  # a UUID, the topic's for its whole life


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """One topic's CreateTopics result: its id and partitions, or a Kafka error code (TOPIC_ALREADY_EXISTS, ...)."""

    name: str
    error_code: int
    error_message: str = ""
    topic_id: str = ""  # empty on an error or with validate_only
    num_partitions: int = -1


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    host: str
    port: int
    alive: bool
    incarnation: str = ""  # its data directory's id; a wiped or replaced one is new


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition_id: int
    leader_node_id: int
    term: int
    commit_index: int
    replica_node_ids: tuple[int, ...]
    # (node id, entries behind the leader) of each other voter, as the partition's leader reported them.
    replica_lag: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSetting:
    """A setting one node runs with; `source` is "default", "config file PATH", "environment VAR" or "flag --x"."""

    name: str
    value: str
    source: str
    default: str
    sensitive: bool  # its value is never sent: "(set)" or ""


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    answered_by: int
    partition_count: int
    nodes: tuple[NodeInfo, ...] = field(default=())
    partitions: tuple[PartitionInfo, ...] = field(default=())
    # Empty until the answering node has learned it (a cluster that has not formed yet).
    cluster_id: str = ""


def _members(group: pb.DescribeGroupsResponse.Group) -> tuple[MemberDescription, ...]:
    out = []
    for m in group.members:
        partitions: tuple[TopicPartition, ...] = ()
        if group.protocol_type == "consumer" and m.member_assignment:
            try:
                partitions = tuple(decode_assignment(m.member_assignment).partitions)
            except ValueError:
                partitions = ()  # another client's format: show the member, not a crash
        out.append(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                partitions,
                m.client_software_name,
                m.client_software_version,
            )
        )
    return tuple(out)


def group_description(group: pb.DescribeGroupsResponse.Group) -> GroupDescription:
    return GroupDescription(
        group_id=group.group_id,
        error_code=group.error_code,
        error_message=group.error_message,
        state=group.group_state,
        protocol_type=group.protocol_type,
        protocol=group.protocol_data,
        generation_id=group.generation_id,
        leader_id=group.leader_id,
        coordinator_node_id=group.coordinator_node_id if group.error_code == Errors.NONE else -1,
        coordinator_partition=group.coordinator_partition if group.error_code == Errors.NONE else -1,
        members=_members(group),
        pending_instance_ids=tuple(group.pending_instance_ids),
        pending_member_count=group.pending_member_count,
        last_rebalance_cause=group.last_rebalance_reason.cause,
    )
