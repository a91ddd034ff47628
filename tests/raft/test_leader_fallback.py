"""raft/patch_fallback.py: a leader whose own tick thread was held up does not step down for the silence it caused.
Its test also runs on pysyncobj without the hunks."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.raft.test_raft_rules import PATCHED, Cluster, module_without, on_tick_thread

pytestmark = pytest.mark.timing

WITHOUT_OWN_STALL = module_without("fallback_own_stall")
# Followers that do not stand for election within the leader's stall (an election timer in [3 s, 4 s]); a leader
# steps down after 1 s without an answer from a majority.
SETTINGS = dict(raftMinTimeout=3.0, raftMaxTimeout=4.0, leaderFallbackTimeout=1.0)
STALL_S = 1.5


def stall_between_ticks(leader: Any) -> None:
    """The tick thread sleeps before a tick (as behind a slow fdatasync or the GIL): the tick comes late."""
    on_tick_thread(leader, lambda: time.sleep(STALL_S))


def stall_inside_a_tick(leader: Any) -> None:
    """The tick thread sleeps inside one tick, after its quorum check (where a large batch is applied, a snapshot
    taken, the tick callbacks run): its poll afterwards starts on time, but no answer was read meanwhile. The first
    version of the hunks counted only a poll that returned late, and this leader stepped down."""
    stalled = threading.Event()

    def stall_once() -> None:
        if not stalled.is_set():
            time.sleep(STALL_S)
            stalled.set()

    leader.addOnTickCallback(stall_once)
    assert stalled.wait(10), "the tick thread never ran the stall"


@pytest.mark.parametrize("stall", [stall_between_ticks, stall_inside_a_tick], ids=["between", "inside"])
@pytest.mark.parametrize("module", [PATCHED, WITHOUT_OWN_STALL], ids=["patched", "unpatched"])
def test_a_leader_held_up_longer_than_the_fallback_timeout_keeps_leading(
    module: types.ModuleType, stall: Callable[[Any], None], tmp_path: Path
):
    """The leader's tick thread is held up for 1.5 s; its followers, which heard from it until then, have not stood
    for election. Patched, it goes on leading in its term and commits; pysyncobj's leader stepped down at its next
    tick."""
    cluster = Cluster(module, tmp_path, **SETTINGS)
    try:
        leader = cluster.leader()
        leader.put(b"before", sync=True, timeout=10)
        term = leader.raftCurrentTerm
        stall(leader)
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


def test_a_leader_whose_followers_are_gone_steps_down_and_says_they_were_silent(tmp_path: Path):
    """What the stall is not credited against: followers that stopped answering. The leader steps down about
    `leaderFallbackTimeout` after their last answer and reports each one's silence and its own deaf time, which
    tells a lost quorum from a stall in the node's log (raft/partition.py logs it as `raft.leader_fallback`)."""
    cluster = Cluster(PATCHED, tmp_path, **SETTINGS)
    reports: list[tuple[dict[Any, float], float]] = []
    leader = cluster.leader()
    try:
        leader.put(b"before", sync=True, timeout=10)
        leader._onLeaderFallback = lambda silent_for, deaf_for: reports.append((silent_for, deaf_for))
        followers = [r for r in cluster.replicas if r is not leader]
        for follower in followers:
            follower.destroy_synchronous()
        gone = time.monotonic()
        while leader._isLeader() and time.monotonic() - gone < 10:
            time.sleep(0.02)
        stepped_down_after = time.monotonic() - gone
    finally:
        leader.destroy_synchronous()
    assert stepped_down_after < 2.5
    assert len(reports) == 1
    silent_for, deaf_for = reports[0]
    assert sorted(node.address for node in silent_for) == sorted(f.selfNode.address for f in followers)
    assert all(1.0 <= seconds < 2.5 for seconds in silent_for.values())
    assert deaf_for < 0.5
