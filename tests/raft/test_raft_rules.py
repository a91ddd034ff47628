"""Our patch of pysyncobj (raft/syncobj_patch.py): one test per fix, each also run on pysyncobj without that hunk
to show that it fails there (the bug is real, and the test can see it).

Replicas here are plain `SyncObj`s of the patched (or unpatched) module on loopback, with pysyncobj's own journal
in a temporary directory; the follower tests feed AppendEntries by hand to a replica whose peers never start.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.node import TCPNode

from groupcoord.node import launcher
from groupcoord.raft import syncobj_patch
from groupcoord.raft.syncobj_patch import HUNKS

# Real time decides these (a race that must happen, an election that must not): `make check` leaves them out.
pytestmark = pytest.mark.timing

NO_OP = b"\x01"  # pysyncobj's NO_OP command byte: never applied as a method call


def module_without(*prefixes: str) -> types.ModuleType:
    """pysyncobj's syncobj.py with every hunk of ours but those whose name starts with one of `prefixes`."""
    kept = tuple(h for h in HUNKS if not h.name.startswith(prefixes))
    assert len(kept) < len(HUNKS), prefixes
    return syncobj_patch.load(kept, name=f"unpatched_{'_'.join(prefixes)}")


PATCHED = syncobj_patch._module
WITHOUT_TRUNCATION_FIX = module_without("conflict_only_truncation")
# The late acknowledgements these fixes are about are many with pysyncobj's own sending (an AppendEntries per
# command and another per commit); with ours (raft/patch_messages.py) they are rarer, not impossible, and a load
# test sees them only on pysyncobj's sending.
PYSYNCOBJ_SENDING = ("coalesced_append", "commit_rides_along")
WITHOUT_NEXT_INDEX_FIX = module_without("monotone_next_index", *PYSYNCOBJ_SENDING)
WITHOUT_EITHER = module_without("conflict_only_truncation", "monotone_next_index", *PYSYNCOBJ_SENDING)
WITHOUT_CHUNK_FIX = module_without("chunk_finish")


_TAKEN: set[int] = set()


def free_port() -> int:
    """Below the ephemeral range (node/launcher.py, free_base): a port from it (what binding port 0 gives) can be
    taken by a peer's outgoing link before a restarted replica binds it again, even by a link to that very port (a
    TCP self-connect succeeds), and the replica never binds while it lives (a CI run of test_storage_rules)."""
    return launcher.free_base("127.0.0.1", 1, _TAKEN)


# The settings our patch reads from SyncObjConf (unknown to pysyncobj), with their defaults here.
OUR_CONF: dict[str, Any] = {
    "preVote": True, "bootstrap": True, "preVoteWindow": None, "firstElectionRank": 0, "compactionGate": None,
    "compactionPhase": None,
}  # fmt: skip


def conf(directory: Path, name: str, **overrides: Any) -> SyncObjConf:
    settings = dict(
        raftMinTimeout=0.2,
        raftMaxTimeout=0.6,
        appendEntriesPeriod=0.05,
        appendEntriesUseBatch=False,
        leaderFallbackTimeout=1.0,
        connectionTimeout=60.0,
        connectionRetryTime=0.2,
        autoTickPeriod=0.02,
        journalFile=str(directory / f"{name}.journal"),
        fullDumpFile=str(directory / f"{name}.snapshot"),
    )
    settings.update(overrides)
    ours = {name: settings.pop(name, default) for name, default in OUR_CONF.items()}
    built = SyncObjConf(**settings)
    for name, value in ours.items():  # read by our patch, unknown to SyncObjConf
        setattr(built, name, value)
    return built


def replica_class(module: types.ModuleType) -> type:
    class Replica(module.SyncObj):  # type: ignore[name-defined,misc]
        def __init__(self, address: str, peers: list[str], config: SyncObjConf) -> None:
            self.applied: list[bytes] = []
            super().__init__(address, peers, config)

        @module.replicated
        def put(self, data: bytes) -> int:
            self.applied.append(data)
            return len(self.applied)

    return Replica


def wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


# -- a follower fed by hand ---------------------------------------------------------------------------


class Follower:
    def __init__(self, module: types.ModuleType, directory: Path) -> None:
        me, self.leader, other = (f"127.0.0.1:{free_port()}" for _ in range(3))
        self.sync = module.SyncObj(me, [self.leader, other], conf(directory, "follower", autoTick=False))
        self.sent: list[dict[str, Any]] = []
        self.sync._SyncObj__transport.send = lambda node, message: self.sent.append(dict(message)) or True

    def append_entries(self, **message: Any) -> None:
        self.sync._SyncObj__onMessageReceived(TCPNode(self.leader), {"type": "append_entries", **message})

    def log(self) -> list[tuple[int, int]]:
        return [(entry[1], entry[2]) for entry in self.sync._SyncObj__raftLog[:]]

    def close(self) -> None:
        self.sync._doDestroy()


@pytest.fixture(params=["patched", "unpatched"])
def follower(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Follower]:
    module = PATCHED if request.param == "patched" else WITHOUT_TRUNCATION_FIX
    made = Follower(module, tmp_path)
    yield made
    made.close()


def entries(first: int, last: int, term: int) -> list[tuple[bytes, int, int]]:
    return [(NO_OP, index, term) for index in range(first, last + 1)]


def test_a_repeated_append_entries_never_shortens_an_acknowledged_log(follower: Follower, request):
    """pysyncobj caps an AppendEntries at 64 KiB and resends after a late acknowledgement; the follower used to
    cut its log back to what the resend covered, below what it had acknowledged."""
    follower.append_entries(term=1, commit_index=1, prevLogIdx=1, prevLogTerm=0, entries=entries(2, 4, 1))
    assert follower.sent[-1]["success"] and follower.sent[-1]["next_node_idx"] == 5  # entries 2-4 acknowledged
    follower.append_entries(term=1, commit_index=1, prevLogIdx=1, prevLogTerm=0, entries=entries(2, 2, 1))
    held = follower.log()[-1]
    if "unpatched" in request.node.name:
        assert held == (2, 1)  # the bug: 3 and 4 were acknowledged and are gone
    else:
        assert held == (4, 1)
        assert follower.sent[-1]["next_node_idx"] == 3  # the answer covers what this message covered


def test_the_commit_index_stops_at_the_last_entry_the_message_vouches_for(follower: Follower, request):
    """Without truncation a follower may keep entries past the ones a message carries; the leader's commit index
    must not commit them (Raft: min(leaderCommit, index of the last new entry))."""
    follower.append_entries(term=1, commit_index=1, prevLogIdx=1, prevLogTerm=0, entries=entries(2, 6, 1))
    # A new leader (term 2) whose entry 5 is the same, but whose entry 6 is of term 2; its message carries 5 only.
    follower.append_entries(term=2, commit_index=6, prevLogIdx=4, prevLogTerm=1, entries=entries(5, 5, 1))
    assert follower.sync.raftCommitIndex == 5
    # Unpatched, entry 6 (term 1) is dropped by the truncation instead, which hides this rule.
    assert follower.log()[-1] == ((6, 1) if "[patched]" in request.node.name else (5, 1))


def test_a_conflicting_entry_is_still_truncated(follower: Follower):
    follower.append_entries(term=1, commit_index=1, prevLogIdx=1, prevLogTerm=0, entries=entries(2, 4, 1))
    follower.append_entries(term=2, commit_index=1, prevLogIdx=2, prevLogTerm=1, entries=entries(3, 3, 2))
    assert follower.log()[-2:] == [(2, 1), (3, 2)]


# -- three replicas -----------------------------------------------------------------------------------


class Cluster:
    def __init__(self, module: types.ModuleType, directory: Path, **overrides: Any) -> None:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        replica = replica_class(module)
        self.replicas = [
            replica(a, [b for b in addresses if b != a], conf(directory, f"n{i}", **overrides))
            for i, a in enumerate(addresses)
        ]

    def leader(self) -> Any:
        wait(lambda: any(r._isLeader() for r in self.replicas))
        return next(r for r in self.replicas if r._isLeader())

    def close(self) -> None:
        for replica in self.replicas:
            replica.destroy_synchronous()


def on_tick_thread(replica: Any, change: Callable[[], None]) -> None:
    """Runs `change` on the replica's tick thread, before its next tick: pysyncobj's state (its journal's meta file
    above all, written through one temporary file) belongs to that thread, and a change made from the test's thread
    raced it (a meta write renamed a temporary file the other write had just renamed)."""
    done = threading.Event()
    tick = replica._onTick

    def change_then_tick(*args: Any) -> Any:
        if not done.is_set():
            change()
            done.set()
        return tick(*args)

    replica._onTick = change_then_tick
    assert done.wait(10), "the tick thread never ran the change"


def put_400(leader: Any) -> None:
    done = threading.Semaphore(0)
    for _ in range(400):
        leader.put(b"x" * 200, callback=lambda result, error: done.release())
    for _ in range(400):
        assert done.acquire(timeout=30)


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_NEXT_INDEX_FIX], ids=["patched", "unpatched"])
def test_a_late_acknowledgement_does_not_make_the_leader_resend(module: types.ModuleType, tmp_path: Path):
    """400 commits at once: each late acknowledgement used to move the leader's nextIndex back over entries
    already in flight, and it sent them again (130-190 entries in a run)."""
    cluster = Cluster(module, tmp_path)
    sent: set[tuple[str, int]] = set()
    resent = 0
    try:
        leader = cluster.leader()
        transport = leader._SyncObj__transport
        real = transport.send

        def send(node: Any, message: dict[str, Any]) -> bool:
            nonlocal resent
            for entry in message.get("entries") or () if message.get("type") == "append_entries" else ():
                resent += (node.address, entry[1]) in sent
                sent.add((node.address, entry[1]))
            return real(node, message)

        transport.send = send
        put_400(leader)
    finally:
        cluster.close()
    assert (resent == 0) == (module is PATCHED), resent


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_EITHER], ids=["patched", "unpatched"])
def test_a_follower_never_holds_less_than_it_acknowledged_under_load(module: types.ModuleType, tmp_path: Path):
    """The resends above, with the truncation of every overlapping AppendEntries, made followers cut entries they
    had acknowledged (3-11 times in a run of 400 commits)."""
    cluster = Cluster(module, tmp_path)
    shrunk: list[tuple[int, int]] = []
    acked: dict[int, int] = {}
    lock = threading.Lock()

    def watch(replica: Any) -> None:
        journal, transport = replica._SyncObj__raftLog, replica._SyncObj__transport
        delete, send = journal.deleteEntriesFrom, transport.send

        def delete_entries_from(first: int) -> None:
            delete(first)
            with lock:
                if acked.get(id(replica), 0) > journal[-1][1]:
                    shrunk.append((acked[id(replica)], journal[-1][1]))

        def send_message(node: Any, message: dict[str, Any]) -> bool:
            if message.get("type") == "next_node_idx" and message.get("success"):
                with lock:
                    acked[id(replica)] = max(acked.get(id(replica), 0), message["next_node_idx"] - 1)
            return send(node, message)

        journal.deleteEntriesFrom, transport.send = delete_entries_from, send_message

    try:
        for replica in cluster.replicas:
            watch(replica)
        put_400(cluster.leader())
    finally:
        cluster.close()
    assert (shrunk == []) == (module is PATCHED), shrunk


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_CHUNK_FIX], ids=["patched", "unpatched"])
def test_an_entry_sent_in_chunks_is_reassembled_at_once(
    module: types.ModuleType, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """An entry of 64 KiB or more goes in chunks; pysyncobj picked the last chunk by the wrong length, for sizes
    where the pickled entry and its command fall on either side of a chunk boundary: the followers' tick failed
    unpickling a partial entry (EOFError) until a resend happened to line up."""
    chunk = 2**16
    pickled = syncobj_patch._module.pickle

    def sizes(payload: int) -> tuple[int, int]:
        command = b"\x00" + pickled.dumps((0, (b"z" * payload,)))
        return len(command), len(pickled.dumps((command, 3, 1)))

    # Pickling wraps the payload and the command in framing of fixed size at these lengths, so one measure finds a
    # payload whose command ends at a chunk boundary and whose entry goes past it (checked below; searching for
    # such a size pickled 65,000 payloads of 64-128 KiB: 20 s).
    command_framing = sizes(chunk)[0] - chunk
    payload = 2 * chunk - command_framing
    command_size, entry_size = sizes(payload)
    assert command_size <= 2 * chunk < entry_size, (command_size, entry_size)
    cluster = Cluster(module, tmp_path)
    try:
        leader = cluster.leader()
        leader.put(b"z" * payload, callback=lambda result, error: None)
        assert all_of(cluster, lambda r: len(r.applied) == 1)
    finally:
        cluster.close()
    failed = [r for r in caplog.records if r.getMessage().startswith("failed _onTick")]
    assert (failed == []) == (module is PATCHED), failed


def all_of(cluster: Cluster, predicate: Callable[[Any], bool], timeout_s: float = 10.0) -> bool:
    try:
        wait(lambda: all(predicate(r) for r in cluster.replicas), timeout_s)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("pre_vote", [True, False], ids=["pre-vote", "without"])
def test_a_node_cut_off_and_back_does_not_depose_a_healthy_leader(pre_vote: bool, tmp_path: Path):
    """A replica whose messages are dropped (its connections stay up) keeps standing for election in ever higher
    terms; without pre-vote, its return forces a new election in a higher term."""
    cluster = Cluster(PATCHED, tmp_path, preVote=pre_vote)
    cut = threading.Event()
    try:
        leader = cluster.leader()
        isolated = next(r for r in cluster.replicas if r is not leader)
        for replica in cluster.replicas:
            transport = replica._SyncObj__transport
            real = transport.send

            def send(node: Any, message: Any, replica: Any = replica, real: Any = real) -> bool:
                if cut.is_set() and (replica is isolated or node.address == isolated.selfNode.address):
                    return True  # dropped
                return real(node, message)

            transport.send = send
        leader.put(b"before", sync=True, timeout=10)
        term = leader.raftCurrentTerm
        cut.set()
        time.sleep(2.0)
        cut.clear()
        leader.put(b"after", sync=True, timeout=10)
        wait(lambda: len(isolated.applied) == 2)  # it rejoined either way
        time.sleep(1.0)
        kept = leader._isLeader() and leader.raftCurrentTerm == term
    finally:
        cluster.close()
    assert kept == pre_vote


def test_a_follower_whose_term_ran_ahead_rejoins_and_the_cluster_keeps_working(tmp_path: Path):
    """etcd's rule: that follower refuses the leader's lower-term AppendEntries and says its term, the leader
    steps down, and one election later every replica is in the same term again."""
    cluster = Cluster(PATCHED, tmp_path)
    try:
        leader = cluster.leader()
        leader.put(b"a", sync=True, timeout=10)
        follower = next(r for r in cluster.replicas if r is not leader)
        on_tick_thread(follower, lambda: follower._SyncObj__setCurrentTerm(leader.raftCurrentTerm + 5, None))
        wait(
            lambda: (
                len({r.raftCurrentTerm for r in cluster.replicas}) == 1 and any(r._isLeader() for r in cluster.replicas)
            )
        )
        cluster.leader().put(b"b", sync=True, timeout=10)
        wait(lambda: all(len(r.applied) == 2 for r in cluster.replicas))
    finally:
        cluster.close()


def test_the_patch_applies_only_to_the_pysyncobj_it_was_written_for():
    with pytest.raises(syncobj_patch.PatchError, match="matches 0 places"):
        syncobj_patch.patched_source("something else")


WITHOUT_PRE_VOTE = module_without("pre_vote", "catch_up")  # the catch-up hunks build on pre-vote


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_PRE_VOTE], ids=["patched", "unpatched"])
def test_a_replica_that_may_not_lead_ignores_a_leadership_transfer(module: types.ModuleType, tmp_path: Path):
    """The cross-replica state check found it odd (raft/digest.py, `may_lead`): even a TimeoutNow, which skips
    pre-votes, does not make it stand for election; it still votes, so the others keep a majority."""
    cluster = Cluster(module, tmp_path)
    try:
        leader = cluster.leader()
        leader.put(b"a", sync=True, timeout=10)
        odd = next(r for r in cluster.replicas if r is not leader)
        odd.may_lead = False
        wait(lambda: len(odd.applied) == 1)
        for _ in range(3):
            leader.transferLeadership(node=odd.selfNode)
            time.sleep(0.5)
        led = odd._isLeader()
        cluster.leader().put(b"b", sync=True, timeout=10)
    finally:
        cluster.close()
    assert led == (module is WITHOUT_PRE_VOTE)


WITHOUT_REFUSAL_TERM = module_without("pre_vote_refusal")


@pytest.mark.parametrize("module", [PATCHED, WITHOUT_REFUSAL_TERM], ids=["patched", "unpatched"])
def test_a_pre_vote_refused_for_a_stale_term_brings_the_pre_candidate_to_the_voters_term(
    module: types.ModuleType, tmp_path: Path
):
    """etcd's rule: a refused pre-vote carries the voter's term, and a pre-candidate behind it takes it. Otherwise a
    replica whose log is ahead but whose term is behind has its pre-votes refused (term+1 is not above theirs)
    while it refuses theirs (its log is ahead), and no one is ever elected."""
    node = Follower(module, tmp_path)
    voter = TCPNode(node.leader)
    try:
        node.sync._SyncObj__setCurrentTerm(5, None)
        node.sync._SyncObj__startPreVote()
        asked = [m["term"] for m in node.sent if m["type"] == "pre_vote"]
        refusal = {"type": "pre_vote_response", "term": 6, "granted": False, "voter_term": 9}
        node.sync._SyncObj__onMessageReceived(voter, refusal)
        term = node.sync._SyncObj__raftCurrentTerm
        stale = {"type": "pre_vote", "term": 3, "last_log_index": 1, "last_log_term": 0}
        node.sync._SyncObj__onMessageReceived(voter, stale)
        answer = node.sent[-1]
    finally:
        node.close()
    assert asked == [6, 6]
    if module is PATCHED:
        assert term == 9
        refused = {"type": "pre_vote_response", "term": 3, "granted": False, "voter_term": 9, "voter_fresh": False}
        assert answer == refused
    else:
        assert term == 5  # the refusal said nothing it could act on
        assert answer == {"type": "pre_vote_response", "term": 3, "granted": False}


@pytest.mark.parametrize(
    ("module", "rank"),
    [(PATCHED, 0), (PATCHED, 1), (WITHOUT_REFUSAL_TERM, 0)],
    ids=["preferred", "another-node", "unpatched"],
)
def test_a_pre_vote_refused_by_a_fresh_voter_is_tried_again_within_windows_by_the_preferred_node_only(
    module: types.ModuleType, rank: int, tmp_path: Path
):
    """A voter still finding out that its cluster is new refuses (it is untrusted) and says so; the partition's
    preferred node (rank 0) stands again after its first election timer (0.1-0.2 s here), not a whole election
    timeout; any other node keeps its timer, so that the preferred one stands first."""
    node = Follower(module, tmp_path)
    node.sync._SyncObj__conf.firstElectionRank = rank
    try:
        node.sync._SyncObj__startPreVote()
        node.sync._SyncObj__raftElectionDeadline = raft_clock() + 10
        refusal = {"type": "pre_vote_response", "term": 1, "granted": False, "voter_term": 0, "voter_fresh": True}
        node.sync._SyncObj__onMessageReceived(TCPNode(node.leader), refusal)
        left_s = node.sync._SyncObj__raftElectionDeadline - raft_clock()  # CLOCK_MONOTONIC_RAW, pysyncobj's
    finally:
        node.close()
    if module is PATCHED and rank == 0:
        assert 0 < left_s <= 0.2, left_s  # the window is half of raftMinTimeout here: 0.1 s
    else:
        assert left_s > 9, left_s
