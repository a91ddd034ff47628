"""Whole-request error answers (not the coordinator, still loading, leadership lost), per RPC shape.

Kafka carries one error code per item in batch responses, so "not the coordinator" fills every item.
"""

from __future__ import annotations

from google.protobuf.message import Message

from groupcoord.coordinator.responses import join_error, sync_error
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


def error_response(request: Message, code: Errors, message: str = "") -> Message:
    """The response to `request` with `code` everywhere a code goes."""
    if isinstance(request, pb.JoinGroupRequest):
        return join_error(code, request.member_id, message)
    if isinstance(request, pb.SyncGroupRequest):
        return sync_error(code, message)
    if isinstance(request, pb.HeartbeatRequest):
        return pb.HeartbeatResponse(error_code=code, error_message=message)
    if isinstance(request, pb.LeaveGroupRequest):
        left = pb.LeaveGroupResponse(error_code=code, error_message=message)
        for m in request.members:
            left.members.add(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=code)
        return left
    if isinstance(request, pb.AddMembersToGroupRequest):
        added = pb.AddMembersToGroupResponse(error_code=code, error_message=message)
        for instance_id in request.group_instance_ids:
            added.results.add(group_instance_id=instance_id, error_code=code)
        return added
    if isinstance(request, pb.OffsetCommitRequest):
        committed = pb.OffsetCommitResponse()
        for topic in request.topics:
            out = committed.topics.add(name=topic.name)
            for part in topic.partitions:
                out.partitions.add(partition_index=part.partition_index, error_code=code)
        return committed
    if isinstance(request, pb.OffsetFetchRequest):
        return pb.OffsetFetchResponse(error_code=code, error_message=message)
    if isinstance(request, pb.OffsetDeleteRequest):
        return pb.OffsetDeleteResponse(error_code=code, error_message=message)
    if isinstance(request, pb.DescribeGroupsRequest):
        described = pb.DescribeGroupsResponse()
        for group_id in request.group_ids:
            described.groups.add(error_code=code, group_id=group_id, group_state="Dead", error_message=message)
        return described
    if isinstance(request, pb.DeleteGroupsRequest):
        deleted = pb.DeleteGroupsResponse()
        for group_id in request.group_ids:
            deleted.results.add(group_id=group_id, error_code=code)
        return deleted
    if isinstance(request, pb.ListGroupsRequest):
        return pb.ListGroupsResponse(error_code=code, error_message=message)
    if isinstance(request, pb.CreateTopicsRequest):
        created = pb.CreateTopicsResponse()
        for new_topic in request.topics:
            created.results.add(name=new_topic.name, error_code=code, error_message=message, num_partitions=-1)
        return created
    if isinstance(request, pb.DeleteTopicsRequest):
        dropped = pb.DeleteTopicsResponse()
        for name in request.names:
            dropped.results.add(name=name, error_code=code, error_message=message)
        return dropped
    if isinstance(request, pb.ListTopicsRequest):
        return pb.ListTopicsResponse(error_code=code, error_message=message)
    raise TypeError(f"no error response for {type(request).__name__}")
