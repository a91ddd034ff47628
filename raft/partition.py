"""One coordinator partition: a pysyncobj Raft group whose log holds the coordinator's record batches.

Every replica (leader included) applies committed entries to an apply-only `GroupStore` on pysyncobj's
tick thread. There is exactly one `@replicated` method, so pysyncobj's method numbering (it sorts the
names of replicated methods) can never re-map an old journal; what an entry means is decided by our own
versioned envelope (raft/entries.py: barriers, digests, the cluster id and record batches, term-fenced).

Every entry that takes effect is also reported as events (`coordinator.events`) to `on_events`, with its
Raft log index, so that every replica writes the same events (docs/EVENTS.md). Each event also names the index
of the partition's previous entry that took effect (`prev_index`, kept in snapshots too), so a reader can tell a
complete export from one with holes: the log's own gaps (pysyncobj's no-ops, fenced batches) are not holes.

Raft messages are encrypted with our `RaftCipher` (raft/cipher.py), not pysyncobj's Fernet. `SyncObj` is pysyncobj's
with our patch for Raft's rules (raft/syncobj_patch.py: conflict-only truncation, pre-vote, ...).

Snapshots are the store's msgpack snapshot plus the fence (raft/snapshot.py); the Raft timing is `RaftSettings`
(raft/settings.py).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack
from pysyncobj import FAIL_REASON, SyncObjConf
from pysyncobj.node import TCPNode

from groupcoord.base.logfields import fields
from groupcoord.coordinator.events import Event, barrier_event, record_event
from groupcoord.coordinator.state import GroupStore
from groupcoord.protocol import records as r
from groupcoord.raft.cipher import RaftCipher
from groupcoord.raft.digest import StateDigests, read_report, report, state_digest
from groupcoord.raft.driver import RaftDriver
from groupcoord.raft.entries import (
    BARRIER,
    CLUSTER_ID,
    DIGEST,
    DIGEST_REPORT,
    ENTRY_VERSION,
    RECORDS,
    barrier_time,
    encode_entry,
)
from groupcoord.raft.journal import CheckedJournal
from groupcoord.raft.quiescence import NodeLiveness, Quiescence
from groupcoord.raft.settings import RaftSettings
from groupcoord.raft.snapshot import (
    SNAPSHOT_VERSION,
    cluster_nodes,
    member_list,
    raft_node,
    read_snapshot_body,
    set_aside_damaged_snapshot,
    write_snapshot_file,
)
from groupcoord.raft.syncobj_patch import SyncObj, replicated
from groupcoord.raft.transport import HAND_OVER, DurableTransport, RoundTrips

log = logging.getLogger(__name__)


class PartitionReplica(SyncObj):  # type: ignore[misc]  # pysyncobj's SyncObj, patched at import: no type hints
    """The replicated log and the committed `GroupStore` of one partition on one node."""

    def __init__(
        self,
        partition_id: int,
        node_id: int,
        self_address: str,
        peer_addresses: list[str],
        secret: str,
        data_prefix: str,
        settings: RaftSettings,
        bind_address: str | None = None,
        on_events: Callable[[list[Event]], None] | None = None,
        on_live_events: Callable[[list[Event]], None] | None = None,
        on_state_change: Callable[[], None] | None = None,
        peer_specs: dict[str, str] | None = None,
        cluster_id: str | None = None,
        on_cluster_id: Callable[[str], None] | None = None,
        wall_ms: Callable[[], int] | None = None,
        incarnation: str | None = None,
        liveness: NodeLiveness | None = None,
        node_of: Callable[[Any], int | None] | None = None,
        first_election_rank: int = 0,
        compaction_gate: threading.Lock | None = None,
        compaction_phase: float = 0.0,
        driver: RaftDriver | None = None,
    ) -> None:
        # Set before SyncObj starts: the journal replays through apply_entry.
        self.on_events = on_events
        # The same events, only for entries committed while this process runs (not the journal's replay).
        self.on_live_events = on_live_events
        self.partition_id = partition_id
        self.node_id = node_id
        self.store = GroupStore()
        self.fence_term = 0
        # The id a `cluster_id` entry of this partition's log gave (partition 0's); reported to `on_cluster_id`.
        self.cluster_id: str | None = None
        self.on_cluster_id = on_cluster_id
        # The log index of the last entry that took effect (0: none, or none known from an older snapshot).
        self.last_effective_index = 0
        self.applied_batches = 0
        self.fenced_batches = 0
        self.digests = StateDigests(partition_id)
        self.digest_interval_s = settings.digest_interval_s
        # Guards `store`, `fence_term` and `last_effective_index` between the tick thread (apply, snapshot)
        # and readers elsewhere.
        self.lock = threading.Lock()
        # Our cipher instead of pysyncobj's Fernet (raft/cipher.py): pysyncobj encrypts only with a password, so it
        # gets none and reads ours through the `encryptor` property.
        self._cipher = RaftCipher(secret)
        conf = SyncObjConf(
            # Peers know this replica by `self_address`; it may listen on another (e.g. 0.0.0.0:port).
            bindAddress=bind_address or self_address,
            raftMinTimeout=settings.election_min_s,
            raftMaxTimeout=settings.election_max_s,
            appendEntriesPeriod=settings.append_entries_period_s,
            appendEntriesUseBatch=settings.append_entries_use_batch,
            leaderFallbackTimeout=settings.leader_fallback_timeout_s,
            connectionTimeout=settings.connection_timeout_s,
            connectionRetryTime=settings.connection_retry_s,
            logCompactionMinEntries=settings.log_compaction_min_entries,
            logCompactionMinTime=settings.log_compaction_min_time_s,
            autoTickPeriod=settings.tick_period_s,
            # Snapshots beside the journal (conf.journal below): a journal alone cannot recover after compaction.
            fullDumpFile=f"{data_prefix}.snapshot",
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            useFork=False,
            # pysyncobj calls it on its tick thread when this replica becomes or stops being leader or candidate.
            onStateChanged=(lambda _old, _new: on_state_change()) if on_state_change is not None else None,
        )
        # Both read by our patch of pysyncobj (raft/syncobj_patch.py: raft/patch_pre_vote.py, patch_catch_up.py).
        conf.preVote = settings.pre_vote
        conf.preVoteWindow = settings.pre_vote_window_s
        conf.bootstrap = settings.bootstrap
        # How many windows more its first election timer waits: 0 on the partition's preferred leader.
        conf.firstElectionRank = first_election_rank
        # The node's replicas write one snapshot at a time (raft/patch_compaction.py).
        conf.compactionGate = compaction_gate
        # ... and each takes its timed snapshots at its own slot of the round, not back to back (the same module).
        conf.compactionPhase = compaction_phase
        # Online membership (`add_member` / `remove_member`): pysyncobj's single-server changes through the log.
        conf.dynamicMembershipChange = True
        if driver is not None:
            # One thread ticks all of the node's replicas (raft/driver.py, raft/patch_driver.py).
            conf.autoTick = False
            conf.poller = driver.poller()
            conf.driver = driver
        self.quiescence: Quiescence | None = None
        if (
            liveness is not None
            and node_of is not None
            and settings.quiesce_after_s > 0
            and not settings.append_entries_use_batch
        ):
            conf.quiescence = self.quiescence = Quiescence(
                partition_id,
                liveness,
                lambda node: node_of(getattr(node, "address", None)),
                lambda node: self._transport.acked_at(node),
                settings.quiesce_after_s,
                settings.rest_tick_s,
            )
        snapshot_damage = set_aside_damaged_snapshot(f"{data_prefix}.snapshot")
        conf.journal = self.journal = CheckedJournal(
            f"{data_prefix}.wal",
            settings.durability,
            legacy_path=f"{data_prefix}.journal",
        )
        # Digest entries up to here are replayed from this node's own journal: it reported on them before.
        self._replayed_through = self.journal.getRaftCommitIndex()
        self._stepping_aside = 0.0  # when this odd replica last handed its leadership over (monotonic)
        if snapshot_damage is not None:
            # Its entries continue a state that is gone: only the leader's copy (snapshot or log) can rebuild it.
            self.journal.discard(snapshot_damage)
        if not peer_addresses:
            self.journal.set_trusted("a one-node cluster: there is no one else to catch up from")
        # A leader answers only within its lease: until a majority may have stopped hearing from it for the pre-vote
        # window (no pre-vote is granted before then), with a tenth off for clock rate drift.
        # Without pre-votes there is no such bound, and no lease: is_leader() alone, as before leases.
        self._lease_s = 0.9 * settings.pre_vote_window_s if settings.pre_vote else None
        # A leadership transfer lets its target skip pre-votes: no lease in that term for as long as the target's
        # election may take (after that, the TimeoutNow was lost and this replica leads on).
        self._transfer_block_s = 2 * settings.election_max_s
        self._transfer: tuple[int, float] = (-1, 0.0)  # (term, monotonic time) of the last transfer sent

        self._node_cluster_id = cluster_id
        self._node_of = node_of

        def transport(sync_obj: Any, self_node: Any, other_nodes: Any) -> DurableTransport:
            self._transport = DurableTransport(sync_obj, self_node, other_nodes, journal=self.journal)
            self._transport.cluster_id = self._node_cluster_id
            if wall_ms is not None:
                self._transport.wall_ms = wall_ms
            self._transport.incarnation = incarnation
            self._transport.quiescence = self.quiescence
            return self._transport

        # Calls handed to the tick thread (`on_tick_thread`), run by a tick callback.
        self._tick_calls: collections.deque[Callable[[], None]] = collections.deque()

        specs = peer_specs or {}
        super().__init__(
            raft_node(self_address, specs.get(self_address)),
            [raft_node(a, specs.get(a)) for a in peer_addresses],
            conf,
            transportClass=transport,
        )
        self.addOnTickCallback(self._run_tick_calls)

    @property
    def encryptor(self) -> RaftCipher:
        return self._cipher

    # -- the replicated entry point -------------------------------------------------------------------

    @replicated  # type: ignore[misc]  # pysyncobj's decorator has no type hints
    def apply_entry(self, entry: bytes) -> bool:
        """Runs on every replica at commit (pysyncobj tick thread); True when the entry took effect."""
        try:
            version, kind, term, node_id, payload = msgpack.unpackb(entry, raw=False, use_list=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            log.error("partition.bad_entry", extra=fields(partition=self.partition_id))
            return False
        if version != ENTRY_VERSION:
            log.warning("partition.unknown_entry_version", extra=fields(partition=self.partition_id, v=version))
            return False
        index = self.raftLastApplied + 1  # pysyncobj advances it after the apply
        if kind == BARRIER:
            with self.lock:
                self.fence_term = max(self.fence_term, term)
                prev_index, self.last_effective_index = self.last_effective_index, index
            self._emit(
                [barrier_event(barrier_time(payload), self.partition_id, index, term, node_id)], prev_index, index
            )
            return True
        if kind == CLUSTER_ID:
            self._apply_cluster_id(bytes(payload).decode("utf-8", "replace"))
            return True
        if kind == DIGEST:
            with self.lock:
                digest = state_digest(self.store.packed_snapshot(), self.fence_term)
            self.digests.on_entry(index, payload, node_id, digest)
            if index > self._replayed_through:
                self.apply_entry(encode_entry(DIGEST_REPORT, term, self.node_id, report(index, digest)))
            self.step_aside_if_odd()
            return True
        if kind == DIGEST_REPORT:
            reported = read_report(payload)
            if reported is not None:
                self.digests.on_report(reported[0], node_id, reported[1])
            return True
        if kind != RECORDS:
            log.warning("partition.unknown_entry_kind", extra=fields(partition=self.partition_id, kind=kind))
            return False
        events: list[Event] = []
        with self.lock:
            if term < self.fence_term:
                self.fenced_batches += 1
                return False
            batch = r.decode_batch(payload)
            effective = False
            for position, rec in enumerate(batch):
                if not self.store.apply(rec):
                    continue
                effective = True
                if self.on_events is not None or self.on_live_events is not None:
                    group = self.store.get(rec.group_id) if isinstance(rec, r.GroupRecord) else None
                    events.append(record_event(rec, group, self.partition_id, index, position, term, node_id))
            prev_index = self.last_effective_index
            if effective:
                self.last_effective_index = index
            self.applied_batches += 1
        self._emit(events, prev_index, index)
        return True

    def _apply_cluster_id(self, cluster_id: str) -> None:
        if self.cluster_id is not None:
            return
        self.cluster_id = cluster_id
        if self.on_cluster_id is not None:
            self.on_cluster_id(cluster_id)

    def set_cluster_id(self, cluster_id: str) -> None:
        """The node's cluster id (from partition 0): stamped on this replica's Raft messages, checked on theirs."""
        self._node_cluster_id = cluster_id
        transport = getattr(self, "_transport", None)  # absent while pysyncobj is still starting
        if transport is not None:
            transport.cluster_id = cluster_id

    @property
    def foreign_messages(self) -> int:
        """Raft messages dropped because they came from another cluster."""
        return self._transport.foreign_messages

    def round_trips(self) -> dict[str, RoundTrips]:
        """As leader, each follower's AppendEntries round trips (raft/transport.py), by node id (by Raft address for a
        node the directory does not know)."""
        trips = self._transport.round_trips.copy()  # the tick thread adds entries
        return {self._peer_name(address): trip for address, trip in trips.items()}

    def _peer_name(self, address: str) -> str:
        """A peer's node id, or its Raft address for a node the directory does not know."""
        node_id = self._node_of(address) if self._node_of is not None else None
        return address if node_id is None else str(node_id)

    def _emit(self, events: list[Event], prev_index: int, index: int) -> None:
        if not events:
            return
        for event in events:
            event["prev_index"] = prev_index
        live = self.on_live_events if index > self._replayed_through else None
        for hook in (self.on_events, live):
            if hook is None:
                continue
            try:
                hook(events)
            except Exception:
                # Events are an export: losing some must never stop the replica from applying the log.
                log.exception("partition.events_failed", extra=fields(partition=self.partition_id))

    # -- snapshots ------------------------------------------------------------------------------------

    def _write_snapshot(self, path: str, raft_data: tuple[Any, Any, Any]) -> None:
        last_entry, previous_entry, cluster = raft_data
        with self.lock:
            body = {
                "version": SNAPSHOT_VERSION,
                "partition": self.partition_id,
                "fence_term": self.fence_term,
                "last_effective_index": self.last_effective_index,
                "cluster_id": self.cluster_id,
                "store": self.store.packed_snapshot(),
                "raft": [list(last_entry), list(previous_entry), member_list(cluster)],
            }
        write_snapshot_file(path, body, packed=("store",))

    def _read_snapshot(self, path: str) -> tuple[Any, Any, Any]:
        body = read_snapshot_body(path, self.partition_id)
        last_entry, previous_entry, addresses = body["raft"]
        with self.lock:
            self.store = GroupStore.restore(body["store"])
            self.fence_term = body["fence_term"]
            self.last_effective_index = body.get("last_effective_index", 0)  # absent before events had prev_index
        if isinstance(body.get("cluster_id"), str):
            self._apply_cluster_id(body["cluster_id"])
        return tuple(last_entry), tuple(previous_entry), cluster_nodes(addresses)

    # -- status ---------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """Leading, able to write its journal (a replica that cannot is mute and loses the lead), and not odd."""
        return self._isLeader() and self.journal.write_error is None and self.may_lead

    @property
    def may_lead(self) -> bool:
        """False while the last state check found this replica odd (raft/digest.py): it then serves nothing, and our
        patch of pysyncobj has it stand for no election (`pre_vote_election`)."""
        return self.node_id not in self.digests.odd_nodes

    def step_aside_if_odd(self) -> None:
        """An odd replica that still leads hands the partition to a follower (at most once a second)."""
        now = time.monotonic()
        if not self.may_lead and self._isLeader() and now - self._stepping_aside >= 1.0:
            self._stepping_aside = now
            self.transferLeadership()

    def _onLeaderFallback(self, silentFor: dict[Any, float], deafFor: float) -> None:
        """Called on the tick thread as this leader steps down for want of a quorum (raft/patch_fallback.py): the
        log says whether the followers went silent or this leader's own thread did not listen."""
        silent = {self._peer_name(node.address): round(seconds, 3) for node, seconds in silentFor.items()}
        log.warning(
            "raft.leader_fallback",
            extra=fields(
                partition=self.partition_id, term=self.raftCurrentTerm, silent_s=silent, deaf_s=round(deafFor, 3)
            ),
        )

    def has_lease(self) -> bool:
        """Leading, and no other replica can have become leader yet: what may be answered without a Raft round.

        The lease is the time a majority last acknowledged this leader (raft/transport.py) plus `_lease_s`."""
        if not self.is_leader() or self._lease_s is None:
            return self.is_leader()
        now = time.monotonic()
        term, sent = self._transfer
        if term == self.raftCurrentTerm and now < sent + self._transfer_block_s:
            return False
        leased = now < self._transport.lease_base() + self._lease_s
        if self.quiescence is not None:
            # A quiet leader's lease runs out; asking for it ends the quiet, and the next acknowledgement renews it.
            self.quiescence.touch(wake=not leased)
            if not leased:
                self._wake()
        return leased

    def destroy(self) -> None:
        super().destroy()
        self._wake()  # a quiet replica's poll would notice only after `rest_tick_s`

    def transferLeadership(self, node: Any = None, callback: Any = None) -> None:
        # Set before the TimeoutNow can leave (has_lease runs on the event loop), taken back if none was sent.
        before, self._transfer = self._transfer, (self.raftCurrentTerm, time.monotonic())

        def sent(result: Any, error: Any) -> None:
            if error != FAIL_REASON.SUCCESS:
                self._transfer = before
            if callback is not None:
                callback(result, error)

        # On the tick thread: pysyncobj's connections are that thread's, and a TimeoutNow written from the event loop
        # while the tick thread wrote an AppendEntries to the same follower interleaved their bytes (a chaos run:
        # the follower's answers never reached the new leader again, and the partition had no leader for 80 s).
        self.on_tick_thread(lambda: SyncObj.transferLeadership(self, node, sent))

    def term(self) -> int:
        """The current Raft term as this replica knows it."""
        term: int = self.raftCurrentTerm
        return term

    def peer_incarnations(self) -> dict[str, str]:
        """The incarnation id each peer's latest message carried, by Raft address."""
        return self._transport.peer_incarnations.copy()

    def set_guests(self, addresses: frozenset[str]) -> None:
        """Nodes outside this replica's configuration to accept and connect to (raft/transport.py, guests)."""
        if addresses != self._transport.wanted_guests:
            self._transport.wanted_guests = addresses

    def peer_wall_ms(self) -> tuple[list[int], int]:
        """The other voters' wall times (ms, now) as their acknowledgements tell this leader, and the voter count."""
        return self._transport.peer_wall_ms()

    # -- membership -------------------------------------------------------------------------------------

    def members(self) -> dict[str, str | None]:
        """This replica's view of the partition's voters, itself included: Raft address -> node spec (None when the
        node came from this node's `peers` setting). A change counts from the moment it is in the log (Raft's
        single-server changes), so a follower's view may run ahead of what has committed."""
        nodes = [self.selfNode, *self.otherNodes]
        return {node.address: getattr(node, "spec", None) for node in nodes}

    def match_indexes(self) -> dict[str, int]:
        """On a leader, the last log index each other voter is known to hold, by Raft address (pysyncobj's status,
        read from another thread: a membership change in between leaves it empty for this once)."""
        try:
            status = self.getStatus()
        except RuntimeError:
            return {}
        prefix = "match_idx_server_"
        return {key[len(prefix) :]: value for key, value in status.items() if key.startswith(prefix)}

    def last_log_index(self) -> int:
        """The index of the last entry in this replica's log (committed or not)."""
        entries = self.journal
        return entries[-1][1] if len(entries) else 0

    def add_member(self, address: str, spec: str, callback: Callable[[Any, Any], None]) -> None:
        """Proposes adding a voter (forwarded to the leader by pysyncobj); `callback(result, FAIL_REASON)` once it
        has committed or been refused (a change still in flight, no leader, already a member)."""
        self.addNodeToCluster(raft_node(address, spec), callback)

    def ask_leader_to_hand_over(self) -> None:
        """Asks the partition's leader (another node) to transfer its leadership: what removing it needs first."""

        def ask() -> None:
            leader = self._getLeader()
            if leader is not None and leader != self.selfNode:
                self._transport.send(leader, {"type": HAND_OVER})

        self.on_tick_thread(ask)

    def on_tick_thread(self, call: Callable[[], None]) -> None:
        """Runs `call` on the replica's tick thread, at the end of its next tick (from any thread): whatever sends on
        pysyncobj's connections or reads its Raft state must, since neither is safe across threads."""
        self._tick_calls.append(call)
        self._wake()

    def _run_tick_calls(self) -> None:
        while self._tick_calls:
            call = self._tick_calls.popleft()
            try:
                call()
            except Exception:
                log.exception("raft.tick_call_failed", extra=fields(partition=self.partition_id))

    def remove_member(self, address: str, callback: Callable[[Any, Any], None]) -> None:
        """Proposes removing a voter; the leader refuses to remove itself (it must hand the partition over first)."""
        self.removeNodeFromCluster(TCPNode(address), callback)

    def listening(self) -> bool:
        """Whether this replica's Raft port is bound (pysyncobj binds it on the replica's first tick, and retries
        every `bindRetryTime` while the port is taken)."""
        return bool(self._transport.ready)

    def is_connected(self, address: str) -> bool:
        """Whether this replica has a live Raft connection to the replica at `address`."""
        connected: bool = self.isNodeConnected(TCPNode(address))
        return connected

    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return leader.address if leader is not None else None

    def copy_store(self) -> GroupStore:
        """A consistent copy of the committed state, for a new leader's working core."""
        with self.lock:
            return self.store.copy()
