"""`groupcoord cluster stop-node|start-node|restart-node N`: one node of a local cluster (`cluster up`) at a time,
as an operator takes one machine of a real cluster down and back: the others keep serving, the node rejoins from
its own data directory with the same settings `up` gave it."""

from __future__ import annotations

import time
from pathlib import Path

from groupcoord.base.errors import StartupError, UserError
from groupcoord.localcluster import (
    STATE_FILE,
    ClusterState,
    NodeEntry,
    _check_ports_free,
    _display,
    _is_node,
    _log_tail,
    _say,
    _secret,
    _start_node,
    _stop,
    health,
)


def _load(cluster_dir: Path, node_id: int) -> tuple[ClusterState, NodeEntry]:
    state = ClusterState.load(cluster_dir.expanduser().resolve())
    if state is None:
        raise StartupError(f"no cluster in {cluster_dir} (no {STATE_FILE}); `groupcoord cluster up` starts one")
    node = next((n for n in state.nodes if n.node_id == node_id), None)
    if node is None:
        ids = ", ".join(str(n.node_id) for n in state.nodes)
        raise UserError(f"the cluster in {_display(state.dir)} has no node {node_id} (its nodes: {ids})")
    return state, node


def stop_node(cluster_dir: Path, node_id: int) -> int:
    """SIGTERM (SIGKILL after 10 s) to the node; the rest of the cluster is untouched."""
    state, node = _load(cluster_dir, node_id)
    _stop([node], _say)
    state.save()
    return 0


def start_node(cluster_dir: Path, node_id: int, timeout_s: float) -> int:
    """Starts a stopped node and waits until it serves: exit 0, or 1 with the end of its log (the node is then
    stopped again, as `up` does, so no half-started process stays behind)."""
    state, node = _load(cluster_dir, node_id)
    if _is_node(node):
        _say(f"node {node_id}: already running (pid {node.pid})")
        return 0
    _check_ports_free(ClusterState(state.dir, state.partitions, [node], state.secret_file))
    since = Path(node.log).stat().st_size if Path(node.log).exists() else 0
    proc = _start_node(state, node, _secret(Path(state.dir)).read_text().strip())
    node.pid = proc.pid
    state.save()
    deadline = time.monotonic() + timeout_s
    status = "UNREACHABLE"
    while time.monotonic() < deadline and proc.poll() is None:
        status = health(node.address, security=state.security())
        if status == "SERVING":
            _say(f"node {node_id}: serving (pid {node.pid})")
            return 0
        time.sleep(0.1)
    why = f"exited with code {proc.returncode}" if proc.poll() is not None else f"{status} after {timeout_s:g} s"
    _say(f"groupcoord: node {node_id} {why}; the end of {_display(node.log)}:")
    _say("\n".join("  " + line for line in _log_tail(node.log, since) or ["(nothing logged yet)"]))
    _stop([node], _say)
    state.save()
    return 1


def restart_node(cluster_dir: Path, node_id: int, timeout_s: float) -> int:
    stop_node(cluster_dir, node_id)
    return start_node(cluster_dir, node_id, timeout_s)
