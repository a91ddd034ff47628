"""The well-behaved client of the HTTP/2 fuzz targets (tests/fuzz/test_h2_fuzz.py): it keeps calling the fuzzed
node from a process of its own, and every call must be answered right within its deadline.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

import grpc

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

CALL_TIMEOUT_S = 10.0
Record = Callable[[str, object], None]


@dataclass
class Latency:
    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = sorted(s * 1000 for s in seconds) or [0.0]
        return cls(len(seconds), ms[len(ms) // 2], ms[min(len(ms) - 1, int(0.99 * len(ms)))], ms[-1])

    def __str__(self) -> str:
        return f"{self.calls} calls, p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms, max {self.max_ms:.1f} ms"


@dataclass
class Answered:
    latency: dict[str, Latency]  # by method, and "all"
    failed: int
    failures: list[str]  # the first 20


def good_calls(address: str, partitions: int, stop: Event, out: Queue[Answered]) -> None:
    """Heartbeat and DescribeCluster in turn, and every tenth call an OffsetCommit (through Raft), in a loop until
    `stop`. In a process of its own: in the fuzzer's it would wait for the GIL, and its latency would be the
    fuzzer's, not the node's."""
    latencies: dict[str, list[float]] = {"Heartbeat": [], "DescribeCluster": [], "OffsetCommit": []}
    failed: list[str] = []
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        beat = pb.HeartbeatRequest(group_id="fz-good", member_id="m")
        commit = pb.OffsetCommitRequest(
            group_id="fz-good",
            generation_id=-1,
            topics=[pb.OffsetCommitRequest.Topic(name="t", partitions=[pb.OffsetCommitRequest.Partition()])],
        )
        calls = 0
        while not stop.is_set():
            method = "OffsetCommit" if calls % 10 == 9 else ("DescribeCluster" if calls % 2 else "Heartbeat")
            start = time.perf_counter()
            try:
                if method == "OffsetCommit":
                    committed = stub.OffsetCommit(commit, timeout=CALL_TIMEOUT_S)
                    right = committed.topics[0].partitions[0].error_code == Errors.NONE
                elif method == "DescribeCluster":
                    cluster = stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=CALL_TIMEOUT_S)
                    right = len(cluster.partitions) == partitions
                else:
                    right = stub.Heartbeat(beat, timeout=CALL_TIMEOUT_S).error_code == Errors.UNKNOWN_MEMBER_ID
            except grpc.RpcError as exc:
                failed.append(f"{method} (call {calls}): {exc.code()} {exc.details()}")
            else:
                latencies[method].append(time.perf_counter() - start)
                if not right:
                    failed.append(f"{method} (call {calls}): a wrong answer")
            calls += 1
    by_method = {method: Latency.of(values) for method, values in latencies.items()}
    by_method["all"] = Latency.of([s for values in latencies.values() for s in values])
    out.put(Answered(by_method, len(failed), failed[:20]))


class GoodClient:
    """Runs `good_calls` in a spawned process for the duration of a `with` block."""

    def __init__(self, address: str, partitions: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._out: Queue[Answered] = context.Queue()
        self._process = context.Process(target=good_calls, args=(address, partitions, self._stop, self._out))
        self.answered: Answered | None = None

    def __enter__(self) -> GoodClient:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.answered = self._out.get(timeout=CALL_TIMEOUT_S + 20)
        self._process.join(10)

    def check(self, record_property: Record, label: str) -> None:
        """Records the latency, and fails on any call that was not answered right within its deadline."""
        answered = self.answered
        assert answered is not None
        for method, latency in answered.latency.items():
            print(f"{label}: good client, {method}: {latency}")
            record_property(f"{label}_good_{method}", str(latency))
        assert answered.latency["all"].calls > 0
        assert not answered.failed, f"{answered.failed} calls failed: {answered.failures}"
