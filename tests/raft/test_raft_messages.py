"""raft/patch_messages.py: fewer Raft messages per write. Each test also runs on pysyncobj without the hunk it is
about, to show that the hunk is what makes the difference (and that the test can see it).
"""

from __future__ import annotations

import threading
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.raft.test_raft_rules import PATCHED, Cluster, module_without, on_tick_thread, wait

pytestmark = pytest.mark.timing

WITHOUT_COALESCING = module_without("coalesced_append")
WITHOUT_RIDING_COMMIT = module_without("commit_rides_along")
# Heartbeats every 0.3 s (and a leader takes commands from its queue for up to that long per tick): few enough
# that the messages a write causes stand out.
SLOW_HEARTBEATS = dict(appendEntriesPeriod=0.3, raftMinTimeout=1.0, raftMaxTimeout=2.0, leaderFallbackTimeout=2.0)


def record_append_entries(leader: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every AppendEntries the leader sends from now on, with the follower it went to."""
    sent: list[tuple[str, dict[str, Any]]] = []
    transport = leader._SyncObj__transport
    real = transport.send

    def send(node: Any, message: dict[str, Any]) -> bool:
        if message.get("type") == "append_entries":
            sent.append((node.address, dict(message)))
        return real(node, message)

    transport.send = send
    return sent


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_COALESCING], ids=["patched", "unpatched"])
def test_commands_queued_together_go_to_each_follower_in_one_append_entries(module: types.ModuleType, tmp_path: Path):
    """20 commands waiting in the leader's queue when its tick takes them: pysyncobj sent each follower one
    AppendEntries per command; the leader now takes them all into its log first and sends one."""
    cluster = Cluster(module, tmp_path, **SLOW_HEARTBEATS)
    applied = threading.Semaphore(0)
    try:
        leader = cluster.leader()
        leader.put(b"warm", sync=True, timeout=10)
        sent = record_append_entries(leader)
        on_tick_thread(
            leader,
            lambda: [leader.put(b"%d" % i, callback=lambda result, error: applied.release()) for i in range(20)],
        )
        for _ in range(20):
            assert applied.acquire(timeout=10)
        wait(lambda: all(len(r.applied) == 21 for r in cluster.replicas))
    finally:
        cluster.close()
    carrying = Counter(node for node, message in sent if message.get("entries"))
    assert len(carrying) == 2, carrying
    if module is PATCHED:
        assert set(carrying.values()) == {1}, carrying
    else:
        assert min(carrying.values()) >= 20, carrying


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_RIDING_COMMIT], ids=["patched", "unpatched"])
def test_a_new_commit_index_rides_on_the_next_append_entries(module: types.ModuleType, tmp_path: Path):
    """Ten writes one after another, heartbeats every 0.3 s: pysyncobj sent each follower an AppendEntries with no
    entry after every apply, only to carry the new commit index; now the next write's AppendEntries carries it (or
    the next heartbeat), and the followers still apply every write."""
    cluster = Cluster(module, tmp_path, **SLOW_HEARTBEATS)
    try:
        leader = cluster.leader()
        leader.put(b"warm", sync=True, timeout=10)
        sent = record_append_entries(leader)
        for i in range(10):
            leader.put(b"%d" % i, sync=True, timeout=10)
        writes = list(sent)
        wait(lambda: all(len(r.applied) == 11 for r in cluster.replicas))
    finally:
        cluster.close()
    empty = Counter(node for node, message in writes if not message.get("entries") and "serialized" not in message)
    with_entries = [message for _, message in writes if message.get("entries")]
    assert len(with_entries) == 20
    # Each write's AppendEntries carries the commit of the write before it.
    assert all(m["commit_index"] == m["entries"][0][1] - 1 for m in with_entries), with_entries
    if module is PATCHED:
        assert max(empty.values(), default=0) <= 1, empty  # at most one heartbeat in the window
    else:
        # One per write; the last one may still be on its way when the tenth write's answer came.
        assert min(empty.values(), default=0) >= 9, empty
