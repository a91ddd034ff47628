"""A node's Prometheus metrics: one `NodeMetrics` per node, on the node's own registry, served over HTTP.

Five sources feed them:

* `instrument()` wraps each RPC handler of the gRPC service: a request counter by API and Kafka error code,
  and a latency histogram by API. Label children are bound once and cached, so a request costs a dict
  lookup, one `inc()` and one `observe()`.
* `on_commit()` is called by the partition leader with every batch of records once it commits: record counts, rebalances
  by cause, completed generations, rebalance durations measured between the records' own `time_ms`, and failed
  rebalances (node-wide and per group, node/group_metrics.py).
* The partition hosts report each change of a partition's role (`on_role`: follower, loading, leader), each
  batch's time from proposal to commit (`on_commit_latency`) and each proposal that failed (`on_proposal_failed`):
  partitions led, leader changes, barrier time, Raft commit latency and failed proposals. `NodeMetrics` is the
  `PartitionObserver` they are given; without one they report nothing.
* The service reports each request (or group of a batch request) its ACL refuses (`on_denied`), by API and by what
  was missing; authorization is off without an ACL file, and then nothing is reported.
* A collector reads the cores at scrape time (groups by state, members, pending members, parked requests, and the
  per-group series up to a cap), so those gauges cost nothing on the request path. It runs the read on the event
  loop, the only thread that may touch a core (node/group_metrics.py).

Every metric object is an attribute of `NodeMetrics`; a new one is one line in `__init__`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import platform
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from time import perf_counter
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    start_http_server,
)

from groupcoord.base.errors import StartupError
from groupcoord.coordinator import GroupCoordinator
from groupcoord.node import hostile
from groupcoord.node.config_types import DEFAULT_MAX_GROUPS, DEFAULT_MAX_OFFSETS
from groupcoord.node.group_metrics import CoreCollector, GroupCounters
from groupcoord.node.logs import LogBudget, fields
from groupcoord.node.partitions import PROPOSAL_FAILURES, Role
from groupcoord.node.replica_metrics import ReplicaCollector
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.raft.partition import PartitionReplica

log = logging.getLogger(__name__)

NAMESPACE = "groupcoord"
# From a cached heartbeat (well under a millisecond) to a JoinGroup parked for a whole rebalance timeout.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A rebalance lasts at least one client round trip and at most a few rebalance timeouts (clients default to 5 min).
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# A barrier is one Raft commit plus restoring the partition's groups: milliseconds, seconds for a large partition.
BARRIER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Records per Raft entry: 1 for a lone call, up to the group commit's cap (node/partitions.py) under load.
ENTRY_RECORDS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# A commit is a round trip to a majority (about 1 ms on a LAN, see docs/PERFORMANCE.md) plus the event loop's hop.
COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# A handler of one request: raw bytes (a unary call) or a parsed message (one request of a batch stream), with its
# call's context: gRPC's servicer context, or the request layer's (node/service.py's Context, the Kafka listener's).
_C = TypeVar("_C")
Handle = Callable[[Any, _C], Awaitable[Message]]


def error_label(code: int) -> str:
    """Kafka's name of an error code (`NONE`, `MEMBER_ID_REQUIRED`); a code Errors does not know, as its number."""
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


def _top_level_code(response: Any) -> tuple[int]:
    return (response.error_code,)


# Batch APIs answer per item: each item's code is counted once. Every other response has a top-level code.
_ITEM_CODES: dict[str, Callable[[Any], Sequence[int]]] = {
    "FindCoordinator": lambda m: [c.error_code for c in m.coordinators],
    "DescribeGroups": lambda m: [g.error_code for g in m.groups],
    "DeleteGroups": lambda m: [g.error_code for g in m.results],
    "OffsetCommit": lambda m: [p.error_code for t in m.topics for p in t.partitions],
}


class _ApiMetrics:
    """One API's request counter children (by outcome, bound on first use) and latency child."""

    __slots__ = ("_api", "_children", "_requests", "codes", "latency")

    def __init__(self, api: str, requests: Counter, latency: Histogram) -> None:
        self._api = api
        self._requests = requests
        self._children: dict[int | str, Any] = {}
        self.codes = _ITEM_CODES.get(api, _top_level_code)
        self.latency = latency.labels(api)
        self.count(Errors.NONE, 0)  # every API shows up from the first scrape

    def count_response(self, response: Any) -> None:
        codes = self.codes(response)
        if len(codes) == 1:
            self.count(codes[0])
        elif not codes:  # an empty batch still counts as one request
            self.count(Errors.NONE)
        else:  # one inc() per distinct code: a commit of many partitions is mostly NONE
            for code, amount in collections.Counter(codes).items():
                self.count(code, amount)

    def count(self, outcome: int | str, amount: int = 1) -> None:
        """`outcome` is a Kafka error code, or a `grpc_<STATUS>` label for a call that failed at the gRPC level."""
        child = self._children.get(outcome)
        if child is None:
            label = outcome if isinstance(outcome, str) else error_label(outcome)
            child = self._children[outcome] = self._requests.labels(self._api, label)
        child.inc(amount)


class PartitionObserver(Protocol):
    """What a `PartitionHost` reports, on the event loop (`NodeMetrics` is one)."""

    def on_role(self, partition: int, role: Role) -> None:
        """The host's role, once at creation and after every change (a repeat of the same role is harmless)."""

    def on_commit_latency(self, seconds: float) -> None:
        """A record batch this node proposed as leader committed `seconds` after it was proposed."""

    def on_batch(self, records: int) -> None:
        """The leader proposed one Raft entry holding `records` records (the calls of a group commit)."""

    def on_proposal_failed(self, reason: str, amount: int = 1) -> None:
        """`amount` barriers or record batches this node proposed as leader failed (node/partitions.py's reasons)."""


def _version() -> str:
    try:
        return version("groupcoord")
    except PackageNotFoundError:
        return ""  # a source tree that was never installed


class NodeMetrics:
    """Every metric of one node. Create it, `watch_cores()`, then `serve()`; `close()` on the way out.

    `max_groups` and `max_offsets` cap the per-group series (the `metrics_max_*` settings, node/group_metrics.py)."""

    def __init__(self, max_groups: int = DEFAULT_MAX_GROUPS, max_offsets: int = DEFAULT_MAX_OFFSETS) -> None:
        self._max_groups, self._max_offsets = max_groups, max_offsets
        # Every counter and histogram would carry a `_created` twin (a fifth of the exposition) that no dashboard
        # reads; the switch is the process's, and the node is the process.
        disable_created_metrics()
        self.registry = reg = CollectorRegistry(auto_describe=True)
        # What a dashboard joins on to tell versions apart during a rolling upgrade.
        Info("build", "The node's version", namespace=NAMESPACE, registry=reg).info(
            {"version": _version(), "python": platform.python_version()}
        )
        # The process's CPU, memory, file descriptors, GC and Python version, as the global registry has them.
        for collector in (PROCESS_COLLECTOR, GC_COLLECTOR, PLATFORM_COLLECTOR):
            reg.register(collector)
        ns = NAMESPACE
        self.requests = Counter(
            "requests", "RPC outcomes by API and Kafka error code", ("api", "error_code"), namespace=ns, registry=reg
        )
        self.request_latency = Histogram(
            "request_latency_seconds",
            "RPC latency by API",
            ("api",),
            namespace=ns,
            registry=reg,
            buckets=REQUEST_BUCKETS,
        )
        self.records = Counter("records", "Committed records by type", ("type",), namespace=ns, registry=reg)
        self.commit_batches = Counter("commit_batches", "Committed record batches", namespace=ns, registry=reg)
        self.rebalances = Counter("rebalances", "Rebalances started, by cause", ("cause",), namespace=ns, registry=reg)
        self.generations_completed = Counter(
            "generations_completed", "Join phases ended with a new generation", namespace=ns, registry=reg
        )
        self.rebalance_duration = Histogram(
            "rebalance_duration_seconds",
            "From a group's RebalanceStarted record to its AssignmentsSynced record",
            namespace=ns,
            registry=reg,
            buckets=REBALANCE_BUCKETS,
        )
        self.partitions_led = Gauge(
            "partitions_led", "Partitions this node serves as leader (barrier committed)", namespace=ns, registry=reg
        )
        self.partition_role = Gauge(
            "partition_role",
            "1 for this node's current role of the partition (follower, loading, leader), 0 for the others",
            ("partition", "role"),
            namespace=ns,
            registry=reg,
        )
        self.leader_changes = Counter(
            "leader_changes",
            "Times this node started (gained) or stopped (lost) serving a partition as leader",
            ("event",),
            namespace=ns,
            registry=reg,
        )
        self.barrier = Histogram(
            "barrier_seconds",
            "From becoming Raft leader of a partition to serving it (barrier committed, groups loaded)",
            namespace=ns,
            registry=reg,
            buckets=BARRIER_BUCKETS,
        )
        self.raft_commit_latency = Histogram(
            "raft_commit_latency_seconds",
            "From proposing a record batch as leader to its commit callback on the event loop",
            namespace=ns,
            registry=reg,
            buckets=COMMIT_BUCKETS,
        )
        self.raft_proposals_failed = Counter(
            "raft_proposals_failed",
            "Barriers and record batches this node proposed as leader that failed, by reason: pysyncobj's "
            "(queue_full, not_leader, leader_changed, ...), not_applied (committed below the fence) or abandoned "
            "(in flight when the node stopped leading)",
            ("reason",),
            namespace=ns,
            registry=reg,
        )
        self.raft_entry_records = Histogram(
            "raft_entry_records",
            "Records per Raft entry a leader proposes: the calls merged by group commit",
            namespace=ns,
            registry=reg,
            buckets=ENTRY_RECORDS_BUCKETS,
        )
        # No identity label: certificate CNs and unknown callers are unbounded; the `auth.denied` log line names them.
        self.authorization_denied = Counter(
            "authorization_denied",
            "Requests (per group for the batch APIs) refused with GROUP_AUTHORIZATION_FAILED, by API and by what "
            "was missing (member, offsets, describe, find, admin, or authenticate for an unknown token)",
            ("rpc", "operation"),
            namespace=ns,
            registry=reg,
        )
        self.malformed_requests = Counter(
            "malformed_requests",
            "Hostile or broken input on the client port that grpcio would log or die of, by kind: unregistered_path "
            "(a call to a method the node does not serve, a path that is not UTF-8 included), header_encoding (a "
            "header value that is not UTF-8), client_gone (a client that left in the middle of a reply)",
            ("kind",),
            namespace=ns,
            registry=reg,
        )
        self.client_connections_closed = Counter(
            "client_connections_closed",
            "Client connections the node closed itself, by reason: per_ip (an address over max_connections_per_ip)",
            ("reason",),
            namespace=ns,
            registry=reg,
        )
        self._closed_per_ip = self.client_connections_closed.labels("per_ip")
        # Every reason a proposal can fail for has its series (at 0) from the start.
        self._proposal_failures = {reason: self.raft_proposals_failed.labels(reason) for reason in PROPOSAL_FAILURES}
        self._malformed_children = {kind: self.malformed_requests.labels(kind) for kind in hostile.KINDS}
        self._gained, self._lost = self.leader_changes.labels("gained"), self.leader_changes.labels("lost")
        # partition -> (its role, perf_counter() when it took that role); written on the event loop only.
        self._roles: dict[int, tuple[Role, float]] = {}
        self._record_children: dict[type, Any] = {}
        # The causes the core writes today are bound up front, so each has a series (at 0) from the start.
        self._cause_children: dict[str, Any] = {c.value: self.rebalances.labels(c.value) for c in r.RebalanceCause}
        # group id -> time_ms of the RebalanceStarted that began its current rebalance; only groups mid-rebalance.
        self._rebalance_started_ms: dict[str, int] = {}
        self.group_counters = GroupCounters(reg, ns)
        self._cores: Callable[[], Iterable[GroupCoordinator]] | None = None
        self._http: tuple[Any, threading.Thread] | None = None
        self._failed_log = LogBudget(hostile.MALFORMED_LOG_PER_S)

    # -- requests -----------------------------------------------------------------------------------

    def instrument(self, api: str, handle: Handle[_C]) -> Handle[_C]:
        """Wraps one RPC's handler: counts each outcome and observes its latency."""
        metrics = _ApiMetrics(api, self.requests, self.request_latency)

        async def instrumented(request: Any, context: _C) -> Message:
            start = perf_counter()
            try:
                response = await handle(request, context)
            except grpc.aio.AbortError:
                code = context.code()  # type: ignore[attr-defined]  # only gRPC's context raises AbortError
                metrics.count(f"grpc_{code.name}" if isinstance(code, grpc.StatusCode) else "grpc_UNKNOWN")
                raise
            except asyncio.CancelledError:  # the client went away or its deadline passed
                metrics.count("grpc_CANCELLED")
                raise
            except Exception:  # `_guarded` turns failures into aborts; whatever still escapes is UNKNOWN to the client
                metrics.count("grpc_UNKNOWN")
                raise
            finally:
                metrics.latency.observe(perf_counter() - start)
            metrics.count_response(response)
            return response

        return instrumented

    # -- committed records --------------------------------------------------------------------------

    def on_commit(self, records: Iterable[r.Record]) -> None:
        """Called with every batch the driver commits, in commit order."""
        self.commit_batches.inc()
        for rec in records:
            kind = type(rec)
            child = self._record_children.get(kind)
            if child is None:
                child = self._record_children[kind] = self.records.labels(kind.__name__)
            child.inc()
            self.group_counters.on_record(rec)
            if isinstance(rec, r.RebalanceStarted):
                self._on_rebalance_started(rec)
            elif isinstance(rec, r.GenerationCompleted):
                self.generations_completed.inc()
                if not rec.leader_id:  # nobody joined: the group went Empty, the rebalance is over
                    self._rebalance_started_ms.pop(rec.group_id, None)
            elif isinstance(rec, r.AssignmentsSynced):
                started = self._rebalance_started_ms.pop(rec.group_id, None)
                if started is not None:
                    self.rebalance_duration.observe(max(rec.time_ms - started, 0) / 1000)
            elif isinstance(rec, r.GroupDeleted):
                self._rebalance_started_ms.pop(rec.group_id, None)

    def _on_rebalance_started(self, rec: r.RebalanceStarted) -> None:
        child = self._cause_children.get(rec.cause)
        if child is None:
            child = self._cause_children[rec.cause] = self.rebalances.labels(rec.cause)
        child.inc()
        # A rebalance restarted before it synced (sync timeout) still counts from its first start.
        self._rebalance_started_ms.setdefault(rec.group_id, rec.time_ms)

    def rebalances_in_progress(self) -> int:
        """How many groups have a rebalance start remembered (bounded by the groups mid-rebalance)."""
        return len(self._rebalance_started_ms)

    # -- partition leadership and Raft ---------------------------------------------------------------------

    def on_role(self, partition: int, role: Role) -> None:
        """A partition host's role: the role gauges, partitions led, leader changes and the barrier time."""
        now = perf_counter()
        previous = self._roles.get(partition)
        label = str(partition)
        if previous is None:  # the host's first report: every role of the partition gets a series
            for other in Role:
                self.partition_role.labels(label, other.value).set(0)
        elif previous[0] is role:
            return
        else:
            self.partition_role.labels(label, previous[0].value).set(0)
        self.partition_role.labels(label, role.value).set(1)
        self._roles[partition] = (role, now)
        if role is Role.LEADER:
            self.partitions_led.inc()
            self._gained.inc()
            if previous is not None and previous[0] is Role.LOADING:
                self.barrier.observe(now - previous[1])
        elif previous is not None and previous[0] is Role.LEADER:
            self.partitions_led.dec()
            self._lost.inc()
            self._forget_groups_not_led()

    def _forget_groups_not_led(self) -> None:
        """The per-group counters keep only the groups this node still leads (the host has dropped its core)."""
        if self._cores is None:
            return
        led: set[str] = set()
        for core in self._cores():
            led.update(core.store.groups)
        self.group_counters.forget_all_but(led.__contains__)

    def on_commit_latency(self, seconds: float) -> None:
        self.raft_commit_latency.observe(seconds)

    def on_batch(self, records: int) -> None:
        self.raft_entry_records.observe(records)

    def on_proposal_failed(self, reason: str, amount: int = 1) -> None:
        child = self._proposal_failures.get(reason)
        if child is None:  # a pysyncobj code that FAIL_REASONS does not name
            child = self._proposal_failures[reason] = self.raft_proposals_failed.labels(reason)
        child.inc(amount)

    def on_connections_cut(self, amount: int) -> None:
        self._closed_per_ip.inc(amount)

    def on_malformed(self, kind: str) -> None:
        self._malformed_children[kind].inc()

    def on_denied(self, rpc: str, operation: str, amount: int = 1) -> None:
        """A call (or `amount` groups of a batch call) refused by the ACL; rare, so the child is looked up each time."""
        self.authorization_denied.labels(rpc, operation).inc(amount)

    # -- scrape-time gauges and the endpoint --------------------------------------------------------

    def watch_cores(self, loop: asyncio.AbstractEventLoop, cores: Callable[[], Iterable[GroupCoordinator]]) -> None:
        """Scrapes report the groups of `cores()` (the cores this node leads), read on `loop`."""
        self._cores = cores
        self.registry.register(
            CoreCollector(NAMESPACE, loop, cores, self.group_counters, self._max_groups, self._max_offsets)
        )

    def watch_replicas(self, replicas: Callable[[], Iterable[PartitionReplica]]) -> None:
        """Scrapes report the journals and state checks of `replicas()` (node/replica_metrics.py)."""
        self.registry.register(ReplicaCollector(NAMESPACE, replicas))

    def serve(self, host: str, port: int) -> int:
        """Starts the HTTP endpoint (`/metrics`) on a daemon thread; returns its port (the one picked for 0)."""
        try:
            server, thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise StartupError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        # socketserver prints a traceback to stderr for every connection that fails (a client resetting it, say).
        server.handle_error = self._request_failed  # type: ignore[method-assign]  # socketserver's per-server hook
        self._http = (server, thread)
        return server.server_port

    def _request_failed(self, request: object, client_address: object) -> None:
        """A failed connection to the metrics port: one rate-limited line and a count, not a traceback."""
        self.on_malformed(hostile.METRICS_CONNECTION)
        skipped = self._failed_log.take(time.monotonic())
        if skipped is not None:
            error = sys.exc_info()[1]
            log.warning(
                "metrics.request_failed",
                extra=fields(peer=str(client_address), error=repr(error), not_logged_before=skipped),
            )

    def close(self) -> None:
        """Stops the endpoint (blocks up to half a second: the server's poll interval)."""
        if self._http is None:
            return
        server, thread = self._http
        self._http = None
        server.shutdown()
        server.server_close()
        thread.join()
