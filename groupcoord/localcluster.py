"""`groupcoord cluster up/down`: a cluster of node processes on this machine, to try the product and to test it;
not a deployment tool. `status` and what `up` prints are groupcoord/localstatus.py; the one-node commands
groupcoord/localnodes.py.

Node i listens on 127.0.0.i (Linux routes all of 127.0.0.0/8 to loopback), so every node uses the same ports
(gRPC, Raft, metrics, Kafka) and a node's address says which node it is. The cluster dir holds everything:
`state.json` (what `down` and `status` need, groupcoord/localstate.py), the cluster secret (mode 0600, handed to the
nodes through their environment because flags show in `ps`), and per node its data dir and JSON log. Nodes run
detached (their own session), so a Ctrl-C in the terminal that started them reaches them only through `down`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.base.errors import StartupError, UserError
from groupcoord.localprocs import (
    describe_cluster,
    is_running,
    leaders,
    log_size,
    log_tail,
    signals_interrupt,
    start_node,
    stop_nodes,
    uninterruptible,
)
from groupcoord.localstate import (
    SECRET_FILE,
    STATE_FILE,
    ClusterState,
    NodeEntry,
    check_node_args,
    check_port_ranges,
    check_ports_free,
    display,
    ensure_certs,
    is_cluster_dir,
    say,
    secret,
)
from groupcoord.localstatus import print_up, watch
from groupcoord.node import config as node_config
from groupcoord.node import launcher
from groupcoord.node.balance import preferred_leader

MIN_NODES, MAX_NODES = 3, 5
DEFAULT_NODES, DEFAULT_PARTITIONS = 3, 16
DEFAULT_BASE_PORT, DEFAULT_RAFT_BASE_PORT, DEFAULT_METRICS_PORT = 50051, 25051, 9464
DEFAULT_KAFKA_BASE_PORT = node_config.KAFKA_DEFAULT_PORT
TLS_DIR = "tls"


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
    check_port_ranges(base, raft_base, partitions, metrics_port, kafka_port)
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
    check_port_ranges(first.port, first.raft_port, state.partitions, metrics_port, kafka_port)
    for node in state.nodes:
        node.metrics_port, node.kafka_port = metrics_port, kafka_port
    state.node_args = opts.node_args
    return state


def _tls_dir(opts: UpOptions, cluster_dir: Path) -> Path | None:
    """The certificates the nodes serve with: --tls-dir's, else the cluster dir's own `tls/`; None for plaintext."""
    if not opts.tls and opts.tls_dir is None:
        return None
    return (opts.tls_dir or cluster_dir / TLS_DIR).expanduser().resolve()


# -- waiting for the nodes ------------------------------------------------------------------------


Procs = dict[str, launcher.Proc]


def _node_at(state: ClusterState, address: str) -> NodeEntry:
    return next(n for n in state.nodes if n.address == address)


def _wait_serving(state: ClusterState, procs: Procs, timeout_s: float) -> tuple[NodeEntry, str] | None:
    """None once every node reports SERVING in the same round, else the first node that did not and why."""
    failed = launcher.wait_serving(procs, timeout_s, state.security())
    if failed is None:
        return None
    if failed.returncode is not None:
        return _node_at(state, failed.address), f"exited with code {failed.returncode}"
    return _node_at(state, failed.address), f"not SERVING after {timeout_s:g} s ({_leader_views(state)})"


def _leader_views(state: ClusterState) -> str:
    """What each node believes about the partition leaders, to tell a stuck election from a stuck barrier."""
    views = []
    for node in state.nodes:
        described = describe_cluster(node.address, state.security())
        if described is None:
            views.append(f"node {node.node_id} does not answer DescribeCluster")
            continue
        leaders = [p.leader_node_id for p in described.partitions]
        views.append(f"node {node.node_id} sees leaders {leaders}")
    return "; ".join(views)


def _wait_balanced(state: ClusterState, procs: Procs, deadline: float) -> bool:
    """Whether each partition came to be led by its preferred node (node/balance.py) in time.

    The preferred nodes stand first at start (raft/patch_pre_vote.py, the rank), and a partition elected elsewhere
    (its preferred node started late) is handed over a few seconds later; waiting for that means the coordinators
    a client finds right after `up` stay put.
    """
    want = {k: preferred_leader(k, list(state.peers())).node_id for k in range(state.partitions)}
    while time.monotonic() < deadline and launcher.first_exited(procs) is None:
        _, now = leaders(state)
        balanced = {k: leader for k, (leader, _) in now.items()} == want
        if balanced and launcher.first_not_serving(procs, state.security()) is None:
            return True
        time.sleep(0.1)
    return False


# -- up -------------------------------------------------------------------------------------------


def up(opts: UpOptions) -> int:
    count = opts.nodes if opts.nodes is not None else DEFAULT_NODES
    if not MIN_NODES <= count <= MAX_NODES:
        raise UserError(f"--nodes must be {MIN_NODES} to {MAX_NODES} (a Raft majority survives a failure), got {count}")
    if opts.partitions is not None and not 1 <= opts.partitions <= 1024:
        raise UserError(f"--partitions must be between 1 and 1024, got {opts.partitions}")
    if opts.timeout <= 0:
        raise UserError(f"--timeout must be positive, got {opts.timeout:g}")
    check_node_args(opts.node_args)
    cluster_dir = opts.dir.expanduser().resolve()
    state = ClusterState.load(cluster_dir)
    if state is None:
        if cluster_dir.exists() and any(cluster_dir.iterdir()):
            raise UserError(f"{cluster_dir} is not empty and holds no cluster; pick another --dir")
        state = _new_state(opts, cluster_dir)
        restart = False
    else:
        live = [n for n in state.nodes if is_running(n)]
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
        ensure_certs(tls_dir, len(state.nodes))  # the user's directory: checked before anything is created
    check_ports_free(state.nodes, state.partitions)
    cluster_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    cluster_secret = secret(cluster_dir)
    if tls_dir is not None:
        ensure_certs(tls_dir, len(state.nodes))
    state.tls_dir = str(tls_dir or "")

    procs: Procs = {}
    log_offsets = {n.node_id: log_size(n.log) for n in state.nodes}
    with signals_interrupt():
        try:
            what = "restarting the cluster (its data is kept)" if restart else "starting a new cluster"
            say(f"{what} in {display(state.dir)}: {len(state.nodes)} nodes, {state.partitions} partitions")
            for node in state.nodes:
                procs[node.address] = start_node(state, node, cluster_secret)
            state.save()
            deadline = time.monotonic() + opts.timeout
            failed = _wait_serving(state, procs, opts.timeout)
            if failed is None and not _wait_balanced(state, procs, deadline):
                exited = launcher.first_exited(procs)
                if exited is not None:
                    failed = _node_at(state, exited.address), f"exited with code {exited.returncode}"
                else:
                    say("note: partition leadership has not settled on the preferred nodes yet")
            if failed is not None:
                node, why = failed
                say(f"groupcoord: node {node.node_id} {why}; the end of {display(node.log)}:")
                tail = log_tail(node.log, log_offsets[node.node_id]) or ["(nothing logged yet)"]
                say("\n".join("  " + line for line in tail))
                raise StartupError(f"node {node.node_id} {why}; stopped the nodes this command started")
            print_up(state, opts.json, opts.foreground)
            if opts.foreground:
                watch(state)
        except BaseException as exc:
            # Whatever ends `up` before it has handed over a running cluster, no node outlives it.
            with uninterruptible():
                say("stopping the cluster")
                stop_nodes(state.nodes, say)
                state.save()
            if isinstance(exc, KeyboardInterrupt):
                return 0 if opts.foreground else 130
            raise
    return 0


# -- down -----------------------------------------------------------------------------------------


def down(cluster_dir: Path, purge: bool = False) -> int:
    cluster_dir = cluster_dir.expanduser().resolve()
    state = ClusterState.load(cluster_dir)
    if state is None:
        print(f"no cluster in {cluster_dir}: nothing to stop")
    else:
        with uninterruptible():
            stop_nodes(state.nodes, print)
            state.save()
    if purge and cluster_dir.exists():
        if not is_cluster_dir(cluster_dir):
            raise UserError(f"{cluster_dir} holds no cluster (no {STATE_FILE}); not removing it")
        shutil.rmtree(cluster_dir)
        print(f"removed {cluster_dir}")
    return 0
