"""The one place each JoinGroup and SyncGroup answer is built (the node's whole-request errors use these too)."""

from __future__ import annotations

from groupcoord.coordinator.state import Group
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


def join_error(code: Errors, member_id: str = "", message: str = "", throttle_ms: int = 0) -> pb.JoinGroupResponse:
    return pb.JoinGroupResponse(
        error_code=code, generation_id=-1, member_id=member_id, error_message=message, throttle_time_ms=throttle_ms
    )


def sync_error(code: Errors, message: str = "") -> pb.SyncGroupResponse:
    return pb.SyncGroupResponse(error_code=code, error_message=message)


def join_ok(group: Group, member_id: str, with_members: bool, skip: bool = False) -> pb.JoinGroupResponse:
    """The end of a join phase for one member; the leader (`with_members`) gets every member's metadata."""
    resp = pb.JoinGroupResponse(
        error_code=Errors.NONE,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=group.leader_id,
        skip_assignment=skip,
        member_id=member_id,
    )
    if with_members:
        resp.members.extend(
            pb.JoinGroupResponse.Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata_for(group.protocol_name),
            )
            for m in group.members.values()
        )
    return resp


def sync_ok(group: Group, member_id: str) -> pb.SyncGroupResponse:
    return pb.SyncGroupResponse(
        error_code=Errors.NONE,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        assignment=group.members[member_id].assignment,
    )
