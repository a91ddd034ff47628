"""The node's collector settings (`settle_collector`, node/server.py): how long it pauses while groups form, and
whether freezing what survives each full collection keeps garbage for good.

    .venv/bin/python bench/collector.py pauses [--groups 100000] [--partitions 16] [--thresholds 5000,3,3]
    .venv/bin/python bench/collector.py leak [--load unary|stream|kafka] [--seconds 20] [--every-ms 200]

`pauses` applies the records of `--groups` Stable groups of 5 members (bench/partition_load.py's) to `--partitions`
stores under the node's collector settings, the thresholds replaced when given, with a small cycle of garbage per
member (a request's); prints the time spent in the collector and its longest pause per generation, in the thread's
CPU time (a loaded machine stretches each into a longer wall-clock stall). Freezing is for good, so compare
thresholds in separate runs.

`leak` runs a one-node cluster in this process under the node's settings, loads it from a child process (unary or
stream commits, 64 in flight, or Kafka clients that connect, commit and disconnect), and forces a full collection
every `--every-ms`, each of which freezes what is alive then. After the load, the node still running, the heap is
unfrozen and collected with `gc.DEBUG_SAVEALL`: what is found then was frozen while alive and became garbage, never
to be collected on a node. A cycle planted before the first freeze and dropped after it must be found (the method's own
check). Prints figures; nothing is asserted (docs/PERFORMANCE.md records the runs).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import secrets
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import uvloop

from groupcoord.bench import offsets
from groupcoord.bench.kafka_client import OFFSET_COMMIT, KafkaClient
from groupcoord.bench.partition_load import form_group
from groupcoord.coordinator import GroupStore
from groupcoord.node import config
from groupcoord.node.launcher import free_base
from groupcoord.node.server import Node, _freeze_survivors, settle_collector

HOST = "127.0.0.1"
PARTITIONS = 4
KAFKA_CLIENTS = 32
# After the load, the node's last calls end before the heap is looked at.
SETTLE_S = 0.5


def _pauses(groups: int, partitions: int, thresholds: tuple[int, ...] | None) -> None:
    settle_collector()
    if thresholds:
        gc.set_threshold(*thresholds)
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            pauses[info["generation"]].append(time.thread_time() - started[0])

    gc.callbacks.insert(0, timed)  # before _freeze_survivors: the freeze is not the collection's
    stores = [GroupStore() for _ in range(partitions)]
    begun = time.perf_counter()
    for g in range(groups):
        for _ in range(5):
            request: list[list[object]] = [[], [], [], []]
            request[3].append(request)
        form_group(stores[g % partitions], g, 5)
    wall = time.perf_counter() - begun
    gc.callbacks.remove(timed)
    longest = "  ".join(f"gen {n} {max(p, default=0) * 1e3:.0f} ms" for n, p in pauses.items())
    print(f"{groups} groups x 5 members into {partitions} stores, thresholds {gc.get_threshold()}: {wall:.1f} s")
    print(f"  in the collector {sum(map(sum, pauses.values())) * 1e3:.0f} ms; longest pause: {longest}")
    print(f"  collections by generation {[len(p) for p in pauses.values()]}; frozen {gc.get_freeze_count()}")


def _frozen_garbage() -> Counter[str]:
    """Collects what is garbage and not frozen, then unfreezes and collects again, saving what it finds: what was
    frozen alive and is garbage now, by type. The node is still running, so its own structures are reachable; no
    other thread runs between the two collections (a long switch interval), so nothing new is found in the second."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        gc.collect()
        gc.callbacks.remove(_freeze_survivors)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.unfreeze()
        gc.collect()
        gc.set_debug(0)
        found = Counter(type(o).__name__ for o in gc.garbage)
        gc.garbage.clear()
        return found
    finally:
        sys.setswitchinterval(switch)


class _Planted:
    """A cycle made alive before the first freeze and dropped after it: the leak check must find it."""

    __slots__ = ("me",)

    def __init__(self) -> None:
        self.me = self


async def _kafka_churn(address: str, seconds: float) -> None:
    """Kafka clients that each connect, make five simple commits and disconnect, again and again."""
    end = time.monotonic() + seconds

    async def client(i: int) -> None:
        group_id = f"collector-{i}"
        while time.monotonic() < end:
            kafka = KafkaClient([address])
            try:
                for offset in range(5):
                    partition = {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                    await kafka.call(
                        group_id,
                        OFFSET_COMMIT,
                        {
                            "group_id": group_id,
                            "generation_id_or_member_epoch": -1,
                            "member_id": "",
                            "group_instance_id": None,
                            "topics": [{"name": offsets.TOPIC, "partitions": [partition]}],
                        },
                    )
            finally:
                await kafka.close()

    await asyncio.gather(*(client(i) for i in range(KAFKA_CLIENTS)))


async def _leak(load: str, seconds: float, every_s: float) -> None:
    settle_collector()
    taken: set[int] = set()
    port, raft_port = free_base(HOST, 1, taken), free_base(HOST, PARTITIONS, taken)
    kafka_port = free_base(HOST, 1, taken) if load == "kafka" else -1
    planted: list[Any] = [_Planted()]
    collections = 0
    with tempfile.TemporaryDirectory(prefix="collector-leak-") as data_dir:
        environ = {
            "GROUPCOORD_NODE_ID": "1",
            "GROUPCOORD_HOST": HOST,
            "GROUPCOORD_PORT": str(port),
            "GROUPCOORD_PEERS": f"1={HOST}:{port}:{raft_port}",
            "GROUPCOORD_PARTITIONS": str(PARTITIONS),
            "GROUPCOORD_CLUSTER_SECRET": secrets.token_hex(32),
            "GROUPCOORD_DATA_DIR": data_dir,
            "GROUPCOORD_METRICS_PORT": "-1",
            "GROUPCOORD_KAFKA_PORT": str(kafka_port),
            "GROUPCOORD_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        }
        node = Node(config.load(argparse.Namespace(config=None), environ))
        await node.start()
        try:
            if load == "kafka":
                command = ["-m", "groupcoord.bench.collector", "kafka-churn", f"{HOST}:{kafka_port}", str(seconds)]
            else:
                rpc = "unary" if load == "unary" else "batched"
                command = ["-m", "groupcoord", "bench", "commit-throughput", "--bootstrap", f"{HOST}:{port}"]
                command += ["--rpc", rpc, "--duration", str(seconds)]
            child = await asyncio.create_subprocess_exec(
                sys.executable, *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
            )
            while child.returncode is None:
                try:
                    await asyncio.wait_for(child.wait(), every_s)
                except TimeoutError:
                    gc.collect()
                    collections += 1
                    planted.clear()
            assert child.stderr is not None
            errors = (await child.stderr.read()).decode(errors="replace")
            if child.returncode != 0:
                raise SystemExit(f"the load ended with {child.returncode}:\n{errors[-2000:]}")
            await asyncio.sleep(SETTLE_S)
            kinds = _frozen_garbage()
        finally:
            await node.stop()
    mine = kinds.pop(_Planted.__name__, 0)
    print(f"{load} load for {seconds:.0f} s, a full collection every {every_s * 1e3:.0f} ms: {collections} collections")
    print(f"  the planted cycle found: {'yes' if mine else 'NO'}")
    print(f"  frozen alive, garbage after: {kinds.total()} objects {kinds.most_common(8)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pauses = commands.add_parser("pauses", help="the collector's pauses while groups form")
    pauses.add_argument("--groups", type=int, default=100_000)
    pauses.add_argument("--partitions", type=int, default=16)
    pauses.add_argument("--thresholds", help="gc.set_threshold's three values, e.g. 10000,10,10 (default: the node's)")
    leak = commands.add_parser("leak", help="garbage kept by freezing what is alive at a full collection")
    leak.add_argument("--load", choices=("unary", "stream", "kafka"), default="unary")
    leak.add_argument("--seconds", type=float, default=20.0)
    leak.add_argument("--every-ms", type=int, default=200)
    churn = commands.add_parser("kafka-churn", help="(the leak check's Kafka load)")
    churn.add_argument("address")
    churn.add_argument("seconds", type=float)
    args = parser.parse_args()
    if args.command == "pauses":
        thresholds = tuple(int(v) for v in args.thresholds.split(",")) if args.thresholds else None
        _pauses(args.groups, args.partitions, thresholds)
    elif args.command == "leak":
        uvloop.run(_leak(args.load, args.seconds, args.every_ms / 1e3))
    else:
        asyncio.run(_kafka_churn(args.address, args.seconds))


if __name__ == "__main__":
    main()
