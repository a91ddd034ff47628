"""The pre-vote window (`raft_pre_vote_window_ms`) apart from the election timeout: a new cluster elects its first
leader, a leader whose connections close is replaced, and a leader's lease lapses, after the window, however long
the election timeout is. The tests run with a 2 s election timeout (4 s for the staggered start), where tying the
window to half of it (as before the setting) takes 1 s or more.
"""

from __future__ import annotations

import dataclasses
import time
import types
from pathlib import Path

import pytest

from groupcoord.raft.settings import RaftSettings
from tests.raft.test_leader_lost import HEARTBEAT_S, SLOW_ELECTIONS, new_leader_after_leader_stops
from tests.raft.test_partition import Cluster as PartitionCluster
from tests.raft.test_quiescence import QUIET_AFTER_S, QuietCluster, _wait, kill_quiet_leader
from tests.raft.test_raft_rules import PATCHED, Cluster, conf, free_port, module_without, replica_class, wait

pytestmark = pytest.mark.timing

WINDOW_S = 0.3
# An election timer in [2 s, 4 s]: if it decided, nothing below would happen within 1 s.
SLOW = RaftSettings(election_min_s=2.0, election_max_s=4.0, leader_fallback_timeout_s=4.0, pre_vote_window_s=WINDOW_S)
# Scheduling on a loaded 2-core machine, on top of the window's random half.
SLACK_S = 0.35


WITHOUT_FIRST_ELECTION = module_without("pre_vote_first_election")


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_FIRST_ELECTION], ids=["patched", "unpatched"])
def test_a_new_cluster_elects_its_first_leader_after_the_window_not_the_election_timeout(
    module: types.ModuleType, tmp_path: Path
):
    started = time.monotonic()
    cluster = Cluster(module, tmp_path, **SLOW_ELECTIONS, preVoteWindow=WINDOW_S)
    try:
        leader = cluster.leader()
        elapsed = time.monotonic() - started
        leader.put(b"first", sync=True, timeout=10)
    finally:
        cluster.close()
    if module is PATCHED:
        assert WINDOW_S <= elapsed < 2 * WINDOW_S + SLACK_S, elapsed
    else:
        assert elapsed >= SLOW_ELECTIONS["raftMinTimeout"], elapsed


def test_a_new_cluster_whose_replicas_start_apart_elects_a_window_after_they_find_it_is_new(tmp_path: Path):
    """Replicas with our journal first find out that every one of them holds nothing (`fresh` messages, which a
    replica not started yet misses): two start, announce to each other and wait; the third starts 0.8 s later. The
    `pre_vote_first_election_*` hunks have them announce again, and stand, within windows of that; without them,
    both waits are whole election timeouts (4-8 s here)."""
    settings = dataclasses.replace(SLOW, election_min_s=4.0, election_max_s=8.0, connection_retry_s=0.2)
    cluster = PartitionCluster(tmp_path, settings=settings, started=2)
    try:
        time.sleep(0.8)  # past the first two's first timers (0.3-0.6 s): they have announced, to each other only
        third_started = time.monotonic()
        cluster.replicas[2] = cluster.start(2)
        cluster.leader()
        elapsed = time.monotonic() - third_started
    finally:
        cluster.close()
    assert elapsed < 2.0, elapsed


@pytest.mark.parametrize("preferred", [0, 1, 2])
def test_a_restarted_cluster_elects_the_preferred_replica_first(preferred: int, tmp_path: Path):
    """Each replica's first timer waits its rank's windows more (node/balance.py's rotation, rank 0 the preferred
    leader), so the preferred one stands first and wins, whichever it is; without the rank every replica's timer
    runs the same one to two windows and any may win (checked: the leader was another replica in most runs)."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    replica = replica_class(PATCHED)
    replicas = [
        replica(a, [b for b in addresses if b != a], conf(tmp_path, f"n{i}", **SLOW_ELECTIONS, preVoteWindow=WINDOW_S,
                                                          firstElectionRank=(i - preferred) % 3))
        for i, a in enumerate(addresses)
    ]  # fmt: skip
    try:
        wait(lambda: any(r._isLeader() for r in replicas))
        leaders = [i for i, r in enumerate(replicas) if r._isLeader()]
    finally:
        for r in replicas:
            r.destroy_synchronous()
    assert leaders == [preferred], leaders


def test_a_new_cluster_of_partition_replicas_elects_the_preferred_one_after_finding_it_is_new(tmp_path: Path):
    """The same through `PartitionReplica(first_election_rank=...)` and our journal: the replicas first find out that
    every one holds nothing, then the rank-0 one stands a window before the others."""
    cluster = PartitionCluster(tmp_path, settings=SLOW, started=0)
    ranks = {0: 2, 1: 0, 2: 1}
    try:
        for i, rank in ranks.items():
            cluster.replicas[i] = cluster.start(i, first_election_rank=rank)
        leader = cluster.leader()
    finally:
        cluster.close()
    assert leader.node_id == 2, leader.node_id


def test_a_leader_whose_connections_close_is_replaced_after_the_window_not_the_election_timeout(tmp_path: Path):
    cluster = Cluster(PATCHED, tmp_path, **SLOW_ELECTIONS, preVoteWindow=WINDOW_S)
    try:
        elapsed, new_leader = new_leader_after_leader_stops(cluster)
        new_leader.put(b"after", sync=True, timeout=10)
    finally:
        cluster.close()
    # Never before a voter may grant the pre-vote (what leases rest on), and within one and a half windows.
    assert WINDOW_S - HEARTBEAT_S <= elapsed < 1.5 * WINDOW_S + SLACK_S, elapsed


def test_a_leaders_lease_lapses_after_nine_tenths_of_the_window(tmp_path: Path):
    cluster = PartitionCluster(tmp_path, settings=SLOW)
    try:
        leader = cluster.leader()
        _wait(leader.has_lease, timeout=5)
        others = [i for i, x in enumerate(cluster.replicas) if x is not None and x is not leader]
        stopped = time.monotonic()
        for i in others:
            cluster.stop(i)
        _wait(lambda: not leader.has_lease(), timeout=5)
        lapsed = time.monotonic() - stopped
        assert leader.is_leader()  # it still leads (the fallback timeout is 4 s); only its lease ran out
    finally:
        cluster.close()
    assert lapsed < 0.9 * WINDOW_S + SLACK_S, lapsed


def test_a_dead_quiet_leader_is_replaced_after_the_window_not_the_election_timeout(tmp_path: Path):
    """A quiet follower's timer runs from the leader node's heartbeat; once the connection to the leader closes, it
    runs out when a pre-vote can first be granted (one and a half windows after that heartbeat)."""
    settings = dataclasses.replace(SLOW, quiesce_after_s=QUIET_AFTER_S, durability="memory")
    cluster = QuietCluster(tmp_path, silent_after_s=settings.election_min_s, settings=settings)
    try:
        took, _ = kill_quiet_leader(cluster)
    finally:
        cluster.close()
    assert took < 2 * WINDOW_S + SLACK_S, took
