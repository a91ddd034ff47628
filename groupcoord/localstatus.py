"""What `groupcoord cluster up` prints once the cluster serves, what `up --foreground` watches, and
`groupcoord cluster status`: tables for people, JSON for scripts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from groupcoord.base.errors import StartupError
from groupcoord.localprocs import describe_cluster, is_running, leaders
from groupcoord.localstate import STATE_FILE, ClusterState, NodeEntry, display, node_flags_parser
from groupcoord.node.launcher import health
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

WATCH_INTERVAL_S = 1.0


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
    args, _ = node_flags_parser().parse_known_args(state.node_args)
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
            f" ssl.ca.location={display(security.ca_file)} ssl.certificate.location={display(security.cert_file)}"
            f" ssl.key.location={display(security.key_file)}"
        )
    if sasl:
        others = f" (or {', '.join(sasl[1:])})" if len(sasl) > 1 else ""
        line += f" sasl.mechanism={sasl[0]}{others}, sasl.username and sasl.password of an identity in the ACL file"
    return line


def print_up(state: ClusterState, as_json: bool, foreground: bool) -> None:
    """The cluster `up` has started: where each node listens and logs, and how clients reach it."""
    if as_json:
        nodes = [_node_json(state, n) for n in state.nodes]
        out = {"dir": state.dir, "partitions": state.partitions, "nodes": nodes, "tls_dir": state.tls_dir or None}
        print(json.dumps(out, indent=2), flush=True)
        return
    metrics = state.nodes[0].metrics_port >= 0
    kafka = [n.kafka_address for n in state.nodes if n.kafka_address]
    headers = ["NODE", "ADDRESS", "KAFKA", "RAFT PORTS", "PID", "LOG"] + (["METRICS"] if metrics else [])
    rows = [
        [str(n.node_id), n.address, n.kafka_address or "-", n.raft_ports(state.partitions), str(n.pid), display(n.log)]
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
            f"TLS with client certificates required. Clients: --ca-file {display(security.ca_file)} "
            f"--cert-file {display(security.cert_file)} --key-file {display(security.key_file)}"
        )
    if not foreground:
        print(f"Stop it with: groupcoord cluster down --dir {display(state.dir)}", flush=True)


def watch(state: ClusterState) -> None:
    """Prints what changes (a node exits, a partition changes leader) until Ctrl-C, which stops the cluster."""
    alive = {n.node_id: True for n in state.nodes}
    _, led_by = leaders(state)
    for node in state.nodes:
        led = [str(k) for k, (leader, _) in sorted(led_by.items()) if leader == node.node_id]
        print(f"node {node.node_id} leads partitions {' '.join(led) or '(none)'}")
    print("Watching: a node that exits and a partition that changes leader are shown; Ctrl-C stops the cluster.")
    print(flush=True)
    while True:
        time.sleep(WATCH_INTERVAL_S)
        stamp = time.strftime("%H:%M:%S")
        for node in state.nodes:
            now = is_running(node)
            if now != alive[node.node_id]:
                alive[node.node_id] = now
                print(f"{stamp} node {node.node_id} ({node.address}) {'is back' if now else 'has exited'}", flush=True)
        _, current = leaders(state)
        for partition, (leader, term) in sorted(current.items()):
            if led_by.get(partition, (None, None))[0] != leader:
                who = f"node {leader}" if leader >= 0 else "no leader"
                print(f"{stamp} partition {partition}: {who} (term {term})", flush=True)
        if current:
            led_by = current


def status(cluster_dir: Path, as_json: bool = False) -> int:
    """Exit 0 when every node is running and SERVING, 1 otherwise (so scripts can wait on it)."""
    cluster_dir = cluster_dir.expanduser().resolve()
    state = ClusterState.load(cluster_dir)
    if state is None:
        raise StartupError(f"no cluster in {cluster_dir} (no {STATE_FILE}); `groupcoord cluster up` starts one")
    nodes = []
    described: tuple[int, pb.DescribeClusterResponse] | None = None
    for node in state.nodes:
        running = is_running(node)
        status = health(node.address, security=state.security()) if running else "DOWN"
        nodes.append({**_node_json(state, node), "pid": node.pid if running else None, "health": status})
        if running and described is None:
            reply = describe_cluster(node.address, state.security())
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
    print(f"Cluster in {display(state.dir)}: {len(state.nodes)} nodes, {state.partitions} partitions")
    rows = []
    for n in nodes:
        kafka = n["kafka_address"] or "-"
        rows.append([str(n["node_id"]), n["address"], kafka, str(n["pid"] or "-"), n["health"], display(n["log"])])
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
