"""Cluster layout: which nodes exist, where they listen, and which partition a group belongs to.

A group maps to partition `stable_hash(group_id) % P`, where `stable_hash` is BLAKE2b with an 8-byte digest
(`digest_size=8`, not a prefix of the 64-byte one) of the group id as UTF-8, read big-endian; docs/ARCHITECTURE.md
has known answers. It never depends on the process (unlike Python's `hash()`),
so every node, client and tool agrees on it. P is fixed when a node first creates its data directory and
stored there (`cluster.json`); a node refuses to start with another P.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from groupcoord.base.errors import StartupError, UserError

# A peers entry's optional Kafka address starts with this (`@kafka=host:port`); the untagged `@host:port` is the
# gRPC client address, as before the Kafka listener.
KAFKA_TAG = "kafka="
PEER_FORM = "id=host:port:raft_port[@client_host:client_port][@kafka=kafka_host:kafka_port]"


def stable_hash(group_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(group_id.encode(), digest_size=8).digest(), "big")


def partition_for(group_id: str, partitions: int) -> int:
    return stable_hash(group_id) % partitions


@dataclass(frozen=True, slots=True)
class Peer:
    """A node of the cluster: other nodes reach it at host:port (partition k's Raft at host:raft_port+k);
    clients are told `client_host:client_port`, which is host:port unless the peers entry advertises another
    address (published container ports, NAT). `kafka`: the address Kafka clients are told for it, when its entry
    gives one (nodes whose Kafka ports are published at different ports); None: the Kafka listener's own rule
    (node/kafka/apis.py, `broker`)."""

    node_id: int
    host: str
    port: int
    raft_port: int
    advertised: tuple[str, int] | None = None
    kafka: tuple[str, int] | None = None

    @property
    def client_host(self) -> str:
        return self.advertised[0] if self.advertised else self.host

    @property
    def client_port(self) -> int:
        return self.advertised[1] if self.advertised else self.port

    @property
    def address(self) -> str:
        """Where the other nodes reach its client port (not the address advertised to clients)."""
        return f"{_bracket(self.host)}:{self.port}"

    def raft_address(self, partition: int) -> str:
        return f"{self.host}:{self.raft_port + partition}"


def format_peer(peer: Peer) -> str:
    """The peer in `peers` form, `parse_peers`'s inverse: what membership entries carry (raft/partition.py)."""
    text = f"{peer.node_id}={_bracket(peer.host)}:{peer.port}:{peer.raft_port}"
    text += f"@{_bracket(peer.advertised[0])}:{peer.advertised[1]}" if peer.advertised else ""
    return text + (f"@{KAFKA_TAG}{_bracket(peer.kafka[0])}:{peer.kafka[1]}" if peer.kafka else "")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def parse_peers(text: str) -> list[Peer]:
    """`1=10.0.0.1:50051:60051,2=...` -> peers (node id = host : client port : first Raft port), each optionally
    followed by `@client_host:client_port`, the address gRPC clients are given for that node, and by
    `@kafka=kafka_host:kafka_port`, the address Kafka clients are given (either, both, in either order)."""
    peers: list[Peer] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            node, _, rest = item.partition("=")
            address, *suffixes = rest.split("@")
            host, port, raft_port = address.rsplit(":", 2)
            advertised, kafka = _advertised(suffixes)
            peer = Peer(int(node), host.strip("[]"), int(port), int(raft_port), advertised, kafka)
        except ValueError:
            raise UserError(f"peers: expected {PEER_FORM}, got {item!r}") from None
        extra = [a for a in (advertised, kafka) if a is not None]
        ports = [peer.port, peer.raft_port, *(a[1] for a in extra)]
        if not host or not all(a[0] for a in extra) or not all(0 < p < 65_536 for p in ports):
            raise UserError(f"peers: bad address in {item!r}")
        peers.append(peer)
    ids = [p.node_id for p in peers]
    if len(set(ids)) != len(ids):
        raise UserError("peers: a node id is listed twice")
    return peers


def _advertised(suffixes: list[str]) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """The `@...` parts of a peers entry: (gRPC client address, Kafka address); ValueError for a repeated, unknown
    or malformed one."""
    advertised: tuple[str, int] | None = None
    kafka: tuple[str, int] | None = None
    for suffix in suffixes:
        if suffix.startswith(KAFKA_TAG) and kafka is None:
            kafka = _host_port(suffix.removeprefix(KAFKA_TAG))
        elif "=" not in suffix and advertised is None:
            advertised = _host_port(suffix)
        else:
            raise ValueError(suffix)
    return advertised, kafka


def check_partition_count(data_dir: Path, partitions: int, node_ids: list[int]) -> None:
    """Stores P and the node ids with the data on first start; refuses a different P afterwards."""
    meta_path = data_dir / "cluster.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("partitions") != partitions:
            raise StartupError(
                f"{meta_path} says this cluster has {meta.get('partitions')} partitions, "
                f"not {partitions}: the partition count is fixed when a cluster is created"
            )
        return
    tmp = meta_path.with_suffix(".tmp")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        meta = {"version": 1, "partitions": partitions, "node_ids": sorted(node_ids), "incarnation": uuid.uuid4().hex}
        tmp.write_text(json.dumps(meta))
        tmp.replace(meta_path)
    except OSError as exc:
        raise StartupError(f"cannot write {meta_path}: {exc.strerror}") from None


def read_cluster_id(data_dir: Path) -> str | None:
    """The cluster id stored with the data (node/cluster.py), or None before this node has learned it."""
    try:
        meta = json.loads((data_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return None
    value = meta.get("cluster_id") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def incarnation(data_dir: Path) -> str:
    """This data directory's incarnation id, kept in cluster.json: minted with the directory, so a node that starts
    on a new or wiped one (a lost volume, a replacement machine) is a new incarnation of its node id. A directory
    made before incarnations existed gets one at its first start."""
    meta_path = data_dir / "cluster.json"
    meta = json.loads(meta_path.read_text())
    value = meta.get("incarnation")
    if isinstance(value, str) and value:
        return value
    meta["incarnation"] = minted = uuid.uuid4().hex
    tmp = meta_path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(meta))
        tmp.replace(meta_path)
    except OSError as exc:
        raise StartupError(f"cannot write {meta_path}: {exc.strerror}") from None
    return minted


def store_cluster_id(data_dir: Path, cluster_id: str) -> None:
    """Adds the cluster id to cluster.json (written whole to a temporary file, renamed into place)."""
    meta_path = data_dir / "cluster.json"
    meta = json.loads(meta_path.read_text())
    meta["cluster_id"] = cluster_id
    tmp = meta_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta))
    tmp.replace(meta_path)
