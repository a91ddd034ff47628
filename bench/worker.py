"""A client process of the `heartbeats` and `scale` scenarios: forms its share of the groups, then heartbeats.

One Python process tops out at a few thousand calls/s, so those scenarios spread their members over several of
these. Protocol with the parent, one JSON or text line each way:

    stdin    first line, JSON config (not argv: 50,000 group names are over the kernel's 128 KiB for one
             argument): bootstrap, groups, members_per_group, interval_ms (0: stop heartbeating once a group
             is Stable), session_timeout_ms, concurrency (groups formed at once), rpc (`batched`: the
             process's heartbeats in batches over one HeartbeatStream per node, as the SDK sends them; `unary`:
             a Heartbeat call each), tls ([CA, certificate, key] files, empty for none); a bearer token
             comes in $GROUPCOORD_TOKEN
    stdout   {"ready": ..., "form_s": ...} once every group is Stable
    stdin    "go W"  → records W seconds of heartbeats, then prints {"latencies_ms": [...], "heartbeats": ...}
    stdin    "leave" → every group leaves (one batch LeaveGroup each) and the process exits; EOF: exits at once
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import random
import sys
import time
from typing import Any

import uvloop

from groupcoord.bench.members import Member, Router, leave, run_member, subscription, wait_stable
from groupcoord.client.security import ClientSecurity

FORM_INTERVAL_S = 0.1
TOKEN_ENV = "GROUPCOORD_TOKEN"
FORM_TIMEOUT_S = 300.0


class Cadence:
    """One group's heartbeat sleeps: FORM_INTERVAL_S while it forms; once it is Stable, each member's next sleep is
    the group's own random phase within the steady interval, then the steady interval. The bench forms many groups
    at once, and without the phase their heartbeats would stay in step (bursts of a thousand in one client); groups
    of independent workers are not. The members of one group stay in step with each other, as after a SyncGroup."""

    def __init__(self) -> None:
        self.steady_s: float | None = None
        self.phase_s = 0.0
        self._shifted: set[str] = set()

    def settle(self, steady_s: float) -> None:
        self.phase_s = random.uniform(0.0, steady_s)
        self.steady_s = steady_s

    def next_sleep(self, member: Member) -> float:
        if self.steady_s is None:
            return FORM_INTERVAL_S
        if member.group_instance_id in self._shifted:
            return self.steady_s
        self._shifted.add(member.group_instance_id)
        return self.phase_s


async def _form(router: Router, group_id: str, config: dict[str, Any], stop: asyncio.Event,
                members: list[Member], tasks: list[asyncio.Task[None]]) -> None:  # fmt: skip
    """Starts one static group and waits until it is Stable; then its members heartbeat at the steady interval
    (or stop, for interval 0)."""
    cadence = Cadence()
    group_stop = stop if config["interval_ms"] else asyncio.Event()
    mine = [
        Member(group_id, f"{group_id}-i{i}", session_timeout_ms=config["session_timeout_ms"])
        for i in range(config["members_per_group"])
    ]
    metadata = subscription(2 * len(mine))
    own = [
        asyncio.create_task(run_member(router, m, metadata, functools.partial(cadence.next_sleep, m), group_stop))
        for m in mine
    ]
    tasks.extend(own)
    await wait_stable(mine, FORM_TIMEOUT_S, tasks=own)
    members.extend(mine)
    if config["interval_ms"]:
        cadence.settle(config["interval_ms"] / 1000)
    else:
        group_stop.set()


async def main(config: dict[str, Any]) -> None:
    ca_file, cert_file, key_file = config["tls"]
    security = ClientSecurity(ca_file, cert_file, key_file, os.environ.get(TOKEN_ENV, ""))
    router = Router(config["bootstrap"], config["rpc"] == "batched", security)
    stop = asyncio.Event()
    members: list[Member] = []
    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    await router.find(config["groups"])
    gate = asyncio.Semaphore(config["concurrency"])

    async def form(group_id: str) -> None:
        async with gate:
            await _form(router, group_id, config, stop, members, tasks)

    await asyncio.gather(*(form(g) for g in config["groups"]))
    # Thousands of members are long-lived objects, and their heartbeats leave no cyclic garbage (none found with
    # DEBUG_SAVEALL): without the collector, its pauses (25-30 ms of CPU every few seconds at 5,000 members) do not
    # delay this client's heartbeats. The bench measures the nodes (docs/PERFORMANCE.md).
    gc.freeze()
    gc.disable()
    _say({"ready": True, "groups": len(config["groups"]), "members": len(members),
          "form_s": round(time.perf_counter() - started, 3)})  # fmt: skip
    loop = asyncio.get_running_loop()
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        if line.startswith("go "):
            _say(await _measure(members, float(line.split()[1])))
        elif line == "leave":
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            by_group: dict[str, list[Member]] = {}
            for m in members:
                by_group.setdefault(m.group_id, []).append(m)
            await asyncio.gather(*(leave(router, ms) for ms in by_group.values()))
            break
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await router.close()


async def _measure(members: list[Member], window_s: float) -> dict[str, Any]:
    errors_before = _errors(members)
    cpu_before = time.process_time()
    for m in members:
        m.latencies.clear()
        m.record = True
    await asyncio.sleep(window_s)
    for m in members:
        m.record = False
    errors = _errors(members)
    return {
        "latencies_ms": [round(x, 3) for m in members for _, x in m.latencies],
        "errors": {k: v - errors_before.get(k, 0) for k, v in errors.items() if v > errors_before.get(k, 0)},
        "cpu_s": round(time.process_time() - cpu_before, 3),
    }


def _errors(members: list[Member]) -> dict[str, int]:
    total: dict[str, int] = {}
    for m in members:
        for k, v in m.errors.items():
            total[k] = total.get(k, 0) + v
    return total


def _say(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


if __name__ == "__main__":
    uvloop.run(main(json.loads(sys.stdin.readline())))
