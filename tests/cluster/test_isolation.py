"""A coordinator cut off from the others (its peers SIGSTOPped, or itself SIGSTOPped) never acts as one for
long: it stops answering within the leader-fallback bound, and the majority serves the group."""

from __future__ import annotations

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


async def test_the_majority_elects_a_new_coordinator_while_the_old_one_is_paused(cluster: Cluster):
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
    # The old leader resumes: it learns the newer term and never coordinates the group again.
    _signal(cluster, [old], signal.SIGCONT)
    time.sleep(1.0)
    assert (await _rpc(coordinator, "Heartbeat", beat)).error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert await _coordinator(cluster, group, old) == new
    commit = pb.OffsetCommitRequest(group_id=group, generation_id=1, member_id=a.member_id)
    commit.topics.add(name="t").partitions.add(partition_index=0, committed_offset=5)
    assert (await _rpc(new, "OffsetCommit", commit)).topics[0].partitions[0].error_code == Errors.NONE
