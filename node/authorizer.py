"""Authorization, the one place it is done for every listener (gRPC and Kafka): who a call is from (a forwarded
caller, the transport's verified identity, or a bearer token), what each RPC needs of the ACL (node/auth.py), and
the refusal each RPC answers with, logged (rate-limited) and counted. Without an ACL nothing is checked.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, cast

from google.protobuf.message import Message

from groupcoord.node import auth
from groupcoord.node.auth import ANONYMOUS, Acl, Caller, UnknownCredentials
from groupcoord.node.forwarding import CallerForwarding
from groupcoord.node.logs import LogBudget, fields
from groupcoord.node.responses import error_response
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

if TYPE_CHECKING:
    from groupcoord.node.metrics import NodeMetrics
    from groupcoord.node.service import Context, Handler

log = logging.getLogger(__name__)

# The RPCs about one group (`group_id`), checked by auth.group_need; the batch ones by group, in `authorized`.
ONE_GROUP_RPCS = frozenset(
    (
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "LeaveGroup",
        "AddMembersToGroup",
        "OffsetCommit",
        "OffsetFetch",
        "OffsetDelete",
    )
)
# The batch RPCs, checked group by group: what each group needs, the response, and its per-group field.
BATCH_RPCS: dict[str, tuple[str, type[Message], str]] = {
    "DescribeGroups": (auth.DESCRIBE, pb.DescribeGroupsResponse, "groups"),
    "DeleteGroups": (auth.ADMIN, pb.DeleteGroupsResponse, "results"),
    "FindCoordinator": (auth.FIND, pb.FindCoordinatorResponse, "coordinators"),
}
# The RPCs that change the cluster itself (node/membership.py): admins only, refused with this response type.
CLUSTER_ADMIN_RPCS: dict[str, type[Message]] = {
    "AddRaftVoter": pb.AddRaftVoterResponse,
    "RemoveRaftVoter": pb.RemoveRaftVoterResponse,
    "CreateTopics": pb.CreateTopicsResponse,
    "DeleteTopics": pb.DeleteTopicsResponse,
    "DescribeSettings": pb.DescribeSettingsResponse,
}
# Refusal log lines per second, at most; the metrics count every refusal.
DENIED_LOG_PER_S = 20
# Why an admin identity is needed, for the error message.
ADMIN_WHY = {
    "LeaveGroup": "removing members other than oneself (several members, or one by instance id alone)",
    "OffsetCommit": "committing offsets without being a member of the generation (no member id or generation -1)",
    "AddMembersToGroup": "pre-registering static members",
    "DeleteGroups": "deleting groups",
    "OffsetDelete": "deleting committed offsets",
    "ReadEvents": "reading the event files",
    "AddRaftVoter": "changing the cluster's voters",
    "RemoveRaftVoter": "changing the cluster's voters",
    "CreateTopics": "creating topics",
    "DeleteTopics": "deleting topics",
    "DescribeSettings": "reading a node's settings",
}


def _identify(acl: Acl, context: Context, forwarding: CallerForwarding) -> Caller:
    """The caller as the ACL sees it: the one another node handed the request on for, else from what the transport
    verified (a Kafka connection's SASL exchange, the client certificate of mutual TLS) or the call's bearer token."""
    metadata = context.invocation_metadata() or ()
    forwarded = forwarding.caller(metadata, time.time())
    if forwarded is not None:
        return forwarded
    verified = context.auth_context()
    return acl.identify(
        metadata,
        list(verified.get(auth.CERT_NAME_KEY, ())),
        list(verified.get(auth.SASL_IDENTITY_KEY, ())),
    )


class Authorizer:
    """The service's authorization: `authorized()` runs a handler on what the caller may do and answers the rest."""

    def __init__(
        self, acl: Acl | None, forwarding: CallerForwarding, node_id: int, metrics: NodeMetrics | None = None
    ) -> None:
        self.acl = acl
        self._forwarding = forwarding
        self._node_id = node_id
        self._metrics = metrics
        self._denied_log = LogBudget(DENIED_LOG_PER_S)
        if acl is not None:
            log.info(
                "auth.enabled",
                extra=fields(acl_file=acl.path, admins=len(acl.admins), tokens=len(acl.tokens), entries=len(acl.rules)),
            )

    async def authorized(self, name: str, request: Message, context: Context, handler: Handler) -> Message:
        """Runs `handler` on what the caller may do; the rest is answered GROUP_AUTHORIZATION_FAILED."""
        acl = self.acl
        assert acl is not None, "authorized() is only called with an ACL"
        try:
            caller = _identify(acl, context, self._forwarding)
        except UnknownCredentials as exc:
            return self._refuse_all(name, request, Caller("", "token"), str(exc))
        if name in CLUSTER_ADMIN_RPCS and not acl.is_admin(caller):
            return _cluster_refusal(name, self._deny(name, caller, auth.ADMIN, []))
        if name in ONE_GROUP_RPCS:
            group_id = request.group_id  # type: ignore[attr-defined]  # every ONE_GROUP_RPCS request has one
            need = auth.group_need(name, request)
            if acl.allows(caller, group_id, need):
                return await handler(request, context)
            return _refusal(request, self._deny(name, caller, need, [group_id]))
        if name in BATCH_RPCS:
            return await self._per_group(acl, name, caller, request, context, handler)
        reply = await handler(request, context)
        response: Any = reply  # the fields of the RPC the name says
        if name == "ListGroups":
            visible = [g for g in response.groups if acl.allows(caller, g.group_id, auth.DESCRIBE)]
            del response.groups[:]
            response.groups.extend(visible)
        elif name == "DescribeCluster" and not acl.is_admin(caller):
            # The nodes and their addresses are what a client needs to find its way; leaders, terms and commit
            # indexes are for operators.
            del response.partitions[:]
        return reply

    async def _per_group(
        self, acl: Acl, name: str, caller: Caller, request: Message, context: Context, handler: Handler
    ) -> Message:
        """A batch request: the allowed groups go to the handler, the others get an entry of their own, in order."""
        need, response_type, field = BATCH_RPCS[name]
        group_ids = list(request.group_ids)  # type: ignore[attr-defined]  # every BATCH_RPCS request has them
        allowed = [acl.allows(caller, g, need) for g in group_ids]
        if all(allowed):
            return await handler(request, context)
        message = self._deny(name, caller, need, [g for g, ok in zip(group_ids, allowed, strict=True) if not ok])
        kept = [g for g, ok in zip(group_ids, allowed, strict=True) if ok]
        # The handler answers its groups in request order, repeats included.
        answered = iter(getattr(await handler(type(request)(group_ids=kept), context), field) if kept else ())
        response = response_type()
        entries = getattr(response, field)
        for group_id, ok in zip(group_ids, allowed, strict=True):
            entries.append(next(answered) if ok else _refused_entry(name, group_id, message))
        return response

    def _refuse_all(self, name: str, request: Message, caller: Caller, reason: str) -> Message:
        """The answer to a call whose credentials are refused: every group (or the whole call) is denied."""
        if name in BATCH_RPCS:
            group_ids = list(request.group_ids)  # type: ignore[attr-defined]  # every BATCH_RPCS request has them
        elif name in ONE_GROUP_RPCS:
            group_ids = [request.group_id]  # type: ignore[attr-defined]  # every ONE_GROUP_RPCS request has one
        else:
            group_ids = []
        message = self._deny(name, caller, auth.AUTHENTICATE, group_ids, reason)
        if name in CLUSTER_ADMIN_RPCS:
            return _cluster_refusal(name, message)
        if name == "FindCoordinator":
            entries = [
                cast(pb.FindCoordinatorResponse.Coordinator, _refused_entry(name, g, message)) for g in group_ids
            ]
            return pb.FindCoordinatorResponse(coordinators=entries)
        if name == "DescribeCluster":
            return pb.DescribeClusterResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED, node_id=self._node_id)
        return _refusal(request, message)

    def caller(self, context: Context) -> Caller:
        """Who a call is from as the ACL judges it (anonymous without an ACL): what a request handed on carries.
        Raises UnknownCredentials for credentials the ACL refuses."""
        return ANONYMOUS if self.acl is None else _identify(self.acl, context, self._forwarding)

    def admin_denial(self, name: str, context: Context) -> str | None:
        """For an RPC that only admins may call at all: None when allowed, else the message of the refusal."""
        if self.acl is None:
            return None
        try:
            caller = _identify(self.acl, context, self._forwarding)
        except UnknownCredentials as exc:
            return self._deny(name, Caller("", "token"), auth.AUTHENTICATE, [], str(exc))
        return None if self.acl.is_admin(caller) else self._deny(name, caller, auth.ADMIN, [])

    def _deny(self, name: str, caller: Caller, need: str, group_ids: list[str], reason: str = "") -> str:
        """Logs and counts one refusal (of `group_ids`, if about groups); returns the client's error message.

        Neither the log nor the message ever holds a token or its digest."""
        if self._metrics is not None:
            self._metrics.on_denied(name, need, max(len(group_ids), 1))
        skipped = self._denied_log.take(time.monotonic())
        if skipped is not None:
            log.warning(
                "auth.denied",
                extra=fields(
                    rpc=name,
                    identity=caller.name,
                    via=caller.via,
                    operation=need,
                    group=group_ids[0] if group_ids else "",
                    groups=len(group_ids),
                    not_logged_before=skipped,
                ),
            )
        if need == auth.AUTHENTICATE:
            return f"{name} not authorized: {reason}"
        what = f"{caller.via} identity {caller.identity!r}" if caller.identity else "an anonymous caller"
        if need == auth.ADMIN:
            return f"{name} not authorized: {ADMIN_WHY.get(name, name)} needs an admin identity, and {what} is not one"
        granted = " or ".join(repr(op) for op in sorted(auth.SATISFIED_BY[need]))
        groups = f"group {group_ids[0]!r}" + (f" (and {len(group_ids) - 1} more)" if len(group_ids) > 1 else "")
        return f"{name} not authorized: {what} has no {granted} operation on {groups}"


def _refusal(request: Message, message: str) -> Message:
    """GROUP_AUTHORIZATION_FAILED for the whole of a one-group request (or ListGroups)."""
    response = error_response(request, Errors.GROUP_AUTHORIZATION_FAILED, message)
    if isinstance(response, pb.OffsetCommitResponse):
        # Its whole-request code, so a client sees the refusal even for a commit of no partitions.
        response.error_code, response.error_message = Errors.GROUP_AUTHORIZATION_FAILED, message
    return response


def _cluster_refusal(name: str, message: str) -> Message:
    return CLUSTER_ADMIN_RPCS[name](error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=message)


def _refused_entry(name: str, group_id: str, message: str) -> Message:
    code = Errors.GROUP_AUTHORIZATION_FAILED
    if name == "DescribeGroups":
        return pb.DescribeGroupsResponse.Group(
            group_id=group_id, error_code=code, group_state="Dead", error_message=message
        )
    if name == "DeleteGroups":
        return pb.DeleteGroupsResponse.Result(group_id=group_id, error_code=code)
    return pb.FindCoordinatorResponse.Coordinator(group_id=group_id, error_code=code, error_message=message)
