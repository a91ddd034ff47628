"""This node's share of the cluster: P partition replicas, the hosts that serve the ones it leads, and the
answers about the cluster (who coordinates a group, who is alive, who leads what).

Replicas are created on the event loop's thread (the main thread, which lives as long as the node:
pysyncobj's tick thread stops when the thread that created the instance dies). A poll task follows each
replica's Raft role and reports readiness: every partition has a leader, and the partitions this node leads
have committed their barrier (the cluster's), and whether this node serves (its own: ready once, and since then
in touch with a majority of the nodes). It runs at once when a replica's Raft state changes (pysyncobj's onStateChanged,
from the tick thread), so a new leader proposes its barrier without delay, and otherwise every
`POLL_INTERVAL_S` (`STEADY_POLL_INTERVAL_S` once the node is ready) for what has no callback (a follower learning
who leads, a membership change, the leader balancer).

It also runs the node-level heartbeat (raft/quiescence.py) that lets idle partitions stop their Raft heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from groupcoord.base.errors import StartupError, UserError
from groupcoord.base.logfields import fields
from groupcoord.coordinator import GroupConfig, GroupCoordinator
from groupcoord.node.balance import LeaderBalancer, preference_rank
from groupcoord.node.clock import ClusterClock, SystemClock
from groupcoord.node.events import EventFiles, PartitionEvents
from groupcoord.node.grouplog import GroupLog
from groupcoord.node.launcher import free_base
from groupcoord.node.partitions import PartitionHost, Role
from groupcoord.node.topology import (
    Peer,
    check_partition_count,
    format_peer,
    incarnation,
    parse_peers,
    partition_for,
    read_cluster_id,
    store_cluster_id,
)
from groupcoord.protocol import records as r
from groupcoord.raft.driver import RaftDriver
from groupcoord.raft.journal import JournalError
from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.quiescence import NodeLiveness
from groupcoord.raft.settings import RaftSettings

if TYPE_CHECKING:
    from groupcoord.node.metrics import PartitionObserver

log = logging.getLogger(__name__)

# The fallback period of the role poll while some partition lacks a leader; Raft state changes wake it at once.
POLL_INTERVAL_S = 0.05
# ... and once every partition has one: what it then catches (a membership change, the leader balancer's round)
# may wait this long, and an idle node does not run it twenty times a second (docs/PERFORMANCE.md, idle).
STEADY_POLL_INTERVAL_S = 0.5
# A refused transfer (the follower still catching up) is asked again after this long.
HAND_OVER_RETRY_S = 0.1
# How often a starting node looks whether its Raft ports are bound, before its gRPC server starts.
RAFT_BIND_POLL_S = 0.01


def compaction_phase(partition: int, partitions: int, peers: Sequence[Peer], node_id: int) -> float:
    """Where in each log-compaction round this replica takes its time-triggered snapshot (raft/patch_compaction.py):
    every replica of the cluster has its own slot, a node's own replicas a round/`partitions` apart, so that no node
    writes its snapshots back to back and no two nodes write theirs at once."""
    ordered = sorted(p.node_id for p in peers)
    slot = partition * len(ordered) + ordered.index(node_id)
    return slot / (partitions * len(ordered))


class NodeCluster:
    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        advertised_host: str,
        peers_text: str,
        raft_port: int,
        partitions: int,
        data_dir: str,
        secret: str,
        group_config: GroupConfig,
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[r.Record]], None] | None = None,
        observer: PartitionObserver | None = None,
        events: EventFiles | None = None,
        raft_settings: RaftSettings | None = None,
        wall_clock_offset_s: int = 0,
    ) -> None:
        peers = parse_peers(peers_text)
        if peers:
            if not secret:
                raise UserError("cluster_secret is required when peers are given")
            me = next((p for p in peers if p.node_id == node_id), None)
            if me is None:
                raise UserError(f"peers does not list this node's id {node_id}")
            self.peers = peers
        else:
            secret = secret or secrets.token_urlsafe(24)
            # Below the ephemeral range (node/launcher.py): an outgoing connection, a client's health check of this
            # very node among them, could otherwise take one of the ports before its replica binds it.
            base = raft_port or free_base(host, partitions, set())
            self.peers = [Peer(node_id, advertised_host, port, base)]
            me = self.peers[0]
        self.node_id = node_id
        # INFO lines per membership change and rebalance, for the records this node's coordinators make.
        self.group_log = GroupLog(node_id)
        self.me = me
        # Raft's key, and the key of the callers one node hands requests on for (node/forwarding.py).
        self.secret = secret
        self.partitions = partitions
        # The cores' settings, topic registry's included (node/topics.py).
        self.group_config = group_config
        # What `peers` said at start: a partition's first voters. Membership changes (node/membership.py) go
        # through each partition's log, and the directory below follows them.
        self._configured = self.peers
        self._spec_peers: dict[str, Peer | None] = {format_peer(p): p for p in self.peers}
        self._members: list[list[Peer]] = [list(self.peers) for _ in range(partitions)]
        self._tmp = None if data_dir else tempfile.TemporaryDirectory(prefix="groupcoord-")
        root = Path(data_dir or self._tmp.name)  # type: ignore[union-attr]  # _tmp is set when data_dir is not
        check_partition_count(root, partitions, [p.node_id for p in self.peers])
        self._root = root
        # This data directory's incarnation: Raft messages carry it, and a node id seen with a new one had its data
        # directory replaced (its replicas are fresh and catch up before they vote; raft/journal.py).
        self.incarnation = incarnation(root)
        self.incarnations: dict[int, str] = {node_id: self.incarnation}
        self._incarnations_seen: dict[int, set[str]] = {node_id: {self.incarnation}}
        # Shared by this node's replicas: one writes its snapshot at a time (raft/patch_compaction.py).
        self._compaction_gate = threading.Lock()
        # Minted by partition 0's first serving leader and learned from its log (raft/partition.py), then stored
        # in cluster.json; Raft messages carry it and those of another cluster are dropped (raft/transport.py).
        self.cluster_id = read_cluster_id(root)
        # Where this node's event files are (node/events.py); None when it writes none.
        self.events_root = root if events is not None and events.max_segments else None
        self._by_raft_address = {p.raft_address(k): p for p in self.peers for k in range(partitions)}
        offset_ns = wall_clock_offset_s * 1_000_000_000
        self.clock = clock = SystemClock(wall_ns=lambda: time.time_ns() + offset_ns)
        settings = raft_settings or RaftSettings()
        self._loop = loop
        self._state_changed = asyncio.Event()
        self.hosts: list[PartitionHost] = []
        # The node-level heartbeat that lets idle partitions go quiet (raft/quiescence.py), on the Raft base port.
        self.liveness: NodeLiveness | None = None
        if settings.quiesce_after_s > 0:
            try:
                self.liveness = NodeLiveness(
                    node_id,
                    (host, me.raft_port),
                    secret,
                    peers=self._liveness_peers,
                    claims=self._claims,
                    on_change=self._wake_replicas,
                    interval_s=settings.append_entries_period_s,
                    silent_after_s=settings.election_min_s,
                    cluster_id=lambda: self.cluster_id,
                )
            except OSError as exc:
                raise StartupError(f"cannot bind the node heartbeat's UDP port {host}:{me.raft_port}: {exc}") from None
        # With `raft_threads = node`, one thread ticks every replica of this node (raft/driver.py).
        self.driver = RaftDriver() if settings.threads == "node" else None
        for k in range(partitions):
            writer = events.writer(root, k) if events is not None else None
            try:
                replica = self._replica(k, node_id, me, secret, root, settings, host, writer)
            except JournalError as exc:
                for started in self.hosts:
                    started.replica.destroy()
                if self.driver is not None:
                    self.driver.stop()
                if self.liveness is not None:
                    self.liveness.stop()
                raise StartupError(str(exc)) from None
            # Records and retention use the time most of the partition's voters agree on, not this node's alone.
            partition_clock = ClusterClock(clock, replica.peer_wall_ms)
            self.hosts.append(
                PartitionHost(replica, group_config, partition_clock, loop, on_commit=on_commit, observer=observer)
            )
        self._ready = asyncio.Event()
        self._on_ready_change: Callable[[bool], object] | None = None
        # This node's own readiness (Kubernetes'): once ready, kept while it reaches a majority of the nodes.
        self._joined = False
        self._serving = False
        self._on_serving_change: Callable[[bool], object] | None = None
        if self.cluster_id is not None:
            for partition_host in self.hosts:  # a replica created while partition 0 was learning the id missed it
                partition_host.replica.set_cluster_id(self.cluster_id)
        self._refresh_directory()
        if self.liveness is not None:
            self.liveness.start()
        self._balancer = LeaderBalancer(node_id, self.members_of, self.hosts)
        self._poller = loop.create_task(self._poll())

    def _replica(
        self,
        k: int,
        node_id: int,
        me: Peer,
        secret: str,
        root: Path,
        settings: RaftSettings,
        host: str,
        writer: PartitionEvents | None,
    ) -> PartitionReplica:
        return PartitionReplica(
            k,
            node_id,
            me.raft_address(k),
            [p.raft_address(k) for p in self.peers if p.node_id != node_id],
            secret,
            str(root / f"partition-{k}"),
            settings,
            # Peers know this replica by its address in `peers`; it listens on this node's host.
            bind_address=f"{host}:{me.raft_port + k}",
            on_events=writer.write if writer is not None else None,
            on_live_events=self.group_log,
            on_state_change=self._wake_poll,
            peer_specs={p.raft_address(k): format_peer(p) for p in self.peers},
            cluster_id=self.cluster_id,
            on_cluster_id=self._learn_cluster_id if k == 0 else None,
            wall_ms=self.clock.wall_ms,
            incarnation=self.incarnation,
            liveness=self.liveness,
            node_of=self._node_of,
            first_election_rank=preference_rank(k, self.peers, node_id),
            compaction_gate=self._compaction_gate,
            compaction_phase=compaction_phase(k, self.partitions, self.peers, node_id),
            driver=self.driver,
        )

    def _node_of(self, raft_address: str | None) -> int | None:
        peer = self._by_raft_address.get(raft_address or "")
        return peer.node_id if peer is not None else None

    def _liveness_peers(self) -> dict[int, tuple[str, int]]:
        """Where the node heartbeat goes (on the liveness thread): every node known, at its Raft base port."""
        return {p.node_id: (p.host, p.raft_port) for p in (*self._configured, *self.peers)}

    def _claims(self) -> dict[int, int]:
        """The partitions this node leads and their terms (on the liveness thread)."""
        return {h.partition_id: h.replica.term() for h in self.hosts if h.replica.is_leader()}

    def _wake_replicas(self) -> None:
        for host in self.hosts:
            if host.replica.quiescence is not None:
                host.replica.quiescence.stir(host.replica._wake)

    def _learn_cluster_id(self, cluster_id: str) -> None:
        """Partition 0 applied its cluster id entry (on its tick thread, or while it starts)."""
        if self.cluster_id == cluster_id:
            return
        if self.cluster_id is not None:
            log.error(
                "cluster.id_conflict",
                extra=fields(stored=self.cluster_id, in_log=cluster_id, data_dir=str(self._root)),
            )
            return
        try:
            store_cluster_id(self._root, cluster_id)
        except OSError as exc:
            log.error("cluster.id_not_stored", extra=fields(error=str(exc), data_dir=str(self._root)))
        self.cluster_id = cluster_id
        log.info("cluster.id", extra=fields(cluster_id=cluster_id))
        for host in list(self.hosts):
            host.replica.set_cluster_id(cluster_id)

    def replicas(self) -> list[PartitionReplica]:
        return [h.replica for h in self.hosts]

    async def wait_listening(self, timeout_s: float) -> list[int]:
        """Until every replica's Raft port is bound, or `timeout_s`; the partitions still unbound then.

        The gRPC server starts after this: a voter adds a node only once all its Raft ports answer
        (node/membership.py), and a start hook asks for that as soon as the server answers."""
        deadline = time.monotonic() + timeout_s
        while True:
            unbound = [h.partition_id for h in self.hosts if not h.replica.listening()]
            if not unbound or time.monotonic() >= deadline:
                return unbound
            await asyncio.sleep(RAFT_BIND_POLL_S)

    # -- leadership and readiness -----------------------------------------------------------------------

    def watch_ready(self, callback: Callable[[bool], object]) -> None:
        self._on_ready_change = callback

    def ready(self) -> bool:
        return self._ready.is_set()

    def watch_serving(self, callback: Callable[[bool], object]) -> None:
        """This node's readiness, not the cluster's: it turns true the first time the node is ready (it has learned
        every partition's leader) and stays true while the node reaches a majority of the nodes, so an election
        (a partition without a leader for a moment) leaves every node that can forward clients serving."""
        self._on_serving_change = callback

    def _reaches_majority(self) -> bool:
        return 2 * sum(self.alive(p) for p in self.peers) > len(self.peers)

    def _wake_poll(self) -> None:
        """A replica's Raft state changed (on its tick thread): the poll runs now."""
        try:
            self._loop.call_soon_threadsafe(self._state_changed.set)
        except RuntimeError:
            log.debug("node.state_change_after_loop_closed", extra=fields(node_id=self.node_id))

    async def _poll(self) -> None:
        while True:
            self._state_changed.clear()
            for host in self.hosts:
                try:
                    host.poll()
                except Exception:
                    log.exception("partition.poll_failed", extra=fields(partition=host.partition_id))
            self._refresh_directory()
            self._balancer.maybe_transfer()
            ready = all(
                h.role is Role.LEADER if h.replica.is_leader() else h.replica.leader_address() is not None
                for h in self.hosts
            )
            if ready != self._ready.is_set():
                (self._ready.set if ready else self._ready.clear)()
                log.info("node.ready" if ready else "node.not_ready", extra=fields(node_id=self.node_id))
                if self._on_ready_change is not None:
                    self._on_ready_change(ready)
            self._joined = self._joined or ready
            serving = self._joined and self._reaches_majority()
            if serving != self._serving:
                self._serving = serving
                log.info("node.serving" if serving else "node.not_serving", extra=fields(node_id=self.node_id))
                if self._on_serving_change is not None:
                    self._on_serving_change(serving)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the event's result when it is set as
            # the task is cancelled, dropping the cancellation, and this loop then outlived a node's shutdown.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STEADY_POLL_INTERVAL_S if ready else POLL_INTERVAL_S):
                    await self._state_changed.wait()

    # -- membership -------------------------------------------------------------------------------------

    def _peer(self, address: str, spec: str | None) -> Peer | None:
        if not spec:
            return self._by_raft_address.get(address)
        if spec not in self._spec_peers:
            try:
                self._spec_peers[spec] = parse_peers(spec)[0]
            except (UserError, IndexError):
                log.error("membership.bad_voter_spec", extra=fields(address=address, spec=spec))
                self._spec_peers[spec] = None
        return self._spec_peers[spec] or self._by_raft_address.get(address)

    def _refresh_directory(self) -> None:
        """Each partition's voters as its replica here knows them, and from them the nodes of the cluster: the
        peers a client is told about, and who leads what by Raft address."""
        members: list[list[Peer]] = []
        for host in self.hosts:
            peers = [self._peer(a, spec) for a, spec in host.replica.members().items()]
            members.append(sorted((p for p in peers if p is not None), key=lambda p: p.node_id))
        self._members = members
        nodes = {p.node_id: p for voters in members for p in voters}
        self.peers = [nodes[i] for i in sorted(nodes)]
        known = {p.node_id: p for p in self._configured} | nodes
        self._by_raft_address = {p.raft_address(k): p for p in known.values() for k in range(self.partitions)}
        self._learn_incarnations()
        # A replica whose log lags a membership change must still hear the nodes its other partitions count as
        # voters (a leader the change made): they are its guests (raft/transport.py).
        for k, host in enumerate(self.hosts):
            own = {p.node_id for p in members[k]} | {self.node_id}
            host.replica.set_guests(frozenset(p.raft_address(k) for p in self.peers if p.node_id not in own))

    def _learn_incarnations(self) -> None:
        """Each peer's incarnation as its Raft messages carry it; a new one for a known node id is logged once."""
        for host in self.hosts:
            for address, inc in host.replica.peer_incarnations().items():
                peer = self._by_raft_address.get(address)
                if peer is None:
                    continue
                seen = self._incarnations_seen.setdefault(peer.node_id, set())
                if inc in seen:
                    continue
                previous = self.incarnations.get(peer.node_id)
                seen.add(inc)
                self.incarnations[peer.node_id] = inc
                if previous is not None:
                    log.warning(
                        "raft.new_incarnation",
                        extra=fields(
                            node=peer.node_id,
                            incarnation=inc,
                            previous=previous,
                            action="its data directory is new (a lost volume, a replacement machine): its replicas "
                            "take no part in elections until they have caught up",
                        ),
                    )

    def members_of(self, partition: int) -> list[Peer]:
        """The partition's voters as this node knows them, by node id."""
        return self._members[partition]

    def host_for(self, group_id: str) -> PartitionHost:
        return self.hosts[partition_for(group_id, self.partitions)]

    def leader_of(self, partition: int) -> Peer | None:
        """The node that leads `partition` as far as this node knows; only a serving leader names itself."""
        host = self.hosts[partition]
        if host.replica.is_leader():
            return self.me if host.role is Role.LEADER else None
        address = host.replica.leader_address()
        return self._by_raft_address.get(address) if address else None

    def leading_cores(self) -> list[GroupCoordinator]:
        return [h.core for h in self.hosts if h.core is not None]

    def groups_led(self) -> int:
        """Groups in the working cores of the partitions this node leads: what `max_groups_per_node` counts (the
        load this node serves as leader; every node also keeps the committed state of every partition)."""
        return sum(len(core.store.groups) for core in self.leading_cores())

    def alive(self, peer: Peer) -> bool:
        if peer.node_id == self.node_id:
            return True
        return any(h.replica.is_connected(peer.raft_address(h.partition_id)) for h in self.hosts)

    # -- shutdown -------------------------------------------------------------------------------------

    async def hand_over(self, timeout_s: float) -> list[int]:
        """Moves the leadership of every partition this node leads to its most caught-up connected follower
        (Raft's TimeoutNow), so that a planned stop costs clients a redirect instead of an election timeout.
        Best effort within `timeout_s`; returns the partitions still led here."""
        deadline = time.monotonic() + timeout_s
        while True:
            led = [h for h in self.hosts if h.replica.is_leader()]
            if not led or len(self.peers) < 2 or time.monotonic() >= deadline:
                return [h.partition_id for h in led]
            for host in led:
                host.replica.transferLeadership()
            await asyncio.sleep(HAND_OVER_RETRY_S)

    def close(self) -> None:
        """Answers every parked request (COORDINATOR_NOT_AVAILABLE) and stops the Raft replicas."""
        self._poller.cancel()
        if self.liveness is not None:
            self.liveness.stop()
        for host in self.hosts:
            host.step_down("node stopping")
            host.replica.destroy()
        if self.driver is not None:
            self.driver.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
