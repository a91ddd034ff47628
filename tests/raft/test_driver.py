"""raft/driver.py and raft/patch_driver.py: one thread per node polls and ticks all its replicas.

Each test is one of the things a replica's own thread did for free and the driver has to do on purpose: honour each
replica's next tick time (a quiet one rests) and wake it at once when asked; count as deaf only the time the driver
was not listening, so that a leader cut off from its followers still steps down; destroy a replica on the driver's
thread. Some also run on pysyncobj without the hunk, or with a driver without the part, and show the failure."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.raft.driver import RaftDriver, ReplicaPoller
from groupcoord.raft.settings import RaftSettings
from tests.raft.test_partition import _wait
from tests.raft.test_quiescence import QuietCluster, _commit, _quiet
from tests.raft.test_raft_rules import PATCHED, conf, free_port, module_without, replica_class

pytestmark = pytest.mark.timing

WITHOUT_DRIVER_DESTROY = module_without("driver_destroy")


class DrivenCluster:
    """Three replicas of each of `partitions` partitions, one driver per "node" (as a node with
    `raft_threads = node` runs them), on the test module's SyncObj."""

    def __init__(self, module: types.ModuleType, tmp: Path, partitions: int = 2, **overrides: Any) -> None:
        self.drivers = [RaftDriver(name=f"raft-driver-{i}") for i in range(3)]
        replica = replica_class(module)
        self.replicas: list[list[Any]] = []
        for p in range(partitions):
            addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
            row = []
            for i, address in enumerate(addresses):
                config = conf(tmp, f"p{p}-n{i}", autoTick=False, **overrides)
                config.poller = self.drivers[i].poller()
                config.driver = self.drivers[i]
                row.append(replica(address, [a for a in addresses if a != address], config))
            self.replicas.append(row)

    def leader(self, p: int) -> Any:
        _wait(lambda: any(r._isLeader() for r in self.replicas[p]))
        return next(r for r in self.replicas[p] if r._isLeader())

    def close(self) -> None:
        for driver in self.drivers:
            driver.stop()


def test_replicas_of_three_nodes_on_three_drivers_elect_commit_and_stop(tmp_path: Path):
    """Two partitions, three nodes, three threads in all: both partitions elect and commit, and the drivers' stop
    destroys every replica (its port can be bound again)."""
    before = threading.active_count()
    cluster = DrivenCluster(PATCHED, tmp_path)
    try:
        assert threading.active_count() == before + 3
        for p in range(2):
            leader = cluster.leader(p)
            assert [leader.put(b"x%d" % k, sync=True, timeout=10) for k in range(20)] == list(range(1, 21))
        _wait(lambda: all(len(r.applied) == 20 for row in cluster.replicas for r in row))
    finally:
        cluster.close()
    assert threading.active_count() == before
    assert not any(driver.alive for driver in cluster.drivers)
    import socket

    for row in cluster.replicas:
        for replica in row:
            host, port = replica.selfNode.address.rsplit(":", 1)
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((host, int(port)))


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_DRIVER_DESTROY], ids=["patched", "unpatched"])
def test_destroy_runs_on_the_driver_thread(module: types.ModuleType, tmp_path: Path):
    """`destroy()` from another thread while the driver ticks the replica: pysyncobj (without `driver_destroy`)
    closes its sockets and journal on the caller's thread, in the middle of whatever the driver is doing with them."""
    cluster = DrivenCluster(module, tmp_path, partitions=1)
    try:
        leader = cluster.leader(0)
        follower = next(r for r in cluster.replicas[0] if r is not leader)
        ran_on: list[str] = []
        real = follower._doDestroy

        def recording() -> None:
            ran_on.append(threading.current_thread().name)
            real()

        follower._doDestroy = recording
        follower.destroy()
        _wait(lambda: bool(ran_on))
        assert leader.put(b"after", sync=True, timeout=10) == 1  # the other two still make a majority
    finally:
        cluster.close()
    driver = cluster.drivers[cluster.replicas[0].index(follower)]
    if module is PATCHED:
        assert ran_on == [driver._thread.name]
    else:  # on this thread, and the driver, which still held the replica, destroyed it again at its stop
        assert ran_on[0] == threading.current_thread().name and len(ran_on) == 2


@pytest.mark.parametrize("deaf_clock", [True, False], ids=["driver_clock", "own_thread_clock"])
def test_a_driven_leader_whose_followers_are_gone_steps_down(
    deaf_clock: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Its followers' drivers stop; the leader's driver listens all the time and hears nothing, so after
    `leaderFallbackTimeout` it steps down, saying it was not deaf. Without the driver's deaf clock, the time between
    two ticks of the replica counted as deaf (its poll returns at once: the driver listens for it), every silence
    was excused, and the cut-off leader led on for ever."""
    if not deaf_clock:
        monkeypatch.delattr(ReplicaPoller, "deafClock")
    cluster = DrivenCluster(PATCHED, tmp_path, partitions=1, raftMinTimeout=3.0, raftMaxTimeout=4.0)
    reports: list[float] = []
    try:
        leader = cluster.leader(0)
        leader.put(b"before", sync=True, timeout=10)
        leader._onLeaderFallback = lambda silent_for, deaf_for: reports.append(deaf_for)
        for driver in cluster.drivers:
            if driver is not leader._poller._driver:
                driver.stop()
        gone = time.monotonic()
        while leader._isLeader() and time.monotonic() - gone < 6:
            time.sleep(0.02)
        stepped_down = not leader._isLeader()
    finally:
        cluster.close()
    if deaf_clock:
        assert stepped_down and len(reports) == 1 and reports[0] < 0.5
    else:
        assert not stepped_down


def test_a_stalled_driver_does_not_depose_its_leaders(tmp_path: Path):
    """A tick that holds the driver for 1.5 s (a snapshot, a slow fdatasync) holds up every replica of the node;
    that time is deaf for all of them, so none of its leaders steps down for the silence it caused."""
    cluster = DrivenCluster(PATCHED, tmp_path, raftMinTimeout=3.0, raftMaxTimeout=4.0)
    try:
        leaders = [cluster.leader(p) for p in range(2)]
        stalled = threading.Event()

        def stall_once() -> None:
            if not stalled.is_set():
                stalled.set()
                time.sleep(1.5)

        # Both partitions led by one node make the point for each; otherwise stall the first one's node.
        leaders[0].addOnTickCallback(stall_once)
        assert stalled.wait(10)
        time.sleep(1.8)
        assert leaders[0]._isLeader()
        assert leaders[0].put(b"after", sync=True, timeout=10) == 1
        terms = {r.raftCurrentTerm for r in cluster.replicas[0]}
        assert terms == {leaders[0].raftCurrentTerm}
    finally:
        cluster.close()


# -- quiescence on drivers: the replica's own next tick time, and `_wake` ---------------------------------------


@pytest.fixture
def quiet_driven(tmp_path: Path) -> Iterator[QuietCluster]:
    c = QuietCluster(tmp_path, settings=RaftSettings(quiesce_after_s=0.3, durability="memory", threads="node"))
    yield c
    c.close()


def test_a_quiet_partition_on_a_driver_rests(quiet_driven: QuietCluster):
    """Quiet, a replica asks for a tick every `rest_tick_s` (1 s) instead of every 50 ms, and the driver keeps to
    it: over two seconds, a few ticks per replica instead of forty."""
    leader = quiet_driven.leader()
    _wait(lambda: _quiet(quiet_driven, leader), timeout=5)
    time.sleep(0.5)
    drivers = quiet_driven.drivers
    before = [d.ticks for d in drivers]
    time.sleep(2.0)
    ticks = [d.ticks - b for d, b in zip(drivers, before, strict=True)]
    assert all(t <= 8 for t in ticks), ticks
    assert leader.is_leader()


def test_a_lease_check_wakes_a_resting_driven_leader_at_once(quiet_driven: QuietCluster):
    """`has_lease()` on a quiet leader finds the lease run out and calls `_wake()`, which must reach the driver
    (pysyncobj's pipe notifier, in the driver's epoll): the lease is back within a round trip, not after the
    replica's 1 s rest (which a single try could hit by chance: three in a row)."""
    leader = quiet_driven.leader()
    for offset in range(3):
        _wait(lambda: _quiet(quiet_driven, leader), timeout=5)
        time.sleep(0.2)
        assert not leader.has_lease()
        asked = time.monotonic()
        while not leader.has_lease():
            assert time.monotonic() - asked < 0.15, "the lease came back only after the rest"
            time.sleep(0.005)
        assert _commit(leader, offset)


def test_a_follower_answers_before_the_work_of_its_next_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """On its own thread a replica flushes right after its poll (one fdatasync, then the answers that waited for
    it: the durability barrier, raft/transport.py) and only then ticks; the driver does the same for each replica
    whose descriptors fired (`_afterDriverPoll`). Without it, a follower's answer waited for its whole next tick
    (here 0.3 s of tick callbacks, as a large apply would take), and so did every commit."""
    settings = RaftSettings(quiesce_after_s=0, durability="fsync", threads="node")
    cluster = QuietCluster(tmp_path, settings=settings)
    slow = threading.Event()
    took = []
    try:
        leader = cluster.leader()
        assert _commit(leader, 1)
        for follower in (r for r in cluster.live() if r is not leader):
            follower.addOnTickCallback(lambda: time.sleep(0.3) if slow.is_set() else None)
        for flush in (True, False):
            if not flush:
                monkeypatch.setattr(RaftDriver, "_flush", lambda self, slot: None)
            slow.set()
            time.sleep(0.4)  # the followers' drivers are in slow ticks now, one after another
            start = time.monotonic()
            assert _commit(leader, 2)
            took.append(time.monotonic() - start)
            slow.clear()
            time.sleep(0.4)
    finally:
        slow.clear()
        cluster.close()
    with_flush, without = took
    assert with_flush < 0.3 <= without, took
