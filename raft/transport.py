"""pysyncobj's TCP transport with a durability barrier: no Raft message leaves before the journal is durable.

Every reply that depends on persistent state — a vote (term and vote), a pre-vote, an AppendEntries
acknowledgement (the entries) — is sent through here. While the journal holds records not yet on stable storage,
such messages are deferred; our patch of pysyncobj
(raft/syncobj_patch.py, `durability_barrier`) calls `flushDeferred` right before and right after each poll, which
fdatasyncs once for everything recorded in that tick (group commit) and then sends what waited. While the journal
cannot be written (disk full, I/O error) the deferred messages are dropped: the replica is mute — it neither
acknowledges nor leads — and Raft's own retransmission resumes once a later flush succeeds.

A leader's AppendEntries is not deferred: the leader's disk write overlaps its followers' (one fdatasync on the
commit path instead of two in a row), and the `leader_self_count` hunk counts the leader toward a quorum only for
entries up to the journal's `durableIndex`.

It also keeps what a leader lease needs (`lease_base`): each AppendEntries carries its send time (`ts`, the
leader's monotonic clock), each acknowledgement echoes the `ts` of the AppendEntries it answers, and the leader
keeps the latest echoed `ts` per follower. Nodes without it ignore the extra key. The same echo gives the leader each
follower's round trip for free (`round_trips`: the AppendEntries' send to its acknowledgement's arrival, the
follower's journal flush included), kept as a fixed-bucket histogram per follower. Each acknowledgement also
carries the follower's wall time (`wt`, ms), from which the leader derives the time most voters agree on for its
records and offset retention (node/clock.py, `ClusterClock`).

And the cluster's identity: once the node knows its cluster id, every message carries it (`cid`), and a message that
carries another is dropped, counted and logged (`raft.foreign_cluster`). Every message also carries the sender's
incarnation id (`inc`: its data directory's), which the node reports and logs when it changes.

And guests: pysyncobj talks only to the nodes of its replica's own configuration, so a follower whose log lags a
membership change (it holds "remove node 1" but not the later "add node 1") refused the leader the change made, and
never caught up (found by a chaos run: a wiped node killed while it caught up). Raft has servers process RPCs
whatever their configuration, so the node gives each replica as *guests* the nodes its other partitions count as
voters (`wanted_guests`): the transport connects to and accepts them, and delivers their messages, without pysyncobj
counting them anywhere. A guest that the log makes a member later is handed over to pysyncobj's own node.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.node import TCPNode
from pysyncobj.transport import TCPTransport

from groupcoord.base.logfields import fields
from groupcoord.raft.journal import CheckedJournal
from groupcoord.raft.quiescence import Quiescence
from groupcoord.raft.wire import install as install_wire

log = logging.getLogger(__name__)
# Every connection of this transport sends stored zlib streams instead of compressed ones (raft/wire.py).
install_wire()

# A follower asks the leader to hand its partition over (its own message type: pysyncobj ignores unknown ones).
HAND_OVER = "gc_hand_over"
# The key of every message that carries the sender's cluster id (old nodes ignore keys they do not read).
CLUSTER_ID_KEY = "cid"
# The key of every message that carries the sender's incarnation id (its data directory's, node/topology.py).
INCARNATION_KEY = "inc"
# The key of AppendEntries from a leader whose partition is going quiet (raft/quiescence.py).
QUIET_KEY = "q"
# One raft.foreign_cluster line per sending node per this many seconds; the metric counts every message.
FOREIGN_LOG_S = 10.0
# Round-trip buckets (seconds): from a LAN hop (~0.1 ms) through a follower's fdatasync to a stalled peer.
ROUND_TRIP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class RoundTrips:
    """A histogram of one follower's round trips, written by the tick thread alone; a reader may see it mid-update
    (a bucket one ahead of the sum), which a scrape tolerates."""

    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(ROUND_TRIP_BUCKETS) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(ROUND_TRIP_BUCKETS, seconds)] += 1
        self.sum += seconds


class DurableTransport(TCPTransport):  # type: ignore[misc]  # pysyncobj has no type hints
    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, journal: CheckedJournal) -> None:
        self._journal = journal
        self._deferred: list[tuple[Any, Any]] = []
        # Leader lease: when each follower's latest acknowledgement was sent (our monotonic clock), and, on a
        # follower, the send time of the latest AppendEntries from each node, echoed in the acknowledgement.
        self._acked: dict[Any, float] = {}
        self._echo: dict[Any, float] = {}
        # On a leader, each follower's round trips by its Raft address (entries added by the tick thread only).
        self.round_trips: dict[str, RoundTrips] = {}
        # Each follower's wall time (ms) as its latest acknowledgement gave it, and when that arrived (monotonic).
        self.wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
        self._walls: dict[Any, tuple[int, float]] = {}
        # The cluster this node belongs to (node/cluster.py sets it once known): stamped on every message, and a
        # message stamped with another is dropped, so a node of another cluster (a volume mixed up, a peers list
        # pointing at the wrong machines, the same secret reused) can neither vote nor overwrite this log.
        self.cluster_id: str | None = None
        self.foreign_messages = 0
        self._foreign_logged: dict[Any, float] = {}
        # This node's incarnation (stamped on every message) and the latest one each peer's messages carried, by
        # Raft address (written on the tick thread, read whole from the event loop).
        self.incarnation: str | None = None
        self.peer_incarnations: dict[str, str] = {}
        # Raft addresses of nodes outside the configuration to talk to anyway (set from the event loop as a whole
        # frozenset; the tick thread reconciles `_guests`, the transport's own nodes for them, with it).
        self.wanted_guests: frozenset[str] = frozenset()
        # The replica's quiet state (raft/quiescence.py), or None: AppendEntries of a resting leader carry `q`.
        self.quiescence: Quiescence | None = None
        self._reconciled: frozenset[str] | None = None
        self._guests: dict[str, Any] = {}
        super().__init__(syncObj, selfNode, otherNodes)

    def lease_base(self) -> float:
        """The latest time a majority (this node included) is known to have heard from this node as leader.

        A follower that heard from a leader grants no pre-vote for the pre-vote window after (our patch of
        pysyncobj), and a new leader needs pre-votes from a majority, which overlaps this one: so no other leader
        can be elected before this time plus that."""
        others = self._syncObj.otherNodes  # the current voters: membership changes replace pysyncobj's set
        needed = (len(others) + 1) // 2  # acknowledgements that, with this node's own, make a majority
        if needed == 0:
            return time.monotonic()
        acked = sorted((self._acked.get(node, float("-inf")) for node in others), reverse=True)
        return acked[needed - 1]

    def acked_at(self, node: Any) -> float:
        """The send time (monotonic) of the latest AppendEntries that node acknowledged; -inf if none."""
        return self._acked.get(node, float("-inf"))

    def peer_wall_ms(self) -> tuple[list[int], int]:
        """The other voters' wall times as their latest acknowledgements gave them, carried forward to now by this
        node's monotonic clock, and how many voters there are (this node included)."""
        others = self._syncObj.otherNodes
        now = time.monotonic()
        walls = self._walls.copy()  # written by the tick thread
        readings = [wt + int((now - at) * 1000) for node, (wt, at) in walls.items() if node in others]
        return readings, len(others) + 1

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if isinstance(message, dict):
            kind, ts = message.get("type"), message.get("ts")
            theirs = message.get(CLUSTER_ID_KEY)
            if theirs is not None and self.cluster_id is not None and theirs != self.cluster_id:
                self._refuse_foreign(node, theirs)
                return
            inc = message.get(INCARNATION_KEY)
            if isinstance(inc, str) and getattr(node, "address", None) is not None:
                self.peer_incarnations[node.address] = inc[:64]
            if kind == HAND_OVER:
                # A voter is being removed while it leads (node/membership.py): pysyncobj's leader cannot remove
                # itself, so it hands the partition to its most caught-up follower first.
                if self._syncObj._isLeader():
                    self._syncObj.transferLeadership()
                return
            if kind == "append_entries":
                if ts is not None:
                    self._echo[node] = ts
                if self.quiescence is not None:
                    self.quiescence.mark(node, message.get("term"), bool(message.get(QUIET_KEY)))
            elif kind == "next_node_idx":
                # Only a newer echo is a round trip: a repeated one would count the time since its first.
                if ts is not None and ts > self._acked.get(node, float("-inf")):
                    self._acked[node] = ts
                    self._observe_round_trip(node, time.monotonic() - ts)
                wt = message.get("wt")
                if isinstance(wt, int) and not isinstance(wt, bool):
                    self._walls[node] = (wt, time.monotonic())
        super()._onMessageReceived(node, message)

    def _observe_round_trip(self, node: Any, seconds: float) -> None:
        address = getattr(node, "address", None)
        if address is None:
            return
        trips = self.round_trips.get(address)
        if trips is None:
            trips = self.round_trips[address] = RoundTrips()
        trips.observe(seconds)

    def _refuse_foreign(self, node: Any, theirs: Any) -> None:
        self.foreign_messages += 1
        now = time.monotonic()
        if now - self._foreign_logged.get(node, float("-inf")) >= FOREIGN_LOG_S:
            self._foreign_logged[node] = now
            log.error(
                "raft.foreign_cluster",
                extra=fields(
                    peer=str(node),
                    their_cluster_id=str(theirs)[:64],
                    cluster_id=self.cluster_id,
                    action="its Raft messages are dropped: check that node's peers list and data directory",
                ),
            )

    def send(self, node: Any, message: Any) -> bool:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind is not None and self.cluster_id is not None:
            message[CLUSTER_ID_KEY] = self.cluster_id
        if kind is not None and self.incarnation is not None:
            message[INCARNATION_KEY] = self.incarnation
        if kind == "append_entries":
            message["ts"] = time.monotonic()
            if self.quiescence is not None and self.quiescence.resting_since is not None:
                message[QUIET_KEY] = 1
        elif kind == "next_node_idx":
            message["wt"] = self.wall_ms()
            if node in self._echo:
                message["ts"] = self._echo[node]
        # A leader's AppendEntries may leave before its own copy is durable (Raft thesis §10.2.1: the leader
        # writes in parallel with its followers); it counts itself toward a quorum only up to `durableIndex`.
        leader_append = kind == "append_entries" and self._journal.write_error is None
        if leader_append or (not self._deferred and self._journal.durable):
            return bool(super().send(node, message))
        self._deferred.append((node, message))
        return True

    def addNode(self, node: Any) -> None:
        guest = self._guests.pop(node.address, None)
        if guest is not None:  # the log made it a member: pysyncobj's node takes the guest's place
            super().dropNode(guest)
        super().addNode(node)

    def _reconcile_guests(self) -> None:
        """On the tick thread: a transport node for each wanted guest that is not a member, none for the others."""
        wanted = self.wanted_guests
        if wanted is self._reconciled:
            return
        self._reconciled = wanted
        members = {node.address for node in self._syncObj.otherNodes} | {self._selfNode.address}
        for address in list(self._guests):
            if address not in wanted or address in members:
                super().dropNode(self._guests.pop(address))
        for address in sorted(wanted - members - self._guests.keys()):
            self._guests[address] = guest = TCPNode(address)
            super().addNode(guest)

    def guests(self) -> list[str]:
        return sorted(self._guests)

    def flushDeferred(self) -> None:
        self._reconcile_guests()
        if not self._journal.sync():
            self._deferred.clear()
            return
        deferred, self._deferred = self._deferred, []
        for node, message in deferred:
            super().send(node, message)
