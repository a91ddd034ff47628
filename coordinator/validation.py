"""Request validation: pure functions of the settings, the hard state and the request.

Nothing here writes a record, answers, arms a timer or takes a token: a check that fails leaves the shard as it
was, and the order the handlers call them in is the order docs/PROTOCOL.md#validation-order gives.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from groupcoord.coordinator.config import GroupConfig
from groupcoord.coordinator.state import Group, GroupState, GroupStore
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

JoinReason = pb.JoinGroupRequest.JoinReason
# protobuf's `values()` builds a new list at each call.
JOIN_REASONS = frozenset(JoinReason.values())
# The groups of every partition the node leads, for `max_groups_per_node`: counted only for a request that would
# create a group (the count sums over the node's partitions).
NodeGroups = Callable[[], int]


def no_groups() -> int:
    return 0


def invalid_group_id(group_id: str, max_length: int, allow_empty: bool = False) -> bool:
    """The group-id rule, shared by the node's request layer (before routing) and the shard."""
    return (not group_id and not allow_empty) or len(group_id) > max_length


def group_id_error(config: GroupConfig, unloaded: bool, group_id: str, allow_empty: bool = False) -> Errors:
    if invalid_group_id(group_id, config.max_id_length, allow_empty):
        return Errors.INVALID_GROUP_ID
    if unloaded:
        return Errors.COORDINATOR_NOT_AVAILABLE
    return Errors.NONE


def member_error(group: Group, member_id: str, instance_id: str) -> Errors:
    """Identity order (docs/PROTOCOL.md#validation-order): instance mapped elsewhere -> fenced; unmapped or unknown
    id -> unknown."""
    if instance_id:
        mapped = group.static_members.get(instance_id)
        if mapped is None:
            return Errors.UNKNOWN_MEMBER_ID
        if mapped != member_id:
            return Errors.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return Errors.UNKNOWN_MEMBER_ID
    return Errors.NONE


def generation_error(
    config: GroupConfig,
    unloaded: bool,
    store: GroupStore,
    group_id: str,
    member_id: str,
    instance_id: str,
    generation_id: int,
) -> tuple[Errors, Group | None]:
    """Group id, then identity, then generation (docs/PROTOCOL.md#validation-order); the group when it exists."""
    code = group_id_error(config, unloaded, group_id)
    if code != Errors.NONE:
        return code, None
    group = store.get(group_id)
    if group is None:
        return Errors.UNKNOWN_MEMBER_ID, None
    code = member_error(group, member_id, instance_id)
    if code == Errors.NONE and generation_id != group.generation_id:
        code = Errors.ILLEGAL_GENERATION
    return code, group


def supports_protocols(group: Group | None, protocol_type: str, names: list[str], member_id: str = "") -> bool:
    """Kafka's supportsProtocols, not counting the joining member's own current protocols."""
    if group is None or not group.members:
        return True
    if protocol_type != group.protocol_type:
        return False
    own = set(group.members[member_id].protocol_names()) if member_id in group.members else set()
    others = len(group.members) - (member_id in group.members)
    return any(group.protocol_support[name] - (name in own) == others for name in names)


def join_request_error(config: GroupConfig, req: pb.JoinGroupRequest) -> tuple[Errors, str]:
    """The JoinGroup fields checked before the group is looked at."""
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        return Errors.INVALID_SESSION_TIMEOUT, (
            f"session_timeout_ms must be within [{config.min_session_timeout_ms}, {config.max_session_timeout_ms}]"
        )
    if req.rebalance_timeout_ms < 0:
        return Errors.INVALID_REQUEST, "rebalance_timeout_ms must not be negative"
    if req.join_reason not in JOIN_REASONS:
        return Errors.INVALID_REQUEST, f"unknown join_reason {req.join_reason}"
    longest = config.max_id_length
    if len(req.group_instance_id) > longest or len(req.client_id) > longest:
        return Errors.INVALID_REQUEST, f"group_instance_id and client_id are limited to {longest} chars"
    if len(req.protocols) > config.max_protocols:
        return Errors.INVALID_REQUEST, f"at most {config.max_protocols} protocols"
    names = [p.name for p in req.protocols]
    if len(set(names)) != len(names) or any(len(n) > longest for n in names):
        return Errors.INVALID_REQUEST, "protocol names must be unique and not too long"
    if sum(len(p.metadata) for p in req.protocols) > config.max_member_metadata_bytes:
        return Errors.INVALID_REQUEST, f"protocol metadata exceeds {config.max_member_metadata_bytes} bytes"
    if not req.protocol_type or not req.protocols or not all(names):
        return Errors.INCONSISTENT_GROUP_PROTOCOL, "protocol_type and named protocols are required"
    return Errors.NONE, ""


def new_group_refusal(config: GroupConfig, store: GroupStore, group_id: str, node_groups: NodeGroups) -> str:
    """Why a request that would create `group_id` is refused, or "". `node_groups()` is what the node counts in the
    partitions it leads (this one included), asked only then; existing groups are never refused."""
    if group_id in store.groups:
        return ""
    if config.max_groups_per_partition and len(store.groups) >= config.max_groups_per_partition:
        return f"this coordinator partition holds max_groups_per_partition = {config.max_groups_per_partition} groups"
    if config.max_groups_per_node and node_groups() >= config.max_groups_per_node:
        return f"the partitions this node leads hold max_groups_per_node = {config.max_groups_per_node} groups"
    return ""


def accepts_joining(config: GroupConfig, group: Group, join_waiters: Collection[str], req: pb.JoinGroupRequest) -> bool:
    """Kafka's acceptJoiningMember (group.max.size), checked before member identity
    (docs/PROTOCOL.md#validation-order). During a rebalance it counts the members waiting in the join phase
    (`join_waiters`): the group may be over a lowered limit, and the last to rejoin are the ones turned away. A
    returning static instance is a known member (KIP-345)."""
    max_size = config.max_size
    if max_size is None or group.state == GroupState.EMPTY:
        return True
    member_id = req.member_id or group.static_members.get(req.group_instance_id, "")
    if group.state == GroupState.PREPARING_REBALANCE:
        return member_id in join_waiters or len(join_waiters) < max_size
    return member_id in group.members or len(group.members) < max_size


def is_simple_commit(group: Group | None, req: pb.OffsetCommitRequest) -> bool:
    """A negative generation on an Empty (or absent, so new) group: a commit of an admin tool or of a consumer
    without group management, accepted whatever member or instance id it carries."""
    return req.generation_id < 0 and (group is None or group.state == GroupState.EMPTY)


def offset_commit_error(group: Group | None, req: pb.OffsetCommitRequest) -> Errors:
    """Kafka's ClassicGroup.validateOffsetCommit (Dead, an unloaded partition, is answered before). Anything but a
    simple commit is fenced by identity, then generation: with neither id that is UNKNOWN_MEMBER_ID."""
    if is_simple_commit(group, req):
        return Errors.NONE
    if group is None:
        return Errors.UNKNOWN_MEMBER_ID
    code = member_error(group, req.member_id, req.group_instance_id)
    if code != Errors.NONE:
        return code
    if req.generation_id != group.generation_id:
        return Errors.ILLEGAL_GENERATION
    if group.state == GroupState.COMPLETING_REBALANCE:
        return Errors.REBALANCE_IN_PROGRESS
    return Errors.NONE
