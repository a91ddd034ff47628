"""`durability`: commit latency and throughput with `--durability=fsync` and `--durability=memory` side by side.

Each run starts two fresh 3-node clusters one after the other, one per mode (the mode that goes first alternates
between runs, so that neither always gets the cooler machine), and on each measures `commit-latency` then
`commit-throughput` (bench/offsets.py). The run's ratios fsync/memory compare figures of the same run."""

from __future__ import annotations

import argparse
import os
from typing import Any

import uvloop

from groupcoord.bench import offsets
from groupcoord.bench.cluster import BenchCluster

MODES = ("fsync", "memory")


def order(run_index: int) -> tuple[str, str]:
    """The modes in the order run `run_index` (from 0) measures them: fsync first in even runs."""
    return MODES if run_index % 2 == 0 else MODES[::-1]


async def _measure(cluster: BenchCluster, args: argparse.Namespace) -> dict[str, Any]:
    batched = args.rpc == "batched"
    return {
        "commit_latency": await offsets.commit_latency(cluster, args.ops, batched),
        "commit_throughput": await offsets.commit_throughput(
            cluster, args.in_flight, args.duration, args.groups, batched
        ),
    }


def run_once(
    node_flags: list[str], args: argparse.Namespace, run_index: int
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """One run: a fresh cluster per mode, each always stopped. The run's figures, and each mode's node flags."""
    modes: dict[str, dict[str, Any]] = {}
    flags: dict[str, list[str]] = {}
    for mode in order(run_index):
        cluster = BenchCluster([*node_flags, f"--durability={mode}"])
        flags[mode] = cluster.node_flags
        load = round(os.getloadavg()[0], 2)
        try:
            cluster.start()
            modes[mode] = {"loadavg_1m_before": load, **uvloop.run(_measure(cluster, args))}
        finally:
            cluster.stop()
    fsync, memory = modes["fsync"], modes["memory"]

    def ratio(scenario: str, *path: str) -> float:
        a, b = fsync[scenario], memory[scenario]
        for key in path:
            a, b = a[key], b[key]
        return round(a / b, 3) if b else float("nan")

    result = {
        "order": ",".join(order(run_index)),
        **{mode: modes[mode] for mode in MODES},
        "ratio_fsync_to_memory": {
            "latency_p50": ratio("commit_latency", "latency", "p50_ms"),
            "latency_p99": ratio("commit_latency", "latency", "p99_ms"),
            "throughput": ratio("commit_throughput", "ops_per_s"),
        },
    }
    return result, flags
