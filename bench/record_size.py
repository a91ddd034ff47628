"""Size and encode/decode cost of the replicated records: today's `[type, version, {field: value}]` maps against
positional arrays `[type, version, [values]]`, for the batches the common calls write.

    .venv/bin/python bench/record_size.py

Prints figures; nothing is asserted (docs/PERFORMANCE.md records the choice).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import msgpack

from groupcoord.protocol import records as r

REPEAT = 2000


def _batches() -> dict[str, list[r.Record]]:
    meta = b"\x83\xa7version\x01\xa6topics\x81\xa6orders\x0c\xa5owned\x80"  # a consumer subscription, 23 bytes
    member = "bench-3f1c9a2e-4b7d-4e0a-9d61-2f6b8c1e7a55"

    def assignments(n: int) -> r.AssignmentsSynced:
        return r.AssignmentsSynced("g", 7, {f"{member}-{i}": b"\x82\xa7version\x01" * 2 for i in range(n)}, 1)

    return {
        "OffsetCommit, 1 partition": [r.OffsetsCommitted("orders-app", member, 7, (("orders", 3, 123456, -1, ""),), 1)],
        "JoinGroup (MemberAdded)": [
            r.MemberAdded(
                "orders-app", member, "", "worker-1", "10.0.0.7", 10_000, 30_000, "consumer", (("range", meta),), 1
            )
        ],
        "SyncGroup of 10 members": [assignments(10), r.GenerationCompleted("g", 7, "range", member, 1)],
        "SyncGroup of 1000 members": [assignments(1000)],
    }


def _positional(rec: r.Record) -> list[object]:
    fields = dataclasses.fields(rec)  # type: ignore[arg-type]  # every record class is a dataclass
    return [rec.TYPE, rec.VERSION, [getattr(rec, f.name) for f in fields]]


def _from_positional(item: list[object]) -> r.Record:
    type_id, _version, values = item
    return r._REGISTRY[type_id](*values)  # type: ignore[index]  # an int type id, as _positional wrote it


def _us(fn: Callable[..., object]) -> float:
    start = time.perf_counter()
    for _ in range(REPEAT):
        fn()
    return (time.perf_counter() - start) / REPEAT * 1e6


def main() -> None:
    print(f"{'batch':<28} {'map B':>8} {'array B':>8} {'map enc+dec µs':>15} {'array enc+dec µs':>17}")
    for name, batch in _batches().items():
        mapped = r.encode_batch(batch)
        positional = msgpack.packb([_positional(x) for x in batch], use_bin_type=True)
        map_us = _us(lambda b=batch: r.decode_batch(r.encode_batch(b)))
        array_us = _us(
            lambda b=batch: [
                _from_positional(x)
                for x in msgpack.unpackb(msgpack.packb([_positional(y) for y in b], use_bin_type=True), raw=False)
            ]
        )
        print(f"{name:<28} {len(mapped):>8} {len(positional):>8} {map_us:>15.1f} {array_us:>17.1f}")


if __name__ == "__main__":
    main()
