"""kill -9 of the coordinator while a group is mid-rebalance: the group becomes Stable again with all live
members, generations only grow, and acknowledged offsets stay."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_three_nodes import SESSION_MS, Cluster, _coordinator, _node_index, _rpc
from tests.e2e.support import join_request

RETRY = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


class Member:
    """A static member that follows the protocol against whichever node coordinates its group."""

    def __init__(self, cluster: Cluster, group: str, instance: str) -> None:
        self.cluster, self.group, self.instance = cluster, group, instance
        self.member_id = ""
        self.generation = -1
        self.coordinator = ""

    async def find(self) -> str:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for i, node in enumerate(self.cluster.nodes):
                if node is not None:
                    found = await _coordinator(self.cluster, self.group, i)
                    if found and self.cluster.nodes[_node_index(self.cluster, found)] is not None:
                        self.coordinator = found
                        return found
            await asyncio.sleep(0.02)
        raise AssertionError("no coordinator found")

    async def call(self, method: str, request):
        """Retries a call across coordinator moves, as the SDK does."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not self.coordinator:
                await self.find()
            try:
                reply = await _rpc(self.coordinator, method, request)
            except Exception:  # the coordinator died under us: rediscover
                self.coordinator = ""
                continue
            if getattr(reply, "error_code", Errors.NONE) in RETRY:
                self.coordinator = "" if reply.error_code == Errors.COORDINATOR_NOT_AVAILABLE else self.coordinator
                await asyncio.sleep(0.02)
                continue
            return reply
        raise AssertionError(f"{method} did not succeed in time")

    async def join(self) -> pb.JoinGroupResponse:
        request = join_request(
            self.group,
            member_id=self.member_id,
            instance_id=self.instance,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=4_000,
        )
        reply = await self.call("JoinGroup", request)
        assert reply.error_code == Errors.NONE, reply
        assert reply.generation_id >= self.generation, "generations only grow"
        self.member_id, self.generation = reply.member_id, reply.generation_id
        return reply

    async def sync(self, assignments: dict[str, bytes] | None = None) -> pb.SyncGroupResponse:
        request = pb.SyncGroupRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
        )
        for member_id, data in (assignments or {}).items():
            request.assignments.add(member_id=member_id, assignment=data)
        return await self.call("SyncGroup", request)

    async def heartbeat(self) -> int:
        request = pb.HeartbeatRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
        )
        return (await self.call("Heartbeat", request)).error_code

    async def commit(self, offset: int) -> int:
        request = pb.OffsetCommitRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
        )
        request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
        return (await self.call("OffsetCommit", request)).topics[0].partitions[0].error_code


async def _stable(a: Member, b: Member) -> None:
    """Drives both members until the group is Stable with both in the same generation."""
    for _ in range(10):
        ja, jb = await asyncio.gather(a.join(), b.join())
        leader = a if ja.leader == a.member_id else b
        given = {m.member_id: m.member_id.encode() for m in (ja if leader is a else jb).members}
        sa, sb = await asyncio.gather(a.sync(given if leader is a else None), b.sync(given if leader is b else None))
        if sa.error_code == sb.error_code == Errors.NONE and a.generation == b.generation:
            assert (sa.assignment, sb.assignment) == (a.member_id.encode(), b.member_id.encode())
            return
    raise AssertionError("group did not become Stable")


async def _described(member: Member) -> pb.DescribeGroupsResponse.Group:
    reply = await member.call("DescribeGroups", pb.DescribeGroupsRequest(group_ids=[member.group]))
    return reply.groups[0]


async def test_kill_in_preparing_rebalance(cluster: Cluster):
    a, b = Member(cluster, "prep", "a"), Member(cluster, "prep", "b")
    await a.join()
    assert (await a.sync({a.member_id: b"all"})).assignment == b"all"
    assert await a.commit(10) == Errors.NONE
    # b's join starts a rebalance that waits for a to rejoin; kill the coordinator in that phase.
    parked_b = asyncio.ensure_future(b.join())
    await asyncio.sleep(0.3)
    assert (await _described(a)).group_state == "PreparingRebalance"
    cluster.kill(_node_index(cluster, a.coordinator))
    a.coordinator = ""
    assert await a.heartbeat() in (Errors.REBALANCE_IN_PROGRESS, Errors.NONE)
    ja = asyncio.ensure_future(a.join())
    await asyncio.wait_for(asyncio.gather(parked_b, ja), 20)
    await _stable(a, b)
    group = await _described(a)
    assert group.group_state == "Stable" and group.generation_id >= 2
    assert sorted(m.group_instance_id for m in group.members) == ["a", "b"]
    fetched = await a.call("OffsetFetch", pb.OffsetFetchRequest(group_id="prep"))
    assert fetched.topics[0].partitions[0].committed_offset == 10


async def test_kill_in_completing_rebalance(cluster: Cluster):
    a, b = Member(cluster, "completing", "a"), Member(cluster, "completing", "b")
    await a.join()
    await a.sync({a.member_id: b"all"})
    assert await a.commit(20) == Errors.NONE
    parked_b = asyncio.ensure_future(b.join())  # starts a rebalance that waits for a
    await asyncio.sleep(0.3)
    ja = await a.join()
    jb = await asyncio.wait_for(parked_b, 10)
    assert ja.generation_id == jb.generation_id == 2
    assert (await _described(a)).group_state == "CompletingRebalance"
    cluster.kill(_node_index(cluster, a.coordinator))
    a.coordinator = b.coordinator = ""
    leader = a if ja.leader == a.member_id else b
    given = {m.member_id: m.member_id.encode() for m in (ja if leader is a else jb).members}
    sa, sb = await asyncio.gather(a.sync(given if leader is a else None), b.sync(given if leader is b else None))
    if sa.error_code == sb.error_code == Errors.NONE:
        assert (sa.assignment, sb.assignment) == (a.member_id.encode(), b.member_id.encode())
    else:  # the sync deadline passed during the failover: one more round
        await _stable(a, b)
    group = await _described(a)
    assert group.group_state == "Stable" and group.generation_id >= 2
    fetched = await a.call("OffsetFetch", pb.OffsetFetchRequest(group_id="completing"))
    assert fetched.topics[0].partitions[0].committed_offset == 20
