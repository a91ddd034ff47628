"""README's run command (`make run` = examples/demo.py) end to end, as a new user would see it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags", [[], ["--tls"]], ids=["plaintext", "tls"])
def test_the_demo_runs_end_to_end_without_a_rebalance(flags: list[str]):
    """With --tls the cluster serves TLS with client certificates required: the workers, `groups describe` and the
    cluster's own health checks all connect with the admin certificate `cluster up --tls` issued."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "every partition has exactly one owner, all in generation 1" in out
    assert "$ kill -9 " in out
    assert "-> no rebalance: every worker still owns its partitions in generation 1" in out
    assert "demo   Stable" in out
    # Two unmodified Kafka consumers share the topic next to the workers, and carry on through the kill too.
    assert "-> librdkafka's consumers split the topic's partitions through the Kafka listener" in out
    assert "-> the Kafka consumers kept their partitions too" in out
    assert "demo-kafka  Stable" in out
    assert out.count("confluent-kafka-python 2.16.1-rdkafka-") == 2
    assert out.count("groupcoord-python ") == 4
    assert "removed" in out.splitlines()[-1]
    # `cluster up` and `cluster status` print where Kafka clients connect; with --tls, over TLS.
    kafka = "Kafka clients: bootstrap.servers=127.0.0.1:9192,127.0.0.2:9192,127.0.0.3:9192"
    assert len([line for line in out.splitlines() if line.startswith(kafka)]) == 2, out
    if flags:
        assert "TLS with client certificates required" in out
        assert "--ca-file" in out and "--cert-file" in out
        assert f"{kafka} security.protocol=SSL ssl.ca.location=" in out
    else:
        assert f"{kafka}\n" in out
    print(f"demo took {elapsed:.1f} s")
