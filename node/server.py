"""A groupcoord node: one gRPC aio server on uvloop in front of this node's replicas of the P partitions."""

from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import gc
import ipaddress
import logging
import signal
import time
from pathlib import Path

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from groupcoord.base.errors import StartupError
from groupcoord.node import logs
from groupcoord.node.cluster import NodeCluster
from groupcoord.node.config_types import NodeSettings
from groupcoord.node.connections import ConnectionsPerAddress
from groupcoord.node.events import EventFiles
from groupcoord.node.forwarding import CallerForwarding
from groupcoord.node.handon import HandOn
from groupcoord.node.hostile import MalformedInput, MalformedLogFilter, guarded_server, install_log_filter
from groupcoord.node.kafka.apis import KafkaApis
from groupcoord.node.kafka.listener import KafkaListener
from groupcoord.node.kafka.metrics import KafkaMetrics
from groupcoord.node.kafka.sasl import Sasl
from groupcoord.node.logs import fields
from groupcoord.node.metrics import NodeMetrics
from groupcoord.node.resources import raise_fd_limit, trim_memory, use_jemalloc
from groupcoord.node.service import SERVICE_NAME, GroupCoordinatorService
from groupcoord.node.tls import peer_credentials, server_credentials, server_ssl_context
from groupcoord.raft.settings import RaftSettings

log = logging.getLogger("groupcoord.node")

# On SIGTERM a leader hands its partitions over for at most this long (and never longer than the grace period).
HAND_OVER_MAX_S = 3.0
# At start, the gRPC server starts once every Raft port is bound (a voter adds a node only once they all answer),
# or after this long with a warning: a port another process holds is retried every second, as before.
RAFT_BIND_WAIT_S = 10.0
# The collector's thresholds (CPython's default is 700, 10, 10). Every full collection freezes what survives it
# (`_freeze_survivors`), so what a collection walks is what the node made since the last one: small thresholds keep
# each pause short while 100,000 groups form (the longest 18-20 ms of CPU against 180-227 ms at 10,000, 10, 10), and
# a young collection is still rare under a steady load whose garbage goes by reference counting. Freezing that often
# keeps no request's garbage for good (bench/collector.py `leak`, run by tests/bench/test_bench.py; docs/PERFORMANCE.md,
# "The collector's pauses while 100,000 groups form").
GC_THRESHOLDS = (5_000, 3, 3)
HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Kubernetes' native gRPC probes ask these (deploy/k8s): liveness is SERVING from start to stop; readiness is this
# node's own (NodeCluster.watch_serving), where "" and the service's name are the whole cluster's (every
# partition led), which an election turns NOT_SERVING on every node at once.
LIVENESS, READINESS = "groupcoord.liveness", "groupcoord.readiness"


def open_access_warning(host: str, acl_file: str, tls: bool) -> str | None:
    """What an anonymous client could do when the node listens beyond this machine without an ACL, else None:
    said once at start, loudly, because every example that binds 0.0.0.0 would otherwise be open without a word."""
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback or acl_file:
        return None
    reach = "anyone who reaches this port" + ("" if tls else " (plaintext: and can read the traffic)")
    return (
        f"no acl_file while listening on {host}: {reach} may list and describe every group, commit and reset "
        "offsets, remove members, delete groups and topics, change the voters and read the event history "
        "(docs/SECURITY.md); set acl_file, or listen on a loopback address"
    )


def listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class Node:
    """One node's server and partitions; `start()` binds and serves, `stop()` shuts down gracefully."""

    def __init__(self, settings: NodeSettings) -> None:
        self._settings = settings
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._cluster: NodeCluster | None = None
        self._metrics: NodeMetrics | None = None
        self._log_filter: MalformedLogFilter | None = None
        self._kafka: KafkaListener | None = None
        # Background tasks that run as long as the server does: the memory trim, the per-address connection cap.
        self._tasks: list[asyncio.Task[None]] = []
        self._health_server: grpc.aio.Server | None = None

    async def start(self) -> int:
        """Returns the port it listens on (the one asked for, or the one picked for port 0)."""
        settings = self._settings
        loop = asyncio.get_running_loop()
        metrics: NodeMetrics | None = None
        if settings.metrics_port >= 0:
            metrics = NodeMetrics(settings.metrics_max_groups, settings.metrics_max_offsets)
        malformed = MalformedInput(metrics.on_malformed if metrics is not None else None)
        raise_fd_limit(settings.max_connections)
        self._log_filter = install_log_filter(malformed)
        server = guarded_server(server_options(settings), malformed)
        address = listen_address(settings.host, settings.port)
        credentials = server_credentials(settings)
        try:
            if credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {address}: {exc}") from None
        events = EventFiles(settings.events_segment_bytes, settings.events_max_segments)
        cluster = NodeCluster(
            settings.node_id,
            settings.host,
            port,
            settings.advertised_host,
            settings.peers,
            settings.raft_port,
            settings.partitions,
            settings.data_dir,
            settings.cluster_secret,
            settings.group,
            loop,
            on_commit=metrics.on_commit if metrics is not None else None,
            observer=metrics,
            events=events,
            raft_settings=raft_settings(settings),
            wall_clock_offset_s=settings.wall_clock_offset_s,
        )
        events.check_room(Path(settings.data_dir), settings.partitions)
        service = GroupCoordinatorService(
            cluster,
            settings.group.max_id_length,
            metrics,
            acl=settings.acl,
            max_response_bytes=settings.max_response_bytes,
            forwarding=CallerForwarding(cluster.secret),
            settings=settings.origins,
        )
        server.add_registered_method_handlers(SERVICE_NAME, service.method_handlers())
        extra: dict[str, str] = {}
        if settings.kafka_port >= 0:
            extra["kafka_address"] = await self._start_kafka(settings, service, cluster, metrics)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((SERVICE_NAME, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME), server)
        if metrics is not None:
            metrics.watch_cores(loop, cluster.leading_cores)
            metrics.watch_replicas(cluster.replicas)
            extra["metrics_address"] = listen_address(
                settings.host, metrics.serve(settings.host, settings.metrics_port)
            )
        for name in ("", SERVICE_NAME, READINESS):
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        # SERVING once every partition has a leader and those this node leads have committed their barrier.
        cluster.watch_ready(lambda ready: loop.create_task(self._set_health(("", SERVICE_NAME), ready)))
        cluster.watch_serving(lambda serving: loop.create_task(self._set_health((READINESS,), serving)))
        unbound = await cluster.wait_listening(RAFT_BIND_WAIT_S)
        if unbound:
            log.warning(
                "node.raft_ports_unbound",
                extra=fields(
                    partitions=unbound,
                    raft_port=settings.raft_port,
                    action="another process holds them; their replicas retry binding every second",
                ),
            )
        await server.start()
        if settings.health_port >= 0:
            extra["health_address"] = await self._start_health_port(settings)
        self._server, self._cluster, self._metrics = server, cluster, metrics
        if settings.memory_trim_interval_ms:
            self._tasks.append(loop.create_task(trim_memory(settings.memory_trim_interval_ms / 1000)))
        if settings.max_connections_per_ip:
            if ConnectionsPerAddress.available():
                per_ip = ConnectionsPerAddress(
                    port, settings.max_connections_per_ip, metrics.on_connections_cut if metrics is not None else None
                )
                self._tasks.append(loop.create_task(per_ip.run()))
            else:
                log.warning("node.max_connections_per_ip", extra=fields(enforced=False, why="no /proc/self/fd"))
        warning = open_access_warning(settings.host, settings.acl_file, credentials is not None)
        if warning is not None:
            log.warning("node.open_access", extra=fields(host=settings.host, why=warning))
        log.info(
            "node.started",
            extra=fields(
                node_id=settings.node_id,
                address=listen_address(settings.host, port),
                loop=type(loop).__module__,
                partitions=settings.partitions,
                raft_port=cluster.me.raft_port,
                tls="off" if credentials is None else f"on, client certificates: {settings.tls_client_auth}",
                **extra,
            ),
        )
        return port

    async def _start_kafka(
        self,
        settings: NodeSettings,
        service: GroupCoordinatorService,
        cluster: NodeCluster,
        metrics: NodeMetrics | None,
    ) -> str:
        """Binds the Kafka listener (TLS when the client port has it, SASL when asked); returns its address."""
        sasl = None
        if settings.kafka_sasl_mechanisms:
            assert settings.acl is not None  # config.py refuses SASL without an ACL file
            sasl = Sasl(settings.acl, settings.kafka_sasl_mechanisms)
        listener = KafkaListener(
            KafkaApis(
                service,
                cluster,
                service.topics,
                HandOn(cluster, peer_credentials(settings), service.forwarding),
                settings.kafka_fetch_max_wait_ms,
            ),
            settings.kafka_max_frame_bytes,
            settings.kafka_max_connections,
            KafkaMetrics(metrics.registry) if metrics is not None else None,
            ssl=server_ssl_context(settings),
            sasl=sasl,
        )
        try:
            port = await listener.start(settings.host, settings.kafka_port)
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {listen_address(settings.host, settings.kafka_port)} (kafka_port): {exc.strerror}"
            ) from None
        listener.apis.advertise(port, settings.kafka_advertised_host, settings.kafka_advertised_port)
        self._kafka = listener
        return listen_address(settings.host, port)

    async def _set_health(self, names: tuple[str, ...], ready: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in names:
            await self._health.set(name, status)

    async def _start_health_port(self, settings: NodeSettings) -> str:
        """The health service alone, in plaintext: the kubelet's gRPC probes speak no TLS, so a node whose client
        port serves TLS is probed here (the same servicer: the same answers)."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        address = listen_address(settings.host, settings.health_port)
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {address} (health_port): {exc}") from None
        await server.start()
        self._health_server = server
        return listen_address(settings.host, port)

    async def wait_for_termination(self) -> None:
        """Returns (or raises) when the gRPC server has stopped, asked to or not."""
        assert self._server is not None
        await self._server.wait_for_termination()

    async def stop(self) -> None:
        if self._server is None or self._cluster is None:
            return
        grace_ms = self._settings.shutdown_grace_ms
        log.info("node.stopping", extra=fields(grace_ms=grace_ms))
        await self._health.enter_graceful_shutdown()
        started = time.monotonic()
        kept = await self._cluster.hand_over(min(HAND_OVER_MAX_S, grace_ms / 1000))
        log.info("node.handed_over", extra=fields(still_led=kept, seconds=round(time.monotonic() - started, 3)))
        # Parked JoinGroup/SyncGroup calls would otherwise hold the whole grace period; their clients rediscover.
        self._cluster.close()
        if self._kafka is not None:
            await self._kafka.stop()
        await self._server.stop(grace_ms / 1000)
        self._server = None
        if self._health_server is not None:
            await self._health_server.stop(None)
        if self._metrics is not None:
            await asyncio.to_thread(self._metrics.close)
        if self._log_filter is not None:
            self._log_filter.remove()
        for task in self._tasks:
            task.cancel()
        log.info("node.stopped")


async def _main(settings: NodeSettings) -> int:
    """0 after SIGTERM/SIGINT; 1 when the gRPC server dies under the node."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, stop, sig)
    settle_collector()
    node = Node(settings)
    await node.start()
    signalled = asyncio.ensure_future(stop.wait())
    died = asyncio.ensure_future(node.wait_for_termination())
    try:
        await asyncio.wait((signalled, died), return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        if died.done() and not stop.is_set():
            # grpcio's aio server shuts itself down on some hostile input (a :path that is not UTF-8). A node
            # whose client port is closed but whose replicas still lead would hold its partitions unreachable:
            # hand them over and exit, so that a supervisor restarts it.
            log.error("node.server_died", extra=fields(error=repr(died.exception())))
        await node.stop()
        # Not cancelled: it shares the server's shutdown future, which stop() awaits too.
        await asyncio.wait((died,), timeout=5)
        if died.done():
            died.exception()  # retrieved: a stop with a grace period may end it with an error of its own
    return 0 if stop.is_set() else 1


def settle_collector() -> None:
    """Takes what importing made (some 30,000 functions, classes and modules) out of every later collection, sets the
    thresholds (`GC_THRESHOLDS`), and freezes what survives each full collection (`_freeze_survivors`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """After a full collection, what is left is alive: freezing it keeps the next full collection to what is newer.

    A full collection walks every tracked object, and the group state is most of them: 30-36 ms per 6,250 groups of 5
    members, some 0.7 s for the 100,000 groups a node holds (committed, and copies of what it leads), all of it
    holding the GIL, so every Raft thread of the node stops sending heartbeats and its partitions lose their leaders
    (docs/PERFORMANCE.md, "100,000 groups formed"). Frozen objects are still freed when their last reference goes;
    only a cycle among them is never collected, so what the node drops in bulk is acyclic when dropped
    (PartitionHost.step_down unloads its core, whose timers close over it)."""
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def _on_signal(stop: asyncio.Event, sig: signal.Signals) -> None:
    log.info("node.signal", extra=fields(signal=sig.name))
    stop.set()


def server_options(settings: NodeSettings) -> list[tuple[str, int]]:
    """grpc core's channel arguments for the client port: the limits of docs/SECURITY.md#limits."""
    return [
        ("grpc.max_receive_message_length", settings.max_request_bytes),
        ("grpc.max_send_message_length", settings.max_response_bytes),
        ("grpc.max_allowed_incoming_connections", settings.max_connections),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        # grpc core's overload protection counts a stream until the server has freed it, not until it ended, so a
        # client that keeps to max_concurrent_streams still had calls refused (docs/FUZZING.md). The limit is ours.
        ("grpc.http.overload_protection", 0),
        ("grpc.max_connection_idle_ms", settings.connection_idle_timeout_ms),
        ("grpc.server_handshake_timeout_ms", settings.connection_handshake_timeout_ms),
        # The server's side of keepalive: how often a client may ping without calls, and how many early pings it
        # may send before it is sent away (grpc's name says "ping interval"; it is the interval it receives).
        ("grpc.http2.min_ping_interval_without_data_ms", settings.keepalive_min_ping_interval_ms),
        ("grpc.http2.max_ping_strikes", settings.keepalive_max_ping_strikes),
        ("grpc.keepalive_permit_without_calls", 1),
        # Without this a second node could bind the same port and silently share its connections.
        ("grpc.so_reuseport", 0),
    ]


def raft_settings(settings: NodeSettings) -> RaftSettings:
    """The default RaftSettings unless the node settings ask for batching, another tick period or election timeout."""
    election_ms = settings.raft_election_timeout_ms
    tick = RaftSettings(
        tick_period_s=settings.raft_tick_period_ms / 1000,
        election_min_s=election_ms / 1000,
        election_max_s=3 * election_ms / 1000,
        pre_vote_window_s=settings.raft_pre_vote_window_ms / 1000,
        durability=settings.durability,
        bootstrap=settings.initial_cluster_state == "new",
        digest_interval_s=settings.raft_digest_interval_ms / 1000,
        quiesce_after_s=settings.raft_quiesce_after_ms / 1000,
        threads=settings.raft_threads,
    )
    if not settings.raft_batch_period_ms:
        return tick
    # Batching sends on the tick, with nothing to wake a resting poll: no quiescence.
    return dataclasses.replace(
        tick,
        append_entries_use_batch=True,
        append_entries_period_s=settings.raft_batch_period_ms / 1000,
        quiesce_after_s=0,
    )


def run(settings: NodeSettings) -> int:
    """Runs a node in the foreground until SIGTERM or SIGINT; 0 after a graceful shutdown, 1 if its server died."""
    allocator = use_jemalloc() if settings.allocator == "jemalloc" else "system: allocator = system"
    logs.setup(settings.log_level, settings.log_format)
    # A crash prints where it happened, and SIGUSR1 prints every thread's stack without stopping the node: what a
    # stuck partition's Raft thread is doing (docs/OPERATIONS.md). Both go to stderr, a launched node's log file.
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    log.info("node.allocator", extra=fields(allocator=allocator))
    return (uvloop.run if settings.event_loop == "uvloop" else asyncio.run)(_main(settings))
