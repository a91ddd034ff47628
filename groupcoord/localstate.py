"""A local cluster's description (`groupcoord cluster`, groupcoord/localcluster.py): its `state.json`, its secret and
certificates, and the checks of what `up` is asked for, made before any node starts.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import secrets
import socket
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from groupcoord import certs
from groupcoord.base.errors import StartupError, UserError
from groupcoord.client.security import PLAINTEXT, ClientSecurity, SecurityError
from groupcoord.node import config as node_config
from groupcoord.node.topology import Peer

STATE_FILE = "state.json"
SECRET_FILE = "cluster-secret"
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


def say(text: str) -> None:
    """Progress goes to stderr, so stdout is only the table (or JSON) that scripts read."""
    print(text, file=sys.stderr, flush=True)


def display(path: str) -> str:
    """Paths under the working directory as relative ones: shorter, and what the user typed."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


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

    def peers(self) -> tuple[Peer, ...]:
        return tuple(Peer(n.node_id, n.host, n.port, n.raft_port) for n in self.nodes)

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


def is_cluster_dir(path: Path) -> bool:
    return (path / STATE_FILE).exists() or (path / SECRET_FILE).exists()


def secret(cluster_dir: Path) -> str:
    """Made once per cluster: the nodes' Raft journals only make sense to nodes with the same secret."""
    path = cluster_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
            print(f"groupcoord: {path} was readable by others; now mode 0600", file=sys.stderr)
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()


# -- checks ---------------------------------------------------------------------------------------


def node_flags_parser() -> argparse.ArgumentParser:
    """`groupcoord node`'s flags, to read what is given after `--`."""
    parser = argparse.ArgumentParser(prog="groupcoord node", add_help=False)
    node_config.add_arguments(parser)
    return parser


def check_node_args(node_args: list[str]) -> None:
    """Rejects a bad extra node flag here, in one line, rather than as N identical node crashes."""
    args, unknown = node_flags_parser().parse_known_args(node_args)
    if unknown:
        raise UserError(f"unknown node flag after --: {unknown[0]} (see groupcoord node --help)")
    managed = sorted(s.flag for s in node_config.SETTINGS if s.name in MANAGED and getattr(args, s.name) is not None)
    if managed:
        raise UserError(f"{managed[0]} is set by `cluster up` for every node; it cannot be given after --")
    node_config.load(args, {})


def check_ports_free(nodes: list[NodeEntry], partitions: int) -> None:
    """Binds each port as the nodes will (SO_REUSEADDR, so a TIME_WAIT from the last run does not count)."""
    for node in nodes:
        for port in node.ports(partitions):
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


def check_port_ranges(
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


# -- certificates (`up --tls`) --------------------------------------------------------------------


def ensure_certs(directory: Path, nodes: int) -> None:
    """Makes a development CA in `directory` when it has none; checks every file `up` will use is there."""
    if not (directory / certs.CA_FILE).exists():
        issued = certs.init(directory, nodes, [ADMIN_CLIENT])
        say(f"made a development CA and certificates in {display(str(directory))} (client: {issued.clients[0].name})")
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


def tls_flags(state: ClusterState, node: NodeEntry) -> list[str]:
    """TLS with mutual TLS required: every client needs a certificate of the cluster's CA."""
    if not state.tls_dir:
        return []
    directory = Path(state.tls_dir)
    cert, key = certs.node_cert(directory, node.node_id)
    return [
        f"--tls-cert-file={cert}", f"--tls-key-file={key}", f"--tls-client-ca-file={directory / certs.CA_FILE}",
        "--tls-client-auth=require",
    ]  # fmt: skip
