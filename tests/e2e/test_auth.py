"""Authorization by bearer token against a real node started with an ACL file (docs/SECURITY.md#authorization):
each team may use its own groups and nothing else, admin operations need the admin identity, unknown tokens and
anonymous callers are refused, ListGroups is filtered, and every refusal is counted and logged without the token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from groupcoord.client.admin import Admin
from groupcoord.client.errors import GroupAuthorizationFailed
from groupcoord.client.member import GroupMember
from groupcoord.client.security import ClientSecurity
from groupcoord.node.auth import hash_token
from groupcoord.node.authorizer import DENIED_LOG_PER_S
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import NodeProcess, join_request, start_node, stop_node
from tests.e2e.test_cli import groupcoord
from tests.e2e.test_metrics import Scrape, metrics_address, scrape_until

DENIED = Errors.GROUP_AUTHORIZATION_FAILED
TOKEN_A, TOKEN_B, TOKEN_OPS = "tok-team-a-5f1c9e", "tok-team-b-77aa01", "tok-ops-c0ffee42"
TOKEN_UNKNOWN = "tok-nobody-0badf00d"
A, B, OPS = ((("authorization", f"Bearer {t}"),) for t in (TOKEN_A, TOKEN_B, TOKEN_OPS))
UNKNOWN = (("authorization", f"Bearer {TOKEN_UNKNOWN}"),)
SECRETS = (TOKEN_A, TOKEN_B, TOKEN_OPS, TOKEN_UNKNOWN, *(hash_token(t) for t in (TOKEN_A, TOKEN_B, TOKEN_OPS)))
PARTITIONS = 4


def acl_text() -> str:
    tokens = "".join(
        f'[[tokens]]\nidentity = "{who}"\nsha256 = "{hash_token(t)}"\n\n'
        for who, t in (("team-a", TOKEN_A), ("team-b", TOKEN_B), ("ops", TOKEN_OPS))
    )
    rules = "".join(
        f'[[acl]]\nidentity = "{team}"\ngroup_prefixes = ["{team}."]\noperations = ["member", "describe"]\n\n'
        for team in ("team-a", "team-b")
    )
    anyone = '[[acl]]\nidentity = "*"\ngroup_prefixes = ["public."]\noperations = ["member"]\n'
    return f'admins = ["ops"]\n\n{tokens}{rules}{anyone}'


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node with the ACL above and metrics (the conftest's `stub` and `channel` talk to it)."""
    directory = tmp_path_factory.mktemp("auth")
    (directory / "acl.toml").write_text(acl_text())
    proc = start_node(
        directory / "node.log",
        f"--acl-file={directory / 'acl.toml'}",
        "--metrics-port=0",
        f"--partitions={PARTITIONS}",
        f"--data-dir={directory / 'data'}",
    )
    try:
        yield proc
    finally:
        stop_node(proc)


async def form(stub: pb_grpc.GroupCoordinatorStub, group_id: str, metadata: tuple, instance_id: str = "") -> tuple:
    """One member joins `group_id` and syncs; returns (member_id, generation)."""
    joined = await stub.JoinGroup(join_request(group_id, instance_id=instance_id), metadata=metadata)
    if joined.error_code == Errors.MEMBER_ID_REQUIRED:
        joined = await stub.JoinGroup(join_request(group_id, member_id=joined.member_id), metadata=metadata)
    assert joined.error_code == Errors.NONE, joined
    synced = await stub.SyncGroup(
        pb.SyncGroupRequest(
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name=joined.protocol_name,
            assignments=[pb.SyncGroupRequest.Assignment(member_id=joined.member_id, assignment=b"\x00")],
        ),
        metadata=metadata,
    )
    assert synced.error_code == Errors.NONE, synced
    return joined.member_id, joined.generation_id


def commit_request(group_id: str, member_id: str = "", generation: int = -1, offset: int = 5) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group_id=group_id, member_id=member_id, generation_id=generation)
    request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
    return request


def commit_codes(reply: pb.OffsetCommitResponse) -> list[int]:
    return [p.error_code for t in reply.topics for p in t.partitions]


def no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


async def state_of(stub: pb_grpc.GroupCoordinatorStub, group_id: str) -> pb.DescribeGroupsResponse.Group:
    reply = await stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[group_id]), metadata=OPS)
    return reply.groups[0]


async def test_a_team_uses_its_own_groups(stub):
    group = "team-a.own"
    member_id, generation = await form(stub, group, A)
    beat = pb.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id)
    assert (await stub.Heartbeat(beat, metadata=A)).error_code == Errors.NONE
    committed = await stub.OffsetCommit(commit_request(group, member_id, generation, offset=42), metadata=A)
    assert commit_codes(committed) == [Errors.NONE] and committed.error_code == Errors.NONE
    fetched = await stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group), metadata=A)
    assert fetched.error_code == Errors.NONE
    assert [(t.name, p.committed_offset) for t in fetched.topics for p in t.partitions] == [("t", 42)]
    [described] = (await stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[group]), metadata=A)).groups
    assert (described.error_code, described.group_state, len(described.members)) == (Errors.NONE, "Stable", 1)
    [found] = (await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[group]), metadata=A)).coordinators
    assert found.error_code == Errors.NONE and found.port > 0
    leave = pb.LeaveGroupRequest(group_id=group, members=[pb.LeaveGroupRequest.MemberIdentity(member_id=member_id)])
    assert (await stub.LeaveGroup(leave, metadata=A)).error_code == Errors.NONE


async def test_another_teams_group_is_refused_for_every_operation(stub):
    group = "team-b.orders"
    member_id, generation = await form(stub, group, B)
    calls = {
        "JoinGroup": stub.JoinGroup(join_request(group), metadata=A),
        "JoinGroup-known": stub.JoinGroup(join_request(group, member_id=member_id), metadata=A),
        "SyncGroup": stub.SyncGroup(
            pb.SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id), metadata=A
        ),
        "Heartbeat": stub.Heartbeat(
            pb.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id), metadata=A
        ),
        "LeaveGroup": stub.LeaveGroup(
            pb.LeaveGroupRequest(group_id=group, members=[pb.LeaveGroupRequest.MemberIdentity(member_id=member_id)]),
            metadata=A,
        ),
        "OffsetFetch": stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group), metadata=A),
    }
    for name, call in calls.items():
        reply = await call
        assert reply.error_code == DENIED, name
        assert "'team-a'" in reply.error_message and repr(group) in reply.error_message, reply.error_message
        no_secret(reply.error_message)
    commit = await stub.OffsetCommit(commit_request(group, member_id, generation), metadata=A)
    assert (commit.error_code, commit_codes(commit)) == (DENIED, [DENIED])
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["team-a.x", group]), metadata=A)
    assert [(c.group_id, c.error_code, c.port) for c in found.coordinators] == [
        ("team-a.x", Errors.NONE, found.coordinators[0].port),
        (group, DENIED, 0),
    ]
    # Per group, in request order: the allowed group is answered (not found), the other refused.
    described = await stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[group, "team-a.none", group]), metadata=A)
    assert [(g.group_id, g.error_code) for g in described.groups] == [
        (group, DENIED),
        ("team-a.none", Errors.GROUP_ID_NOT_FOUND),
        (group, DENIED),
    ]
    assert described.groups[0].members == [] and described.groups[0].group_state == "Dead"
    # Nothing team-a tried touched team-b's group.
    after = await state_of(stub, group)
    assert (after.group_state, after.generation_id, [m.member_id for m in after.members]) == (
        "Stable",
        generation,
        [member_id],
    )
    beat = pb.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id)
    assert (await stub.Heartbeat(beat, metadata=B)).error_code == Errors.NONE


async def test_admin_operations_need_the_admin_identity(stub, node):
    group = "team-a.admin"
    static_id, generation = await form(stub, group, A, instance_id="static-1")
    other_id, _ = await form(stub, "team-a.admin-2", A)

    def leave(*members: tuple[str, str]) -> pb.LeaveGroupRequest:
        identities = [pb.LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members]
        return pb.LeaveGroupRequest(group_id=group, members=identities)

    by_instance = await stub.LeaveGroup(leave(("", "static-1")), metadata=A)
    assert by_instance.error_code == DENIED and [m.error_code for m in by_instance.members] == [DENIED]
    assert "needs an admin identity" in by_instance.error_message
    assert (await stub.LeaveGroup(leave((static_id, ""), (other_id, "")), metadata=A)).error_code == DENIED
    added = await stub.AddMembersToGroup(
        pb.AddMembersToGroupRequest(group_id=group, group_instance_ids=["static-2"]), metadata=A
    )
    assert added.error_code == DENIED
    simple = await stub.OffsetCommit(commit_request(group), metadata=A)
    assert (simple.error_code, commit_codes(simple)) == (DENIED, [DENIED])
    deleted = await stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=[group, "team-b.orders"]), metadata=A)
    assert [r.error_code for r in deleted.results] == [DENIED, DENIED]
    cluster = await stub.DescribeCluster(pb.DescribeClusterRequest(), metadata=A)
    assert cluster.error_code == Errors.NONE and cluster.partition_count == PARTITIONS
    assert [n.port for n in cluster.nodes] == [node.port] and list(cluster.partitions) == []
    events = [e async for e in stub.ReadEvents(pb.ReadEventsRequest(), metadata=A)]
    assert [e.error_code for e in events] == [DENIED] and "admin" in events[0].error_message
    voter = await stub.AddRaftVoter(pb.AddRaftVoterRequest(node="2=127.0.0.1:1:2"), metadata=A)
    assert voter.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED and "admin" in voter.error_message
    removal = await stub.RemoveRaftVoter(pb.RemoveRaftVoterRequest(node_id=1), metadata=A)
    assert removal.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert (await state_of(stub, group)).generation_id == generation  # none of it happened

    # The admin may do all of it, on any team's groups.
    removed = await stub.LeaveGroup(leave(("", "static-1")), metadata=OPS)
    assert removed.error_code == Errors.NONE and [m.error_code for m in removed.members] == [Errors.NONE]
    deadline = time.monotonic() + 5
    while (await state_of(stub, group)).group_state != "Empty":
        assert time.monotonic() < deadline, "the group did not become Empty"
        await asyncio.sleep(0.05)
    assert commit_codes(await stub.OffsetCommit(commit_request(group), metadata=OPS)) == [Errors.NONE]
    added = await stub.AddMembersToGroup(
        pb.AddMembersToGroupRequest(group_id="team-b.prereg", group_instance_ids=["static-2"]), metadata=OPS
    )
    assert added.error_code == Errors.NONE and [r.error_code for r in added.results] == [Errors.NONE]
    deleted = await stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=[group]), metadata=OPS)
    assert [r.error_code for r in deleted.results] == [Errors.NONE]
    cluster = await stub.DescribeCluster(pb.DescribeClusterRequest(), metadata=OPS)
    assert len(cluster.partitions) == PARTITIONS
    last = await stub.RemoveRaftVoter(pb.RemoveRaftVoterRequest(node_id=1), metadata=OPS)
    assert last.error_code == Errors.INVALID_REQUEST and "last voter" in last.error_message
    events = [e async for e in stub.ReadEvents(pb.ReadEventsRequest(), metadata=OPS)]
    assert events and all(e.error_code == Errors.NONE for e in events)
    assert any(b"team-a.admin" in e.lines for e in events)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (UNKNOWN, "unknown bearer token"),
        ((("authorization", f"Basic {TOKEN_A}"),), "not 'Bearer <token>'"),
        ((("authorization", "Bearer "),), "not 'Bearer <token>'"),
    ],
)
async def test_an_unknown_or_malformed_token_is_refused_everything(stub, metadata, message):
    # public.* is open to everyone, anonymous callers included: a bad token is still not anonymous.
    joined = await stub.JoinGroup(join_request("public.chat"), metadata=metadata)
    assert joined.error_code == DENIED and message in joined.error_message
    no_secret(joined.error_message)
    listed = await stub.ListGroups(pb.ListGroupsRequest(), metadata=metadata)
    assert listed.error_code == DENIED and list(listed.groups) == []
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["public.chat"]), metadata=metadata)
    assert [c.error_code for c in found.coordinators] == [DENIED]
    cluster = await stub.DescribeCluster(pb.DescribeClusterRequest(), metadata=metadata)
    assert cluster.error_code == DENIED and list(cluster.nodes) == []
    voter = await stub.RemoveRaftVoter(pb.RemoveRaftVoterRequest(node_id=1), metadata=metadata)
    assert voter.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED and message in voter.error_message


async def test_anonymous_callers_get_only_what_the_wildcard_entry_grants(stub):
    refused = await stub.JoinGroup(join_request("team-a.anon"))
    assert refused.error_code == DENIED and "anonymous" in refused.error_message
    assert (await stub.JoinGroup(join_request("public.chat"))).error_code == Errors.MEMBER_ID_REQUIRED
    # `member` on public.* is not `describe`: an anonymous caller lists nothing.
    assert list((await stub.ListGroups(pb.ListGroupsRequest())).groups) == []
    [described] = (await stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=["public.chat"]))).groups
    assert described.error_code == DENIED


async def test_list_groups_shows_each_identity_what_it_may_describe(stub):
    await form(stub, "team-a.listed", A)
    await form(stub, "team-b.listed", B)

    async def listed(metadata: tuple) -> set[str]:
        reply = await stub.ListGroups(pb.ListGroupsRequest(), metadata=metadata)
        assert reply.error_code == Errors.NONE
        return {g.group_id for g in reply.groups}

    mine, theirs, everything = await listed(A), await listed(B), await listed(OPS)
    assert "team-a.listed" in mine and all(g.startswith("team-a.") for g in mine)
    assert "team-b.listed" in theirs and all(g.startswith("team-b.") for g in theirs)
    assert mine | theirs <= everything and {"team-a.listed", "team-b.listed"} <= everything


async def test_refusals_are_counted_and_logged_without_the_token(stub, node):
    address = metrics_address(node)
    await asyncio.sleep(1.1)  # the refusals of earlier tests do not use up this second's log lines
    before = await asyncio.to_thread(Scrape, address)
    assert (await stub.JoinGroup(join_request("team-b.counted"), metadata=A)).error_code == DENIED
    deleted = await stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["team-a.x", "team-b.y"]), metadata=A)
    assert [r.error_code for r in deleted.results] == [DENIED, DENIED]
    assert (await stub.ListGroups(pb.ListGroupsRequest(), metadata=UNKNOWN)).error_code == DENIED
    expected = {("JoinGroup", "member"): 1, ("DeleteGroups", "admin"): 2, ("ListGroups", "authenticate"): 1}
    name = "groupcoord_authorization_denied_total"

    def grown(s: Scrape, rpc: str, op: str) -> float:
        return s.value(name, rpc=rpc, operation=op) - before.value(name, rpc=rpc, operation=op)

    after = await scrape_until(address, lambda s: all(grown(s, *k) >= n for k, n in expected.items()))
    assert {k: grown(after, *k) for k in expected} == expected
    assert (
        after.value("groupcoord_requests_total", api="JoinGroup", error_code="GROUP_AUTHORIZATION_FAILED")
        - before.value("groupcoord_requests_total", api="JoinGroup", error_code="GROUP_AUTHORIZATION_FAILED")
        == 1
    )

    deadline = time.monotonic() + 5
    while True:
        denied = [e for e in node.events() if e.get("event") == "auth.denied"]
        mine = [e for e in denied if e.get("group") == "team-b.counted"]
        unknown = [e for e in denied if e.get("rpc") == "ListGroups" and e.get("operation") == "authenticate"]
        if (mine and unknown) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert [(e["rpc"], e["identity"], e["via"], e["operation"], e["level"]) for e in mine] == [
        ("JoinGroup", "team-a", "token", "member", "warning")
    ]
    assert unknown and unknown[-1]["identity"] == "anonymous" and unknown[-1]["via"] == "token"
    assert any(e["rpc"] == "DeleteGroups" and e["groups"] == 2 for e in denied)
    [enabled] = [e for e in node.events() if e.get("event") == "auth.enabled"]
    assert (enabled["admins"], enabled["tokens"], enabled["entries"]) == (1, 3, 3)
    no_secret(Path(node.log_path).read_text(errors="replace"))


async def test_a_flood_of_refusals_is_counted_in_full_but_logged_at_a_bounded_rate(stub, node):
    address = metrics_address(node)
    await asyncio.sleep(1.1)
    name = "groupcoord_authorization_denied_total"
    before = (await asyncio.to_thread(Scrape, address)).value(name, rpc="Heartbeat", operation="member")
    beat = pb.HeartbeatRequest(group_id="team-b.flood", generation_id=1, member_id="m")
    replies = await asyncio.gather(*(stub.Heartbeat(beat, metadata=A) for _ in range(60)))
    assert {r.error_code for r in replies} == {DENIED}
    await asyncio.sleep(1.1)
    assert (await stub.Heartbeat(beat, metadata=A)).error_code == DENIED
    after = await scrape_until(address, lambda s: s.value(name, rpc="Heartbeat", operation="member") >= before + 61)
    assert after.value(name, rpc="Heartbeat", operation="member") == before + 61
    deadline = time.monotonic() + 5
    while True:
        lines = [e for e in node.events() if e.get("event") == "auth.denied" and e.get("group") == "team-b.flood"]
        if len(lines) > DENIED_LOG_PER_S or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    # At most DENIED_LOG_PER_S lines a second (the flood takes well under one, more on a loaded machine); the
    # line after it says how many were left out.
    assert DENIED_LOG_PER_S + 1 <= len(lines) < 61
    assert lines[-1]["not_logged_before"] > 0


async def test_the_sdk_fails_clearly_on_a_refusal(node):
    bootstrap = [node.address]
    team_a = ClientSecurity(token=TOKEN_A)
    stranger = GroupMember(bootstrap, "team-b.sdk", {"t": 2}, security=team_a, session_timeout_ms=6000)
    await stranger.start()
    started = time.monotonic()
    with pytest.raises(GroupAuthorizationFailed) as failed:
        await asyncio.wait_for(stranger.wait_failed(), 10)
    assert failed.value.code == DENIED and time.monotonic() - started < 5
    assert "team-b.sdk" in str(failed.value) and "GROUP_AUTHORIZATION_FAILED" in str(failed.value)
    await stranger.close()

    member = GroupMember(
        bootstrap, "team-a.sdk", {"t": 2}, security=team_a, session_timeout_ms=6000, heartbeat_interval_ms=100
    )
    await member.start()
    try:
        assert len((await member.wait_stable(15)).partitions) == 2
        assert set((await member.commit({("t", 0): 3})).values()) == {Errors.NONE}
        # Its heartbeats (over a HeartbeatStream) carry the token too: the member stays in the group.
        beats = member.last_heartbeat_ok
        await asyncio.sleep(1.0)
        assert member.last_heartbeat_ok > beats and not member._task.done()
    finally:
        await member.close()

    async with Admin(bootstrap, deadline_s=10, security=team_a) as admin:
        assert await admin.delete_groups(["team-a.sdk", "team-b.sdk"]) == {"team-a.sdk": DENIED, "team-b.sdk": DENIED}
        with pytest.raises(GroupAuthorizationFailed) as refused:
            await admin.list_offsets("team-b.sdk")
        assert refused.value.code == DENIED
        with pytest.raises(GroupAuthorizationFailed) as refused:
            await admin.add_members("team-a.sdk", ["s1"])
        assert refused.value.code == DENIED
        assert (await admin.describe_cluster()).partitions == ()
        with pytest.raises(GroupAuthorizationFailed) as refused:
            [e async for e in admin.read_events(node.address)]
        assert refused.value.code == DENIED
        assert all(g.group_id.startswith("team-a.") for g in await admin.list_groups())
    async with Admin(bootstrap, deadline_s=10, security=ClientSecurity(token=TOKEN_OPS)) as admin:
        assert len((await admin.describe_cluster()).partitions) == PARTITIONS
        assert (await admin.list_offsets("team-a.sdk")) == {("t", 0): (3, "")}


async def test_with_no_acl_file_tokens_are_ignored(tmp_path):
    """Authorization off (the default) is today's behaviour: nobody is refused, whatever they send."""
    plain = start_node(tmp_path / "node.log", "--partitions=1")
    try:
        async with grpc.aio.insecure_channel(plain.address) as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            for metadata in (None, UNKNOWN, A):
                reply = await stub.JoinGroup(join_request("team-b.open"), metadata=metadata)
                assert reply.error_code == Errors.MEMBER_ID_REQUIRED
            deleted = await stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["nope"]))
            assert [r.error_code for r in deleted.results] == [Errors.GROUP_ID_NOT_FOUND]
            assert len((await stub.DescribeCluster(pb.DescribeClusterRequest())).partitions) == 1
    finally:
        stop_node(plain)


def test_a_bad_acl_file_stops_the_node_with_one_line(tmp_path):
    path = tmp_path / "acl.toml"
    path.write_text('[[tokens]]\nidentity = "team-a"\nsha256 = "tok-team-a-in-clear"\n')
    result = groupcoord("node", "--port=0", f"--acl-file={path}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"groupcoord: error: acl_file {path}: tokens[0].sha256: expected the 64 hex digits of a SHA-256 digest "
        "(`groupcoord token hash` prints one)"
    ]
