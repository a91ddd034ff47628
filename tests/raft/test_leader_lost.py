"""raft/patch_leader_lost.py: a follower whose connection to its leader closes stands for election as soon as a
pre-vote can be granted, not a whole election timeout later. Each hunk's test also runs on pysyncobj without it.
"""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

import pytest

from tests.raft.test_raft_rules import PATCHED, Cluster, conf, free_port, module_without, on_tick_thread, wait

pytestmark = pytest.mark.timing

WITHOUT_LOST_TIMER = module_without("leader_lost_timer")
WITHOUT_TICK_WAIT = module_without("leader_lost_tick_wait")
# A long election timeout, so that "sooner than a timeout" and "not before a pre-vote can be granted" are far
# apart from each other and from this machine's scheduling delays: an election timer in [2 s, 4 s], and a voter
# grants a pre-vote once it has not heard from a leader for 1 s.
SLOW_ELECTIONS = dict(raftMinTimeout=2.0, raftMaxTimeout=4.0, leaderFallbackTimeout=4.0)
HEARTBEAT_S = 0.05  # conf()'s appendEntriesPeriod: a follower last heard from the leader at most this long ago


def new_leader_after_leader_stops(cluster: Cluster) -> tuple[float, Any]:
    """Seconds from the leader's stop (its connections closed, as the kernel closes a killed process's) until one
    of the other two leads, and that one."""
    leader = cluster.leader()
    leader.put(b"before", sync=True, timeout=10)
    cluster.replicas.remove(leader)
    stopped = time.monotonic()
    leader.destroy_synchronous()
    wait(lambda: any(r._isLeader() for r in cluster.replicas), timeout_s=15)
    elapsed = time.monotonic() - stopped
    return elapsed, next(r for r in cluster.replicas if r._isLeader())


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_LOST_TIMER], ids=["patched", "unpatched"])
def test_followers_elect_a_new_leader_as_soon_as_the_old_ones_connections_close(
    module: types.ModuleType, tmp_path: Path
):
    """Patched: a new leader half an election timeout after the last heartbeat (plus up to a quarter for the
    followers' spread), never sooner, which is what leader leases rely on. pysyncobj waited the whole timeout."""
    cluster = Cluster(module, tmp_path, **SLOW_ELECTIONS)
    try:
        elapsed, new_leader = new_leader_after_leader_stops(cluster)
        new_leader.put(b"after", sync=True, timeout=10)
        wait(lambda: all(r.applied == [b"before", b"after"] for r in cluster.replicas))
    finally:
        cluster.close()
    half, timeout = SLOW_ELECTIONS["raftMinTimeout"] / 2, SLOW_ELECTIONS["raftMinTimeout"]
    if module is PATCHED:
        assert half - HEARTBEAT_S <= elapsed < timeout - HEARTBEAT_S, elapsed
    else:
        assert elapsed >= timeout - HEARTBEAT_S, elapsed


def test_a_dropped_connection_to_a_leader_that_lives_changes_nothing(tmp_path: Path):
    """The leader closes its connection to one follower and goes on: that follower asks for pre-votes, the other
    refuses (it hears the leader), the connection comes back, and the leader keeps its term and its writes."""
    cluster = Cluster(PATCHED, tmp_path)
    try:
        leader = cluster.leader()
        leader.put(b"before", sync=True, timeout=10)
        term = leader.raftCurrentTerm
        follower = next(r for r in cluster.replicas if r is not leader)
        transport = leader._SyncObj__transport
        node = next(n for n in leader.otherNodes if n.address == follower.selfNode.address)
        on_tick_thread(leader, lambda: transport._connections[node].disconnect())
        time.sleep(2.0)  # past the follower's early timer, the pre-vote and the reconnection (every 0.2 s)
        leader.put(b"after", sync=True, timeout=10)
        wait(lambda: follower.applied == [b"before", b"after"])
        assert leader._isLeader() and leader.raftCurrentTerm == term
        assert all(r.raftCurrentTerm == term for r in cluster.replicas)
    finally:
        cluster.close()


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_TICK_WAIT], ids=["patched", "unpatched"])
def test_a_followers_tick_waits_no_longer_than_its_election_timer(module: types.ModuleType, tmp_path: Path):
    """pysyncobj looked at the timer once per tick period, so an election started up to a period late."""
    me, leader, other = (f"127.0.0.1:{free_port()}" for _ in range(3))
    sync = module.SyncObj(me, [leader, other], conf(tmp_path, "follower", autoTick=False, autoTickPeriod=0.5))
    try:
        sync._SyncObj__raftElectionDeadline = module.monotonicTime() + 0.1  # pysyncobj's clock, not time's
        waited = sync._SyncObj__tickWait()
    finally:
        sync._doDestroy()
    if module is PATCHED:
        assert 0 < waited <= 0.1
    else:
        assert waited == 0.5
