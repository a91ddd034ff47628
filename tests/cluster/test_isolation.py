"""A coordinator cut off from the others (its peers SIGSTOPped, or itself SIGSTOPped) does not act as one for
long: it stops answering within the leader-fallback bound, and the majority serves the group."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_three_nodes import Cluster, _coordinator, _node_index, _rpc, _stable_static_group

# leaderFallbackTimeout is 1 s (raft/partition.py) and the node polls its role every 5 ms.
STEP_DOWN_BOUND_S = 3.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    for node in c.nodes:
        if node is not None and node.alive():
            os.kill(node.proc.pid, signal.SIGCONT)
    c.stop_all()


def _signal(cluster: Cluster, indexes: list[int], sig: signal.Signals) -> None:
    for i in indexes:
        node = cluster.nodes[i]
        assert node is not None
        os.kill(node.proc.pid, sig)


async def test_a_leader_without_a_quorum_stops_answering(cluster: Cluster):
    group = "isolated-leader"
    coordinator, (a,) = await _stable_static_group(cluster, group)
    leader = _node_index(cluster, coordinator)
    others = [i for i in range(3) if i != leader]
    beat = pb.HeartbeatRequest(group_id=group, generation_id=1, member_id=a.member_id)
    _signal(cluster, others, signal.SIGSTOP)
    start = time.monotonic()
    while (await _rpc(coordinator, "Heartbeat", beat)).error_code == Errors.NONE:
        assert time.monotonic() - start < STEP_DOWN_BOUND_S, "a leader without a quorum kept coordinating"
        time.sleep(0.02)
    stepped_down = time.monotonic() - start
    print(f"isolated leader stopped coordinating after {stepped_down:.2f} s")
    assert (await _rpc(coordinator, "Heartbeat", beat)).error_code == Errors.COORDINATOR_NOT_AVAILABLE
    _signal(cluster, others, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while True:
        found = await _coordinator(cluster, group, others[0])
        if found and (await _rpc(found, "Heartbeat", beat)).error_code == Errors.NONE:
            break
        assert time.monotonic() < deadline, "the group was not served again after the partition healed"
        time.sleep(0.02)


async def test_the_majority_takes_over_from_a_paused_leader_whose_stale_writes_are_fenced(cluster: Cluster):
    group = "paused-leader"
    coordinator, (a,) = await _stable_static_group(cluster, group)
    old = _node_index(cluster, coordinator)
    survivor = (old + 1) % 3
    beat = pb.HeartbeatRequest(group_id=group, generation_id=1, member_id=a.member_id)
    _signal(cluster, [old], signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        found = await _coordinator(cluster, group, survivor)
        if found and found != coordinator and (await _rpc(found, "Heartbeat", beat)).error_code == Errors.NONE:
            break
        assert time.monotonic() < deadline, "the majority did not take the group over"
        time.sleep(0.02)
    new = found

    def commit(offset: int) -> pb.OffsetCommitRequest:
        request = pb.OffsetCommitRequest(group_id=group, generation_id=1, member_id=a.member_id)
        request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
        return request

    assert (await _rpc(new, "OffsetCommit", commit(5))).topics[0].partitions[0].error_code == Errors.NONE
    # A commit sent to the paused old leader waits in its socket and is the first thing it handles when it
    # resumes, possibly before it learns the newer term: whatever it writes then must never be applied.
    stale = asyncio.ensure_future(_rpc(coordinator, "OffsetCommit", commit(666)))
    await asyncio.sleep(0.2)
    _signal(cluster, [old], signal.SIGCONT)
    stale_code = (await asyncio.wait_for(stale, 15)).topics[0].partitions[0].error_code
    # NOT_AVAILABLE (it learnt it was deposed), LOAD_IN_PROGRESS (it is taking its preferred partition back,
    # node/balance.py), or NONE only if it had legitimately become the coordinator again by then.
    assert stale_code in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NONE)
    deadline = time.monotonic() + 10
    while True:
        named = {await _coordinator(cluster, group, i) for i in range(3)}
        current = next(iter(named))
        if len(named) == 1 and current and (await _rpc(current, "Heartbeat", beat)).error_code == Errors.NONE:
            break
        assert time.monotonic() < deadline, "the nodes did not settle on one coordinator"
        await asyncio.sleep(0.05)
    fetched = await _rpc(current, "OffsetFetch", pb.OffsetFetchRequest(group_id=group))
    # Acknowledged writes are kept; a write the deposed leader made is never applied.
    assert fetched.topics[0].partitions[0].committed_offset == (666 if stale_code == Errors.NONE else 5)
