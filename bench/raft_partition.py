"""Commit latency of one partition (3 in-process replicas on loopback) and idle CPU of 16 partitions x 3.

    .venv/bin/python bench/raft_partition.py [--commits 1000]

Prints figures; nothing is asserted (docs/PERFORMANCE.md records the runs).
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import tempfile
import time

from groupcoord.protocol import records as r
from groupcoord.raft.entries import BARRIER, RECORDS, encode_entry
from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.settings import RaftSettings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _group(partition: int, tmp: str) -> list[PartitionReplica]:
    addresses = [f"127.0.0.1:{_free_port()}" for _ in range(3)]
    return [
        PartitionReplica(
            partition, i + 1, a, [b for b in addresses if b != a], "bench", f"{tmp}/n{i}-p{partition}", RaftSettings()
        )
        for i, a in enumerate(addresses)
    ]


def _leader(replicas: list[PartitionReplica]) -> PartitionReplica:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for replica in replicas:
            if replica.is_leader():
                return replica
        time.sleep(0.01)
    raise RuntimeError("no leader")


def commit_latency(commits: int, tmp: str) -> None:
    replicas = _group(0, tmp)
    try:
        leader = _leader(replicas)
        leader.apply_entry(encode_entry(BARRIER, leader.term(), leader.node_id, b""), sync=True, timeout=10)
        latencies = []
        for i in range(commits):
            batch = r.encode_batch([r.OffsetsCommitted("g", "m", 1, (("t", 0, i, -1, ""),), i)])
            entry = encode_entry(RECORDS, leader.term(), leader.node_id, batch)
            start = time.perf_counter()
            leader.apply_entry(entry, sync=True, timeout=10)
            latencies.append((time.perf_counter() - start) * 1000)
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        print(
            f"commit latency over {commits} sequential commits: p50 {statistics.median(latencies):.2f} ms, "
            f"p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms"
        )
    finally:
        for replica in replicas:
            replica.destroy()


def idle_cpu(tmp: str, partitions: int = 16, seconds: float = 5.0) -> None:
    replicas = [x for p in range(partitions) for x in _group(p, tmp)]
    try:
        time.sleep(3)
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        time.sleep(seconds)
        after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - start
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        print(f"idle CPU of {partitions} partitions x 3 replicas: {100 * cpu / elapsed:.1f}% of one core")
    finally:
        for replica in replicas:
            replica.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        commit_latency(args.commits, tmp)
        idle_cpu(tmp)


if __name__ == "__main__":
    main()
