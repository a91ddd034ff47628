"""`groupcoord cluster stop-node|start-node|restart-node N`: one node of a local cluster (`cluster up`) at a time,
as an operator takes one machine of a real cluster down and back: the others keep serving, the node rejoins from
its own data directory with the same settings `up` gave it."""

from __future__ import annotations

from pathlib import Path

from groupcoord import localprocs
from groupcoord.base.errors import StartupError, UserError
from groupcoord.localprocs import is_running, log_size, log_tail, stop_nodes
from groupcoord.localstate import STATE_FILE, ClusterState, NodeEntry, check_ports_free, display, say, secret
from groupcoord.node import launcher


def _load(cluster_dir: Path, node_id: int) -> tuple[ClusterState, NodeEntry]:
    state = ClusterState.load(cluster_dir.expanduser().resolve())
    if state is None:
        raise StartupError(f"no cluster in {cluster_dir} (no {STATE_FILE}); `groupcoord cluster up` starts one")
    node = next((n for n in state.nodes if n.node_id == node_id), None)
    if node is None:
        ids = ", ".join(str(n.node_id) for n in state.nodes)
        raise UserError(f"the cluster in {display(state.dir)} has no node {node_id} (its nodes: {ids})")
    return state, node


def stop_node(cluster_dir: Path, node_id: int) -> int:
    """SIGTERM (SIGKILL after 10 s) to the node; the rest of the cluster is untouched."""
    state, node = _load(cluster_dir, node_id)
    stop_nodes([node], say)
    state.save()
    return 0


def start_node(cluster_dir: Path, node_id: int, timeout_s: float) -> int:
    """Starts a stopped node and waits until it serves: exit 0, or 1 with the end of its log (the node is then
    stopped again, as `up` does, so no half-started process stays behind)."""
    state, node = _load(cluster_dir, node_id)
    if is_running(node):
        say(f"node {node_id}: already running (pid {node.pid})")
        return 0
    check_ports_free([node], state.partitions)
    since = log_size(node.log)
    proc = localprocs.start_node(state, node, secret(Path(state.dir)))
    state.save()
    failed = launcher.wait_serving({node.address: proc}, timeout_s, state.security())
    if failed is None:
        say(f"node {node_id}: serving (pid {node.pid})")
        return 0
    exited = failed.returncode is not None
    why = f"exited with code {failed.returncode}" if exited else f"{failed.status} after {timeout_s:g} s"
    say(f"groupcoord: node {node_id} {why}; the end of {display(node.log)}:")
    say("\n".join("  " + line for line in log_tail(node.log, since) or ["(nothing logged yet)"]))
    stop_nodes([node], say)
    state.save()
    return 1


def restart_node(cluster_dir: Path, node_id: int, timeout_s: float) -> int:
    stop_node(cluster_dir, node_id)
    return start_node(cluster_dir, node_id, timeout_s)
