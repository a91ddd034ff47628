"""`groupcoord bench --bootstrap` against a node that requires client certificates: the bench's own checks, its
members and its worker processes all connect with the CA, certificate and key given on the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord import certs
from groupcoord.client.security import ClientSecurity
from tests.e2e.support import NodeProcess, start_node, stop_node


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki") / "certs"
    certs.init(directory, 1, ["admin"])
    return directory


@pytest.fixture(scope="module")
def mtls_node(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    cert, key = certs.node_cert(pki, 1)
    ca = pki / certs.CA_FILE
    client_cert, client_key = certs.client_cert(pki, "admin")
    flags = (
        f"--tls-cert-file={cert}", f"--tls-key-file={key}", f"--tls-client-ca-file={ca}", "--tls-client-auth=require",
        "--group-initial-rebalance-delay-ms=0", "--group-min-session-timeout-ms=500",
    )  # fmt: skip
    proc = start_node(
        tmp_path_factory.mktemp("mtls") / "node.log",
        *flags,
        security=ClientSecurity(str(ca), str(client_cert), str(client_key)),
    )
    try:
        yield proc
    finally:
        stop_node(proc)


def _bench(*argv: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "groupcoord", "bench", *argv, "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def _credentials(pki: Path) -> tuple[str, ...]:
    cert, key = certs.client_cert(pki, "admin")
    return ("--ca-file", str(pki / certs.CA_FILE), "--cert-file", str(cert), "--key-file", str(key))


@pytest.mark.timeout(120)
def test_commits_and_heartbeats_reach_a_mutual_tls_node(pki: Path, mtls_node: NodeProcess):
    done = _bench("commit-latency", "--ops", "30", "--bootstrap", mtls_node.address, *_credentials(pki))
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)["runs"][0]
    assert run["ops"] == 30 and run["latency"]["count"] == 30
    assert "ca_file" not in json.loads(done.stdout)["options"]  # credentials are not echoed

    beats = _bench(
        "heartbeats", "--members", "20", "--members-per-group", "10", "--interval-ms", "300", "--window", "1.5",
        "--p99-limit-ms", "100000", "--bootstrap", mtls_node.address, *_credentials(pki),
    )  # fmt: skip
    assert beats.returncode == 0, beats.stderr[-3000:]
    step = json.loads(beats.stdout)["runs"][0]["steps"]["20"]
    assert step["heartbeats"] > 0 and not step["errors"]


def test_without_the_ca_the_bench_fails_and_says_so(mtls_node: NodeProcess):
    refused = _bench("commit-latency", "--ops", "5", "--bootstrap", mtls_node.address)
    assert refused.returncode == 2
    assert "did not answer as ready" in refused.stderr and "give --ca-file" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_credentials_without_bootstrap_are_refused(pki: Path):
    refused = _bench("commit-latency", "--ops", "5", *_credentials(pki))
    assert refused.returncode == 2
    assert "are for a --bootstrap cluster" in refused.stderr
