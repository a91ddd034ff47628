"""What a partition's size costs the threads that must keep Raft's heartbeats going: a new leader's copy of the
committed state and its load, a ListGroups' hold of the committed state, the state check's hash (`digest`
entries), a compaction's snapshot, a node's partitions compacting together (how long another thread then waits to
run, with and without the node's compaction gate, raft/patch_compaction.py) and a full collection of the heap.

    .venv/bin/python bench/partition_load.py [--groups 6250] [--members 5] [--runs 5] [--partitions 16]

6,250 groups is one partition's share of 100,000 groups over 16 partitions. Each figure is the best of `--runs`
(the machine's noise only ever adds). Prints figures; nothing is asserted (docs/PERFORMANCE.md records the runs).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import threading
import time
from collections.abc import Callable

import msgpack

from groupcoord.coordinator import GroupConfig, GroupCoordinator, GroupStore
from groupcoord.coordinator.admin import group_rows, list_groups
from groupcoord.protocol import records as r
from groupcoord.raft.digest import state_digest
from groupcoord.raft.settings import RaftSettings
from groupcoord.raft.snapshot import write_snapshot_file

PROTOCOLS = (("range", b"\x83\xa7version\x01\xa6topics\x81\xa6orders\x0c\xa5owned\x80"),)


class _Clock:
    def wall_ms(self) -> int:
        return 1_000

    def mono_ms(self) -> int:
        return 1_000


def form_group(store: GroupStore, g: int, members: int) -> None:
    """Applies the records of one Stable group as the scale bench forms it: uuid-like member ids, an assignment each,
    one committed offset."""
    group_id = f"scale-4f3a2b-{g}"
    ids = [f"client-{m}-{g:08d}-4b7d-4e0a-9d61-2f6b8c1e7a55" for m in range(members)]
    for member_id in ids:
        store.apply(r.MemberAdded(group_id, member_id, "", "c", "/127.0.0.1", 10_000, 30_000, "consumer", PROTOCOLS, 1))
    store.apply(r.RebalanceStarted(group_id, "join", ids[0], "", 0, "", 2))
    store.apply(r.GenerationCompleted(group_id, 1, "range", ids[0], 3))
    store.apply(r.AssignmentsSynced(group_id, 1, {m: b"\x82\xa7version\x01" * 2 for m in ids}, 4))
    store.apply(r.OffsetsCommitted(group_id, ids[0], 1, (("orders", g % 12, 42, -1, ""),), 5))


def _store(groups: int, members: int) -> GroupStore:
    store = GroupStore()
    for g in range(groups):
        form_group(store, g, members)
    return store


def _best_ms(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _load_ms(store: GroupStore, runs: int) -> float:
    """A new leader's core built on a copy made beforehand: `load()` (its session and phase timers), no copy."""
    best = float("inf")
    for _ in range(runs):
        working = store.copy()
        start = time.perf_counter()
        GroupCoordinator(GroupConfig(), _Clock(), new_uuid=lambda: "id", store=working)  # calls load()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _longest_wait_ms(store: GroupStore, partitions: int, gated: bool, directory: str) -> float:
    """`partitions` tick threads write their snapshots at once, as a node's do when they reach the compaction
    threshold together, each of a copy whose encodings are not cached (its groups changed since the last one, as
    while groups form); returns the longest another thread (the node's event loop, a Raft tick) waited to run."""
    stores = [store.copy() for _ in range(partitions)]
    gate = threading.Lock()
    tick_s = RaftSettings().tick_period_s
    waits: list[float] = []
    done = threading.Event()

    def probe() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.005)
            now = time.perf_counter()
            waits.append(now - last - 0.005)
            last = now

    def compact(k: int) -> None:
        while gated and not gate.acquire(blocking=False):
            time.sleep(tick_s)  # the next tick tries again
        try:
            body = {"version": 1, "store": stores[k].packed_snapshot()}
            write_snapshot_file(os.path.join(directory, f"{k}.snapshot"), body, packed=("store",))
        finally:
            if gated:
                gate.release()

    prober = threading.Thread(target=probe)
    prober.start()
    threads = [threading.Thread(target=compact, args=(k,)) for k in range(partitions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    prober.join()
    return max(waits, default=0.0) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=6250)
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=16, help="a node's partitions, for the compaction figures")
    args = parser.parse_args()
    store = _store(args.groups, args.members)
    runs = args.runs

    def old_digest() -> bytes:
        return state_digest(msgpack.packb(store.snapshot(), use_bin_type=True), 7)

    store.packed_snapshot()  # the cache filled, as after the partition's first digest
    figures = {
        "new leader's copy: restore(snapshot())": _best_ms(lambda: GroupStore.restore(store.snapshot()), runs),
        "new leader's copy: copy()": _best_ms(store.copy, runs),
        "new leader's load (timers), after the copy": _load_ms(store, runs),
        "state check's hash: snapshot() packed": _best_ms(old_digest, runs),
        "state check's hash: packed_snapshot(), cached": _best_ms(
            lambda: state_digest(store.packed_snapshot(), 7), runs
        ),
        "ListGroups: the partition's reply built": _best_ms(lambda: list_groups([store], ()), runs),
        "ListGroups: its rows copied (what holds the lock)": _best_ms(lambda: group_rows(store, set()), runs),
    }
    with tempfile.TemporaryDirectory(prefix="partition-load-") as directory:
        path = os.path.join(directory, "partition.snapshot")
        # What a compaction writes on the tick thread (PartitionReplica._write_snapshot): spliced, fdatasynced.
        figures["compaction's snapshot written, cached encoding"] = _best_ms(
            lambda: write_snapshot_file(path, {"version": 1, "store": store.packed_snapshot()}, packed=("store",)),
            runs,
        )
        for gated, name in ((False, "all at once"), (True, "one at a time (gate)")):
            label = f"{args.partitions} compactions {name}: longest wait"
            figures[label] = min(_longest_wait_ms(store, args.partitions, gated, directory) for _ in range(runs))
    gc.collect()
    figures["full collection, nothing frozen"] = _best_ms(gc.collect, runs)
    gc.freeze()
    figures["full collection, the state frozen"] = _best_ms(gc.collect, runs)
    gc.unfreeze()
    print(f"{args.groups} groups x {args.members} members, best of {runs}")
    for name, ms in figures.items():
        print(f"  {name:<52} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
