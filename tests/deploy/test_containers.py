"""The container deployment for real: the image deploy/build-image made, the root docker-compose.yml brought up by
testcontainers (Docker Compose v2, Ryuk off: it cannot be pulled here) exactly as shipped: mutual TLS and an ACL,
with the credentials its one-shot service generated at the first start. SDK members on the host use the admin's
certificate copied out of the compose project, as deploy/README.md tells operators to; anonymous callers and an
identity acl.toml grants nothing are refused; a Kafka client asks for Metadata over TLS. A coordinator container is
killed during a rebalance; the whole cluster is restarted on its volumes. Needs a Docker engine and the image
(`.ci/run` starts dockerd and runs deploy/build-image).

Container traffic stays on the compose project's own network and 127.0.0.1: the file publishes on loopback only.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"  # before testcontainers reads its configuration

from testcontainers.compose import DockerCompose

from groupcoord import certs
from groupcoord.client import GroupMember
from groupcoord.client.security import ClientSecurity, sync_channel
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.deploy.test_manifests import compose_binary

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "groupcoord:latest"
NODES = 3
CLIENT_PORTS = [50051 + i for i in range(NODES)]
METRICS_PORTS = [9464 + i for i in range(NODES)]
KAFKA_PORTS = [9092 + i for i in range(NODES)]
BOOTSTRAP = [f"127.0.0.1:{port}" for port in CLIENT_PORTS]
GROUP, TOPIC, PARTITIONS = "containers", "orders", 6
SESSION_MS = 6_000
LONG_SESSION_MS = 60_000  # outlives a full restart of the cluster
UP_TIMEOUT_S = 120.0
CREDENTIALS = "/etc/groupcoord/credentials"  # in the `credentials` service's container (docker-compose.yml)
CA_DIR = "/etc/groupcoord/ca"


def _docker(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)


def _require_engine_and_image() -> None:
    info = _docker("info", "--format", "{{.ServerVersion}}")
    if info.returncode != 0:
        pytest.fail(f"no Docker engine ({info.stderr.strip()}): start dockerd (.ci/run does)", pytrace=False)
    if _docker("image", "inspect", IMAGE).returncode != 0:
        pytest.fail(f"no {IMAGE} image: build it with deploy/build-image", pytrace=False)
    for port in CLIENT_PORTS + METRICS_PORTS + KAFKA_PORTS:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail(f"127.0.0.1:{port} is taken; docker-compose.yml publishes it", pytrace=False)


@dataclass
class ComposeCluster:
    compose: DockerCompose
    credentials: Path  # a host copy of the files the nodes use: ca.pem, admin.pem, admin-key.pem, acl.toml
    admin: ClientSecurity


def _copy_credentials(compose: DockerCompose, into: Path) -> None:
    """`docker compose cp credentials:...` as deploy/README.md has it (the CA's key too, to mint test identities)."""
    (into / "ca").mkdir(parents=True)
    for source, target in ((f"{CREDENTIALS}/.", into), (f"{CA_DIR}/.", into / "ca")):
        done = subprocess.run([*compose.compose_command_property, "cp", f"credentials:{source}", str(target)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr


def admin_security(directory: Path) -> ClientSecurity:
    cert, key = certs.client_cert(directory, "admin")
    return ClientSecurity(str(directory / certs.CA_FILE), str(cert), str(key))


@contextmanager
def compose_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    files: tuple[str, ...] = ("docker-compose.yml",),
    env: dict[str, str] | None = None,
) -> Iterator[ComposeCluster]:
    """The compose project of `files` up and healthy, every partition led (asked as `admin`); down -v after.

    With GROUPCOORD_CREDENTIALS_DIR in `env` the nodes use the files there; otherwise those the project generated.
    """
    _require_engine_and_image()
    # `docker compose` is the Compose v2 CLI plugin: the same binary tests/deploy/test_manifests.py validates with.
    config = tmp_path_factory.mktemp("docker-config")
    (config / "cli-plugins").mkdir()
    (config / "cli-plugins" / "docker-compose").symlink_to(compose_binary())
    saved = dict(os.environ)
    os.environ.update(
        DOCKER_CONFIG=str(config),
        COMPOSE_PROJECT_NAME=f"gctest{os.getpid()}",
        GROUPCOORD_CLUSTER_SECRET=secrets.token_hex(32),
        **(env or {}),
    )
    compose = DockerCompose(ROOT, compose_file_name=list(files), wait=True)
    try:
        started = time.monotonic()
        compose.start()  # `up --wait`: every container healthy, i.e. its node answers SERVING over mutual TLS
        healthy_s = time.monotonic() - started
        own = (env or {}).get("GROUPCOORD_CREDENTIALS_DIR")
        if own is None:
            credentials = tmp_path_factory.mktemp("compose") / "credentials"
            _copy_credentials(compose, credentials)
        else:
            credentials = Path(own)
        admin = admin_security(credentials)
        led_s = _wait_all_led(time.monotonic() + UP_TIMEOUT_S, admin) + healthy_s
        print(f"compose cluster: healthy after {healthy_s:.1f} s, every partition led after {led_s:.1f} s")
        yield ComposeCluster(compose, credentials, admin)
    finally:
        try:
            compose.stop(down=True)  # down --volumes
        finally:
            os.environ.clear()
            os.environ.update(saved)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    with compose_cluster(tmp_path_factory) as running:
        yield running


def _stub(port: int, security: ClientSecurity) -> pb_grpc.GroupCoordinatorStub:
    return pb_grpc.GroupCoordinatorStub(sync_channel(f"127.0.0.1:{port}", security))


def _describe_cluster(security: ClientSecurity) -> pb.DescribeClusterResponse | None:
    for port in CLIENT_PORTS:
        try:
            return _stub(port, security).DescribeCluster(pb.DescribeClusterRequest(), timeout=2)
        except grpc.RpcError:
            continue
    return None


def _wait_all_led(deadline: float, security: ClientSecurity) -> float:
    """Seconds until DescribeCluster shows a leader for every partition."""
    started = time.monotonic()
    while time.monotonic() < deadline:
        described = _describe_cluster(security)
        if described is not None and all(p.leader_node_id > 0 for p in described.partitions):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError("some partition had no leader in time")


def _coordinator(security: ClientSecurity) -> pb.FindCoordinatorResponse.Coordinator:
    for port in CLIENT_PORTS:
        try:
            found = _stub(port, security).FindCoordinator(pb.FindCoordinatorRequest(group_ids=[GROUP]), timeout=2)
        except grpc.RpcError:
            continue
        if found.coordinators[0].error_code == Errors.NONE:
            return found.coordinators[0]
    raise AssertionError("no node named a coordinator")


def _describe(security: ClientSecurity) -> pb.DescribeGroupsResponse.Group | None:
    coordinator = _coordinator(security)
    try:
        stub = _stub(coordinator.port, security)
        reply = stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[GROUP]), timeout=2)
    except grpc.RpcError:
        return None
    return reply.groups[0] if reply.groups[0].error_code == Errors.NONE else None


async def _wait_group(
    state: str, members: int, security: ClientSecurity, timeout_s: float = 60.0
) -> pb.DescribeGroupsResponse.Group:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described = await asyncio.to_thread(_safe_describe, security)
        if described is not None and described.group_state == state and len(described.members) == members:
            return described
        await asyncio.sleep(0.1)
    raise AssertionError(f"group not {state} with {members} members in time: {described}")


def _safe_describe(security: ClientSecurity) -> pb.DescribeGroupsResponse.Group | None:
    try:
        return _describe(security)
    except AssertionError:
        return None


def _member(security: ClientSecurity, instance: str = "", session_ms: int = SESSION_MS) -> GroupMember:
    return GroupMember(
        BOOTSTRAP, GROUP, {TOPIC: PARTITIONS}, client_id=instance or "dynamic", group_instance_id=instance,
        session_timeout_ms=session_ms, heartbeat_interval_ms=500, security=security,
    )  # fmt: skip


def _container_health(compose: DockerCompose, service: str) -> str:
    container_id = compose.get_container(service, include_all=True).ID
    state = json.loads(_docker("inspect", "--format", "{{json .State}}", container_id).stdout)
    return state.get("Health", {}).get("Status", state["Status"])


async def _commit_round(members: list[GroupMember], offset: int, acked: dict[tuple[str, int], int]) -> None:
    for member in members:
        owned = member.assignment.partitions
        codes = await member.commit({tp: offset for tp in owned})
        acked.update({tp: offset for tp in owned if codes.get(tp) == Errors.NONE})


def kafka_ssl(security: ClientSecurity) -> dict[str, str]:
    """librdkafka's settings for a client of the compose cluster's Kafka listeners (mutual TLS, Kafka's SSL)."""
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(security.ca_file),
        "ssl.certificate.location": str(security.cert_file),
        "ssl.key.location": str(security.key_file),
    }


def test_kafka_clients_are_told_every_node_at_its_published_port(cluster: ComposeCluster) -> None:
    """Each node's Kafka listener answers over TLS through its published port, and its Metadata names every node at
    the host port that node is published on (the `@kafka=` addresses of GROUPCOORD_PEERS), not its container port."""
    expected = [(i + 1, "127.0.0.1", port) for i, port in enumerate(KAFKA_PORTS)]
    for port in KAFKA_PORTS:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **kafka_ssl(cluster.admin)})
        metadata = admin.list_topics(timeout=10)
        assert sorted((b.id, b.host, b.port) for b in metadata.brokers.values()) == expected, port


def _cli(*args: str, security: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The host's `groupcoord` command against the published ports; `security` as GROUPCOORD_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPCOORD_")}
    return subprocess.run(
        [sys.executable, "-m", "groupcoord", *args, "--bootstrap", ",".join(BOOTSTRAP)],
        env={**env, **(security or {})}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _as(directory: Path, name: str) -> dict[str, str]:
    cert, key = certs.client_cert(directory, name)
    return {"GROUPCOORD_CA_FILE": str(directory / certs.CA_FILE), "GROUPCOORD_CERT_FILE": str(cert),
            "GROUPCOORD_KEY_FILE": str(key)}  # fmt: skip


async def test_the_shipped_cluster_refuses_anonymous_callers(cluster: ComposeCluster) -> None:
    """As shipped, nobody without a certificate of the cluster's CA gets in (gRPC or Kafka), and an identity with one
    may do only what acl.toml grants it, which as generated is nothing: it sees no group and cannot move an offset."""
    group = "anon-check"
    made = _cli("offsets", "set", group, f"{TOPIC}:0=1000", security=_as(cluster.credentials, "admin"))
    assert made.returncode == 0, made.stderr
    listed = _cli("groups", "list", "--json", security=_as(cluster.credentials, "admin"))
    assert listed.returncode == 0 and group in {g["group_id"] for g in json.loads(listed.stdout)}, listed

    ca_only = {"GROUPCOORD_CA_FILE": str(cluster.credentials / certs.CA_FILE)}
    for security in (None, ca_only):
        for command in (("groups", "list"), ("offsets", "set", group, f"{TOPIC}:0=0")):
            refused = _cli(*command, security=security)
            assert refused.returncode == 3, (security, command, refused.stdout, refused.stderr)
            assert "cannot reach the cluster" in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": f"127.0.0.1:{KAFKA_PORTS[0]}"}).list_topics(timeout=5)

    # A certificate of the cluster's own CA for an identity acl.toml does not name.
    certs.issue_client(cluster.credentials, "stranger", cluster.credentials / "ca" / certs.CA_KEY_FILE)
    stranger = _as(cluster.credentials, "stranger")
    seen = _cli("groups", "list", "--json", security=stranger)
    assert seen.returncode == 0 and json.loads(seen.stdout) == [], seen
    rewound = _cli("offsets", "set", group, f"{TOPIC}:0=0", security=stranger)
    assert rewound.returncode == 1 and "GROUP_AUTHORIZATION_FAILED" in rewound.stdout + rewound.stderr, rewound
    deleted = _cli("groups", "delete", group, security=stranger)
    assert deleted.returncode == 1 and "GROUP_AUTHORIZATION_FAILED" in deleted.stdout + deleted.stderr, deleted
    kept = _cli("offsets", "get", group, "--json", security=_as(cluster.credentials, "admin"))
    assert kept.returncode == 0 and "1000" in kept.stdout, kept


async def test_killing_the_coordinator_container_during_a_rebalance(cluster: ComposeCluster) -> None:
    admin = cluster.admin
    static, dynamic = _member(admin, "worker-a"), _member(admin)
    for member in (static, dynamic):
        await member.start()
    await asyncio.gather(static.wait_stable(60), dynamic.wait_stable(60))
    acked: dict[tuple[str, int], int] = {}
    await _commit_round([static, dynamic], 10, acked)
    assert len(acked) == PARTITIONS

    coordinator = await asyncio.to_thread(_coordinator, admin)
    victim = f"node{coordinator.node_id}"
    joiner = _member(admin)
    await joiner.start()  # the group goes to PreparingRebalance
    deadline = time.monotonic() + 20
    while (described := await asyncio.to_thread(_safe_describe, admin)) is None or described.group_state not in (
        "PreparingRebalance",
        "CompletingRebalance",
    ):
        assert time.monotonic() < deadline, "the group never started rebalancing"
        await asyncio.sleep(0.02)
    phase = described.group_state
    killed = _docker("kill", cluster.compose.get_container(victim).ID)
    assert killed.returncode == 0, killed.stderr
    print(f"docker kill {victim} (the coordinator) while the group was {phase}")

    stable = await _wait_group("Stable", 3, admin)
    assert (await asyncio.to_thread(_coordinator, admin)).node_id != coordinator.node_id
    await asyncio.gather(*(m.wait_stable(60) for m in (static, dynamic, joiner)))
    owned = [tp for m in (static, dynamic, joiner) for tp in m.assignment.partitions]
    assert sorted(owned) == [(TOPIC, p) for p in range(PARTITIONS)], "every partition owned exactly once"
    committed = await joiner.committed()
    assert all(committed[tp] >= offset for tp, offset in acked.items()), (committed, acked)
    await _commit_round([static, dynamic, joiner], 20, acked)
    print(f"group Stable again at generation {stable.generation_id} on node {stable.coordinator_node_id}")

    # The killed node's container comes back with its volume and catches up.
    assert _docker("start", cluster.compose.get_container(victim, include_all=True).ID).returncode == 0
    deadline = time.monotonic() + UP_TIMEOUT_S
    while _container_health(cluster.compose, victim) != "healthy":
        assert time.monotonic() < deadline, f"{victim} did not become healthy again"
        await asyncio.sleep(0.5)
    described_cluster = await asyncio.to_thread(_describe_cluster, admin)
    assert described_cluster is not None
    assert all(n.alive for n in described_cluster.nodes), described_cluster.nodes
    for member in (static, dynamic, joiner):
        await member.close()


async def test_a_full_restart_keeps_groups_and_offsets_in_the_volumes(cluster: ComposeCluster) -> None:
    """Every container stopped (SIGTERM) and started again on its volumes: the static member's place, the offsets
    and the credentials are still there (the credentials service leaves them be), so the member comes back with the
    same certificate in the same generation without a rebalance."""
    admin = cluster.admin
    static = _member(admin, "worker-b", session_ms=LONG_SESSION_MS)
    await static.start()
    await static.wait_stable(60)
    described = await _wait_group("Stable", 1, admin)  # members of the previous test have left or expired
    while static.generation_id != described.generation_id:
        await asyncio.sleep(0.1)
    generation = static.generation_id
    acked: dict[tuple[str, int], int] = {}
    await _commit_round([static], 77, acked)
    await static.close()  # static: no LeaveGroup, the group keeps its place

    for action in (["stop"], ["up", "--wait"]):
        command = [*cluster.compose.compose_command_property, *action]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    await asyncio.to_thread(_wait_all_led, time.monotonic() + UP_TIMEOUT_S, admin)

    again = _member(admin, "worker-b", session_ms=LONG_SESSION_MS)
    await again.start()
    await again.wait_stable(60)
    assert again.generation_id == generation, "the static member's place survived the restart: no rebalance"
    assert sorted(again.assignment.partitions) == [(TOPIC, p) for p in range(PARTITIONS)]
    committed = await again.committed()
    assert all(committed[tp] == offset for tp, offset in acked.items()), (committed, acked)
    await again.close()
