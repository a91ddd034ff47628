"""DescribeGroups, ListGroups and DeleteGroups."""

from __future__ import annotations

from collections.abc import Iterable

from groupcoord.coordinator.result import CoordinatorResult, Token
from groupcoord.coordinator.runtime import Runtime
from groupcoord.coordinator.state import Group, GroupState, GroupStore
from groupcoord.coordinator.validation import group_id_error
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

_STATE_NAMES = {state.value.lower(): state for state in GroupState}


class Admin:
    """The admin APIs of the shard: reads of the store, and the one record an admin writes, GroupDeleted."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def describe_groups(self, out: CoordinatorResult, req: pb.DescribeGroupsRequest, token: Token) -> None:
        resp = pb.DescribeGroupsResponse()
        for group_id in req.group_ids:
            code = group_id_error(self.rt.config, self.rt.unloaded, group_id, allow_empty=True)
            group = self.rt.store.get(group_id) if code == Errors.NONE else None
            if code == Errors.NONE and group is None:
                code = Errors.GROUP_ID_NOT_FOUND
            if group is None:
                resp.groups.add(error_code=code, group_id=group_id, group_state=GroupState.DEAD.value)
            else:
                resp.groups.append(_describe(group))
        out.reply(token, resp)

    def list_groups(self, out: CoordinatorResult, req: pb.ListGroupsRequest, token: Token) -> None:
        if self.rt.unloaded:
            out.reply(token, pb.ListGroupsResponse(error_code=Errors.COORDINATOR_NOT_AVAILABLE))
        else:
            out.reply(token, list_groups([self.rt.store], req.states_filter))

    def delete_groups(self, out: CoordinatorResult, req: pb.DeleteGroupsRequest, token: Token) -> None:
        resp = pb.DeleteGroupsResponse()
        for group_id in req.group_ids:
            code = group_id_error(self.rt.config, self.rt.unloaded, group_id, allow_empty=True)
            group = self.rt.store.get(group_id) if code == Errors.NONE else None
            if code == Errors.NONE and group is None:
                code = Errors.GROUP_ID_NOT_FOUND
            elif group is not None and (group.members or group.state != GroupState.EMPTY):
                code = Errors.NON_EMPTY_GROUP
            elif group is not None:
                self.rt.emit(out, r.GroupDeleted(group_id, "admin", self.rt.wall()))
            resp.results.add(group_id=group_id, error_code=code)
        out.reply(token, resp)


def _describe(group: Group) -> pb.DescribeGroupsResponse.Group:
    stable = group.state == GroupState.STABLE
    out = pb.DescribeGroupsResponse.Group(
        error_code=Errors.NONE,
        group_id=group.group_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type,
        protocol_data=group.protocol_name,
        generation_id=group.generation_id,
        leader_id=group.leader_id,
        pending_instance_ids=list(group.registered_instances),
        pending_member_count=len(group.pending_members),
    )
    for m in group.members.values():
        out.members.add(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            client_software_name=m.client_software_name,
            client_software_version=m.client_software_version,
            member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"",
        )
    last = group.last_rebalance
    if last is not None:
        out.last_rebalance_reason.CopyFrom(
            pb.RebalanceReason(
                cause=last.cause,
                member_id=last.member_id,
                group_instance_id=last.group_instance_id,
                join_reason=last.join_reason,  # type: ignore[arg-type]  # the record keeps the enum as an int
                reason=last.reason,
                time_ms=last.time_ms,
            )
        )
    return out


GroupRow = tuple[str, str, str]
"""What ListGroups shows of one group: its id, protocol type and state."""


def listed_states(states_filter: Iterable[str]) -> set[GroupState] | pb.ListGroupsResponse:
    """The states a ListGroups asks for (empty: all), or the INVALID_REQUEST response naming one it does not know."""
    wanted: set[GroupState] = set()
    for name in states_filter:
        state = _STATE_NAMES.get(name.lower())
        if state is None:
            return pb.ListGroupsResponse(error_code=Errors.INVALID_REQUEST, error_message=f"unknown state {name!r}")
        wanted.add(state)
    return wanted


def group_rows(store: GroupStore, wanted: set[GroupState]) -> list[GroupRow]:
    """A copy of what ListGroups shows of a store, so that a caller sharing the store with the Raft thread (a
    node's committed state) holds it only for the copy: a quarter of the reply's time (bench/partition_load.py)."""
    return [(gid, g.protocol_type, g.state.value) for gid, g in store.groups.items() if not wanted or g.state in wanted]


def add_rows(resp: pb.ListGroupsResponse, rows: Iterable[GroupRow]) -> None:
    for group_id, protocol_type, state in rows:
        resp.groups.add(group_id=group_id, protocol_type=protocol_type, group_state=state)


def list_groups(stores: Iterable[GroupStore], states_filter: Iterable[str]) -> pb.ListGroupsResponse:
    """ListGroups over the given stores, sorted by group id."""
    wanted = listed_states(states_filter)
    if isinstance(wanted, pb.ListGroupsResponse):
        return wanted
    resp = pb.ListGroupsResponse(error_code=Errors.NONE)
    add_rows(resp, sorted(row for store in stores for row in group_rows(store, wanted)))
    return resp
