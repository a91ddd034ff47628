"""The Kubernetes manifests (deploy/k8s), checked offline: each object validated, strictly (unknown fields are
errors), against the Kubernetes OpenAPI schemas that kubernetes-validate bundles, for the oldest and the newest
version we support; then the cross-file checks no schema knows: what kustomization.yaml lists, the StatefulSet's
Service, selectors, the peers list against the replicas, the addresses Kafka clients are told, TLS and the ACL.
The compose files' checks and the shared constants are in test_manifests.py.
"""

from __future__ import annotations

import re
import subprocess
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
from tests.deploy.test_manifests import CLIENT_PORT, DATA_DIR, K8S, KAFKA_PORT, RAFT_PORT, kafka_brokers, rel

INSTALL_K8S = "pip install 'kubernetes-validate==1.37.0' (in pyproject's dev extra)"
# The Kubernetes versions whose API schemas the manifests must match (deploy/README.md): an older one still in
# use and the newest that kubernetes-validate 1.37.0 bundles.
K8S_VERSIONS = ("1.30.0", "1.37.0")


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
