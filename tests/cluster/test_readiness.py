"""A node's own readiness (what Kubernetes probes, deploy/k8s) against the cluster's: an election leaves every node
that reaches a majority Ready, a node cut off from the majority is not, and liveness only says the node runs.
Asked over the plaintext health port (`health_port`), as the kubelet's gRPC probe asks."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from groupcoord.node.launcher import health
from tests.cluster.test_cli_cluster import HOSTS, _cli, _free_on_every_host, _gone, cluster_dir

__all__ = ["cluster_dir"]  # the fixture: a cluster directory that `cluster down` cleans up after the test

PARTITIONS = 4
READINESS, LIVENESS, CLUSTER = "groupcoord.readiness", "groupcoord.liveness", ""


def _until(check, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_readiness_is_the_nodes_own_and_survives_an_election(cluster_dir: Path):
    base = _free_on_every_host(1)
    raft_base = _free_on_every_host(PARTITIONS, avoid=range(base, base + 1))
    probe = _free_on_every_host(1, avoid=[base, *range(raft_base, raft_base + PARTITIONS)])
    up = _cli("up", "--nodes", "3", "--partitions", str(PARTITIONS), "--timeout", "30", "--dir", str(cluster_dir),
              "--base-port", str(base), "--raft-base-port", str(raft_base), "--kafka-base-port", "-1", "--",
              f"--health-port={probe}")  # fmt: skip
    assert up.returncode == 0, up.stderr
    state = json.loads((cluster_dir / "state.json").read_text())
    pids = {n["node_id"]: n["pid"] for n in state["nodes"]}
    logs = {n["node_id"]: Path(n["log"]) for n in state["nodes"]}
    probes = {i + 1: f"{host}:{probe}" for i, host in enumerate(HOSTS)}
    _until(lambda: all(health(a, service=READINESS) == "SERVING" for a in probes.values()))
    assert all(health(a, service=LIVENESS) == "SERVING" for a in probes.values())
    since = {i: path.stat().st_size for i, path in logs.items()}

    # Node 1 leads some partitions (the balancer spreads them); killed, they have no leader until an election.
    os.kill(pids[1], signal.SIGKILL)
    _until(lambda: _gone(pids[1]))
    seen = {2: set(), 3: set()}
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        for i in seen:
            seen[i].add(health(probes[i], service=READINESS))
        if all(health(probes[i], service=CLUSTER) == "SERVING" for i in seen) and time.monotonic() > deadline - 5:
            break
        time.sleep(0.02)
    assert seen == {2: {"SERVING"}, 3: {"SERVING"}}, seen
    # The cluster's check did go NOT_SERVING on the survivors (a partition had no leader): what every pod's
    # readiness used to be, and why a Service could lose all its endpoints at once.
    survivors = {i: logs[i].read_text()[since[i] :] for i in (2, 3)}
    assert any('"node.not_ready"' in text for text in survivors.values()), survivors
    assert not any('"node.not_serving"' in text for text in survivors.values()), survivors

    # Node 3 killed too: node 2 reaches no majority, so it is not Ready; it is still alive.
    os.kill(pids[3], signal.SIGKILL)
    _until(lambda: health(probes[2], service=READINESS) == "NOT_SERVING")
    assert health(probes[2], service=LIVENESS) == "SERVING"

    # Back to a majority: Ready again, without a restart of node 2.
    started = _cli("start-node", "3", "--timeout", "30", "--dir", str(cluster_dir))
    assert started.returncode == 0, started.stderr
    _until(lambda: health(probes[2], service=READINESS) == "SERVING" == health(probes[3], service=READINESS))
