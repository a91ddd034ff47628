"""Authorization by client certificate: a node serving mutual TLS (certificates from `groupcoord certs init`) with an
ACL file; the identity is the certificate's subject CN. A CN the ACL does not list, or lists for another team's
groups only, is refused; the admin's certificate may do everything; a token still wins over the certificate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from groupcoord import certs
from groupcoord.client.admin import Admin
from groupcoord.client.errors import GroupAuthorizationFailed
from groupcoord.client.member import GroupMember
from groupcoord.client.security import ClientSecurity, aio_channel
from groupcoord.node.auth import hash_token
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import NodeProcess, join_request, start_node, stop_node

DENIED = Errors.GROUP_AUTHORIZATION_FAILED
TOKEN_B = "tok-team-b-over-mtls"
ACL = f"""
admins = ["ops"]

[[tokens]]
identity = "team-b"
sha256 = "{hash_token(TOKEN_B)}"

[[acl]]
identity = "team-a"
group_prefixes = ["team-a."]
operations = ["member", "describe"]

[[acl]]
identity = "team-b"
group_prefixes = ["team-b."]
operations = ["member", "describe"]
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki") / "certs"
    certs.init(directory, nodes=1, clients=["ops", "team-a", "stranger"])
    return directory


def security(pki: Path, name: str, token: str = "") -> ClientSecurity:
    cert, key = certs.client_cert(pki, name)
    return ClientSecurity(ca_file=str(pki / certs.CA_FILE), cert_file=str(cert), key_file=str(key), token=token)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, pki: Path) -> Iterator[NodeProcess]:
    directory = tmp_path_factory.mktemp("mtls")
    (directory / "acl.toml").write_text(ACL)
    cert, key = certs.node_cert(pki, 1)
    proc = start_node(
        directory / "node.log",
        f"--tls-cert-file={cert}",
        f"--tls-key-file={key}",
        f"--tls-client-ca-file={pki / certs.CA_FILE}",
        "--tls-client-auth=require",
        f"--acl-file={directory / 'acl.toml'}",
        "--partitions=2",
        security=security(pki, "ops"),
    )
    try:
        yield proc
    finally:
        stop_node(proc)


@pytest.fixture
async def stubs(node: NodeProcess, pki: Path) -> AsyncIterator[dict[str, pb_grpc.GroupCoordinatorStub]]:
    """A stub per client certificate (and one with team-a's certificate but team-b's token)."""
    channels = {name: aio_channel(node.address, security(pki, name)) for name in ("ops", "team-a", "stranger")} | {
        "team-a+token-b": aio_channel(node.address, security(pki, "team-a", TOKEN_B))
    }
    yield {name: pb_grpc.GroupCoordinatorStub(ch) for name, ch in channels.items()}
    for channel in channels.values():
        await channel.close()


async def test_a_certificate_identity_uses_its_own_groups_only(stubs, node):
    team_a, stranger = stubs["team-a"], stubs["stranger"]
    assert (await team_a.JoinGroup(join_request("team-a.orders"))).error_code == Errors.MEMBER_ID_REQUIRED
    refused = await team_a.JoinGroup(join_request("team-b.orders"))
    assert refused.error_code == DENIED and "certificate identity 'team-a'" in refused.error_message
    found = await team_a.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["team-a.orders", "team-b.orders"]))
    assert [c.error_code for c in found.coordinators] == [Errors.NONE, DENIED]
    # A CN the ACL does not name has no group at all.
    assert (await stranger.JoinGroup(join_request("team-a.orders"))).error_code == DENIED
    assert list((await stranger.ListGroups(pb.ListGroupsRequest())).groups) == []
    # A token wins over the certificate it travels with.
    assert (await stubs["team-a+token-b"].JoinGroup(join_request("team-a.x"))).error_code == DENIED
    assert (await stubs["team-a+token-b"].JoinGroup(join_request("team-b.x"))).error_code == Errors.MEMBER_ID_REQUIRED
    denied = [e for e in node.events() if e.get("event") == "auth.denied" and e.get("group") == "team-b.orders"]
    assert {(e["identity"], e["via"]) for e in denied} >= {("team-a", "certificate")}


async def test_admin_operations_need_the_admin_certificate(stubs):
    group = "team-a.admin"
    for who, code in (("team-a", DENIED), ("stranger", DENIED), ("ops", Errors.NONE)):
        stub = stubs[who]
        added = await stub.AddMembersToGroup(pb.AddMembersToGroupRequest(group_id=group, group_instance_ids=[who]))
        assert added.error_code == code, who
        leave = pb.LeaveGroupRequest(
            group_id=group, members=[pb.LeaveGroupRequest.MemberIdentity(group_instance_id=who)]
        )
        assert (await stub.LeaveGroup(leave)).error_code == code, who
        deleted = await stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["team-a.none"]))
        assert deleted.results[0].error_code == (Errors.GROUP_ID_NOT_FOUND if code == Errors.NONE else DENIED), who
        cluster = await stub.DescribeCluster(pb.DescribeClusterRequest())
        assert len(cluster.partitions) == (2 if code == Errors.NONE else 0), who
        events = [e async for e in stub.ReadEvents(pb.ReadEventsRequest())]
        assert all(e.error_code == code for e in events) and events, who


async def test_the_sdk_with_a_client_certificate(node, pki):
    member = GroupMember([node.address], "team-b.sdk", {"t": 1}, security=security(pki, "team-a"))
    await member.start()
    with pytest.raises(GroupAuthorizationFailed) as failed:
        await asyncio.wait_for(member.wait_failed(), 10)
    assert failed.value.code == DENIED
    await member.close()
    member = GroupMember(
        [node.address], "team-a.sdk", {"t": 1}, security=security(pki, "team-a"), heartbeat_interval_ms=100
    )
    await member.start()
    try:
        await member.wait_stable(15)
        beats = member.last_heartbeat_ok
        await asyncio.sleep(1.0)
        assert member.last_heartbeat_ok > beats  # heartbeats (a HeartbeatStream) are team-a's too
    finally:
        await member.close()
    async with Admin([node.address], deadline_s=10, security=security(pki, "team-a")) as admin:
        assert await admin.delete_groups(["team-a.sdk"]) == {"team-a.sdk": DENIED}
    async with Admin([node.address], deadline_s=10, security=security(pki, "ops")) as admin:
        assert await admin.delete_groups(["team-a.sdk"]) == {"team-a.sdk": Errors.NONE}
