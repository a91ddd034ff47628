"""Quiescence: an idle partition sends no Raft heartbeats; one node-level heartbeat keeps its followers calm.

Each partition's leader sends AppendEntries to every follower every `append_entries_period_s` (50 ms), so a node
with 16 idle partitions handled about 1,300 Raft messages a second and a 3-node cluster used half a core doing
nothing (docs/PERFORMANCE.md). CockroachDB's answer is quiescence, and it is ours:

* A leader whose log is fully replicated and committed, and whose lease no one has asked for (every reply does) for
  `quiesce_after_s`, starts resting: its AppendEntries carry `q`, which marks the partition quiet at each follower
  (`mark`), and the commit index. Once every follower has acknowledged one of them, it stops sending
  AppendEntries. Any new entry, a lease check that finds the lease expired (`touch(wake=True)`), a change among
  the nodes (`stir`) or a leadership change ends the quiet at once.
* Every node sends every other node a small signed UDP datagram every `interval_s` (on its Raft base port): it is
  alive, and it leads these partitions in these terms (`NodeLiveness`). A quiet follower counts that as hearing
  from its leader: its election timer runs from the leader node's latest datagram instead of the latest
  AppendEntries, and it refuses pre-votes while that is recent (raft/patch_quiescence.py, the `quiet_*` hunks). When
  the leader node falls silent or stops claiming the partition, the follower's timer runs out exactly as it would
  have without quiescence, so failover takes as long as before.
* A quiet leader counts its followers' datagrams toward its leader fallback timeout, and both sides poll every
  `rest_tick_s` instead of every tick period; anything that needs them sooner wakes their poll (`wake`).

Safety does not depend on any of this: terms, votes, the log and leases are Raft's as before. The lease only ever
grows from real acknowledgements (raft/transport.py), so a quiet leader's lease runs out, and its next reply waits
for one round of AppendEntries that the lease check itself wakes. The datagrams carry an HMAC-SHA256 under a key
derived from the cluster secret, the sender's boot id (random per process) and a sequence number that must grow
within a boot, so a forged or replayed datagram cannot keep a dead leader's followers waiting. No wall time: a node
whose clock is wrong is a case the cluster handles (node/clock.py), and its heartbeat must still count.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack
from pysyncobj.monotonic import monotonic as raft_clock

from groupcoord.base.logfields import fields

log = logging.getLogger(__name__)

DATAGRAM_VERSION = 1
KEY_CONTEXT = b"groupcoord node liveness v1"
TAG_BYTES = 16
# The boots remembered per node (each with its highest sequence number): a replay of an older boot is dropped too.
BOOTS_KEPT = 8
# Peer host names are resolved again after this long (a Kubernetes pod that came back has a new address).
RESOLVE_EVERY_S = 10.0
MAX_DATAGRAM = 65_507


def liveness_key(secret: str) -> bytes:
    return hmac.new(secret.encode(), KEY_CONTEXT, hashlib.sha256).digest()


class NodeLiveness:
    """This node's heartbeat to every other node, and what theirs said; one thread per node.

    `peers()` gives the other nodes' UDP addresses by node id (their Raft host and base port); `claims()` the
    partitions this node leads and their terms; `on_change()` runs on this thread when a node falls silent, comes
    back, restarts or changes its claims (the node then ends its replicas' quiet: `Quiescence.stir`)."""

    def __init__(
        self,
        node_id: int,
        bind: tuple[str, int],
        secret: str,
        peers: Callable[[], dict[int, tuple[str, int]]],
        claims: Callable[[], dict[int, int]],
        on_change: Callable[[], None],
        interval_s: float,
        silent_after_s: float,
        cluster_id: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.node_id = node_id
        self.interval_s = interval_s
        self.silent_after_s = silent_after_s
        self._key = liveness_key(secret)
        self._peers = peers
        self._claims = claims
        self._on_change = on_change
        self._cluster_id = cluster_id
        self._boot = int.from_bytes(os.urandom(8), "big")
        self._seq = 0
        # Per sender node id: when its latest datagram came, its (boot, seq), and its claims. Written by this thread
        # only; read from the replicas' tick threads (plain dict reads of whole values). Times are pysyncobj's clock
        # (CLOCK_MONOTONIC_RAW, not time.monotonic's): our patch compares them with its election deadlines.
        self._heard: dict[int, float] = {}
        self._order: dict[int, dict[int, int]] = {}
        self._led: dict[int, dict[int, int]] = {}
        self._silent: set[int] = set()
        self._resolved: dict[tuple[str, int], tuple[Any, float]] = {}
        self.dropped = 0
        host, port = bind
        info = socket.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)[0]
        self._family = info[0]
        self._sock = socket.socket(info[0], socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._sock.bind(info[4])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-liveness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self.interval_s + 1)
        self._sock.close()

    # -- what replicas ask (any thread) ----------------------------------------------------------------

    def heard_at(self, node_id: int | None) -> float:
        """When that node's latest datagram came (pysyncobj's clock); -inf if never or unknown."""
        if node_id is None:
            return float("-inf")
        return self._heard.get(node_id, float("-inf"))

    def leads(self, node_id: int | None, partition: int, term: int) -> bool:
        """Whether that node's latest datagram claimed `partition` in `term`."""
        return node_id is not None and self._led.get(node_id, {}).get(partition) == term

    # -- the thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        """One wake-up per interval: read what came, note who fell silent, send ours (reading datagrams as they
        arrive would wake the thread three times as often, and a datagram is never needed sooner)."""
        while not self._stop.wait(self.interval_s):
            try:
                self._receive_all()
                self._check_silence(raft_clock())
                self._send_all()
            except Exception:
                log.exception("raft.liveness_failed", extra=fields(node_id=self.node_id))

    def _datagram(self) -> bytes:
        self._seq += 1
        body = msgpack.packb(
            [
                DATAGRAM_VERSION,
                self._cluster_id() or "",
                self.node_id,
                self._boot,
                self._seq,
                self._claims(),
            ]
        )
        return hmac.new(self._key, body, hashlib.sha256).digest()[:TAG_BYTES] + body

    def _send_all(self) -> None:
        data = self._datagram()
        for node_id, address in self._peers().items():
            if node_id == self.node_id:
                continue
            target = self._resolve(address)
            if target is None:
                continue
            try:
                self._sock.sendto(data, target)
            except OSError as exc:
                log.debug("raft.liveness_send_failed", extra=fields(peer=node_id, error=str(exc)))

    def _resolve(self, address: tuple[str, int]) -> Any:
        now = time.monotonic()
        cached = self._resolved.get(address)
        if cached is not None and now - cached[1] < RESOLVE_EVERY_S:
            return cached[0]
        target: tuple[Any, ...] | None
        try:
            infos = socket.getaddrinfo(address[0], address[1], family=self._family, type=socket.SOCK_DGRAM)
            target = infos[0][4]
        except (OSError, IndexError):
            target = cached[0] if cached is not None else None
        self._resolved[address] = (target, now)
        return target

    def _receive_all(self) -> None:
        changed = False
        while True:
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:  # reported for an earlier send to a stopped peer
                continue
            except OSError:  # the socket closed under us (stopping): nothing more to read
                break
            changed |= self._receive(data)
        if changed:
            self._on_change()

    def _receive(self, data: bytes) -> bool:
        """Takes one datagram; True when it changed a node's claims, ended its silence or came from a new boot (a
        restarted node knows no leader yet, and only AppendEntries tell it: quiet leaders must speak again)."""
        tag, body = data[:TAG_BYTES], data[TAG_BYTES:]
        if not hmac.compare_digest(tag, hmac.new(self._key, body, hashlib.sha256).digest()[:TAG_BYTES]):
            self.dropped += 1
            return False
        try:
            version, cluster_id, node_id, boot, seq, claims = msgpack.unpackb(body, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            self.dropped += 1
            return False
        ours = self._cluster_id()
        try:
            if version != DATAGRAM_VERSION or not isinstance(node_id, int) or not isinstance(boot, int):
                raise ValueError("not a heartbeat of this version")
            if (ours and cluster_id and cluster_id != ours) or node_id == self.node_id:
                raise ValueError("another cluster's, or this node's own")
            led = {int(k): int(v) for k, v in claims.items()}
        except (ValueError, TypeError, AttributeError):
            self.dropped += 1
            return False
        boots = self._order.setdefault(node_id, {})
        if not isinstance(seq, int) or seq <= boots.get(boot, -1):
            self.dropped += 1
            return False
        restarted = bool(boots) and boot not in boots
        boots.pop(boot, None)
        boots[boot] = seq  # the latest boot last: the oldest are forgotten first
        while len(boots) > BOOTS_KEPT:
            del boots[next(iter(boots))]
        self._heard[node_id] = raft_clock()
        changed = restarted or node_id in self._silent or self._led.get(node_id) != led
        self._silent.discard(node_id)
        self._led[node_id] = led
        return changed

    def _check_silence(self, now: float) -> None:
        fallen = [n for n, at in self._heard.items() if n not in self._silent and now - at >= self.silent_after_s]
        if fallen:
            self._silent.update(fallen)
            self._on_change()


class Quiescence:
    """One replica's quiet state; read by our patch of pysyncobj on the replica's tick thread."""

    def __init__(
        self,
        partition_id: int,
        liveness: NodeLiveness,
        node_of: Callable[[Any], int | None],
        acked: Callable[[Any], float],
        after_s: float,
        rest_tick_s: float,
    ) -> None:
        self.partition_id = partition_id
        self.rest_tick_s = rest_tick_s
        self._liveness = liveness
        self._node_of = node_of
        self._acked = acked
        self._after_s = after_s
        self._active = time.monotonic()
        self._woken = False
        self._last_index = -1
        # Leader: whether its latest tick skipped the heartbeats (for the metrics; stale once it leads no more).
        self.leading_quiet = False
        # Leader: since when (monotonic) the log has been settled and nothing has needed the partition; the
        # AppendEntries sent after it carry `q` (and the commit index), and once every voter acknowledged one it rests.
        self.resting_since: float | None = None
        # Follower: the (leader, term) whose latest AppendEntries carried `q`.
        self._mark: tuple[Any, int] | None = None

    # leader side

    def touch(self, wake: bool = False) -> None:
        """Someone needs this partition (from any thread); `wake` ends its quiet now."""
        self._active = time.monotonic()
        if wake:
            self._woken = True

    def stir(self, wake: Callable[[], None]) -> None:
        """Something changed among the nodes (one fell silent, came back, restarted, or leads other partitions):
        a quiet leader heartbeats again until it settles anew, and the replica's poll runs now."""
        self.touch(wake=True)
        wake()

    def leader_quiet(self, settled: bool, last_index: int, voters: Any) -> bool:
        """Whether the leader may skip its heartbeats now. A new entry only restarts the resting: the leader's own
        entries (barriers, state checks) need no one's attention afterwards, and a client's write checks the lease
        before its reply, which counts as being needed. A partition in use never marks its followers quiet, so
        their election timers are Raft's own."""
        now = time.monotonic()
        if self._woken:
            self._woken = False
            self._active = now
        if not settled or last_index != self._last_index or now - self._active < self._after_s:
            self._last_index = last_index
            self.resting_since = None
            self.leading_quiet = False
            return False
        if self.resting_since is None:
            self.resting_since = now
        since = self.resting_since
        self.leading_quiet = all(self._acked(node) > since for node in voters)
        return self.leading_quiet

    @property
    def liveness(self) -> NodeLiveness:
        return self._liveness

    def node_heard(self, node: Any) -> float:
        return self._liveness.heard_at(self._node_of(node))

    # follower side

    def mark(self, leader: Any, term: Any, quiet: bool) -> None:
        self._mark = (leader, term) if quiet else None

    def leader_heard(self, leader: Any, term: int) -> float | None:
        """When the leader's node was last heard, if this partition is quiet under it; else None."""
        if self._mark != (leader, term):
            return None
        node_id = self._node_of(leader)
        if not self._liveness.leads(node_id, self.partition_id, term):
            return None
        return self._liveness.heard_at(node_id)
