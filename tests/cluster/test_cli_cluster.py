"""`groupcoord cluster up/status/down` as a user runs it: real processes, and none left behind."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import grpc
import pytest
from confluent_kafka.admin import AdminClient
from grpc_health.v1 import health_pb2

from groupcoord import localstatus
from groupcoord.localstate import ClusterState, NodeEntry
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import health_status

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
PARTITIONS = 4
NODES_ERROR = "--nodes must be 3 to 5 (a Raft majority survives a failure), got 7"


def _free_on_every_host(count: int, avoid: Collection[int] = ()) -> int:
    """A base port with `count` ports after it free on all three loopback hosts."""
    while True:
        with socket.socket() as s:
            s.bind((HOSTS[0], 0))
            base = s.getsockname()[1]
        ports = range(base, base + count)
        if ports.stop > 65_536 or set(ports) & set(avoid):
            continue
        try:
            for host in HOSTS:
                for port in ports:
                    with socket.socket() as probe:
                        probe.bind((host, port))
            return base
        except OSError:
            continue


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "groupcoord", "cluster", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _gone(pid: int) -> bool:
    """Exited: no such pid, or a zombie that its (new) parent has not reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    yield path
    _cli("down", "--dir", str(path))  # whatever the test did, no node outlives it


def _find_coordinators(address: str, groups: list[str]) -> list[tuple[int, str, int, int]]:
    with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
        found = pb_grpc.GroupCoordinatorStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(group_ids=groups), timeout=5
        )
    return [(c.error_code, c.host, c.port, c.partition) for c in found.coordinators]


def _agreed_coordinators(addresses: list[str], groups: list[str]) -> list[tuple[int, str, int, int]]:
    """Every node names the same coordinators; a leadership hand-over in flight may take a moment to settle."""
    deadline = time.monotonic() + 5
    while True:
        answers = [_find_coordinators(a, groups) for a in addresses]
        agreed = answers[0] == answers[1] == answers[2]
        if agreed and all(code == Errors.NONE for code, *_ in answers[0]):
            return answers[0]
        assert time.monotonic() < deadline, answers
        time.sleep(0.1)


def _settled_status(cluster_dir: Path) -> dict:
    """`status --json` once it shows every node SERVING and every partition led (exit 0 says the former)."""
    deadline = time.monotonic() + 5
    while True:
        status = _cli("status", "--json", "--dir", str(cluster_dir))
        described = json.loads(status.stdout)  # JSON whatever the health
        leaders = [p["leader"] for p in (described["cluster"] or {}).get("partitions", [])]
        if status.returncode == 0 and described["healthy"] and leaders and set(leaders) <= {1, 2, 3}:
            return described
        assert time.monotonic() < deadline, status.stdout + status.stderr
        time.sleep(0.2)


def _kafka_brokers(bootstrap: str) -> list[tuple[int, str, int]]:
    """The brokers of a Kafka Metadata answer, through librdkafka (what a Kafka client is told)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})
    metadata = admin.list_topics(timeout=10)
    return sorted((b.id, b.host, b.port) for b in metadata.brokers.values())


def test_up_status_down_and_restart(cluster_dir: Path):
    base = _free_on_every_host(1)
    raft_base = _free_on_every_host(PARTITIONS, avoid=range(base, base + 1))
    kafka = _free_on_every_host(1, avoid=[base, *range(raft_base, raft_base + PARTITIONS)])
    flags = ["--dir", str(cluster_dir), "--base-port", str(base), "--raft-base-port", str(raft_base)]
    up = _cli(
        "up", "--nodes", "3", "--partitions", str(PARTITIONS), "--json", "--timeout", "30", *flags,
        "--kafka-base-port", str(kafka),
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    shown = json.loads(up.stdout)
    addresses = [n["address"] for n in shown["nodes"]]
    assert addresses == [f"{h}:{base}" for h in HOSTS]
    assert [n["raft_ports"] for n in shown["nodes"]] == [[raft_base, raft_base + PARTITIONS - 1]] * 3
    kafka_addresses = [n["kafka_address"] for n in shown["nodes"]]
    assert kafka_addresses == [f"{h}:{kafka}" for h in HOSTS]
    # Node 1's Metadata names every node at the address `up` printed for it.
    assert _kafka_brokers(kafka_addresses[0]) == [(i + 1, h, kafka) for i, h in enumerate(HOSTS)]

    state = json.loads((cluster_dir / "state.json").read_text())
    pids = [n["pid"] for n in state["nodes"]]
    assert pids == [n["pid"] for n in shown["nodes"]]
    assert state["partitions"] == PARTITIONS
    secret_file = Path(state["secret_file"])
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    for pid in pids:
        assert secret not in Path(f"/proc/{pid}/cmdline").read_text()  # environment only, never argv
    for node in state["nodes"]:
        assert json.loads(Path(node["log"]).read_text().splitlines()[0])["event"]  # JSON logs
    assert all(health_status(a) == health_pb2.HealthCheckResponse.SERVING for a in addresses)

    groups = [f"cli-group-{i}" for i in range(8)]
    answers = _agreed_coordinators(addresses, groups)
    assert {f"{host}:{port}" for _, host, port, _ in answers} <= set(addresses)

    described = _settled_status(cluster_dir)
    assert [n["health"] for n in described["nodes"]] == ["SERVING"] * 3
    assert [n["pid"] for n in described["nodes"]] == pids
    assert [n["kafka_address"] for n in described["nodes"]] == kafka_addresses
    table = _cli("status", "--dir", str(cluster_dir))
    assert "KAFKA" in table.stdout.splitlines()[1] and all(a in table.stdout for a in kafka_addresses), table.stdout
    assert f"Kafka clients: bootstrap.servers={','.join(kafka_addresses)}" in table.stdout.splitlines()
    assert [p["partition"] for p in described["cluster"]["partitions"]] == list(range(PARTITIONS))
    # `up` waited for leadership to spread: partition k on node k % 3 + 1 (node/balance.py).
    assert [p["leader"] for p in described["cluster"]["partitions"]] == [k % 3 + 1 for k in range(PARTITIONS)]

    again = _cli("up", "--dir", str(cluster_dir))
    assert again.returncode == 1
    assert "already running" in again.stderr and "Traceback" not in again.stderr

    down = _cli("down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert all(_gone(pid) for pid in pids)
    assert down.stdout.count("stopped") == 3

    # Full cluster restart: the same dir brings back the same nodes and ports, no flags needed.
    restarted = _cli("up", "--json", "--dir", str(cluster_dir), "--timeout", "30")
    assert restarted.returncode == 0, restarted.stderr
    assert "restarting" in restarted.stderr
    assert [n["address"] for n in json.loads(restarted.stdout)["nodes"]] == addresses
    assert [n["kafka_address"] for n in json.loads(restarted.stdout)["nodes"]] == kafka_addresses
    new_pids = [n["pid"] for n in json.loads(restarted.stdout)["nodes"]]
    assert _cli("down", "--dir", str(cluster_dir)).returncode == 0
    assert all(_gone(pid) for pid in new_pids)
    assert _cli("down", "--dir", str(cluster_dir)).returncode == 0  # already down is fine


def test_node_count_outside_3_to_5_is_a_one_line_error(tmp_path: Path):
    result = _cli("up", "--nodes", "7", "--dir", str(tmp_path / "c"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"groupcoord: error: {NODES_ERROR}"]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--base-port", "50051", "--kafka-base-port", "50051"], "--kafka-base-port 50051 collides"),
        (["--kafka-base-port", "70000"], "--kafka-base-port 70000 collides with another port or is out of range"),
        (["--", "--kafka-port=9092"], "--kafka-port is set by `cluster up`"),
    ],
    ids=["same-as-base-port", "out-of-range", "as-a-node-flag"],
)
def test_a_bad_kafka_port_is_refused_before_anything_starts(tmp_path: Path, flags: list[str], message: str):
    result = _cli("up", "--dir", str(tmp_path / "c"), *flags)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "c").exists()


def test_the_kafka_client_settings_up_and_status_print(tmp_path: Path):
    """What `up` and `status` tell Kafka clients: every node's listener, and with --tls the TLS settings, client
    certificate included since the nodes require one. No processes: `up --tls` alone takes ~10 s; test_demo.py runs
    it, and tests/e2e/test_tls.py connects a Kafka client to a TLS node."""
    nodes = [
        NodeEntry(i, h, 50051, 25051, str(tmp_path / f"n{i}"), "log", kafka_port=9092) for i, h in enumerate(HOSTS, 1)
    ]
    state = ClusterState(str(tmp_path), 1, nodes, str(tmp_path / "cluster-secret"))
    servers = "bootstrap.servers=127.0.0.1:9092,127.0.0.2:9092,127.0.0.3:9092"
    assert localstatus._kafka_clients(state) == f"Kafka clients: {servers}"
    state.tls_dir = str(tmp_path / "tls")
    tls = (
        f"ssl.ca.location={tmp_path}/tls/ca.pem ssl.certificate.location={tmp_path}/tls/admin.pem "
        f"ssl.key.location={tmp_path}/tls/admin-key.pem"
    )
    assert localstatus._kafka_clients(state) == f"Kafka clients: {servers} security.protocol=SSL {tls}"
    state.node_args = ["--acl-file=acl.toml", "--kafka-sasl-mechanisms", "SCRAM-SHA-256,PLAIN"]
    sasl = localstatus._kafka_clients(state)
    assert sasl.startswith(
        f"Kafka clients: {servers} security.protocol=SASL_SSL {tls} sasl.mechanism=SCRAM-SHA-256 (or PLAIN), "
    )
    state.tls_dir = ""
    assert "security.protocol=SASL_PLAINTEXT sasl.mechanism=" in localstatus._kafka_clients(state)


def test_bad_extra_node_flag_is_refused_before_anything_starts(tmp_path: Path):
    result = _cli("up", "--dir", str(tmp_path / "c"), "--", "--peers=1=x:1:2")
    assert result.returncode == 2 and "set by `cluster up`" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c").exists()


def test_down_leaves_a_reused_pid_alone(tmp_path: Path):
    """A pid in state.json that now belongs to another program is not signalled."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cluster_dir = tmp_path / "c"
        cluster_dir.mkdir()
        node = NodeEntry(1, "127.0.0.1", 1, 2, str(cluster_dir / "node-1" / "data"), "log", pid=stranger.pid)
        ClusterState(str(cluster_dir), 1, [node], str(cluster_dir / "cluster-secret")).save()
        result = _cli("down", "--dir", str(cluster_dir), "--purge")
        assert result.returncode == 0, result.stderr
        assert "left alone" in result.stdout
        assert stranger.poll() is None
        assert not cluster_dir.exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_down_without_a_cluster_is_not_an_error(tmp_path: Path):
    result = _cli("down", "--dir", str(tmp_path / "none"))
    assert result.returncode == 0 and "nothing to stop" in result.stdout


def test_one_node_stops_starts_and_restarts_while_the_others_serve(cluster_dir: Path):
    base = _free_on_every_host(1)
    raft_base = _free_on_every_host(PARTITIONS, avoid=range(base, base + 1))
    flags = ["--dir", str(cluster_dir)]
    up = _cli("up", "--nodes", "3", "--partitions", str(PARTITIONS), "--timeout", "30", *flags, "--base-port",
              str(base), "--raft-base-port", str(raft_base), "--kafka-base-port", "-1")  # fmt: skip
    assert up.returncode == 0, up.stderr
    pids = {n["node_id"]: n["pid"] for n in json.loads((cluster_dir / "state.json").read_text())["nodes"]}

    stopped = _cli("stop-node", "2", *flags)
    assert stopped.returncode == 0 and "node 2: stopped" in stopped.stderr, stopped.stderr
    assert _gone(pids[2]) and not _gone(pids[1]) and not _gone(pids[3])
    status = _cli("status", "--json", *flags)
    assert status.returncode == 1  # not every node serves
    health = {n["node_id"]: n["health"] for n in json.loads(status.stdout)["nodes"]}
    assert health[2] == "DOWN"
    # The two others still answer for every group: a majority of every partition is up.
    coordinators = _agreed_coordinators([f"{HOSTS[0]}:{base}", f"{HOSTS[2]}:{base}"] * 2, ["a", "b", "c"])
    assert {c[1] for c in coordinators} <= {HOSTS[0], HOSTS[2]}

    again = _cli("stop-node", "2", *flags)
    assert again.returncode == 0 and "node 2: already down" in again.stderr

    started = _cli("start-node", "2", "--timeout", "30", *flags)
    assert started.returncode == 0 and "node 2: serving" in started.stderr, started.stderr
    assert _settled_status(cluster_dir)["nodes"][1]["health"] == "SERVING"

    restarted = _cli("restart-node", "3", "--timeout", "30", *flags)
    assert restarted.returncode == 0, restarted.stderr
    assert _gone(pids[3])
    new_pids = {n["node_id"]: n["pid"] for n in _settled_status(cluster_dir)["nodes"]}
    assert new_pids[3] not in (None, pids[3]) and new_pids[1] == pids[1]

    missing = _cli("stop-node", "9", *flags)
    assert missing.returncode == 2 and "has no node 9 (its nodes: 1, 2, 3)" in missing.stderr
