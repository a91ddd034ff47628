"""Hostile requests for every RPC of `groupcoord.v1.GroupCoordinator`, shared by the in-process and gRPC targets.

Every field gets values a client should never send (empty, over-long, unicode, NUL, negative and extreme
integers, unknown enum values, long repeated fields, random bytes) mixed with values from the caller's
pools (known group, member and instance ids), so a request often gets past validation and reaches state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from google.protobuf.message import Message
from hypothesis import strategies as st

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

Strategy = st.SearchStrategy
# Known group, member or instance ids to mix in.
Pool = Sequence[str]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
KNOWN_CODES = frozenset(int(e) for e in Errors)

# Items in a bulk repeated field, at most (the default; a target over the network asks for fewer).
BULK = 20_000
NASTY = ("\x00", "\u2028", "..", "/", "Stable", "💥" * 3, "a\nb", " ", "\ufeff", "Dead")
int32s = st.one_of(
    st.sampled_from([0, -1, 1, 6_000, 10_000, 1_800_000, 1_800_001, INT32_MAX, INT32_MIN]),
    st.integers(INT32_MIN, INT32_MAX),
)
int64s = st.one_of(st.sampled_from([0, -1, 1, INT64_MAX, INT64_MIN]), st.integers(INT64_MIN, INT64_MAX))
# Up to ~60 KB of text: long enough for every length limit, short enough for max_request_bytes.
huge_text = st.builds(
    lambda c, n: c * n, st.sampled_from(["g", "é", "💥"]), st.one_of(st.integers(250, 260), st.integers(261, 20_000))
)
huge_bytes = st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=4), st.integers(1_000, 100_000))


# Shared objects, not built per call: one_of drops a branch that is the *same object* as another, and
# hypothesis caches strategies built with equal arguments only while they stay in its cache. Branches built
# per call could then count differently from one example to the next (FlakyStrategyDefinition).
EMPTY = st.just("")
HOSTILE_TEXT = st.one_of(EMPTY, st.text(max_size=12), st.sampled_from(NASTY), huge_text)


def text(pool: Sequence[str] = ()) -> Strategy[str]:
    """Half the time a pool value when there is a pool; otherwise empty, short unicode, nasty or huge text."""
    return st.one_of(st.sampled_from(list(pool)), HOSTILE_TEXT) if pool else HOSTILE_TEXT


def binary() -> Strategy[bytes]:
    return st.one_of(st.binary(max_size=48), huge_bytes)


def repeated(element: Strategy, max_size: int = 4) -> Strategy[list]:
    """Short lists mostly; sometimes long ones (limits on protocols, members, group ids)."""
    return st.one_of(st.lists(element, max_size=max_size), st.lists(element, min_size=60, max_size=80))


def bulk(make: Callable[[int], object], most: int) -> Strategy[list]:
    """Up to `most` distinct items, cheap to draw: a handler whose work grows faster than its request shows
    up as a call over the targets' time budget (a hang of the node's event loop)."""
    return st.integers(min(1_000, most), most).map(lambda n: [make(i) for i in range(n)])


def listed(element: Strategy, many: Strategy[list]) -> Strategy[list]:
    """A repeated field: `repeated(element)` three times in four, else the bulk list `many`."""
    return st.sampled_from([False, False, False, True]).flatmap(lambda bulky: many if bulky else repeated(element))


def many_ids(pool: Pool, most: int) -> Strategy[list[str]]:
    return listed(text(pool), bulk(lambda i: f"id-{i}", most))


def join_reasons() -> Strategy[int]:
    return st.one_of(st.integers(0, 3), int32s)


def protocols(names: Sequence[str] = ("range", "roundrobin")) -> Strategy[list]:
    protocol = st.builds(pb.JoinGroupRequest.Protocol, name=text(names), metadata=binary())
    return repeated(protocol)


def join_group(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(
        pb.JoinGroupRequest,
        group_id=text(groups),
        session_timeout_ms=st.one_of(st.sampled_from([6_000, 10_000]), int32s),
        rebalance_timeout_ms=st.one_of(st.sampled_from([0, 5_000]), int32s),
        member_id=st.one_of(EMPTY, text(members)),
        group_instance_id=st.one_of(EMPTY, text(instances)),
        protocol_type=st.one_of(st.just("consumer"), text()),
        protocols=protocols(),
        reason=text(),
        join_reason=join_reasons(),
        client_id=text(("c",)),
    )


def member_fields(groups: Sequence[str], members: Sequence[str], instances: Sequence[str]) -> dict[str, Strategy]:
    """The group / generation / member / instance fields that SyncGroup, Heartbeat and OffsetCommit share."""
    return {
        "group_id": text(groups),
        "generation_id": st.one_of(st.integers(-1, 4), int32s),
        "member_id": st.one_of(EMPTY, text(members)),
        "group_instance_id": st.one_of(EMPTY, text(instances)),
    }


def sync_group(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    assignment = st.builds(pb.SyncGroupRequest.Assignment, member_id=text(members), assignment=binary())
    return st.builds(
        pb.SyncGroupRequest,
        **member_fields(groups, members, instances),
        protocol_type=st.one_of(EMPTY, st.just("consumer"), text()),
        protocol_name=st.one_of(EMPTY, st.just("range"), text()),
        assignments=repeated(assignment),
    )


def heartbeat(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.HeartbeatRequest, **member_fields(groups, members, instances))


def leave_group(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    identity = st.builds(
        pb.LeaveGroupRequest.MemberIdentity,
        member_id=st.one_of(EMPTY, text(members)),
        group_instance_id=st.one_of(EMPTY, text(instances)),
        reason=text(),
    )
    many = bulk(lambda i: pb.LeaveGroupRequest.MemberIdentity(group_instance_id=f"id-{i}"), most)
    return st.builds(pb.LeaveGroupRequest, group_id=text(groups), members=listed(identity, many))


def add_members(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.AddMembersToGroupRequest, group_id=text(groups), group_instance_ids=many_ids(instances, most))


def offset_commit(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    partition = st.builds(
        pb.OffsetCommitRequest.Partition,
        partition_index=st.one_of(st.integers(0, 3), int32s),
        committed_offset=st.one_of(st.integers(0, 100), int64s),
        committed_leader_epoch=int32s,
        committed_metadata=st.one_of(EMPTY, text()),
    )
    many = bulk(lambda i: pb.OffsetCommitRequest.Partition(partition_index=i, committed_offset=i), most)
    topic = st.builds(pb.OffsetCommitRequest.Topic, name=text(("t1", "t2")), partitions=listed(partition, many))
    return st.builds(pb.OffsetCommitRequest, **member_fields(groups, members, instances), topics=repeated(topic))


def offset_fetch(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    topic = st.builds(
        pb.OffsetFetchRequest.Topic,
        name=text(("t1", "t2")),
        partition_indexes=listed(st.one_of(st.integers(0, 3), int32s), bulk(lambda i: i, most)),
    )
    return st.builds(pb.OffsetFetchRequest, group_id=text(groups), topics=repeated(topic), require_stable=st.booleans())


def offset_delete(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    partition = st.builds(pb.OffsetDeleteRequest.Partition, partition_index=st.one_of(st.integers(0, 3), int32s))
    many = bulk(lambda i: pb.OffsetDeleteRequest.Partition(partition_index=i), most)
    topic = st.builds(pb.OffsetDeleteRequest.Topic, name=text(("t1", "t2")), partitions=listed(partition, many))
    return st.builds(pb.OffsetDeleteRequest, group_id=text(groups), topics=repeated(topic))


def describe_groups(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.DescribeGroupsRequest, group_ids=many_ids(groups, most))


def delete_groups(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.DeleteGroupsRequest, group_ids=many_ids(groups, most))


def list_groups(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    states = text(("Stable", "empty", "PREPARINGREBALANCE", "Dead"))
    return st.builds(pb.ListGroupsRequest, states_filter=repeated(states))


def find_coordinator(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.FindCoordinatorRequest, group_ids=many_ids(groups, most))


def heartbeat_batch(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.HeartbeatBatchRequest, requests=repeated(heartbeat(groups, members, instances, most), 8))


def offset_commit_batch(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    """A few commits per batch: one of them may be a bulk one, and every batch is sent twice."""
    return st.builds(pb.OffsetCommitBatchRequest, requests=st.lists(offset_commit(groups, members, instances, most),
                                                                    max_size=4))  # fmt: skip


def describe_cluster(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.just(pb.DescribeClusterRequest())


def read_events(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.ReadEventsRequest, partitions=repeated(st.one_of(st.integers(-1, 4), int32s)))


def _node_spec() -> Strategy[str]:
    """A `peers` entry: on loopback only (the node connects to it before it changes anything), or garbage."""
    port = st.integers(-1, 70_000).map(str)
    loopback = st.builds(lambda i, p, r: f"{i}=127.0.0.1:{p}:{r}", st.integers(-5, 9), port, port)
    return st.one_of(loopback, st.sampled_from(NASTY), st.text(max_size=40).filter(lambda t: "=" not in t))


def add_raft_voter(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    timeouts = st.one_of(st.integers(-1, 2_000), int32s)
    return st.builds(pb.AddRaftVoterRequest, node=_node_spec(), timeout_ms=timeouts, replace=st.booleans())


def remove_raft_voter(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    # A node id the single fuzz node does not have, or its own (refused): never an actual removal.
    node_ids = st.one_of(st.integers(-1, 9), int32s)
    return st.builds(pb.RemoveRaftVoterRequest, node_id=node_ids, timeout_ms=st.one_of(st.integers(-1, 2_000), int32s))


def create_topics(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    """Topics named like the groups (legal names) or hostile ones; a bulk request creates `most` distinct topics."""
    counts = st.one_of(st.sampled_from([-1, 0, 1, 3, 10_000, 10_001]), int32s)
    topic = st.builds(pb.CreateTopicsRequest.Topic, name=text(groups), num_partitions=counts)
    many = bulk(lambda i: pb.CreateTopicsRequest.Topic(name=f"topic-{i}", num_partitions=1), most)
    return st.builds(pb.CreateTopicsRequest, topics=listed(topic, many), validate_only=st.booleans())


def delete_topics(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.DeleteTopicsRequest, names=many_ids(groups, most))


def list_topics(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.builds(pb.ListTopicsRequest, names=many_ids(groups, most))


def describe_settings(groups: Pool, members: Pool, instances: Pool, most: int = BULK) -> Strategy[Message]:
    return st.just(pb.DescribeSettingsRequest())


RequestStrategy = Callable[[Pool, Pool, Pool, int], Strategy[Message]]
# Every RPC of the service, by method name (the gRPC target checks this covers the whole service).
BY_METHOD: dict[str, RequestStrategy] = {
    "FindCoordinator": find_coordinator,
    "JoinGroup": join_group,
    "SyncGroup": sync_group,
    "Heartbeat": heartbeat,
    "HeartbeatStream": heartbeat_batch,
    "LeaveGroup": leave_group,
    "AddMembersToGroup": add_members,
    "OffsetCommit": offset_commit,
    "OffsetCommitStream": offset_commit_batch,
    "OffsetFetch": offset_fetch,
    "OffsetDelete": offset_delete,
    "DescribeGroups": describe_groups,
    "ListGroups": list_groups,
    "DeleteGroups": delete_groups,
    "DescribeCluster": describe_cluster,
    "ReadEvents": read_events,
    "AddRaftVoter": add_raft_voter,
    "RemoveRaftVoter": remove_raft_voter,
    "CreateTopics": create_topics,
    "DeleteTopics": delete_topics,
    "ListTopics": list_topics,
    "DescribeSettings": describe_settings,
}


def error_codes(message: Message) -> list[int]:
    """Every non-zero `error_code` in a response, nested ones included (proto3 does not list zeros)."""
    codes: list[int] = []
    for descriptor, value in message.ListFields():
        if descriptor.name == "error_code":
            codes.append(value)
        elif descriptor.message_type is not None:
            items = [value] if isinstance(value, Message) else value
            for item in items:
                codes.extend(error_codes(item))
    return codes


def unknown_codes(message: Message) -> list[int]:
    return [code for code in error_codes(message) if code not in KNOWN_CODES]
