"""`groupcoord bench etcd`, the reference of docs/PERFORMANCE.md: without etcd it says what is missing and runs
nothing; with Debian's etcd-server installed, a tiny run gives every workload on both systems and the ratios.
CI does not install etcd (it is for people comparing), so the second test says it was not run."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.bench.test_bench import bench, ordered


def test_without_etcd_it_says_what_is_missing_and_runs_nothing(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord", "bench", "etcd", "--etcd", str(tmp_path / "no-etcd")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0
    assert "needs an etcd binary (Debian: apt-get install etcd-server" in out.stderr
    assert "nothing was run" in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed: bench etcd was not run")
@pytest.mark.timeout(150)
def test_a_tiny_reference_run_measures_both_systems_and_their_ratios() -> None:
    result = bench(
        "etcd", "--ops", "30", "--in-flight", "8", "--duration", "1", "--groups", "4", "--members", "10", timeout=140
    )
    (run,) = result["runs"]
    for system in ("etcd", "groupcoord", "groupcoord_stream", "groupcoord_kafka", "grpc_floor", "kafka_floor"):
        ordered(run["sequential"][system]["latency"], 30)
        flight = run["in_flight"][system]
        assert flight["ops"] > 0 and flight["cpu_us_per_write"] > 0
    assert run["registrations"]["etcd"]["members"] == 10
    assert run["registrations"]["etcd"]["seconds_all_seen"] > 0
    for system in ("groupcoord", "groupcoord_kafka"):
        joined = run["registrations"][system]["sizes"]["10"]
        assert joined["seconds"] > 0 and joined["members_with_assignment"] == 10
    assert set(run["ratios"]) == {
        "sequential_p50", "sequential_p99", "sequential_stream_p50", "in_flight_ops_per_s_unary",
        "in_flight_ops_per_s_stream", "cpu_per_write_unary", "cpu_per_write_stream", "registrations_seconds",
        "kafka_sequential_p50", "kafka_sequential_p99", "kafka_in_flight_ops_per_s", "kafka_cpu_per_write",
        "kafka_registrations_seconds", "floor_sequential_p50", "floor_in_flight_ops_per_s", "floor_cpu_per_write",
        "kafka_floor_sequential_p50", "kafka_floor_in_flight_ops_per_s", "kafka_floor_cpu_per_write",
    }  # fmt: skip
    assert all(ratio > 0 for ratio in run["ratios"].values())
