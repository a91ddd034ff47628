"""The membership and group administration APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups and DeleteGroups, each a gRPC request through the one request layer.

Version rules follow Kafka's: a JoinGroup below v4 never sees MEMBER_ID_REQUIRED (the listener rejoins with the id
at once, as Kafka's coordinator does for old clients); DescribeGroups below v6 reports an unknown group as Dead
with no error; LeaveGroup below v3 names one member and answers with that member's error.
"""

from __future__ import annotations

from typing import Any, cast

from groupcoord.node.kafka.common import NO_OPERATIONS, Values, member_identity
from groupcoord.node.service import Context, GroupCoordinatorService
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import millis
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

CLASSIC = "classic"


class GroupApis:
    def __init__(self, service: GroupCoordinatorService) -> None:
        self._service = service

    async def join_group(self, version: int, request: Any, context: Context) -> Values:
        session_ms = millis(request.session_timeout)
        software_name, software_version = getattr(context, "client_software", ("", ""))
        join = pb.JoinGroupRequest(
            group_id=request.group_id,
            session_timeout_ms=session_ms,
            # v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms=millis(request.rebalance_timeout) if version >= 1 else session_ms,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None) or "",
            protocol_type=request.protocol_type,
            protocols=[pb.JoinGroupRequest.Protocol(name=p.name, metadata=p.metadata) for p in request.protocols],
            reason=getattr(request, "reason", None) or "",
            client_id=getattr(context, "client_id", "") or "",
            client_software_name=software_name,
            client_software_version=software_version,
        )
        response = cast(pb.JoinGroupResponse, await self._service.serve("JoinGroup", join, context))
        if version < 4 and response.error_code == Errors.MEMBER_ID_REQUIRED:
            join.member_id = response.member_id
            response = cast(pb.JoinGroupResponse, await self._service.serve("JoinGroup", join, context))
        return {
            "throttle_time": response.throttle_time_ms,
            "error_code": response.error_code,
            "generation_id": response.generation_id if response.error_code == Errors.NONE else -1,
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name or (None if version >= 7 else ""),
            "leader": response.leader,
            "skip_assignment": response.skip_assignment,
            "member_id": response.member_id,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id or None, "metadata": m.metadata}
                for m in response.members
            ],
        }

    async def sync_group(self, version: int, request: Any, context: Context) -> Values:
        sync = pb.SyncGroupRequest(
            **member_identity(request, request.generation_id),
            protocol_type=getattr(request, "protocol_type", None) or "",
            protocol_name=getattr(request, "protocol_name", None) or "",
            assignments=[
                pb.SyncGroupRequest.Assignment(member_id=a.member_id, assignment=a.assignment)
                for a in request.assignments
            ],
        )
        response = cast(pb.SyncGroupResponse, await self._service.serve("SyncGroup", sync, context))
        return {
            "throttle_time": 0,
            "error_code": response.error_code,
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name or None,
            "assignment": response.assignment,
        }

    async def heartbeat(self, version: int, request: Any, context: Context) -> Values:
        beat = pb.HeartbeatRequest(**member_identity(request, request.generation_id))
        response = cast(pb.HeartbeatResponse, await self._service.serve("Heartbeat", beat, context))
        return {"throttle_time": 0, "error_code": response.error_code}

    async def leave_group(self, version: int, request: Any, context: Context) -> Values:
        if version >= 3:
            members = [
                pb.LeaveGroupRequest.MemberIdentity(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id or "",
                    reason=getattr(m, "reason", None) or "",
                )
                for m in request.members
            ]
        else:
            members = [pb.LeaveGroupRequest.MemberIdentity(member_id=request.member_id)]
        response = cast(
            pb.LeaveGroupResponse,
            await self._service.serve(
                "LeaveGroup", pb.LeaveGroupRequest(group_id=request.group_id, members=members), context
            ),
        )
        code = response.error_code
        if version < 3 and code == Errors.NONE and response.members:
            code = response.members[0].error_code
        # Kafka's rule: a request-level error comes with no member entries.
        answered = response.members if response.error_code == Errors.NONE else ()
        return {
            "throttle_time": 0,
            "error_code": code,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id or None, "error_code": m.error_code}
                for m in answered
            ],
        }

    async def describe_groups(self, version: int, request: Any, context: Context) -> Values:
        response = cast(
            pb.DescribeGroupsResponse,
            await self._service.serve(
                "DescribeGroups", pb.DescribeGroupsRequest(group_ids=list(request.groups)), context
            ),
        )
        groups = []
        for g in response.groups:
            code = g.error_code
            if code == Errors.GROUP_ID_NOT_FOUND and version < 6:
                code = Errors.NONE  # Kafka's older versions describe an unknown group as Dead, without an error
            groups.append(
                {
                    "error_code": code,
                    "error_message": g.error_message or (f"Group {g.group_id} not found." if code else None),
                    "group_id": g.group_id,
                    "group_state": g.group_state,
                    "protocol_type": g.protocol_type,
                    "protocol_data": g.protocol_data,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id or None,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.member_metadata,
                            "member_assignment": m.member_assignment,
                        }
                        for m in g.members
                    ],
                    "authorized_operations": NO_OPERATIONS,
                }
            )
        return {"throttle_time": 0, "groups": groups}

    async def list_groups(self, version: int, request: Any, context: Context) -> Values:
        """Kafka's admin clients ask every broker and merge: each node lists the groups it coordinates. Every group
        here is of Kafka's "classic" type (KIP-848's "consumer" groups are not served yet), so a types filter
        (v5) without it lists nothing."""
        states = list(getattr(request, "states_filter", ()))
        types = {t.lower() for t in getattr(request, "types_filter", ())}
        if types and CLASSIC not in types:
            return {"throttle_time": 0, "error_code": Errors.NONE, "groups": []}
        response = cast(
            pb.ListGroupsResponse,
            await self._service.serve(
                "ListGroups", pb.ListGroupsRequest(states_filter=states, coordinated_only=True), context
            ),
        )
        return {
            "throttle_time": 0,
            "error_code": response.error_code,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.group_state,
                    "group_type": CLASSIC,
                }
                for g in response.groups
            ],
        }

    async def delete_groups(self, version: int, request: Any, context: Context) -> Values:
        response = cast(
            pb.DeleteGroupsResponse,
            await self._service.serve(
                "DeleteGroups", pb.DeleteGroupsRequest(group_ids=list(request.groups_names)), context
            ),
        )
        return {
            "throttle_time": 0,
            "results": [{"group_id": r.group_id, "error_code": r.error_code} for r in response.results],
        }
