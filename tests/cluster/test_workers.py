"""examples/worker.py processes against a real 3-node cluster: a worker killed with SIGKILL is replaced after
its session timeout, a static worker restarted within its session timeout gets its partitions back without a
generation bump, and committed offsets never go backwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_three_nodes import Cluster

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 8
SESSION_MS = 3_000


class Worker:
    def __init__(self, cluster: Cluster, name: str, static: bool) -> None:
        self.name = name
        cmd = [
            sys.executable, str(ROOT / "examples" / "worker.py"),
            "--bootstrap", ",".join(cluster.address(i) for i in range(3)),
            "--group", "workers", "--topic", f"orders:{PARTITIONS}",
            f"--session-timeout-ms={SESSION_MS}", "--heartbeat-interval-ms=300", "--commit-interval-s=0.2",
        ] + (["--instance", name] if static else [])  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def current(self) -> tuple[int, frozenset[str]] | None:
        """(generation, partitions) of the last assignment not revoked since."""
        for event in reversed(self.events):
            if event["event"] == "revoked":
                return None
            if event["event"] == "assigned":
                return event["generation"], frozenset(event["partitions"])
        return None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def _settled(workers: list[Worker], newer_than: int = 0, timeout_s: float = 30.0) -> int:
    """Waits until every worker owns a share of one generation > newer_than and the shares cover all partitions
    exactly once; returns the generation."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = [w.current() for w in workers]
        if all(states):
            generations = {g for g, _ in states}  # type: ignore[misc]
            owned = [p for _, parts in states for p in parts]  # type: ignore[misc]
            if len(generations) == 1 and min(generations) > newer_than and len(owned) == PARTITIONS:
                assert len(set(owned)) == PARTITIONS, f"a partition has two owners: {states}"
                return generations.pop()
        time.sleep(0.05)
    raise AssertionError(f"workers did not settle: {[(w.name, w.current()) for w in workers]}")


def _offsets_never_go_backwards(workers: list[Worker]) -> int:
    """Acknowledged commits of every partition, in time order across all workers, never decrease."""
    commits = sorted((e["t"], p, o) for w in workers for e in w.events if e["event"] == "committed"
                     for p, o in e["offsets"].items())  # fmt: skip
    last: dict[str, int] = {}
    for _, partition, offset in commits:
        assert offset >= last.get(partition, 0), f"{partition} went back from {last[partition]} to {offset}"
        last[partition] = offset
    assert set(last) == {f"orders-{p}" for p in range(PARTITIONS)}
    return len(commits)


def test_sigkill_and_static_restart(cluster: Cluster):
    workers = [Worker(cluster, "w1", True), Worker(cluster, "w2", True), Worker(cluster, "d1", False),
               Worker(cluster, "d2", False)]  # fmt: skip
    try:
        generation = _settled(workers)
        # SIGKILL a dynamic worker: no LeaveGroup; the others take over after its session timeout.
        killed = workers.pop()
        start = time.monotonic()
        killed.stop(signal.SIGKILL)
        generation = _settled(workers, newer_than=generation, timeout_s=SESSION_MS / 1000 + 20)
        print(f"killed worker replaced after {time.monotonic() - start:.2f} s")
        # Restart static w1 within its session timeout: same partitions, same generation.
        w1 = workers[0]
        before = w1.current()
        assert before is not None
        w1.stop()
        workers[0] = Worker(cluster, "w1", True)
        assert _settled(workers, newer_than=generation - 1) == generation
        assert workers[0].current() == before
        time.sleep(1.0)
        assert _offsets_never_go_backwards([killed, w1, *workers]) > PARTITIONS
    finally:
        for w in workers:
            w.stop()
