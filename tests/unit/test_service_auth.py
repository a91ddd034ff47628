"""The service's authorization layer (node/authorizer.py, `Authorizer.authorized`) on hostile requests of every RPC and
every kind of caller: the handler sees exactly what the caller may do, every refused group gets its own
GROUP_AUTHORIZATION_FAILED entry in request order, and nothing raises."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.node import auth
from groupcoord.node.auth import hash_token, parse_acl
from groupcoord.node.authorizer import BATCH_RPCS, ONE_GROUP_RPCS
from groupcoord.node.metrics import NodeMetrics
from groupcoord.node.service import GroupCoordinatorService
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.fuzz.strategies import BY_METHOD
from tests.unit.profiles import examples

DENIED = Errors.GROUP_AUTHORIZATION_FAILED
GROUPS = ("team-a.x", "team-a.", "team-b.x", "public.x", "", "team-a")
ACL = parse_acl(
    {
        "admins": ["ops"],
        "tokens": [{"identity": "team-a", "sha256": hash_token("ta")}, {"identity": "ops", "sha256": hash_token("to")}],
        "acl": [
            {"identity": "team-a", "group_prefixes": ["team-a."], "operations": ["member", "describe"]},
            {"identity": "*", "group_prefixes": ["public."], "operations": ["member"]},
        ],
    },
    "acl.toml",
)
CALLERS = {
    "team-a": ((("authorization", "Bearer ta"),), ()),
    "ops": ((("authorization", "Bearer to"),), ()),
    "unknown": ((("authorization", "Bearer nope"),), ()),
    "anonymous": ((), ()),
    "cert-team-a": ((), (b"team-a",)),
}
CHECKED = sorted(ONE_GROUP_RPCS | set(BATCH_RPCS) | {"ListGroups", "DescribeCluster"})


class Context:
    def __init__(self, metadata: tuple, names: tuple) -> None:
        self._metadata, self._names = metadata, names

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {auth.CERT_NAME_KEY: list(self._names)} if self._names else {}


class Handler:
    """Answers like the real handlers' shapes (NONE everywhere) and remembers what it was given."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[Message] = []

    async def __call__(self, request: Any, context: Any) -> Message:
        self.seen.append(request)
        if self.name == "DescribeGroups":
            return pb.DescribeGroupsResponse(
                groups=[pb.DescribeGroupsResponse.Group(group_id=g) for g in request.group_ids]
            )
        if self.name == "DeleteGroups":
            return pb.DeleteGroupsResponse(
                results=[pb.DeleteGroupsResponse.Result(group_id=g) for g in request.group_ids]
            )
        if self.name == "FindCoordinator":
            coordinators = [pb.FindCoordinatorResponse.Coordinator(group_id=g, port=1) for g in request.group_ids]
            return pb.FindCoordinatorResponse(coordinators=coordinators)
        if self.name == "ListGroups":
            return pb.ListGroupsResponse(groups=[pb.ListGroupsResponse.ListedGroup(group_id=g) for g in GROUPS])
        if self.name == "DescribeCluster":
            return pb.DescribeClusterResponse(node_id=1, partitions=[pb.DescribeClusterResponse.Partition()])
        return type(request).__name__  # a one-group request: the marker that it went through


@pytest.fixture(scope="module")
def service() -> GroupCoordinatorService:
    cluster = SimpleNamespace(node_id=1)
    return GroupCoordinatorService(cluster, 255, NodeMetrics(), acl=ACL)  # type: ignore[arg-type]


@settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data(), rpc=st.sampled_from(CHECKED), who=st.sampled_from(sorted(CALLERS)))
async def test_the_handler_sees_only_what_the_caller_may_do(service, data, rpc, who):
    request = data.draw(BY_METHOD[rpc](GROUPS, ("m1", ""), ("s1",), 30))
    handler = Handler(rpc)
    response = await service.auth.authorized(rpc, request, Context(*CALLERS[who]), handler)
    caller = None if who == "unknown" else ACL.identify(*CALLERS[who])
    if rpc in ONE_GROUP_RPCS:
        allowed = caller is not None and ACL.allows(caller, request.group_id, auth.group_need(rpc, request))
        assert (response == type(request).__name__) == allowed
        if not allowed:
            assert response.error_code == DENIED and response.error_message
    elif rpc in BATCH_RPCS:
        need, _, field = BATCH_RPCS[rpc]
        ok = [caller is not None and ACL.allows(caller, g, need) for g in request.group_ids]
        entries = getattr(response, field)
        assert [e.group_id for e in entries] == list(request.group_ids)
        assert [e.error_code == DENIED for e in entries] == [not o for o in ok]
        given_ids = [g for s in handler.seen for g in s.group_ids]
        assert given_ids == [g for g, o in zip(request.group_ids, ok, strict=True) if o]
    elif rpc == "ListGroups":
        if caller is None:
            assert response.error_code == DENIED and not response.groups and not handler.seen
        else:
            assert {g.group_id for g in response.groups} == {g for g in GROUPS if ACL.allows(caller, g, auth.DESCRIBE)}
    else:
        if caller is None:
            assert response.error_code == DENIED and not handler.seen
        else:
            assert len(response.partitions) == (1 if ACL.is_admin(caller) else 0)


def test_without_an_acl_nothing_is_checked():
    plain = GroupCoordinatorService(SimpleNamespace(node_id=1), 255)  # type: ignore[arg-type]
    assert plain.auth.acl is None and plain.auth.admin_denial("ReadEvents", Context((), ())) is None


@pytest.mark.parametrize("who", sorted(CALLERS))
async def test_topic_changes_are_for_admins_and_the_listing_for_anyone_identified(service, who):
    caller = None if who == "unknown" else ACL.identify(*CALLERS[who])
    admin = caller is not None and ACL.is_admin(caller)
    for rpc, request in (
        ("CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreateTopicsRequest.Topic(name="t", num_partitions=1)])),
        ("DeleteTopics", pb.DeleteTopicsRequest(names=["t"])),
    ):
        handler = Handler(rpc)
        response = await service.auth.authorized(rpc, request, Context(*CALLERS[who]), handler)
        if admin:
            assert response == type(request).__name__
        else:
            assert response.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED and response.error_message
            assert not response.results and not handler.seen
    handler = Handler("ListTopics")
    response = await service.auth.authorized("ListTopics", pb.ListTopicsRequest(), Context(*CALLERS[who]), handler)
    if caller is None:
        assert response.error_code == DENIED and response.error_message and not handler.seen
    else:
        assert response == "ListTopicsRequest"


@pytest.mark.parametrize("who", sorted(CALLERS))
async def test_a_nodes_settings_are_for_admins(service, who):
    caller = None if who == "unknown" else ACL.identify(*CALLERS[who])
    handler = Handler("DescribeSettings")
    request = pb.DescribeSettingsRequest()
    response = await service.auth.authorized("DescribeSettings", request, Context(*CALLERS[who]), handler)
    if caller is not None and ACL.is_admin(caller):
        assert response == "DescribeSettingsRequest"
    else:
        assert response.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED and response.error_message
        assert not response.settings and not handler.seen
