"""The model of tests/unit/test_property.py's state machine: the simulated clients' views, the requests in
flight, the rebalance episodes, the strategies, and the state-shape check every store must pass.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgpack
from hypothesis import strategies as st

from groupcoord.coordinator import GroupConfig, GroupState, GroupStore
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

GROUPS = ("g0", "g1", "g2")
# Clients 0-2 are static (instance ids i0..i2), 3-5 dynamic.
CLIENTS = 6
STATIC = {0: "i0", 1: "i1", 2: "i2"}
PROTOCOL_SETS = (
    (("range", b"r1"), ("roundrobin", b"")),
    (("roundrobin", b"rr2"), ("range", b"r2")),  # compatible with every set but the last
    (("range", b"r3"),),
    (("sticky", b"s"),),
)
VALID_SESSIONS = (6_000, 10_000, 15_000)
REBALANCE_TIMEOUTS = (0, 5_000, 12_000, 20_000)  # 0 means "same as the session timeout"
S_MAX = max(VALID_SESSIONS)
RT_MAX = max(*REBALANCE_TIMEOUTS, S_MAX)
METADATA_LIMIT = 16
RETENTION_MS = 30_000
RETENTION_CHECK_MS = 10_000
# Long enough for every group to finish any rebalance chain, every session to expire and retention to run.
QUIET_MS = 6 * (S_MAX + RT_MAX) + RETENTION_MS + 2 * RETENTION_CHECK_MS

JoinReason = pb.JoinGroupRequest.JoinReason
IN_REBALANCE = (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
REJOIN_ON = {
    Errors.REBALANCE_IN_PROGRESS,
    Errors.ILLEGAL_GENERATION,
    Errors.UNKNOWN_MEMBER_ID,
    Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.FENCED_INSTANCE_ID,
}
REPLY_TYPES: dict[str, type[Any]] = {
    "join": pb.JoinGroupResponse,
    "sync": pb.SyncGroupResponse,
    "heartbeat": pb.HeartbeatResponse,
    "leave": pb.LeaveGroupResponse,
    "add": pb.AddMembersToGroupResponse,
    "commit": pb.OffsetCommitResponse,
    "fetch": pb.OffsetFetchResponse,
    "delete_offsets": pb.OffsetDeleteResponse,
    "describe": pb.DescribeGroupsResponse,
    "list": pb.ListGroupsResponse,
    "delete": pb.DeleteGroupsResponse,
}


@dataclass
class ClientView:
    """What one simulated client believes about its membership of one group."""

    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    protocols: int = 0
    session_ms: int = 10_000
    rebalance_ms: int = 0
    needs_join: bool = True
    needs_sync: bool = False


@dataclass
class Sent:
    kind: str
    client: int
    group: str
    member_id: str = ""
    at: int = 0


@dataclass
class Episode:
    """One continuous stay of a group in PreparingRebalance or CompletingRebalance."""

    state: GroupState
    since: int
    # The group's rebalance timeout when the episode began, and the largest it has had since.
    rebalance_ms: int
    max_rebalance_ms: int
    # PreparingRebalance: when the join phase's first deadline falls (start + rebalance timeout).
    first_deadline: int = 0


def pack(obj: Any) -> bytes:
    """Snapshots compared as msgpack sees them: what a replica would store."""
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """The inverse of `pack`, with the map keys snapshots use."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


CONFIGS = st.builds(
    GroupConfig,
    max_size=st.sampled_from([None, None, 2, 3]),
    initial_rebalance_delay_ms=st.sampled_from([0, 3_000]),
    offset_metadata_max_bytes=st.just(METADATA_LIMIT),
    offsets_retention_ms=st.just(RETENTION_MS),
    offsets_retention_check_interval_ms=st.just(RETENTION_CHECK_MS),
    max_pending_members=st.sampled_from([1, 2, 5, 10_000]),
)

clients = st.integers(0, CLIENTS - 1)
# Disruptive rules (failover, delete, quiet, admin) run on about a quarter of the steps that pick them.
RARELY = st.sampled_from([True, True, True, False])
groups = st.sampled_from(GROUPS)
modes = st.sampled_from(["ok"] * 6 + ["stale_gen", "stale_id", "no_instance"])


def check_derived(store: GroupStore) -> None:
    """State a store derives from its members (not in snapshots) agrees with them, live or replayed;
    and the shape of each state: Empty has no members, CompletingRebalance / Stable have members and the
    protocol the vote picks (Kafka's: each member votes for its first protocol all support, most votes win)."""
    for group in store.groups.values():
        if group.state == GroupState.EMPTY:
            assert not group.members, group.group_id
        elif group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert group.members, group.group_id
            names = [m.protocol_names() for m in group.members.values()]
            common = set(names[0]).intersection(*names[1:])
            assert group.protocol_name in common, (group.group_id, group.protocol_name, names)
            votes = Counter(next(n for n in own if n in common) for own in names)
            assert votes[group.protocol_name] == max(votes.values()), (group.group_id, group.protocol_name, votes)
        static = {m.group_instance_id: mid for mid, m in group.members.items() if m.group_instance_id}
        assert group.static_members == static, group.group_id
        support = Counter(name for m in group.members.values() for name in m.protocol_names())
        assert group.protocol_support == support, group.group_id
        assert (group.leader_id in group.members) if group.members else not group.leader_id, group.group_id
        assert not set(group.pending_members) & set(group.members), group.group_id


def first_commit_error(resp: pb.OffsetCommitResponse) -> int:
    """An OffsetCommit's error as a client acts on it: the first partition's that is not about its metadata."""
    for topic in resp.topics:
        for part in topic.partitions:
            if part.error_code not in (Errors.NONE, Errors.OFFSET_METADATA_TOO_LARGE):
                return part.error_code
    return Errors.NONE
