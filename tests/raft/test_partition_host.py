"""A partition served by the leader of three in-process replicas: barrier, replies after commit, failover."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from groupcoord.coordinator import GroupConfig
from groupcoord.node.clock import SystemClock
from groupcoord.node.partitions import ABANDONED, MAX_BATCH_RECORDS, PartitionHost, Role
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.raft.test_partition import Cluster

CONFIG = GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=0)


class Failures:
    """A PartitionObserver that keeps only the failed proposals, by reason."""

    def __init__(self) -> None:
        self.seen: collections.Counter[str] = collections.Counter()

    def on_role(self, partition: int, role: Role) -> None:
        pass

    def on_commit_latency(self, seconds: float) -> None:
        pass

    def on_batch(self, records: int) -> None:
        pass

    def on_proposal_failed(self, reason: str, amount: int = 1) -> None:
        self.seen[reason] += amount


class Hosts:
    def __init__(self, cluster: Cluster, loop: asyncio.AbstractEventLoop, observer: Failures | None = None) -> None:
        self.cluster = cluster
        self.hosts: list[PartitionHost | None] = [
            PartitionHost(replica, CONFIG, SystemClock(), loop, observer=observer) for replica in cluster.live()
        ]
        self._poller = loop.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            for host in self.hosts:
                if host is not None:
                    host.poll()
            await asyncio.sleep(0.005)

    async def serving(self) -> PartitionHost:
        for _ in range(2000):
            leaders = [h for h in self.hosts if h is not None and h.role is Role.LEADER]
            if leaders:
                return leaders[0]
            await asyncio.sleep(0.005)
        raise AssertionError("no partition leader is serving")

    def kill(self, host: PartitionHost) -> None:
        i = self.hosts.index(host)
        self.hosts[i] = None
        self.cluster.stop(i)

    async def close(self) -> None:
        self._poller.cancel()
        self.cluster.close()


@pytest.fixture
async def hosts(tmp_path: Path) -> AsyncIterator[Hosts]:
    h = Hosts(Cluster(tmp_path), asyncio.get_running_loop())
    yield h
    await h.close()


def _join(member_id: str = "", instance: str = "") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[pb.JoinGroupRequest.Protocol(name="range", metadata=b"m")],
        client_id="c",
    )


async def _call(host: PartitionHost, request, method: str):
    return await host.call(request, lambda core, token: getattr(core, method)(request, token))


async def test_followers_refuse_and_the_leader_serves_after_its_barrier(hosts: Hosts):
    leader = await hosts.serving()
    assert leader.replica.fence_term == leader.term
    for host in hosts.hosts:
        if host is not leader:
            resp = await _call(host, _join(instance="a"), "join_group")
            assert resp.error_code == Errors.COORDINATOR_NOT_AVAILABLE
    joined = await _call(leader, _join(instance="a"), "join_group")
    assert (joined.error_code, joined.generation_id) == (Errors.NONE, 1)
    # The reply came after the commit: the leader's committed store holds the member already ...
    assert joined.member_id in leader.replica.store.groups["g"].members
    # ... and every replica applies it once it learns the commit index.
    for _ in range(400):
        if all(h is not None and "g" in h.replica.store.groups for h in hosts.hosts):
            break
        await asyncio.sleep(0.005)
    for host in hosts.hosts:
        assert host is not None
        assert list(host.replica.store.groups["g"].members) == [joined.member_id]


async def test_a_stable_group_survives_the_leader_without_a_rebalance(hosts: Hosts):
    leader = await hosts.serving()
    a = await _call(leader, _join(instance="a"), "join_group")
    sync = pb.SyncGroupRequest(
        group_id="g",
        generation_id=a.generation_id,
        member_id=a.member_id,
        assignments=[pb.SyncGroupRequest.Assignment(member_id=a.member_id, assignment=b"p0")],
    )
    assert (await _call(leader, sync, "sync_group")).assignment == b"p0"
    hosts.kill(leader)
    new_leader = await hosts.serving()
    assert new_leader is not leader and new_leader.term > leader.term
    beat = pb.HeartbeatRequest(group_id="g", generation_id=a.generation_id, member_id=a.member_id)
    assert (await _call(new_leader, beat, "heartbeat")).error_code == Errors.NONE
    described = await _call(new_leader, pb.DescribeGroupsRequest(group_ids=["g"]), "describe_groups")
    group = described.groups[0]
    assert (group.group_state, group.generation_id, group.members[0].member_assignment) == ("Stable", 1, b"p0")


async def test_parked_requests_fail_over_with_coordinator_not_available(hosts: Hosts):
    leader = await hosts.serving()
    first = await _call(leader, _join(instance="a"), "join_group")
    assert first.generation_id == 1
    # b joins: a rebalance starts and b's JoinGroup parks until a rejoins.
    parked = asyncio.ensure_future(_call(leader, _join(instance="b"), "join_group"))
    await asyncio.sleep(0.2)
    assert not parked.done()
    term = leader.term
    leader.replica.transferLeadership()  # Raft moves the partition to another node
    resp = await asyncio.wait_for(parked, 5)
    assert resp.error_code == Errors.COORDINATOR_NOT_AVAILABLE
    # It stepped down; if the transfer's election failed it may already lead again, but only in a later term.
    assert leader.role is Role.FOLLOWER or leader.term > term
    new_leader = await hosts.serving()
    assert new_leader is not leader or new_leader.term > term
    # The group was mid-rebalance: a rejoins, b joins again, and the join phase completes at the new leader.
    rejoin_a = asyncio.ensure_future(_call(new_leader, _join(first.member_id, "a"), "join_group"))
    again_b = await _call(new_leader, _join(instance="b"), "join_group")
    done_a = await asyncio.wait_for(rejoin_a, 5)
    assert (again_b.error_code, done_a.error_code) == (Errors.NONE, Errors.NONE)
    assert again_b.generation_id == done_a.generation_id == 2


def _commit(member_id: str, generation: int, partition: int, offset: int) -> pb.OffsetCommitRequest:
    return pb.OffsetCommitRequest(
        group_id="g",
        generation_id=generation,
        member_id=member_id,
        group_instance_id="a",
        topics=[
            pb.OffsetCommitRequest.Topic(
                name="t",
                partitions=[pb.OffsetCommitRequest.Partition(partition_index=partition, committed_offset=offset)],
            )
        ],
    )


async def test_concurrent_calls_share_raft_entries_and_are_answered_after_their_commit(hosts: Hosts):
    leader = await hosts.serving()
    a = await _call(leader, _join(instance="a"), "join_group")
    sync = pb.SyncGroupRequest(group_id="g", generation_id=a.generation_id, member_id=a.member_id)
    await _call(leader, sync, "sync_group")

    def commit(p: int) -> Awaitable[pb.OffsetCommitResponse]:
        return _call(leader, _commit(a.member_id, a.generation_id, p, 1000 + p), "offset_commit")

    before = leader.replica.applied_batches
    # A lone call goes out on the next loop turn; the calls that arrive while it is in flight queue up and share
    # entries of at most MAX_BATCH_RECORDS records (one record per call here).
    first = asyncio.ensure_future(commit(0))
    for _ in range(3):
        await asyncio.sleep(0)
    calls = MAX_BATCH_RECORDS + 52
    replies = [await first, *await asyncio.gather(*(commit(p) for p in range(1, calls)))]
    assert all(rep.topics[0].partitions[0].error_code == Errors.NONE for rep in replies)
    assert leader.replica.applied_batches - before == 3
    # Every reply came after its own commit: the committed store holds every offset already.
    offsets = leader.replica.store.groups["g"].offsets
    assert {p: offsets[("t", p)].offset for p in range(calls)} == {p: 1000 + p for p in range(calls)}


async def test_round_trips_are_measured_and_a_batch_cut_off_from_its_followers_is_abandoned(tmp_path: Path):
    failures = Failures()
    hosts = Hosts(Cluster(tmp_path), asyncio.get_running_loop(), failures)
    try:
        leader = await hosts.serving()
        joined = await _call(leader, _join(instance="a"), "join_group")
        assert joined.error_code == Errors.NONE
        # The commit needed both followers' acknowledgements: one round trip each at least, by Raft address.
        followers = {a for a in hosts.cluster.addresses if a != leader.replica.selfNode.address}
        trips = leader.replica.round_trips()
        assert trips.keys() == followers
        assert all(sum(t.buckets) >= 1 and t.sum > 0 for t in trips.values())
        assert not failures.seen

        for host in [h for h in hosts.hosts if h is not None and h is not leader]:
            hosts.kill(host)
        # No follower acknowledges the next batch; the leader steps down (pysyncobj's leader fallback timeout).
        reply = await asyncio.wait_for(_call(leader, _join(instance="b"), "join_group"), 10)
        assert reply.error_code == Errors.COORDINATOR_NOT_AVAILABLE
        assert failures.seen == {ABANDONED: 1}
    finally:
        await hosts.close()
