"""OffsetDelete on a real node, over gRPC, the SDK's Admin and `groupcoord offsets delete`; and the empty group id,
which Kafka routes like any other for FindCoordinator and the offset and group-administration APIs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from groupcoord.client.admin import Admin
from groupcoord.client.protocol import Subscription, encode_subscription
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import NodeProcess, heartbeat, join_request, sync_all

OD = pb.OffsetDeleteRequest


def offset_delete(group_id: str, topics: dict[str, list[int]]) -> pb.OffsetDeleteRequest:
    return OD(
        group_id=group_id,
        topics=[OD.Topic(name=t, partitions=[OD.Partition(partition_index=p) for p in ps]) for t, ps in topics.items()],
    )


def simple_commit(group_id: str, offsets: dict[tuple[str, int], int]) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group_id=group_id, generation_id=-1)
    by_topic: dict[str, pb.OffsetCommitRequest.Topic] = {}
    for (topic, partition), offset in offsets.items():
        if topic not in by_topic:
            by_topic[topic] = request.topics.add(name=topic)
        by_topic[topic].partitions.add(partition_index=partition, committed_offset=offset)
    return request


def codes(response: pb.OffsetDeleteResponse) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def fetched(stub: pb_grpc.GroupCoordinatorStub, group_id: str) -> set[tuple[str, int]]:
    reply = await stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group_id))
    assert reply.error_code == Errors.NONE
    return {(t.name, p.partition_index) for t in reply.topics for p in t.partitions}


def groupcoord(node: NodeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupcoord", *args, "--bootstrap", node.address, "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
    )


async def test_the_empty_group_id_is_routable_where_kafka_allows_it(node: NodeProcess, stub):
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[""]))
    (entry,) = found.coordinators
    assert (entry.error_code, entry.port) == (Errors.NONE, node.port)
    committed = await stub.OffsetCommit(simple_commit("", {("t", 0): 5, ("t", 1): 6}))
    assert [p.error_code for p in committed.topics[0].partitions] == [Errors.NONE, Errors.NONE]
    assert await fetched(stub, "") == {("t", 0), ("t", 1)}
    (described,) = (await stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[""]))).groups
    assert (described.error_code, described.group_state) == (Errors.NONE, "Empty")
    deleted = await stub.OffsetDelete(offset_delete("", {"t": [0]}))
    assert (deleted.error_code, codes(deleted)) == (Errors.NONE, {("t", 0): Errors.NONE})
    assert await fetched(stub, "") == {("t", 1)}
    # The SDK finds the coordinator of "" as of any group.
    async with Admin([node.address], deadline_s=10) as admin:
        assert await admin.list_offsets("") == {("t", 1): (6, "")}
    (gone,) = (await stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=[""]))).results
    assert gone.error_code == Errors.NONE
    # The membership APIs still refuse it.
    assert (await stub.JoinGroup(join_request(""))).error_code == Errors.INVALID_GROUP_ID
    assert await heartbeat(stub, "", "m", 1) == Errors.INVALID_GROUP_ID
    assert (await stub.SyncGroup(pb.SyncGroupRequest(group_id="", member_id="m"))).error_code == Errors.INVALID_GROUP_ID
    leave = pb.LeaveGroupRequest(group_id="", members=[pb.LeaveGroupRequest.MemberIdentity(member_id="m")])
    assert (await stub.LeaveGroup(leave)).error_code == Errors.INVALID_GROUP_ID


async def test_offset_delete_over_grpc_and_the_sdk(node: NodeProcess, stub):
    group = "offset-delete-grpc"
    absent = await stub.OffsetDelete(offset_delete(group, {"t": [0]}))
    assert (absent.error_code, list(absent.topics)) == (Errors.GROUP_ID_NOT_FOUND, [])

    await stub.OffsetCommit(simple_commit(group, {("t", 0): 1, ("t", 1): 2, ("u", 0): 3}))
    # A live consumer group subscribed to "t" (the SDK's encoding of its subscription).
    metadata = encode_subscription(Subscription({"t": 2}))
    protocols = [pb.JoinGroupRequest.Protocol(name="range", metadata=metadata)]
    first = await stub.JoinGroup(join_request(group, protocols=protocols))
    joined = await stub.JoinGroup(join_request(group, member_id=first.member_id, protocols=protocols))
    [synced] = await sync_all(stub, group, [joined], [""])
    assert synced.error_code == Errors.NONE

    live = await stub.OffsetDelete(offset_delete(group, {"t": [0, 1], "u": [0]}))
    assert live.error_code == Errors.NONE
    assert codes(live) == {
        ("t", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC,
        ("t", 1): Errors.GROUP_SUBSCRIBED_TO_TOPIC,
        ("u", 0): Errors.NONE,
    }
    assert await fetched(stub, group) == {("t", 0), ("t", 1)}

    async with Admin([node.address], deadline_s=10) as admin:
        assert await admin.delete_offsets(group, [("t", 1), ("v", 0)]) == {
            ("t", 1): Errors.GROUP_SUBSCRIBED_TO_TOPIC,
            ("v", 0): Errors.NONE,
        }
        leave = pb.LeaveGroupRequest(
            group_id=group, members=[pb.LeaveGroupRequest.MemberIdentity(member_id=joined.member_id)]
        )
        assert (await stub.LeaveGroup(leave)).members[0].error_code == Errors.NONE
        assert await admin.delete_offsets(group, [("t", 1)]) == {("t", 1): Errors.NONE}
    assert await fetched(stub, group) == {("t", 0)}


def test_offsets_delete_on_the_command_line(node: NodeProcess):
    group = "offset-delete-cli"
    done = groupcoord(node, "offsets", "set", group, "orders:0=1", "orders:1=2", "orders:2=3", "audit:0=4")
    assert done.returncode == 0, done.stderr

    deleted = groupcoord(node, "offsets", "delete", group, "audit:0", "--topic", "orders", "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == [
        {"topic": t, "partition": p, "error_code": 0, "error": "NONE"}
        for t, p in (("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2))
    ]
    assert groupcoord(node, "offsets", "get", group, "--json").stdout.strip() == "[]"

    nothing = groupcoord(node, "offsets", "delete", group, "--topic", "orders")
    assert nothing.returncode == 1
    assert f"{group}: no committed offsets of topic 'orders'" in nothing.stderr

    absent = groupcoord(node, "offsets", "delete", "offset-delete-nobody", "orders:0")
    assert absent.returncode == 1
    assert "GROUP_ID_NOT_FOUND" in absent.stderr and "Traceback" not in absent.stderr

    for bad in (("orders-0",), ()):
        usage = groupcoord(node, "offsets", "delete", group, *bad)
        assert usage.returncode == 2, usage.stderr
        assert len(usage.stderr.splitlines()) == 1 and "Traceback" not in usage.stderr
