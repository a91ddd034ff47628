"""A local cluster's nodes as processes (`groupcoord cluster`): started through the node launcher
(node/launcher.py) with the settings the cluster's state gives them, found again by the pid `state.json` keeps,
stopped, and asked who leads what. Shared by `up`/`down`/`status` and the one-node commands (groupcoord/localnodes.py).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from groupcoord.client.security import ClientSecurity, sync_channel
from groupcoord.localstate import ClusterState, NodeEntry, tls_flags
from groupcoord.node import launcher
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

STOP_WAIT_S = launcher.STOP_GRACE_S
LOG_TAIL_LINES = 25

# Nodes this process started: the only ones it may reap (an exited child is a zombie until its parent reaps it).
_spawned: dict[int, launcher.Proc] = {}


def is_running(node: NodeEntry) -> bool:
    """Whether node.pid is still this cluster's `groupcoord node` (a pid can be reused by any process)."""
    if node.pid is None:
        return False
    child = _spawned.get(node.pid)
    if child is not None and child.poll() is not None:
        del _spawned[node.pid]
    return launcher.is_node(node.pid, node.data_dir)


def start_node(state: ClusterState, node: NodeEntry, secret: str) -> launcher.Proc:
    """Starts the node detached from this terminal (its own session): only `down` or `stop-node` ends it."""
    Path(node.data_dir).mkdir(parents=True, exist_ok=True)
    options = launcher.NodeOptions(
        host=node.host,
        port=node.port,
        node_id=node.node_id,
        peers=state.peers(),
        partitions=state.partitions,
        data_dir=Path(node.data_dir),
        metrics_port=node.metrics_port,
        kafka_port=node.kafka_port,
        flags=(*tls_flags(state, node), *state.node_args),
    )
    proc = launcher.start(options, Path(node.log), secret)
    _spawned[proc.pid] = proc
    node.pid = proc.pid
    return proc


def stop_nodes(nodes: list[NodeEntry], say: Callable[[str], None]) -> None:
    """SIGTERM every node that is still ours, up to STOP_WAIT_S for them to exit, then SIGKILL."""
    running: dict[int, NodeEntry] = {}
    for node in nodes:
        if node.pid is not None and is_running(node):
            running[node.pid] = node
        elif node.pid is not None and launcher.cmdline(node.pid) is not None:
            say(f"node {node.node_id}: pid {node.pid} is no longer a groupcoord node of this cluster; left alone")
        else:
            say(f"node {node.node_id}: already down")

    def exited(pid: int, killed: bool) -> None:
        node = running[pid]
        if killed:
            say(f"node {node.node_id}: killed (pid {pid}) after {STOP_WAIT_S:g} s without exiting")
        else:
            say(f"node {node.node_id}: stopped (pid {pid})")

    launcher.stop(list(running), lambda pid: is_running(running[pid]), STOP_WAIT_S, exited)
    for node in nodes:
        node.pid = None


def log_tail(path: str, since: int) -> list[str]:
    """The last lines the node logged after byte `since` (where its log ended before this start)."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


def log_size(path: str) -> int:
    return Path(path).stat().st_size if Path(path).exists() else 0


@contextmanager
def signals_interrupt() -> Iterator[None]:
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
def uninterruptible() -> Iterator[None]:
    """A second Ctrl-C while the nodes stop would leave some of them running."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# -- asking the nodes -----------------------------------------------------------------------------


def describe_cluster(
    address: str, security: ClientSecurity, timeout_s: float = 2.0
) -> pb.DescribeClusterResponse | None:
    with sync_channel(address, security, launcher.CHANNEL_OPTIONS) as channel:
        try:
            reply: pb.DescribeClusterResponse = pb_grpc.GroupCoordinatorStub(channel).DescribeCluster(
                pb.DescribeClusterRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return None
    return reply


def leaders(state: ClusterState) -> tuple[int | None, dict[int, tuple[int, int]]]:
    """(answering node, partition -> (leader, term)) from the first node that answers DescribeCluster."""
    for node in state.nodes:
        if is_running(node):
            reply = describe_cluster(node.address, state.security(), timeout_s=1.0)
            if reply is not None:
                return node.node_id, {p.partition_id: (p.leader_node_id, p.term) for p in reply.partitions}
    return None, {}
