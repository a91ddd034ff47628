"""raft/patch_fallback.py: a leader whose own tick thread was held up does not step down for the silence it caused.
Its test also runs on pysyncobj without the hunks."""

from __future__ import annotations

import time
import types
from pathlib import Path

import pytest

from tests.raft.test_raft_rules import PATCHED, Cluster, module_without, on_tick_thread

pytestmark = pytest.mark.timing

WITHOUT_OWN_STALL = module_without("fallback_own_stall")
# Followers that do not stand for election within the leader's stall (an election timer in [3 s, 4 s]); a leader
# steps down after 1 s without an answer from a majority.
SETTINGS = dict(raftMinTimeout=3.0, raftMaxTimeout=4.0, leaderFallbackTimeout=1.0)
STALL_S = 1.5


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_OWN_STALL], ids=["patched", "unpatched"])
def test_a_leader_held_up_longer_than_the_fallback_timeout_keeps_leading(module: types.ModuleType, tmp_path: Path):
    """The leader's tick thread sleeps 1.5 s between two ticks (as behind a slow fdatasync or the GIL); its
    followers, which heard from it until then, have not stood for election. Patched, it goes on leading in its term
    and commits; pysyncobj's leader stepped down at its next tick."""
    cluster = Cluster(module, tmp_path, **SETTINGS)
    try:
        leader = cluster.leader()
        leader.put(b"before", sync=True, timeout=10)
        term = leader.raftCurrentTerm
        on_tick_thread(leader, lambda: time.sleep(STALL_S))
        time.sleep(0.3)  # a few ticks after the stall, well before any follower's election timer
        still_leading = leader._isLeader()
        if still_leading:
            leader.put(b"after", sync=True, timeout=10)
        terms = [r.raftCurrentTerm for r in cluster.replicas]
    finally:
        cluster.close()
    if module is PATCHED:
        assert still_leading
        assert terms == [term] * 3
    else:
        assert not still_leading
