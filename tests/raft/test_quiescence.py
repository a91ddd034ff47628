"""Quiescence (raft/quiescence.py): an idle partition stops its Raft heartbeats while the node-level heartbeat shows
its leader alive, and everything Raft promises still holds: no election while the leader lives, a new leader in
election time when it dies, writes and lease checks answered, leadership transfers done."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pysyncobj.monotonic import monotonic as raft_clock

from groupcoord.node.launcher import free_base
from groupcoord.protocol import records as r
from groupcoord.raft.driver import RaftDriver
from groupcoord.raft.entries import RECORDS, encode_entry
from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.quiescence import DATAGRAM_VERSION, TAG_BYTES, NodeLiveness, liveness_key
from groupcoord.raft.settings import RaftSettings
from tests.raft.test_partition import _wait

SECRET = "test-cluster-secret"
QUIET_AFTER_S = 0.3
_TAKEN: set[int] = set()


class QuietCluster:
    """Three replicas of partition 0, each with the node-level heartbeat of its own node (127.0.0.1-3)."""

    def __init__(
        self,
        tmp: Path,
        quiesce_after_s: float = QUIET_AFTER_S,
        silent_after_s: float | None = None,
        settings: RaftSettings | None = None,
    ) -> None:
        self.tmp = tmp
        self.settings = settings or RaftSettings(quiesce_after_s=quiesce_after_s, durability="memory")
        self.silent_after_s = self.settings.election_min_s if silent_after_s is None else silent_after_s
        self.hosts = [f"127.0.0.{i}" for i in (1, 2, 3)]
        self.raft = [f"{h}:{free_base(h, 1, _TAKEN)}" for h in self.hosts]
        self.udp = [(h, free_base(h, 1, _TAKEN)) for h in self.hosts]
        self.node_of = {a: i + 1 for i, a in enumerate(self.raft)}
        self.replicas: list[PartitionReplica | None] = [None] * 3
        self.livenesses: list[NodeLiveness | None] = [None] * 3
        self.sent: list[list[tuple[float, str]]] = [[], [], []]
        # With `threads = node`, each node's replica is ticked by that node's driver (raft/driver.py).
        node_threads = self.settings.threads == "node"
        self.drivers = [RaftDriver(name=f"raft-driver-{i}") for i in range(3)] if node_threads else []
        for i in range(3):
            self.start(i)

    def start(self, i: int) -> None:
        def claims() -> dict[int, int]:
            replica = self.replicas[i]
            return {0: replica.term()} if replica is not None and replica.is_leader() else {}

        def wake() -> None:
            replica = self.replicas[i]
            if replica is not None and replica.quiescence is not None:
                replica.quiescence.stir(replica._wake)

        liveness = NodeLiveness(
            i + 1,
            self.udp[i],
            SECRET,
            peers=lambda: {j + 1: a for j, a in enumerate(self.udp)},
            claims=claims,
            on_change=wake,
            interval_s=self.settings.append_entries_period_s,
            silent_after_s=self.silent_after_s,
        )
        replica = PartitionReplica(
            0,
            i + 1,
            self.raft[i],
            [a for a in self.raft if a != self.raft[i]],
            SECRET,
            str(self.tmp / f"n{i}-p0"),
            self.settings,
            liveness=liveness,
            node_of=lambda address: self.node_of.get(address or ""),
            driver=self.drivers[i] if self.drivers else None,
        )
        transport = replica._transport
        original = transport.send
        log = self.sent[i]

        def counting_send(node: Any, message: Any) -> bool:
            if isinstance(message, dict):
                log.append((time.monotonic(), str(message.get("type"))))
            return bool(original(node, message))

        transport.send = counting_send
        self.replicas[i], self.livenesses[i] = replica, liveness
        liveness.start()

    def kill(self, i: int) -> None:
        """As kill -9 does: the node's heartbeat and its replica stop at once."""
        liveness, replica = self.livenesses[i], self.replicas[i]
        assert liveness is not None and replica is not None
        liveness.stop()
        replica.destroy_synchronous()
        self.replicas[i] = self.livenesses[i] = None

    def live(self) -> list[PartitionReplica]:
        return [x for x in self.replicas if x is not None]

    def leader(self) -> PartitionReplica:
        _wait(lambda: any(x.is_leader() for x in self.live()))
        return next(x for x in self.live() if x.is_leader())

    def index(self, replica: PartitionReplica) -> int:
        return self.replicas.index(replica)

    def sent_since(self, i: int, since: float, kind: str = "append_entries") -> int:
        return sum(1 for at, k in self.sent[i] if at >= since and k == kind)

    def close(self) -> None:
        for i in range(3):
            if self.replicas[i] is not None:
                self.kill(i)
        for driver in self.drivers:
            driver.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[QuietCluster]:
    c = QuietCluster(tmp_path)
    yield c
    c.close()


def _commit(leader: PartitionReplica, offset: int) -> bool:
    record = r.OffsetsCommitted("g", "", -1, (("topic", 0, offset, -1, ""),), 1_700_000_000_000)
    entry = encode_entry(RECORDS, leader.term(), leader.node_id, r.encode_batch([record]))
    return bool(leader.apply_entry(entry, sync=True, timeout=5))


def _quiet(cluster: QuietCluster, leader: PartitionReplica) -> bool:
    i = cluster.index(leader)
    return cluster.sent_since(i, time.monotonic() - 0.3) == 0


def kill_quiet_leader(cluster: QuietCluster) -> tuple[float, PartitionReplica]:
    """Seconds from the kill of a quiet leader until another leads in a later term, and that one."""
    leader = cluster.leader()
    term = leader.term()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    killed = time.monotonic()
    cluster.kill(cluster.index(leader))
    new = cluster.leader()
    took = time.monotonic() - killed
    assert new.term() > term
    return took, new


# The clusters' tests are `timing` (pyproject.toml): real time decides whether an election happens, so `make check`
# leaves them out; the node heartbeat's own tests below are not.
@pytest.mark.timing
def test_an_idle_partition_stops_its_heartbeats_and_keeps_its_leader(cluster: QuietCluster):
    leader = cluster.leader()
    term = leader.term()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    start = time.monotonic()
    time.sleep(2.0)  # ten minimum election timeouts without a single AppendEntries
    assert cluster.sent_since(cluster.index(leader), start) == 0
    # its followers neither: their election timers run from the leader node's heartbeat
    assert all(cluster.sent_since(j, start, "pre_vote") == 0 for j in range(3))
    assert leader.is_leader() and all(x.term() == term for x in cluster.live())
    address = cluster.raft[cluster.index(leader)]
    assert all(x.leader_address() == address for x in cluster.live() if x is not leader)


@pytest.mark.timing
def test_without_quiescence_the_leader_heartbeats_all_the_time(tmp_path: Path):
    c = QuietCluster(tmp_path, quiesce_after_s=0)
    try:
        leader = c.leader()
        time.sleep(1.0)
        start = time.monotonic()
        time.sleep(1.0)
        # every 50 ms to each of two followers
        assert c.sent_since(c.index(leader), start) >= 20
    finally:
        c.close()


@pytest.mark.timing
def test_a_write_ends_the_quiet_and_commits(cluster: QuietCluster):
    leader = cluster.leader()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    assert _commit(leader, 3)
    _wait(lambda: all(x.raftLastApplied == leader.raftLastApplied for x in cluster.live()))
    # it goes quiet again once nothing needs it
    _wait(lambda: _quiet(cluster, leader), timeout=5)


@pytest.mark.timing
def test_a_lease_check_on_a_quiet_leader_wakes_it_and_the_lease_comes_back(cluster: QuietCluster):
    leader = cluster.leader()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    assert not leader.has_lease()  # no acknowledgement for longer than the lease
    _wait(leader.has_lease, timeout=1)


@pytest.mark.timing
def test_a_dead_quiet_leader_is_replaced_in_election_time(cluster: QuietCluster):
    took, new = kill_quiet_leader(cluster)
    # the node heartbeat's silence (0.2 s) and a random election timeout (0.2-0.6 s) after its last datagram:
    # the same bound as without quiescence (a liveness bound, not a speed figure; bench/ measures failover)
    assert took < 3.0, took
    assert _commit(new, 1)


@pytest.mark.timing
def test_a_follower_restarted_while_the_partition_is_quiet_learns_its_leader(tmp_path: Path):
    """It knows no leader after a restart, and only AppendEntries tell it: its node heartbeat's new boot id has the
    quiet leader speak again (even when the restart was too quick for its node to be found silent)."""
    cluster = QuietCluster(tmp_path, silent_after_s=30)
    try:
        _restart_a_follower(cluster)
    finally:
        cluster.close()


def _restart_a_follower(cluster: QuietCluster) -> None:
    leader = cluster.leader()
    term = leader.term()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    i = next(j for j, x in enumerate(cluster.replicas) if x is not leader)
    cluster.kill(i)
    cluster.start(i)
    restarted = cluster.replicas[i]
    assert restarted is not None
    _wait(lambda: restarted.leader_address() == cluster.raft[cluster.index(leader)], timeout=5)
    assert leader.is_leader() and leader.term() == term


@pytest.mark.timing
def test_a_leadership_transfer_works_on_a_quiet_partition(cluster: QuietCluster):
    """pysyncobj refuses a transfer, silently, while the target's match index is behind the leader's log (the
    balancer tries again each round): up to three tries, 1.5 s apart, as a slow CI machine once needed more than one.
    A transfer that cannot work on a quiet partition (its TimeoutNow lost) fails all three."""
    leader = cluster.leader()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    target = next(x for x in cluster.live() if x is not leader)
    for _ in range(3):
        leader.transferLeadership(node=cluster.raft[cluster.index(target)])
        deadline = time.monotonic() + 1.5
        while not target.is_leader() and time.monotonic() < deadline:
            time.sleep(0.01)
        if target.is_leader():
            return
    raise AssertionError("three transfers to a follower of a quiet partition: it never became leader")


@pytest.mark.timing
def test_a_follower_that_stops_hearing_the_leader_node_does_not_depose_it(cluster: QuietCluster):
    """Its node heartbeat stops (it hears no one's datagrams): its election timer runs out and it asks for
    pre-votes, which the other follower, still hearing the leader's node, refuses."""
    leader = cluster.leader()
    term = leader.term()
    _wait(lambda: _quiet(cluster, leader), timeout=5)
    lonely = next(x for x in cluster.live() if x is not leader)
    i = cluster.index(lonely)
    cluster.livenesses[i].stop()  # type: ignore[union-attr]
    lonely._wake()
    _wait(lambda: cluster.sent_since(i, 0, "pre_vote") > 0, timeout=cluster.settings.election_max_s + 2)
    time.sleep(1.0)
    assert leader.is_leader() and leader.term() == term


# -- the node heartbeat itself --------------------------------------------------------------------------------


def _datagram(key: bytes, node_id: int, boot: int, seq: int, claims: dict[int, int]) -> bytes:
    body = msgpack.packb([DATAGRAM_VERSION, "", node_id, boot, seq, claims])
    return hmac.new(key, body, hashlib.sha256).digest()[:TAG_BYTES] + body


@pytest.fixture
def liveness() -> Iterator[NodeLiveness]:
    changes: list[float] = []
    address = ("127.0.0.1", free_base("127.0.0.1", 1, _TAKEN))
    lv = NodeLiveness(1, address, SECRET, dict, dict, lambda: changes.append(1), interval_s=0.05, silent_after_s=0.2)
    yield lv
    lv.stop()


def test_a_signed_datagram_counts_and_its_claims_are_read(liveness: NodeLiveness):
    assert liveness._receive(_datagram(liveness_key(SECRET), 2, 7, 1, {3: 5})) is True
    assert liveness.leads(2, 3, 5) and not liveness.leads(2, 3, 6) and not liveness.leads(2, 4, 5)
    assert liveness.heard_at(2) > raft_clock() - 1


@pytest.mark.parametrize(
    "why",
    ["another key", "tampered", "replayed", "replayed from an older boot", "garbage", "from itself"],
)
def test_a_forged_or_replayed_datagram_is_dropped(liveness: NodeLiveness, why: str):
    key = liveness_key(SECRET)
    liveness._receive(_datagram(key, 2, 6, 9, {0: 1}))  # an older boot of node 2
    liveness._receive(_datagram(key, 2, 7, 5, {0: 1}))
    assert liveness.dropped == 0
    heard = liveness.heard_at(2)
    bad = {
        "another key": _datagram(liveness_key("another secret"), 2, 7, 6, {0: 2}),
        "tampered": _datagram(key, 2, 7, 6, {0: 2})[:-1] + b"\x03",
        "replayed": _datagram(key, 2, 7, 5, {0: 2}),
        "replayed from an older boot": _datagram(key, 2, 6, 9, {0: 2}),
        "garbage": b"\x00" * 40,
        "from itself": _datagram(key, 1, 7, 9, {0: 2}),
    }[why]
    assert liveness._receive(bad) is False
    assert liveness.dropped == 1
    assert liveness.heard_at(2) == heard and liveness.leads(2, 0, 1)


def test_a_node_that_falls_silent_is_reported_once(liveness: NodeLiveness):
    calls: list[int] = []
    liveness._on_change = lambda: calls.append(1)
    liveness._receive(_datagram(liveness_key(SECRET), 2, 7, 1, {}))
    liveness._check_silence(raft_clock())
    assert calls == []
    liveness._check_silence(raft_clock() + 0.5)
    liveness._check_silence(raft_clock() + 0.6)
    assert calls == [1]
    # back again: a change too
    assert liveness._receive(_datagram(liveness_key(SECRET), 2, 7, 2, {})) is True
