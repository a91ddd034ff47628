"""One coordinator partition replicated by pysyncobj across three in-process replicas on loopback."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.state import GroupStore
from groupcoord.node.launcher import free_base
from groupcoord.protocol import records as r
from groupcoord.raft.entries import BARRIER, RECORDS, encode_entry
from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.settings import RaftSettings
from groupcoord.raft.transport import HAND_OVER

SECRET = "test-cluster-secret"
_TAKEN: set[int] = set()


def _free_port() -> int:
    """Below the ephemeral range: a peer's outgoing link can never hold it (node/launcher.py, free_base)."""
    return free_base("127.0.0.1", 1, _TAKEN)


def _wait(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Cluster:
    def __init__(
        self,
        tmp: Path,
        size: int = 3,
        secrets: list[str] | None = None,
        settings: RaftSettings | None = None,
        started: int | None = None,
    ) -> None:
        """`started`: how many of the replicas start now (the rest with `start`, as nodes started apart)."""
        self.tmp = tmp
        self.settings = settings or RaftSettings()
        self.addresses = [f"127.0.0.1:{_free_port()}" for _ in range(size)]
        self.secrets = secrets or [SECRET] * size
        now = size if started is None else started
        self.replicas: list[PartitionReplica | None] = [self.start(i) if i < now else None for i in range(size)]

    def start(self, i: int, first_election_rank: int = 0) -> PartitionReplica:
        peers = [a for a in self.addresses if a != self.addresses[i]]
        return PartitionReplica(
            0, i + 1, self.addresses[i], peers, self.secrets[i], str(self.tmp / f"n{i}-p0"), self.settings,
            first_election_rank=first_election_rank,
        )  # fmt: skip

    def stop(self, i: int) -> None:
        replica = self.replicas[i]
        assert replica is not None
        replica.destroy_synchronous()
        self.replicas[i] = None

    def live(self) -> list[PartitionReplica]:
        return [x for x in self.replicas if x is not None]

    def leader(self) -> PartitionReplica:
        _wait(lambda: any(x.is_leader() for x in self.live()))
        return next(x for x in self.live() if x.is_leader())

    def close(self) -> None:
        for i, replica in enumerate(self.replicas):
            if replica is not None:
                self.stop(i)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.close()


def _commit(leader: PartitionReplica, records: list[r.Record], term: int | None = None) -> bool:
    entry = encode_entry(RECORDS, leader.term() if term is None else term, leader.node_id, r.encode_batch(records))
    return leader.apply_entry(entry, sync=True, timeout=10)


def _barrier(leader: PartitionReplica) -> bool:
    return leader.apply_entry(encode_entry(BARRIER, leader.term(), leader.node_id, b""), sync=True, timeout=10)


def _offset(i: int) -> r.Record:
    return r.OffsetsCommitted("g", "", -1, (("topic", i % 4, i, -1, ""),), 1_700_000_000_000 + i)


def _converged(cluster: Cluster, expected: dict) -> bool:
    return all(x.copy_store().snapshot() == expected for x in cluster.live())


def test_batches_are_applied_on_every_replica_in_order(cluster: Cluster):
    leader = cluster.leader()
    assert _barrier(leader)
    records = [_offset(i) for i in range(60)]
    for i in range(0, 60, 3):
        assert _commit(leader, records[i : i + 3])
    replay = GroupStore()
    for rec in records:
        replay.apply(rec)
    _wait(lambda: _converged(cluster, replay.snapshot()))
    assert leader.store.groups["g"].offsets[("topic", 3)].offset == 59


def test_batches_of_an_older_term_than_the_barrier_are_fenced(cluster: Cluster):
    leader = cluster.leader()
    assert _barrier(leader)
    assert _commit(leader, [_offset(1)])
    # A node that lost leadership in an earlier term still proposes: the entry commits but is not applied.
    assert _commit(leader, [_offset(2)], term=leader.term() - 1) is False
    _wait(lambda: all(x.fenced_batches == 1 for x in cluster.live()))
    for replica in cluster.live():
        assert replica.store.groups["g"].offsets[("topic", 1)].offset == 1
        assert ("topic", 2) not in replica.store.groups["g"].offsets


def test_unknown_entry_kinds_and_versions_are_skipped(cluster: Cluster):
    leader = cluster.leader()
    assert leader.apply_entry(encode_entry("future-kind", leader.term(), 1, b""), sync=True, timeout=5) is False
    assert leader.apply_entry(b"\xc1garbage", sync=True, timeout=5) is False
    assert _commit(leader, [_offset(7)])


def test_state_survives_compaction_and_a_full_restart(cluster: Cluster):
    leader = cluster.leader()
    assert _barrier(leader)
    for i in range(40):
        assert _commit(leader, [_offset(i)])
    expected = leader.copy_store().snapshot()
    _wait(lambda: _converged(cluster, expected))
    for replica in cluster.live():
        replica.forceLogCompaction()
    _wait(lambda: all(Path(str(cluster.tmp / f"n{i}-p0.snapshot")).exists() for i in range(3)))
    for i in range(20):
        assert _commit(leader, [_offset(100 + i)])
    expected = leader.copy_store().snapshot()
    _wait(lambda: _converged(cluster, expected))
    for i in range(3):
        cluster.stop(i)
    cluster.replicas = [cluster.start(i) for i in range(3)]
    _wait(lambda: _converged(cluster, expected))
    leader = cluster.leader()
    assert _barrier(leader)
    assert _commit(leader, [_offset(500)])


def test_a_follower_behind_a_compaction_catches_up_from_the_snapshot(cluster: Cluster):
    leader = cluster.leader()
    lagging = next(i for i, x in enumerate(cluster.replicas) if x is not leader)
    cluster.stop(lagging)
    for i in range(30):
        assert _commit(leader, [_offset(i)])
    for replica in cluster.live():
        replica.forceLogCompaction()
    _wait(lambda: (cluster.tmp / f"n{cluster.replicas.index(leader)}-p0.snapshot").exists())
    expected = leader.copy_store().snapshot()
    cluster.replicas[lagging] = cluster.start(lagging)
    _wait(lambda: _converged(cluster, expected), timeout=20)


def test_a_replica_without_the_cluster_secret_gets_nothing(tmp_path: Path):
    c = Cluster(tmp_path)  # a new cluster forms once every replica has started (raft/syncobj_patch.py, fresh)
    try:
        c.leader()
        c.stop(2)
        c.secrets[2] = "wrong-secret"
        c.replicas[2] = c.start(2)
        leader = c.leader()
        assert leader.node_id != 3
        assert _commit(leader, [_offset(1)])
        time.sleep(0.5)
        intruder = c.replicas[2]
        assert intruder is not None
        assert intruder.copy_store().snapshot()["groups"] == []
        assert not intruder.is_leader()
    finally:
        c.close()


def test_a_leader_that_loses_its_quorum_logs_how_long_each_follower_was_silent(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
):
    """`raft.leader_fallback` (raft/patch_fallback.py): what tells a lost quorum from a leader's own stall in a log."""
    leader = cluster.leader()
    followers = [i for i, x in enumerate(cluster.replicas) if x is not None and x is not leader]
    caplog.set_level(logging.WARNING, logger="groupcoord.raft.partition")
    for i in followers:
        cluster.stop(i)
    _wait(lambda: not leader._isLeader())
    reports = [x for x in caplog.records if x.message == "raft.leader_fallback"]
    assert len(reports) == 1
    report = reports[0].fields
    assert report["partition"] == 0 and report["term"] == leader.term()
    assert set(report["silent_s"]) == {cluster.addresses[i] for i in followers}
    fallback_s = cluster.settings.leader_fallback_timeout_s
    assert all(fallback_s <= s < fallback_s + 1.5 for s in report["silent_s"].values())
    assert 0 <= report["deaf_s"] < 0.5


def test_a_transfer_asked_from_another_thread_is_sent_from_the_tick_thread(cluster: Cluster):
    """pysyncobj's connections belong to the tick thread. The node's leader balancer asks for transfers from the
    event loop, and pysyncobj wrote the TimeoutNow from there, while the tick thread could be writing an
    AppendEntries to the same follower: the two messages' bytes interleaved, and that follower's answers never
    reached anyone again (a chaos run, twice: a partition without a leader for 80 s). The hand-over request to a
    leader (membership) is sent the same way."""
    leader = cluster.leader()
    follower = next(x for x in cluster.live() if x is not leader)
    sent_on: list[tuple[str, str]] = []
    for replica in (leader, follower):
        real = replica._transport.send

        def recording(node, message, real=real):  # type: ignore[no-untyped-def]
            if isinstance(message, dict) and message.get("type") in ("timeout_now", HAND_OVER):
                sent_on.append((message["type"], threading.current_thread().name))
            return real(node, message)

        replica._transport.send = recording
    leader.transferLeadership(node=follower.selfNode.address)
    _wait(lambda: ("timeout_now", leader._SyncObj__thread.name) in sent_on)
    _wait(follower.is_leader)
    leader.ask_leader_to_hand_over()  # the old leader asks the new one (which then hands over in turn)
    _wait(lambda: (HAND_OVER, leader._SyncObj__thread.name) in sent_on)
    assert threading.current_thread().name not in {name for _, name in sent_on}
