"""The SDK's GroupMember against a real 3-node cluster: convergence, exclusive ownership, failover."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from groupcoord.client.member import GroupMember
from tests.cluster.test_three_nodes import Cluster, _node_index

TOPICS = {"orders": 12, "payments": 4}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def _member(cluster: Cluster, name: str, static: bool) -> GroupMember:
    return GroupMember(
        [cluster.address(i) for i in range(3)],
        "sdk-group",
        TOPICS,
        client_id=name,
        group_instance_id=name if static else "",
        session_timeout_ms=6_000,
        rebalance_timeout_ms=5_000,
        heartbeat_interval_ms=300,
    )


@pytest.fixture
async def members(cluster: Cluster) -> AsyncIterator[list[GroupMember]]:
    group = [_member(cluster, f"static-{i}", True) for i in range(3)] + [
        _member(cluster, f"dynamic-{i}", False) for i in range(3)
    ]
    yield group
    await asyncio.gather(*(m.close() for m in group), return_exceptions=True)


async def _converged(members: list[GroupMember], timeout_s: float = 30.0) -> int:
    """Waits until every member holds an assignment of one generation; checks exclusive, full coverage."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        generations = {m.generation_id for m in members}
        if all(m._stable.is_set() for m in members) and len(generations) == 1:
            owned = [p for m in members for p in m.assignment.partitions]
            if len(owned) == sum(TOPICS.values()):
                assert len(set(owned)) == len(owned), "a partition is owned twice in one generation"
                assert set(owned) == {(t, p) for t, n in TOPICS.items() for p in range(n)}
                return generations.pop()
        assert asyncio.get_running_loop().time() < deadline, "members did not converge"
        await asyncio.sleep(0.05)


async def test_members_converge_and_survive_the_coordinators_death(cluster: Cluster, members: list[GroupMember]):
    for member in members:
        await member.start()
    generation = await _converged(members)
    assignments = {m.member_id: m.assignment for m in members}
    coordinator = await members[0]._connections.coordinator("sdk-group")
    cluster.kill(_node_index(cluster, coordinator))
    await asyncio.sleep(3)  # several heartbeat intervals at the new coordinator
    assert await _converged(members) == generation, "a failover alone must not rebalance"
    assert {m.member_id: m.assignment for m in members} == assignments
    # A dynamic member leaves: the rest rebalance and still cover every partition exactly once.
    leaving = members.pop()
    await leaving.close()
    assert await _converged(members) > generation


async def test_ten_members_then_pre_registration_costs_one_generation(cluster: Cluster):
    members = [_member(cluster, f"s{i}", True) for i in range(5)] + [_member(cluster, f"d{i}", False) for i in range(5)]
    newcomers = [_member(cluster, name, True) for name in ("x", "y", "z")]
    try:
        for member in members:
            await member.start()
        generation = await _converged(members)
        bootstrap = ",".join(cluster.address(i) for i in range(3))
        cmd = [sys.executable, "-m", "groupcoord", "members", "add", "sdk-group", "x", "y", "z",
               "--bootstrap", bootstrap, "--json"]  # fmt: skip
        done = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert [item["error_code"] for item in json.loads(done.stdout)] == [0, 0, 0]
        for member in newcomers:
            await member.start()
            await asyncio.sleep(0.3)  # staggered arrivals: the coordinator waits for all three
        assert await _converged(members + newcomers) == generation + 1
    finally:
        await asyncio.gather(*(m.close() for m in members + newcomers), return_exceptions=True)


async def test_removing_two_static_instances_rebalances_at_once(cluster: Cluster, members: list[GroupMember]):
    for member in members:
        await member.start()
    generation = await _converged(members)
    gone = members[:2]
    for member in gone:
        await member.close()  # static: no LeaveGroup, the group keeps their place until their sessions expire
    bootstrap = ",".join(cluster.address(i) for i in range(3))
    cmd = [sys.executable, "-m", "groupcoord", "members", "remove", "sdk-group", "static-0", "static-1",
           "--reason", "scale down", "--bootstrap", bootstrap, "--json"]  # fmt: skip
    start = asyncio.get_running_loop().time()
    done = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [item["error_code"] for item in json.loads(done.stdout)] == [0, 0]
    rest = members[2:]
    assert await _converged(rest) > generation
    assert asyncio.get_running_loop().time() - start < 6.0, "the removal waited for the session timeout"
