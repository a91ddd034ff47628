"""The node's role poll runs when a replica's Raft state changes, not only on its fallback period."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from groupcoord.coordinator import GroupConfig
from groupcoord.node import cluster
from groupcoord.node.partitions import Role


async def test_a_replica_that_wins_its_election_starts_serving_without_waiting_for_the_poll_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Longer than the test: the poll's first run finds every replica a follower (single-node elections take
    # 0.2-0.6 s), so only the state-change wake-up can make them propose their barriers.
    monkeypatch.setattr(cluster, "POLL_INTERVAL_S", 3600.0)
    node = cluster.NodeCluster(
        1, "127.0.0.1", 0, "127.0.0.1", "", 0, 2, str(tmp_path), "", GroupConfig(), asyncio.get_running_loop()
    )
    try:
        await asyncio.sleep(0)
        assert all(host.role is Role.FOLLOWER for host in node.hosts)
        async with asyncio.timeout(10):
            while not all(host.role is Role.LEADER for host in node.hosts):
                await asyncio.sleep(0.01)
    finally:
        node.close()
