"""Whole-request error answers (not the coordinator, still loading, leadership lost), per RPC shape.

Kafka carries one error code per item in batch responses, so "not the coordinator" fills every item.
"""

from __future__ import annotations

from google.protobuf.message import Message

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


def error_response(request: Message, code: Errors, message: str = "") -> Message:
    """The response to `request` with `code` everywhere a code goes."""
    if isinstance(request, pb.JoinGroupRequest):
        return pb.JoinGroupResponse(
            error_code=code, generation_id=-1, member_id=request.member_id, error_message=message
        )
    if isinstance(request, pb.SyncGroupRequest):
        return pb.SyncGroupResponse(error_code=code, error_message=message)
    if isinstance(request, pb.HeartbeatRequest):
        return pb.HeartbeatResponse(error_code=code, error_message=message)
    if isinstance(request, pb.LeaveGroupRequest):
        resp = pb.LeaveGroupResponse(error_code=code, error_message=message)
        for m in request.members:
            resp.members.add(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=code)
        return resp
    if isinstance(request, pb.AddMembersToGroupRequest):
        resp = pb.AddMembersToGroupResponse(error_code=code, error_message=message)
        for instance_id in request.group_instance_ids:
            resp.results.add(group_instance_id=instance_id, error_code=code)
        return resp
    if isinstance(request, pb.OffsetCommitRequest):
        resp = pb.OffsetCommitResponse()
        for topic in request.topics:
            out = resp.topics.add(name=topic.name)
            for part in topic.partitions:
                out.partitions.add(partition_index=part.partition_index, error_code=code)
        return resp
    if isinstance(request, pb.OffsetFetchRequest):
        return pb.OffsetFetchResponse(error_code=code, error_message=message)
    if isinstance(request, pb.OffsetDeleteRequest):
        return pb.OffsetDeleteResponse(error_code=code, error_message=message)
    if isinstance(request, pb.DescribeGroupsRequest):
        resp = pb.DescribeGroupsResponse()
        for group_id in request.group_ids:
            resp.groups.add(error_code=code, group_id=group_id, group_state="Dead", error_message=message)
        return resp
    if isinstance(request, pb.DeleteGroupsRequest):
        resp = pb.DeleteGroupsResponse()
        for group_id in request.group_ids:
            resp.results.add(group_id=group_id, error_code=code)
        return resp
    if isinstance(request, pb.ListGroupsRequest):
        return pb.ListGroupsResponse(error_code=code, error_message=message)
    if isinstance(request, pb.CreateTopicsRequest):
        resp = pb.CreateTopicsResponse()
        for topic in request.topics:
            resp.results.add(name=topic.name, error_code=code, error_message=message, num_partitions=-1)
        return resp
    if isinstance(request, pb.DeleteTopicsRequest):
        resp = pb.DeleteTopicsResponse()
        for name in request.names:
            resp.results.add(name=name, error_code=code, error_message=message)
        return resp
    if isinstance(request, pb.ListTopicsRequest):
        return pb.ListTopicsResponse(error_code=code, error_message=message)
    raise TypeError(f"no error response for {type(request).__name__}")
