"""The two timed shapes the references of `bench etcd` are measured with (etcd, and the gRPC echo floor of
bench/grpc_floor.py): one call at a time, and N calls in flight. One loop each, so that the systems compared are
timed, warmed up and metered the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from groupcoord.bench.cluster import CpuMeter, Processes
from groupcoord.bench.stats import summary

# A call, given its sequence number (sequential) or its worker's index (in flight).
Call = Callable[[int], Awaitable[object]]
WARM_UP_CALLS = 20  # sequential: the connection, the first writes
WARM_UP_S = 1.0  # in flight


async def sequential(servers: Processes, call: Call, ops: int) -> dict[str, Any]:
    """One call at a time → latency, calls/s and the servers' CPU."""
    for i in range(WARM_UP_CALLS):
        await call(i)
    latencies = []
    cpu, start = CpuMeter(servers), time.perf_counter()
    for i in range(ops):
        sent = time.perf_counter()
        await call(i)
        latencies.append((time.perf_counter() - sent) * 1000)
    elapsed = time.perf_counter() - start
    used = cpu.result()
    return {"ops": ops, "latency": summary(latencies), "ops_per_s": round(ops / elapsed, 1), **used}


async def in_flight(servers: Processes, call: Call, in_flight: int, duration_s: float) -> dict[str, Any]:
    """`in_flight` loops calling for `duration_s` after `WARM_UP_S` of the same → calls/s, latency and CPU."""
    done: list[float] = []

    async def loop(worker: int, until: float, record: bool) -> None:
        while time.perf_counter() < until:
            sent = time.perf_counter()
            await call(worker)
            if record:
                done.append((time.perf_counter() - sent) * 1000)

    await asyncio.gather(*(loop(w, time.perf_counter() + WARM_UP_S, False) for w in range(in_flight)))
    cpu, start = CpuMeter(servers), time.perf_counter()
    await asyncio.gather(*(loop(w, start + duration_s, True) for w in range(in_flight)))
    elapsed = time.perf_counter() - start
    used = cpu.result()
    ops_per_s = round(len(done) / elapsed, 1)
    return {"in_flight": in_flight, "ops": len(done), "ops_per_s": ops_per_s, "latency": summary(done), **used}
