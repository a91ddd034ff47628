"""Raft's storage rules with our journal (raft/journal.py) and durability barrier (raft/transport.py), on real
replicas over loopback; each hunk of raft/syncobj_patch.py that they need is also shown missing."""

from __future__ import annotations

import functools
import itertools
import os
import pickle
import queue
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import FAIL_REASON, SyncObjConf
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.transport import TCPTransport

from groupcoord.base.logfields import FIELDS
from groupcoord.raft.journal import CheckedJournal
from groupcoord.raft.transport import DurableTransport
from tests.raft.test_raft_rules import PATCHED, conf, free_port, module_without, wait

# Real time decides these (a race that must happen, an election that must not): `make check` leaves them out.
pytestmark = pytest.mark.timing

WITHOUT_BARRIER = module_without("durability_barrier")
WITHOUT_CATCH_UP = module_without("catch_up")
WITHOUT_SNAPSHOT_FIX = module_without("snapshot_keeps_suffix")
WITHOUT_CONFIG_FIX = module_without("config_")
WITHOUT_CONFIG_AT_COMMIT_FIX = module_without("config_not_at_commit")
WITHOUT_COMPACTION_GATE = module_without("compaction_gate")
WITHOUT_COMPACTION_PHASE = module_without("compaction_phase")


def replica_class(module: types.ModuleType) -> type:
    class Replica(module.SyncObj):  # type: ignore[name-defined,misc]
        def __init__(self, address: str, peers: list[str], config: SyncObjConf, journal: CheckedJournal) -> None:
            self.applied: list[bytes] = []
            self.journal = journal
            if not peers:  # as PartitionReplica does: no one to catch up from
                journal.set_trusted("one replica")
            config.journal = journal
            transport = functools.partial(DurableTransport, journal=journal)
            super().__init__(address, peers, config, transportClass=transport)

        @module.replicated
        def put(self, data: bytes) -> int:
            self.applied.append(data)
            # State pysyncobj's default serializer snapshots (only attributes made after SyncObj's own __init__).
            self.__dict__.setdefault("state", []).append(data)
            return len(self.applied)

    return Replica


class Cluster:
    def __init__(self, module: types.ModuleType, directory: Path, size: int = 3) -> None:
        self.module, self.directory = module, directory
        self.addresses = [f"127.0.0.1:{free_port()}" for _ in range(size)]
        self.replicas: list[Any] = [None] * size

    def start(self, i: int, durability: str = "fsync", **overrides: Any) -> Any:
        journal = CheckedJournal(str(self.directory / f"n{i}.wal"), durability)
        peers = [a for a in self.addresses if a != self.addresses[i]]
        config = conf(self.directory, f"n{i}", **overrides)
        self.replicas[i] = replica_class(self.module)(self.addresses[i], peers, config, journal)
        return self.replicas[i]

    def start_all(self, **overrides: Any) -> Any:
        """Every replica started; the leader they elect."""
        for i in range(len(self.replicas)):
            self.start(i, **overrides)
        return self.leader()

    def elects(self, timeout_s: float) -> bool:
        try:
            self.leader(timeout_s)
        except AssertionError:
            return False
        return True

    def running(self) -> list[Any]:
        return [r for r in self.replicas if r is not None]

    def leader(self, timeout_s: float = 10.0) -> Any:
        wait(lambda: any(r._isLeader() for r in self.running()), timeout_s)
        return next(r for r in self.running() if r._isLeader())

    def close(self) -> None:
        for replica in self.running():
            replica.destroy_synchronous()


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every message that leaves a replica: its type, and whether the sender's journal was durable then."""
    seen: list[tuple[str, bool]] = []
    real = TCPTransport.send

    def send(self: Any, node: Any, message: Any) -> bool:
        journal = getattr(self, "_journal", None)
        seen.append((message.get("type", ""), journal is None or journal.durable))
        return bool(real(self, node, message))

    monkeypatch.setattr(TCPTransport, "send", send)
    return seen


def put_many(leader: Any, count: int) -> None:
    done = threading.Semaphore(0)
    for i in range(count):
        leader.put(b"%d" % i, callback=lambda result, error: done.release())
    for _ in range(count):
        assert done.acquire(timeout=30)


def test_every_raft_message_leaves_after_the_records_it_depends_on_are_on_disk(
    tmp_path: Path, sends: list[tuple[str, bool]]
):
    cluster = Cluster(PATCHED, tmp_path)
    try:
        leader = cluster.start_all()
        put_many(leader, 300)
        wait(lambda: all(len(r.applied) == 300 for r in cluster.running()))
        fsyncs = sum(r.journal.fsyncs for r in cluster.running())
    finally:
        cluster.close()
    kinds = {kind for kind, _ in sends}
    assert {"pre_vote", "request_vote", "response_vote", "append_entries", "next_node_idx"} <= kinds
    # Not one vote or acknowledgement before its records were fdatasync'ed; a leader's AppendEntries may go
    # before its own copy is durable (it then does not count itself: the next test).
    assert [s for s in sends if not s[1] and s[0] != "append_entries"] == []
    # Group commit: 300 entries on 3 replicas, plus terms and votes, took fewer flushes than records.
    print(f"fdatasync calls: {fsyncs} for 300 entries x 3 replicas")
    assert fsyncs < 900


WITHOUT_SELF_COUNT = module_without("leader_self_count")


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_SELF_COUNT], ids=["patched", "unpatched"])
def test_a_leader_counts_itself_only_for_entries_on_its_disk(module: types.ModuleType, tmp_path: Path):
    """With one follower down, an entry needs the leader's own copy: until that copy is flushed, it is not
    committed, although the leader's AppendEntries went out before the flush."""
    cluster = Cluster(module, tmp_path)
    try:
        leader = cluster.start_all()
        put_many(leader, 3)
        follower = next(r for r in cluster.running() if r is not leader)
        cluster.replicas[cluster.replicas.index(follower)] = None
        follower.destroy_synchronous()
        journal = leader.journal
        journal.sync = lambda: journal._write_pending() or journal.write_error is None  # writes, never flushes
        done = threading.Event()
        leader.put(b"not flushed", callback=lambda result, error: done.set())
        committed_unflushed = done.wait(2.0)
        del journal.sync  # the instance attribute; flushing resumes
        assert done.wait(10)
    finally:
        cluster.close()
    assert committed_unflushed == (module is WITHOUT_SELF_COUNT)


def test_without_the_barrier_hook_nothing_that_waits_for_the_disk_is_ever_sent(tmp_path: Path):
    cluster = Cluster(WITHOUT_BARRIER, tmp_path)
    try:
        for i in range(3):
            cluster.start(i)
        with pytest.raises(AssertionError, match="timed out"):
            cluster.leader(timeout_s=3.0)
    finally:
        cluster.close()


def test_upstream_pysyncobj_answers_votes_and_appends_without_flushing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The rule our journal and barrier add: pysyncobj's own FileJournal (an mmap) is never flushed while it runs."""
    flushes = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real, name=name: flushes.append(name) or real(fd))
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    from tests.raft.test_raft_rules import replica_class as upstream_replica

    replicas = [
        upstream_replica(PATCHED)(a, [b for b in addresses if b != a], conf(tmp_path, f"u{i}"))
        for i, a in enumerate(addresses)
    ]
    try:
        wait(lambda: any(r._isLeader() for r in replicas))
        leader = next(r for r in replicas if r._isLeader())
        put_many(leader, 50)
    finally:
        for replica in replicas:
            replica.destroy_synchronous()
    assert flushes == []


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_CATCH_UP], ids=["patched", "unpatched"])
def test_a_replica_that_may_have_lost_acknowledged_entries_neither_votes_nor_stands(
    module: types.ModuleType, tmp_path: Path
):
    """Node 1 holds entries node 0 and node 1 acknowledged; node 1's journal was damaged (here: marked untrusted,
    as a damaged journal is). With node 0 down, nodes 1 and 2 must not elect a leader: 2 lacks the entries."""
    cluster = Cluster(module, tmp_path)
    try:
        put_many(cluster.start_all(), 20)
        wait(lambda: all(len(r.applied) == 20 for r in cluster.running()))
        cluster.close()
        damaged = CheckedJournal(str(tmp_path / "n1.wal"))
        damaged.discard("test: damaged")
        # Its term and vote went with the damaged records (without this, a term above node 2's would make the
        # unpatched run's outcome depend on which node voted last, not on the bug).
        damaged.setCurrentTerm(0, None)
        damaged._destroy()
        cluster.replicas = [None, None, None]
        cluster.start(1)
        cluster.start(2)
        elected = cluster.elects(timeout_s=10.0 if module is WITHOUT_CATCH_UP else 4.0)
        if module is WITHOUT_CATCH_UP:
            assert elected  # the bug: a replica with an empty log helped elect a leader without the 20 entries
            return
        assert not elected
        cluster.start(0)
        leader = cluster.leader()
        assert leader is not cluster.replicas[1]
        leader.put(b"after", sync=True, timeout=10)
        wait(lambda: cluster.replicas[1].journal.trusted)  # caught up: it votes again
        wait(lambda: cluster.replicas[1].applied[-1:] == [b"after"] and len(cluster.replicas[1].applied) == 21)
    finally:
        cluster.close()


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_CATCH_UP], ids=["patched", "unpatched"])
def test_a_wiped_replica_does_not_help_a_stale_one_win_and_lose_acknowledged_entries(
    module: types.ModuleType, tmp_path: Path
):
    """The issue's first case: C is down while A and B acknowledge 12 entries; B's data directory is wiped and A
    is down. B (empty) and C (stale) must not elect a leader: C lacks the 12 entries."""
    cluster = Cluster(module, tmp_path)
    try:
        put_many(cluster.start_all(), 5)
        wait(lambda: all(len(r.applied) == 5 for r in cluster.running()))
        cluster.replicas[2].destroy_synchronous()
        cluster.replicas[2] = None
        put_many(cluster.leader(), 12)  # acknowledged by A and B
        cluster.close()
        cluster.replicas = [None, None, None]
        (tmp_path / "n1.wal").unlink()  # B's volume is gone
        b, c = cluster.start(1), cluster.start(2)
        elected = cluster.elects(timeout_s=4.0)
        if module is WITHOUT_CATCH_UP:
            assert elected  # the bug: C won with B's vote, without the 12 acknowledged entries
            wait(lambda: len(c.applied) == 5)
            assert len(c.applied) == 5
            return
        assert not elected and b.journal.fresh and not b.journal.trusted
        cluster.start(0)
        cluster.leader().put(b"after", sync=True, timeout=10)
        wait(lambda: all(len(r.applied) == 18 for r in cluster.running()))
        wait(lambda: b.journal.trusted)
    finally:
        cluster.close()


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_SNAPSHOT_FIX], ids=["patched", "unpatched"])
def test_a_crash_between_snapshot_and_compaction_keeps_the_entries_after_the_snapshot(
    module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """pysyncobj writes the snapshot, then compacts the journal; after a crash in between, it used to throw away
    every journal entry on restart, those after the snapshot included: committed commands vanished."""
    cluster = Cluster(module, tmp_path, size=1)
    node = cluster.start(0)
    wait(node._isLeader)
    for i in range(10):
        node.put(b"before-%d" % i, sync=True, timeout=10)
    monkeypatch.setattr(node.journal, "deleteEntriesTo", lambda entry_to: None)  # the crash: no compaction
    node.forceLogCompaction()
    wait(lambda: os.path.exists(tmp_path / "n0.snapshot"))
    time.sleep(0.3)
    for i in range(5):
        node.put(b"after-%d" % i, sync=True, timeout=10)
    cluster.close()
    restarted = cluster.start(0)
    try:
        wait(lambda: len(getattr(restarted, "state", [])) >= 10)
        time.sleep(0.5)
        applied = list(restarted.state)
    finally:
        cluster.close()
    if module is WITHOUT_SNAPSHOT_FIX:
        assert len(applied) == 10  # the bug: the five commands after the snapshot are gone
    else:
        assert applied == [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(5)]


def read_pickle(path: str) -> Any:
    """A snapshot as the tests' serializers write it."""
    with open(path, "rb") as f:
        return pickle.load(f)


def one_replica_clusters(module: types.ModuleType, directory: Path, count: int) -> list[Cluster]:
    """`count` single-replica clusters side by side, as a node's partitions are."""
    clusters = []
    for k in range(count):
        (directory / f"p{k}").mkdir()
        clusters.append(Cluster(module, directory / f"p{k}", size=1))
    return clusters


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_COMPACTION_GATE], ids=["patched", "unpatched"])
def test_the_replicas_of_a_node_write_one_snapshot_at_a_time(module: types.ModuleType, tmp_path: Path):
    """Three partitions of one node, compactions forced on all at once: with the node's gate, their snapshots are
    written one after another (each retried on a later tick), and every one of them is written."""
    gate = threading.Lock()
    written: list[tuple[float, float]] = []

    def serializer(path: str, raft_data: Any) -> None:
        start = time.monotonic()
        time.sleep(0.3)  # a snapshot of thousands of groups takes as long
        with open(path, "wb") as f:
            pickle.dump(raft_data, f)
        written.append((start, time.monotonic()))

    clusters = one_replica_clusters(module, tmp_path, 3)
    try:
        nodes = [c.start(0, serializer=serializer, deserializer=read_pickle, compactionGate=gate) for c in clusters]
        for node in nodes:
            wait(node._isLeader)
            for i in range(5):
                node.put(b"%d" % i, sync=True, timeout=10)
        for node in nodes:
            node.forceLogCompaction()
        wait(lambda: len(written) == 3, 10)
    finally:
        for c in clusters:
            c.close()
    spans = sorted(written)
    overlapping = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    if module is WITHOUT_COMPACTION_GATE:
        assert overlapping  # the three ticks, 20 ms apart, all start writing
    else:
        assert overlapping == []
        assert not gate.locked()


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_COMPACTION_PHASE], ids=["patched", "unpatched"])
def test_replicas_that_compacted_together_take_their_next_timed_snapshots_in_their_own_slots(
    module: types.ModuleType, tmp_path: Path
):
    """Three replicas of a node compact at once (as a load's entry counts make them do); each has its own phase of a
    3 s round. Their next, timed, snapshots come each at its own slot of the round, not all three one round after
    the last."""
    round_s = 3.0
    phases = [0.0, 1 / 3, 2 / 3]
    written: dict[str, list[float]] = {}

    def serializer(path: str, raft_data: Any) -> None:
        # pysyncobj writes a temporary file beside the snapshot: the directory names the replica. The slots are on
        # pysyncobj's clock (CLOCK_MONOTONIC_RAW), which drifts from time.monotonic's by tenths of a second an hour.
        written.setdefault(os.path.dirname(path), []).append(raft_clock())
        with open(path, "wb") as f:
            pickle.dump(raft_data, f)

    clusters = one_replica_clusters(module, tmp_path, 3)
    dirs = [str(c.directory) for c in clusters]

    def written_since(since: list[float]) -> list[float | None]:
        """Each replica's first snapshot since its own time."""
        return [next((t for t in written.get(d, []) if t >= s), None) for d, s in zip(dirs, since, strict=True)]

    try:
        nodes = [
            c.start(
                0,
                serializer=serializer,
                deserializer=read_pickle,
                logCompactionMinTime=round_s,
                logCompactionMinEntries=1_000_000,
                compactionPhase=phase,
            )
            for c, phase in zip(clusters, phases, strict=True)
        ]
        for node in nodes:
            wait(node._isLeader)
        # A replica whose timed slot falls between its put and its force writes that snapshot instead (the forced
        # one then finds nothing new to write): either is its snapshot "together" with the others.
        together = []
        for node in nodes:
            together.append(raft_clock())
            node.put(b"before", sync=True, timeout=10)
            node.forceLogCompaction()
        wait(lambda: None not in written_since(together), 5)
        time.sleep(0.1)  # the snapshots' success is taken on the replicas' next ticks
        more = [raft_clock()] * len(nodes)
        for node in nodes:
            node.put(b"after", sync=True, timeout=10)
        wait(lambda: None not in written_since(more), 2.5 * round_s)
        timed = [t for t in written_since(more) if t is not None]
    finally:
        for c in clusters:
            c.close()
    if module is WITHOUT_COMPACTION_PHASE:
        assert max(timed) - min(timed) < 0.5, timed  # all three one round after the forced ones
    else:
        past_slot = [(t - phase * round_s) % round_s for t, phase in zip(timed, phases, strict=True)]
        # Slots are 1 s apart: together one round after the forced ones, at most one of the three is within 0.5 s.
        assert all(late < 0.5 for late in past_slot), past_slot


def change_voters(leader: Any, change: str, address: str) -> None:
    """One membership change, committed; retried while the leader refuses it (its own first entry is not applied
    yet: REQUEST_DENIED), as our AddRaftVoter does."""
    method = leader.addNodeToCluster if change == "add" else leader.removeNodeFromCluster
    answers: queue.Queue[Any] = queue.Queue()
    for _ in range(50):
        method(address, callback=lambda result, error: answers.put(error))
        reason = answers.get(timeout=10)
        if reason != FAIL_REASON.REQUEST_DENIED:
            break
        time.sleep(0.1)
    assert reason == FAIL_REASON.SUCCESS, reason


@pytest.mark.parametrize(
    "module",
    [PATCHED, WITHOUT_CONFIG_FIX, WITHOUT_CONFIG_AT_COMMIT_FIX],
    ids=["patched", "unpatched", "reapplied-at-commit"],
)
def test_a_restarted_replica_counts_with_the_latest_configuration_in_its_log(module: types.ModuleType, tmp_path: Path):
    """Raft: a server uses the latest configuration in its log, committed or not. A replica restarted with a COMMIT
    hint older than its last membership changes (the hint is written once a second, so a kill loses up to a
    second of it) must not count votes with the voters of before."""
    cluster = Cluster(module, tmp_path)
    removed, added = (f"127.0.0.1:{free_port()}" for _ in range(2))
    try:
        leader = cluster.start_all(dynamicMembershipChange=True)
        follower = cluster.replicas.index(next(r for r in cluster.running() if r is not leader))
        change_voters(leader, "add", removed)
        wait(lambda: cluster.replicas[follower].raftCommitIndex == leader.raftCommitIndex)
        time.sleep(1.2)  # the follower's once-a-second COMMIT hint now covers the first change
        journal = cluster.replicas[follower].journal
        journal._write_commit = lambda: None  # and none after it: a kill -9 within the next second
        change_voters(leader, "rem", removed)
        change_voters(leader, "add", added)
        wait(lambda: cluster.replicas[follower].raftCommitIndex == leader.raftCommitIndex)
    finally:
        cluster.close()
    cluster.replicas = [None] * len(cluster.replicas)
    restarted = cluster.start(follower, dynamicMembershipChange=True)
    try:
        time.sleep(0.5)  # its first ticks, alone: no leader will tell it the commit index
        voters = {node.id for node in restarted.otherNodes}
    finally:
        cluster.close()
    others = {a for i, a in enumerate(cluster.addresses) if i != follower}
    if module is WITHOUT_CONFIG_FIX:
        assert voters == others | {removed}  # the configuration as of the hint: a second old
    elif module is WITHOUT_CONFIG_AT_COMMIT_FIX:
        assert voters == others | {removed, added}  # the replay brought back the removed voter
    else:
        assert voters == others | {added}


def test_empty_replicas_form_a_new_cluster_only_when_initial_cluster_state_is_new(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """etcd's `initial-cluster-state existing`: replicas that all hold nothing (every data directory lost) do not
    come back as an empty cluster, and each says why once."""
    existing = Cluster(PATCHED, tmp_path / "existing")
    (tmp_path / "existing").mkdir()
    try:
        for i in range(3):
            existing.start(i, bootstrap=False)
        formed = existing.elects(3.0)
    finally:
        existing.close()
    assert not formed
    refused = [r for r in caplog.records if r.message == "journal.bootstrap_refused"]
    files = sorted(getattr(r, FIELDS)["file"] for r in refused)
    assert files == sorted(str(tmp_path / "existing" / f"n{i}.wal") for i in range(3))
    new = Cluster(PATCHED, tmp_path / "new")
    (tmp_path / "new").mkdir()
    try:
        for i in range(3):
            new.start(i)
        assert new.elects(10.0)
    finally:
        new.close()


@pytest.fixture(autouse=True)
def _no_leftover_threads() -> Iterator[None]:
    yield
    time.sleep(0.1)
