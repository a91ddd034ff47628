"""The issue's fifth storage case, with a real network partition (network namespaces): a coordinator cut off from
the other nodes while clients still reach it must stop answering before a new one starts, so no client reads an
offset older than one already acknowledged, and two coordinators never answer for the group at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from groupcoord.chaos.cluster import ChaosCluster
from groupcoord.chaos.history import Recorder
from groupcoord.chaos.network import Namespaces
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

GROUP = "deposed"
RPC_TIMEOUT_S = 0.3


@dataclass
class Answer:
    node: int
    sent: float
    received: float
    offset: int


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ChaosCluster]:
    assert Namespaces.available(), "the partition needs network namespaces: run the tests as root"
    network = Namespaces(3)
    history = Recorder(tmp_path / "history.jsonl")
    flags = ["--group-initial-rebalance-delay-ms=0"]
    c = ChaosCluster(network, 3, 1, tmp_path, history, "deposed-leader-secret", flags)
    try:
        for node_id in c.nodes:
            c.start(node_id)
        assert c.wait_healthy(60) is not None, "the cluster did not come up"
        yield c
    finally:
        c.stop_all()
        for node in c.nodes.values():
            if node.proc is not None:
                node.proc.wait(10)
        network.heal()
        network.close()
        history.close()


def commit_request(offset: int) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group_id=GROUP, generation_id=-1)
    request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
    return request


def test_what_the_harness_records_when_groups_do_not_converge(cluster: ChaosCluster):
    """Each node's Raft view of every partition, and every thread's stack in every node's log."""
    deadline = time.monotonic() + 20
    while True:  # a leadership may still move after the cluster is first healthy (the leader balancer)
        views = cluster.raft_views()
        leaders = {n: [(p["partition"], p["leader"], p["term"]) for p in view or []] for n, view in views.items()}
        if set(views) == {1, 2, 3} and leaders[1] == leaders[2] == leaders[3] and len(leaders[1]) == 1:
            break
        assert time.monotonic() < deadline, leaders
        time.sleep(0.2)
    (leader,) = {p["leader"] for view in views.values() for p in view or []}
    (as_leader,) = views[int(leader)] or []
    assert as_leader["voters"] == [1, 2, 3] and set(as_leader["match"]) == {1, 2, 3} - {leader}, as_leader
    assert cluster.dump_stacks() == [1, 2, 3]
    deadline = time.monotonic() + 10
    logs = {n: cluster.run_dir / f"node{n}" / "node.log" for n in cluster.nodes}
    while time.monotonic() < deadline and not all("_autoTickThread" in p.read_text() for p in logs.values()):
        time.sleep(0.1)
    assert all("_autoTickThread" in p.read_text() for p in logs.values())
    assert all(node.alive() for node in cluster.nodes.values())


async def test_a_cut_off_coordinator_stops_answering_before_a_new_one_starts(cluster: ChaosCluster):
    stubs = {n: pb_grpc.GroupCoordinatorStub(grpc.aio.insecure_channel(p.address)) for n, p in cluster.nodes.items()}
    leaders = cluster.leaders(1)
    assert leaders is not None
    [old] = leaders  # one partition: its leader coordinates every group
    network = cluster.network
    assert isinstance(network, Namespaces)
    others = [n for n in cluster.nodes if n != old]
    answers: list[Answer] = []
    acknowledged: list[tuple[float, int]] = []  # (when the ack arrived, offset)
    stop = asyncio.Event()

    async def read(node: int) -> None:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                reply = await stubs[node].OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                continue
            received = time.monotonic()
            if reply.error_code == Errors.NONE:
                parts = [p.committed_offset for t in reply.topics for p in t.partitions]
                answers.append(Answer(node, sent, received, parts[0] if parts else -1))
            await asyncio.sleep(0.002)

    async def write() -> None:
        """Commits at the coordinator, then (once the partition is made) at whichever other node takes over, as
        clients that rediscover the coordinator do; none is pending at the old one when it is cut off."""
        offset = 0
        while not stop.is_set():
            if quiet.is_set():
                await asyncio.sleep(0.01)
                continue
            offset += 1
            for node in others if cut_made.is_set() else [old]:
                try:
                    reply = await stubs[node].OffsetCommit(commit_request(offset), timeout=RPC_TIMEOUT_S)
                except grpc.aio.AioRpcError:
                    continue
                if reply.topics[0].partitions[0].error_code == Errors.NONE:
                    acknowledged.append((time.monotonic(), offset))
                    break
            await asyncio.sleep(0.002)

    quiet, cut_made = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(read(n)) for n in cluster.nodes] + [asyncio.create_task(write())]
    await asyncio.sleep(1.0)
    quiet.set()
    await asyncio.sleep(0.5)
    cut = time.monotonic()
    network.partition(old, others)
    cut_made.set()
    quiet.clear()
    await asyncio.sleep(4.0)
    stop.set()
    await asyncio.gather(*tasks)
    network.heal()

    after = [a for a in answers if a.received > cut]
    from_old = [a for a in after if a.node == old]
    from_new = [a for a in after if a.node != old]
    assert from_new, "no other node answered for the group after the partition"
    last_old = max((a.sent for a in from_old), default=cut)
    first_new = min(a.received for a in from_new)
    print(
        f"old coordinator answered until {last_old - cut:.3f} s after the cut, the new one from "
        f"{first_new - cut:.3f} s; {len(answers)} reads, {len(acknowledged)} commits acknowledged"
    )
    assert last_old < first_new, "two coordinators answered for the group at the same time"
    stale = [
        (a, newest)
        for a in answers
        if (newest := max((o for t, o in acknowledged if t < a.sent), default=-1)) > a.offset
    ]
    assert stale == [], f"{len(stale)} reads older than an acknowledged commit, e.g. {stale[:3]}"
    assert acknowledged[-1][0] > cut + 1.0, "commits did not go on at the new coordinator"
