"""`groupcoord cluster up/down/status`: a cluster of node processes on this machine, to try the product and
to test it; not a deployment tool.

Node i listens on 127.0.0.i (Linux routes all of 127.0.0.0/8 to loopback), so every node uses the same ports
(gRPC, Raft, metrics, Kafka) and a node's address says which node it is. The cluster dir holds everything:
`state.json` (what `down` and `status` need), the cluster secret (mode 0600, handed to the nodes through their
environment because flags show in `ps`), and per node its data dir and JSON log. Nodes run detached (their own
session), so a Ctrl-C in the terminal that started them reaches them only through `down`.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from groupcoord import certs
from groupcoord.base.errors import StartupError, UserError
from groupcoord.client.security import PLAINTEXT, ClientSecurity, SecurityError, sync_channel
from groupcoord.node import config as node_config
from groupcoord.node.balance import preferred_leader
from groupcoord.node.topology import Peer
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

STATE_FILE = "state.json"
SECRET_FILE = "cluster-secret"
SECRET_ENV = node_config.ENV_PREFIX + "CLUSTER_SECRET"
MIN_NODES, MAX_NODES = 3, 5
DEFAULT_NODES, DEFAULT_PARTITIONS = 3, 16
DEFAULT_BASE_PORT, DEFAULT_RAFT_BASE_PORT, DEFAULT_METRICS_PORT = 50051, 25051, 9464
DEFAULT_KAFKA_BASE_PORT = node_config.KAFKA_DEFAULT_PORT
SERVICE = "groupcoord.v1.GroupCoordinator"
STOP_WAIT_S = 10.0
LOG_TAIL_LINES = 25
WATCH_INTERVAL_S = 1.0
# Settings the cluster decides for every node; extra node flags after `--` may set any other.
MANAGED = frozenset(
    {
        "node_id",
        "host",
        "port",
        "advertised_host",
        "peers",
        "raft_port",
        "partitions",
        "data_dir",
        "cluster_secret",
        "metrics_port",
        "kafka_port",
        "log_format",
        "tls_cert_file",
        "tls_key_file",
        "tls_client_ca_file",
        "tls_client_auth",
    }
)
# The client identity `cluster up --tls` issues and uses itself (health checks, status), and hands to the demo.
ADMIN_CLIENT = "admin"
TLS_DIR = "tls"
# Loopback addresses other than 127.0.0.1 are not guaranteed to exist, and an HTTP proxy must not see them.
CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)


# -- the cluster's description (state.json) ---------------------------------------------------------


@dataclass
class NodeEntry:
    node_id: int
    host: str
    port: int
    raft_port: int
    data_dir: str
    log: str
    metrics_port: int = -1
    pid: int | None = None
    kafka_port: int = -1

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        """Where Kafka clients reach this node (what it advertises: its peers entry's host and this port)."""
        return f"{self.host}:{self.kafka_port}" if self.kafka_port >= 0 else None

    def raft_ports(self, partitions: int) -> str:
        return f"{self.raft_port}-{self.raft_port + partitions - 1}" if partitions > 1 else str(self.raft_port)

    def ports(self, partitions: int) -> list[int]:
        """Every port this node binds, for the free-port check."""
        extra = [p for p in (self.metrics_port, self.kafka_port) if p >= 0]
        return [self.port, *range(self.raft_port, self.raft_port + partitions), *extra]


@dataclass
class ClusterState:
    dir: str
    partitions: int
    nodes: list[NodeEntry]
    secret_file: str
    node_args: list[str] = field(default_factory=list)
    version: int = 1
    # The certificates of the last `up --tls` (nodes serve TLS with mutual TLS required); empty: plaintext.
    tls_dir: str = ""
    # The last --kafka-base-port an `up` was given, kept for restarts without one; None: the default, 9092.
    kafka_base_port: int | None = None

    @property
    def path(self) -> Path:
        return Path(self.dir) / STATE_FILE

    def peers(self) -> str:
        return ",".join(f"{n.node_id}={n.host}:{n.port}:{n.raft_port}" for n in self.nodes)

    def security(self) -> ClientSecurity:
        """How this tool reaches the nodes: as the admin client when they serve TLS."""
        if not self.tls_dir:
            return PLAINTEXT
        cert, key = certs.client_cert(Path(self.tls_dir), ADMIN_CLIENT)
        return ClientSecurity(str(Path(self.tls_dir) / certs.CA_FILE), str(cert), str(key))

    def save(self) -> None:
        """Atomically (write + rename), so `down` never reads half a file after a crash of `up`."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(self.path)

    @classmethod
    def load(cls, cluster_dir: Path) -> ClusterState | None:
        if cluster_dir.exists() and not cluster_dir.is_dir():
            raise UserError(f"{cluster_dir} is not a directory; pick another --dir")
        path = cluster_dir / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            nodes = [NodeEntry(**n) for n in raw.pop("nodes")]
            return cls(nodes=nodes, **raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise UserError(f"{path} is not a cluster state file ({exc}); remove it or pick another --dir") from None


# -- processes ------------------------------------------------------------------------------------


# Nodes this process started: the only pids it may reap (an exited child is a zombie until its parent does).
_spawned: set[int] = set()


def _cmdline(pid: int) -> list[str] | None:
    """The pid's argv, or None when there is no such (live) process. A zombie's argv is empty."""
    if pid in _spawned:
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    proc = Path("/proc")
    if proc.is_dir():
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return None
        return raw.decode(errors="replace").split("\0")[:-1] or None
    # No /proc (macOS): ps shows argv joined by spaces, enough for the substring checks in `_is_node`.
    out = subprocess.run(["ps", "-ww", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
    return out.stdout.split() or None


def _is_node(node: NodeEntry) -> bool:
    """Whether node.pid is still this cluster's `groupcoord node` (a pid can be reused by any process)."""
    if node.pid is None:
        return False
    argv = _cmdline(node.pid)
    return (
        argv is not None
        and "node" in argv
        and any("groupcoord" in a for a in argv)
        and f"--data-dir={node.data_dir}" in argv
    )


def _stop(nodes: list[NodeEntry], say: Callable[[str], None]) -> None:
    """SIGTERM every node that is still ours, up to STOP_WAIT_S for them to exit, then SIGKILL."""
    running: list[NodeEntry] = []
    for node in nodes:
        if _is_node(node):
            os.kill(node.pid, signal.SIGTERM)  # type: ignore[arg-type]
            running.append(node)
        elif node.pid is not None and _cmdline(node.pid) is not None:
            say(f"node {node.node_id}: pid {node.pid} is no longer a groupcoord node of this cluster; left alone")
        else:
            say(f"node {node.node_id}: already down")
    deadline = time.monotonic() + STOP_WAIT_S
    while running and time.monotonic() < deadline:
        time.sleep(0.05)
        for node in [n for n in running if not _is_node(n)]:
            say(f"node {node.node_id}: stopped (pid {node.pid})")
            running.remove(node)
    for node in running:
        if _is_node(node):
            os.kill(node.pid, signal.SIGKILL)  # type: ignore[arg-type]
            deadline = time.monotonic() + STOP_WAIT_S
            while _is_node(node) and time.monotonic() < deadline:
                time.sleep(0.02)
        say(f"node {node.node_id}: killed (pid {node.pid}) after {STOP_WAIT_S:g} s without exiting")
    for node in nodes:
        node.pid = None


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end `up` like Ctrl-C does, so its cleanup runs whichever way it is stopped."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def _uninterruptible() -> Iterator[None]:
    """A second Ctrl-C while the nodes stop would leave some of them running."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# -- talking to nodes -----------------------------------------------------------------------------


def health(address: str, timeout_s: float = 1.0, security: ClientSecurity = PLAINTEXT, service: str = SERVICE) -> str:
    """The node's gRPC health status name (SERVING, NOT_SERVING, ...) or UNREACHABLE; `service` as the health
    service names it (the cluster's by default, or "groupcoord.readiness" / "groupcoord.liveness")."""
    with sync_channel(address, security, CHANNEL_OPTIONS) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.RpcError:
            return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def _describe_cluster(
    address: str, security: ClientSecurity, timeout_s: float = 2.0
) -> pb.DescribeClusterResponse | None:
    with sync_channel(address, security, CHANNEL_OPTIONS) as channel:
        try:
            return pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return None


# -- checks ---------------------------------------------------------------------------------------


def _check_node_args(node_args: list[str]) -> None:
    """Rejects a bad extra node flag here, in one line, rather than as N identical node crashes."""
    parser = argparse.ArgumentParser(prog="groupcoord node", add_help=False)
    node_config.add_arguments(parser)
    args, unknown = parser.parse_known_args(node_args)
    if unknown:
        raise UserError(f"unknown node flag after --: {unknown[0]} (see groupcoord node --help)")
    managed = sorted(s.flag for s in node_config.SETTINGS if s.name in MANAGED and getattr(args, s.name) is not None)
    if managed:
        raise UserError(f"{managed[0]} is set by `cluster up` for every node; it cannot be given after --")
    node_config.load(args, {})


def _check_ports_free(state: ClusterState) -> None:
    """Binds each port as the nodes will (SO_REUSEADDR, so a TIME_WAIT from the last run does not count)."""
    for node in state.nodes:
        for port in node.ports(state.partitions):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((node.host, port))
                except OSError as exc:
                    hint = ""
                    if exc.errno == errno.EADDRNOTAVAIL:  # no 127.0.0.x besides 127.0.0.1 (macOS)
                        hint = f" (add a loopback alias: sudo ifconfig lo0 alias {node.host})"
                    raise StartupError(
                        f"node {node.node_id} cannot bind {node.host}:{port}: {exc.strerror}{hint}; "
                        "pick other ports with --base-port / --raft-base-port"
                        + (" / --metrics-port" if node.metrics_port >= 0 else "")
                        + (" / --kafka-base-port (-1: no Kafka listener)" if node.kafka_port >= 0 else "")
                    ) from None


def _check_port_ranges(
    base_port: int, raft_base_port: int, partitions: int, metrics_port: int, kafka_port: int = -1
) -> None:
    raft = range(raft_base_port, raft_base_port + partitions)
    if not 0 < base_port < 65_536:
        raise UserError(f"--base-port must be between 1 and 65535, got {base_port}")
    if raft_base_port <= 0 or raft.stop > 65_536:
        raise UserError(f"--raft-base-port {raft_base_port} + {partitions} partitions goes beyond port 65535")
    if base_port in raft:
        raise UserError(f"--base-port {base_port} is inside the Raft ports {raft.start}-{raft.stop - 1}")
    if metrics_port >= 0 and (metrics_port in raft or metrics_port == base_port or not 0 < metrics_port < 65_536):
        raise UserError(f"--metrics-port {metrics_port} collides with another port or is out of range")
    if kafka_port != -1 and (
        kafka_port in raft or kafka_port in (base_port, metrics_port) or not 0 < kafka_port < 65_536
    ):
        raise UserError(f"--kafka-base-port {kafka_port} collides with another port or is out of range (-1: none)")


def _secret(cluster_dir: Path) -> Path:
    """Made once per cluster: the nodes' Raft journals only make sense to nodes with the same secret."""
    path = cluster_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
            print(f"groupcoord: {path} was readable by others; now mode 0600", file=sys.stderr)
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return path


def _is_cluster_dir(path: Path) -> bool:
    return (path / STATE_FILE).exists() or (path / SECRET_FILE).exists()


# -- up -------------------------------------------------------------------------------------------


@dataclass
class UpOptions:
    dir: Path
    nodes: int | None = None
    partitions: int | None = None
    base_port: int | None = None
    raft_base_port: int | None = None
    metrics: bool = False
    metrics_port: int | None = None
    json: bool = False
    timeout: float = 60.0
    foreground: bool = False
    node_args: list[str] = field(default_factory=list)
    tls: bool = False
    tls_dir: Path | None = None
    kafka_base_port: int | None = None


def _new_state(opts: UpOptions, cluster_dir: Path) -> ClusterState:
    count = opts.nodes or DEFAULT_NODES
    partitions = opts.partitions or DEFAULT_PARTITIONS
    base = opts.base_port or DEFAULT_BASE_PORT
    raft_base = opts.raft_base_port or DEFAULT_RAFT_BASE_PORT
    metrics_port = _metrics_port(opts)
    kafka_port = _kafka_port(opts, None)
    _check_port_ranges(base, raft_base, partitions, metrics_port, kafka_port)
    nodes = [
        NodeEntry(
            node_id=i,
            host=f"127.0.0.{i}",
            port=base,
            raft_port=raft_base,
            metrics_port=metrics_port,
            kafka_port=kafka_port,
            data_dir=str(cluster_dir / f"node-{i}" / "data"),
            log=str(cluster_dir / f"node-{i}" / "node.log"),
        )
        for i in range(1, count + 1)
    ]
    state = ClusterState(str(cluster_dir), partitions, nodes, str(cluster_dir / SECRET_FILE), opts.node_args)
    state.kafka_base_port = opts.kafka_base_port
    return state


def _metrics_port(opts: UpOptions) -> int:
    if opts.metrics or opts.metrics_port is not None:
        return opts.metrics_port if opts.metrics_port is not None else DEFAULT_METRICS_PORT
    return -1


def _kafka_port(opts: UpOptions, remembered: int | None) -> int:
    """Every node's Kafka port: this run's --kafka-base-port, else the last one given (`remembered`), else Kafka's
    9092. With --tls the listener serves TLS, with the client port's certificate and client-certificate rule."""
    asked = opts.kafka_base_port if opts.kafka_base_port is not None else remembered
    return DEFAULT_KAFKA_BASE_PORT if asked is None else asked


def _reuse_state(opts: UpOptions, state: ClusterState) -> ClusterState:
    """A restart keeps the cluster's shape (a different count or port would strand the Raft logs in the data
    dirs); metrics, the Kafka port and extra node flags are this run's choice, like any process's flags (the
    Kafka port asked for last is kept: clients are configured with it)."""
    first = state.nodes[0]
    fixed = (
        ("--nodes", opts.nodes, len(state.nodes)),
        ("--partitions", opts.partitions, state.partitions),
        ("--base-port", opts.base_port, first.port),
        ("--raft-base-port", opts.raft_base_port, first.raft_port),
    )
    for flag, asked, existing in fixed:
        if asked is not None and asked != existing:
            raise UserError(
                f"the cluster in {state.dir} was created with {flag} {existing}; it is fixed for that cluster "
                f"(`groupcoord cluster down --purge --dir {state.dir}` to start over, or use another --dir)"
            )
    metrics_port = _metrics_port(opts)
    if opts.kafka_base_port is not None:
        state.kafka_base_port = opts.kafka_base_port
    kafka_port = _kafka_port(opts, state.kafka_base_port)
    _check_port_ranges(first.port, first.raft_port, state.partitions, metrics_port, kafka_port)
    for node in state.nodes:
        node.metrics_port, node.kafka_port = metrics_port, kafka_port
    state.node_args = opts.node_args
    return state


def _start_node(state: ClusterState, node: NodeEntry, secret: str) -> subprocess.Popen[bytes]:
    Path(node.data_dir).mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "groupcoord", "node",
        f"--node-id={node.node_id}", f"--host={node.host}", f"--port={node.port}",
        f"--peers={state.peers()}", f"--partitions={state.partitions}", f"--data-dir={node.data_dir}",
        f"--metrics-port={node.metrics_port}", f"--kafka-port={node.kafka_port}", "--log-format=json",
        *_tls_flags(state, node), *state.node_args,
    ]  # fmt: skip
    env = {**os.environ, SECRET_ENV: secret}
    with open(node.log, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    _spawned.add(proc.pid)
    return proc


def _tls_dir(opts: UpOptions, cluster_dir: Path) -> Path | None:
    """The certificates the nodes serve with: --tls-dir's, else the cluster dir's own `tls/`; None for plaintext."""
    if not opts.tls and opts.tls_dir is None:
        return None
    return (opts.tls_dir or cluster_dir / TLS_DIR).expanduser().resolve()


def _ensure_certs(directory: Path, nodes: int) -> None:
    """Makes a development CA in `directory` when it has none; checks every file `up` will use is there."""
    if not (directory / certs.CA_FILE).exists():
        issued = certs.init(directory, nodes, [ADMIN_CLIENT])
        _say(f"made a development CA and certificates in {_display(str(directory))} (client: {issued.clients[0].name})")
    wanted = [directory / certs.CA_FILE, *certs.client_cert(directory, ADMIN_CLIENT)]
    for node_id in range(1, nodes + 1):
        wanted += certs.node_cert(directory, node_id)
    missing = [p.name for p in wanted if not p.is_file()]
    if missing:
        raise UserError(
            f"{directory} lacks {', '.join(missing)}: `cluster up` needs node-1 to node-{nodes} and an "
            f"{ADMIN_CLIENT!r} client (groupcoord certs init DIR --nodes {nodes} --clients {ADMIN_CLIENT},...)"
        )
    ca = directory / certs.CA_FILE
    cert, key = certs.client_cert(directory, ADMIN_CLIENT)
    try:
        ClientSecurity(str(ca), str(cert), str(key)).credentials()
    except SecurityError as exc:
        raise UserError(str(exc)) from None


def _tls_flags(state: ClusterState, node: NodeEntry) -> list[str]:
    """TLS with mutual TLS required: every client needs a certificate of the cluster's CA."""
    if not state.tls_dir:
        return []
    directory = Path(state.tls_dir)
    cert, key = certs.node_cert(directory, node.node_id)
    return [
        f"--tls-cert-file={cert}", f"--tls-key-file={key}", f"--tls-client-ca-file={directory / certs.CA_FILE}",
        "--tls-client-auth=require",
    ]  # fmt: skip


def _log_tail(path: str, since: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


Procs = dict[int, subprocess.Popen[bytes]]


def _exited(state: ClusterState, procs: Procs) -> tuple[NodeEntry, str] | None:
    for node in state.nodes:
        code = procs[node.node_id].poll()
        if code is not None:
            return node, f"exited with code {code}"
    return None


def _all_serving(state: ClusterState) -> NodeEntry | None:
    """None when every node reports SERVING in this one round, else the first that does not."""
    security = state.security()
    return next((n for n in state.nodes if health(n.address, security=security) != "SERVING"), None)


def _wait_serving(state: ClusterState, procs: Procs, timeout_s: float) -> tuple[NodeEntry, str] | None:
    """None once every node reports SERVING in the same round, else the first node that did not and why.

    One round for all: a node is briefly NOT_SERVING while leadership moves between nodes at startup.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        failed = _exited(state, procs)
        if failed is not None:
            return failed
        lagging = _all_serving(state)
        if lagging is None:
            return None
        if time.monotonic() > deadline:
            return lagging, f"not SERVING after {timeout_s:g} s ({_leader_views(state)})"
        time.sleep(0.1)


def _leader_views(state: ClusterState) -> str:
    """What each node believes about the partition leaders, to tell a stuck election from a stuck barrier."""
    views = []
    for node in state.nodes:
        described = _describe_cluster(node.address, state.security())
        if described is None:
            views.append(f"node {node.node_id} does not answer DescribeCluster")
            continue
        leaders = [p.leader_node_id for p in described.partitions]
        views.append(f"node {node.node_id} sees leaders {leaders}")
    return "; ".join(views)


def _wait_balanced(state: ClusterState, procs: Procs, deadline: float) -> bool:
    """Whether each partition came to be led by its preferred node (node/balance.py) in time.

    Nodes hand partitions to their preferred leaders a few seconds after start; waiting for that means the
    coordinators a client finds right after `up` stay put.
    """
    peers = [Peer(n.node_id, n.host, n.port, n.raft_port) for n in state.nodes]
    want = {k: preferred_leader(k, peers).node_id for k in range(state.partitions)}
    while time.monotonic() < deadline and _exited(state, procs) is None:
        _, leaders = _leaders(state)
        if {k: leader for k, (leader, _) in leaders.items()} == want and _all_serving(state) is None:
            return True
        time.sleep(0.1)
    return False


def up(opts: UpOptions) -> int:
    count = opts.nodes if opts.nodes is not None else DEFAULT_NODES
    if not MIN_NODES <= count <= MAX_NODES:
        raise UserError(f"--nodes must be {MIN_NODES} to {MAX_NODES} (a Raft majority survives a failure), got {count}")
    if opts.partitions is not None and not 1 <= opts.partitions <= 1024:
        raise UserError(f"--partitions must be between 1 and 1024, got {opts.partitions}")
    if opts.timeout <= 0:
        raise UserError(f"--timeout must be positive, got {opts.timeout:g}")
    _check_node_args(opts.node_args)
    cluster_dir = opts.dir.expanduser().resolve()
    state = ClusterState.load(cluster_dir)
    if state is None:
        if cluster_dir.exists() and any(cluster_dir.iterdir()):
            raise UserError(f"{cluster_dir} is not empty and holds no cluster; pick another --dir")
        state = _new_state(opts, cluster_dir)
        restart = False
    else:
        live = [n for n in state.nodes if _is_node(n)]
        if live:
            pids = ", ".join(f"node {n.node_id} pid {n.pid}" for n in live)
            raise StartupError(
                f"the cluster in {cluster_dir} is already running ({pids}); "
                f"`groupcoord cluster down --dir {opts.dir}` stops it"
            )
        state = _reuse_state(opts, state)
        restart = True
    tls_dir = _tls_dir(opts, cluster_dir)
    if opts.tls_dir is not None and tls_dir is not None:
        _ensure_certs(tls_dir, len(state.nodes))  # the user's directory: checked before anything is created
    _check_ports_free(state)
    cluster_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = _secret(cluster_dir).read_text().strip()
    if tls_dir is not None:
        _ensure_certs(tls_dir, len(state.nodes))
    state.tls_dir = str(tls_dir or "")

    procs: dict[int, subprocess.Popen[bytes]] = {}
    log_offsets = {n.node_id: Path(n.log).stat().st_size if Path(n.log).exists() else 0 for n in state.nodes}
    with _signals_interrupt():
        try:
            what = "restarting the cluster (its data is kept)" if restart else "starting a new cluster"
            _say(f"{what} in {_display(state.dir)}: {len(state.nodes)} nodes, {state.partitions} partitions")
            for node in state.nodes:
                procs[node.node_id] = _start_node(state, node, secret)
                node.pid = procs[node.node_id].pid
            state.save()
            deadline = time.monotonic() + opts.timeout
            failed = _wait_serving(state, procs, opts.timeout)
            if failed is None and not _wait_balanced(state, procs, deadline):
                failed = _exited(state, procs)
                if failed is None:
                    _say("note: partition leadership has not settled on the preferred nodes yet")
            if failed is not None:
                node, why = failed
                _say(f"groupcoord: node {node.node_id} {why}; the end of {_display(node.log)}:")
                tail = _log_tail(node.log, log_offsets[node.node_id]) or ["(nothing logged yet)"]
                _say("\n".join("  " + line for line in tail))
                raise StartupError(f"node {node.node_id} {why}; stopped the nodes this command started")
            _print_up(state, opts.json, opts.foreground)
            if opts.foreground:
                _watch(state)
        except BaseException as exc:
            # Whatever ends `up` before it has handed over a running cluster, no node outlives it.
            with _uninterruptible():
                _say("stopping the cluster")
                _stop(state.nodes, _say)
                state.save()
            if isinstance(exc, KeyboardInterrupt):
                return 0 if opts.foreground else 130
            raise
    return 0


def _say(text: str) -> None:
    """Progress goes to stderr, so stdout is only the table (or JSON) that scripts read."""
    print(text, file=sys.stderr, flush=True)


def _display(path: str) -> str:
    """Paths under the working directory as relative ones: shorter, and what the user typed."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = [headers, *rows]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def _node_json(state: ClusterState, node: NodeEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node_id": node.node_id,
        "address": node.address,
        "raft_ports": [node.raft_port, node.raft_port + state.partitions - 1],
        "pid": node.pid,
        "log": node.log,
        "data_dir": node.data_dir,
    }
    if node.metrics_port >= 0:
        out["metrics_address"] = f"{node.host}:{node.metrics_port}"
    out["kafka_address"] = node.kafka_address
    return out


def _kafka_sasl(state: ClusterState) -> list[str]:
    """The SASL mechanisms the nodes' Kafka listeners require, as given after `--` (none by default)."""
    parser = argparse.ArgumentParser(prog="groupcoord node", add_help=False)
    node_config.add_arguments(parser)
    args, _ = parser.parse_known_args(state.node_args)
    return [m.strip() for m in (args.kafka_sasl_mechanisms or "").split(",") if m.strip()]


def _kafka_clients(state: ClusterState) -> str:
    """The Kafka client settings (librdkafka's names) for this cluster's Kafka listeners: with --tls they speak
    TLS with client certificates required, like the client port, so a Kafka client needs the CA and a certificate."""
    servers = ",".join(n.kafka_address for n in state.nodes if n.kafka_address)
    sasl = _kafka_sasl(state)
    protocol = ("SASL_SSL" if sasl else "SSL") if state.tls_dir else ("SASL_PLAINTEXT" if sasl else "PLAINTEXT")
    line = f"Kafka clients: bootstrap.servers={servers}"
    if protocol != "PLAINTEXT":
        line += f" security.protocol={protocol}"
    if state.tls_dir:
        security = state.security()
        line += (
            f" ssl.ca.location={_display(security.ca_file)} ssl.certificate.location={_display(security.cert_file)}"
            f" ssl.key.location={_display(security.key_file)}"
        )
    if sasl:
        others = f" (or {', '.join(sasl[1:])})" if len(sasl) > 1 else ""
        line += f" sasl.mechanism={sasl[0]}{others}, sasl.username and sasl.password of an identity in the ACL file"
    return line


def _print_up(state: ClusterState, as_json: bool, foreground: bool) -> None:
    if as_json:
        nodes = [_node_json(state, n) for n in state.nodes]
        out = {"dir": state.dir, "partitions": state.partitions, "nodes": nodes, "tls_dir": state.tls_dir or None}
        print(json.dumps(out, indent=2), flush=True)
        return
    metrics = state.nodes[0].metrics_port >= 0
    kafka = [n.kafka_address for n in state.nodes if n.kafka_address]
    headers = ["NODE", "ADDRESS", "KAFKA", "RAFT PORTS", "PID", "LOG"] + (["METRICS"] if metrics else [])
    rows = [
        [str(n.node_id), n.address, n.kafka_address or "-", n.raft_ports(state.partitions), str(n.pid), _display(n.log)]
        + ([f"http://{n.host}:{n.metrics_port}/metrics"] if metrics else [])
        for n in state.nodes
    ]
    print(_table(headers, rows))
    print(f"Every node is SERVING; {state.partitions} partitions, each with a leader.")
    if kafka:
        print(_kafka_clients(state))
    if state.tls_dir:
        security = state.security()
        print(
            f"TLS with client certificates required. Clients: --ca-file {_display(security.ca_file)} "
            f"--cert-file {_display(security.cert_file)} --key-file {_display(security.key_file)}"
        )
    if not foreground:
        print(f"Stop it with: groupcoord cluster down --dir {_display(state.dir)}", flush=True)


# -- watching (up --foreground) -------------------------------------------------------------------


def _leaders(state: ClusterState) -> tuple[int | None, dict[int, tuple[int, int]]]:
    """(answering node, partition -> (leader, term)) from the first node that answers DescribeCluster."""
    for node in state.nodes:
        if _is_node(node):
            reply = _describe_cluster(node.address, state.security(), timeout_s=1.0)
            if reply is not None:
                return node.node_id, {p.partition_id: (p.leader_node_id, p.term) for p in reply.partitions}
    return None, {}


def _watch(state: ClusterState) -> None:
    """Prints what changes (a node exits, a partition changes leader) until Ctrl-C, which stops the cluster."""
    alive = {n.node_id: True for n in state.nodes}
    _, leaders = _leaders(state)
    for node in state.nodes:
        led = [str(k) for k, (leader, _) in sorted(leaders.items()) if leader == node.node_id]
        print(f"node {node.node_id} leads partitions {' '.join(led) or '(none)'}")
    print("Watching: a node that exits and a partition that changes leader are shown; Ctrl-C stops the cluster.")
    print(flush=True)
    while True:
        time.sleep(WATCH_INTERVAL_S)
        stamp = time.strftime("%H:%M:%S")
        for node in state.nodes:
            now = _is_node(node)
            if now != alive[node.node_id]:
                alive[node.node_id] = now
                print(f"{stamp} node {node.node_id} ({node.address}) {'is back' if now else 'has exited'}", flush=True)
        _, current = _leaders(state)
        for partition, (leader, term) in sorted(current.items()):
            if leaders.get(partition, (None, None))[0] != leader:
                who = f"node {leader}" if leader >= 0 else "no leader"
                print(f"{stamp} partition {partition}: {who} (term {term})", flush=True)
        if current:
            leaders = current


# -- down -----------------------------------------------------------------------------------------


def down(cluster_dir: Path, purge: bool = False) -> int:
    cluster_dir = cluster_dir.expanduser().resolve()
    state = ClusterState.load(cluster_dir)
    if state is None:
        print(f"no cluster in {cluster_dir}: nothing to stop")
    else:
        with _uninterruptible():
            _stop(state.nodes, print)
            state.save()
    if purge and cluster_dir.exists():
        if not _is_cluster_dir(cluster_dir):
            raise UserError(f"{cluster_dir} holds no cluster (no {STATE_FILE}); not removing it")
        shutil.rmtree(cluster_dir)
        print(f"removed {cluster_dir}")
    return 0


# -- status ---------------------------------------------------------------------------------------


def status(cluster_dir: Path, as_json: bool = False) -> int:
    """Exit 0 when every node is running and SERVING, 1 otherwise (so scripts can wait on it)."""
    cluster_dir = cluster_dir.expanduser().resolve()
    state = ClusterState.load(cluster_dir)
    if state is None:
        raise StartupError(f"no cluster in {cluster_dir} (no {STATE_FILE}); `groupcoord cluster up` starts one")
    nodes = []
    described: tuple[int, pb.DescribeClusterResponse] | None = None
    for node in state.nodes:
        running = _is_node(node)
        status = health(node.address, security=state.security()) if running else "DOWN"
        nodes.append({**_node_json(state, node), "pid": node.pid if running else None, "health": status})
        if running and described is None:
            reply = _describe_cluster(node.address, state.security())
            if reply is not None:
                described = (node.node_id, reply)
    healthy = all(n["health"] == "SERVING" for n in nodes)
    cluster: dict[str, Any] | None = None
    if described is not None:
        answered_by, reply = described
        cluster = {
            "answered_by": answered_by,
            "nodes": [{"node_id": n.node_id, "address": f"{n.host}:{n.port}", "alive": n.alive} for n in reply.nodes],
            "partitions": [
                {
                    "partition": p.partition_id,
                    "leader": p.leader_node_id if p.leader_node_id >= 0 else None,
                    "term": p.term,
                    "commit_index": p.commit_index,
                    "replicas": list(p.replica_node_ids),
                }
                for p in reply.partitions
            ],
        }
    if as_json:
        out = {"dir": state.dir, "partitions": state.partitions, "healthy": healthy, "nodes": nodes, "cluster": cluster}
        print(json.dumps(out, indent=2))
        return 0 if healthy else 1
    print(f"Cluster in {_display(state.dir)}: {len(state.nodes)} nodes, {state.partitions} partitions")
    rows = []
    for n in nodes:
        kafka = n["kafka_address"] or "-"
        rows.append([str(n["node_id"]), n["address"], kafka, str(n["pid"] or "-"), n["health"], _display(n["log"])])
    print(_table(["NODE", "ADDRESS", "KAFKA", "PID", "HEALTH", "LOG"], rows))
    if any(n.kafka_address for n in state.nodes):
        print(_kafka_clients(state))
    if cluster is None:
        print("\nNo node answered DescribeCluster.")
    else:
        print(f"\nPartitions, as node {cluster['answered_by']} sees them:")
        rows = [
            [str(p["partition"]), str(p["leader"] or "none"), str(p["term"]), str(p["commit_index"])]
            for p in cluster["partitions"]
        ]
        print(_table(["PARTITION", "LEADER", "TERM", "COMMIT INDEX"], rows))
    return 0 if healthy else 1
