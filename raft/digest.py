"""Cross-replica state check: replicas compare a digest of their state at the same log index (etcd's corruption
check, done through the log itself).

A leader proposes a `digest` entry now and then (node/partitions.py). Every replica, when it applies one at
index i, hashes its committed state (the `GroupStore` snapshot and the fence) and remembers it for i. The next
`digest` entry carries its proposer's own hash for the previous one's index; each replica that remembers its own
hash for that index compares. Apply is deterministic, so replicas that applied the same log hold the same state
and the same hash; a mismatch means one replica's state went wrong (a disk that returned bad data past its
checksum, a bug), so it raises the alarm: one `partition.digest_mismatch` log line and the
`groupcoord_replica_digest_mismatch` gauge.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import msgpack

from groupcoord.logfields import fields

log = logging.getLogger(__name__)

KEPT = 4  # digests remembered: a check compares against the previous one, with room for a late proposal


def state_digest(store_snapshot: dict[str, Any], fence_term: int) -> bytes:
    return hashlib.blake2b(msgpack.packb([store_snapshot, fence_term], use_bin_type=True), digest_size=16).digest()


@dataclass(frozen=True)
class Mismatch:
    index: int  # the log index both digests are of
    mine: bytes
    theirs: bytes
    proposer: int  # the node whose digest differs from this replica's


class StateDigests:
    """One replica's remembered digests and the result of its checks (written on the tick thread)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self._mine: dict[int, bytes] = {}
        self.checks = 0
        self.mismatch: Mismatch | None = None

    def latest(self) -> tuple[int, bytes] | None:
        """(index, digest) of the last digest entry this replica applied: what its next proposal carries."""
        if not self._mine:
            return None
        index = max(self._mine)
        return index, self._mine[index]

    def on_entry(self, index: int, payload: bytes, proposer: int, digest: bytes) -> None:
        """A digest entry at `index`, whose proposer's digest for an earlier index is in `payload`."""
        try:
            checked = msgpack.unpackb(payload) if payload else None
        except (ValueError, msgpack.UnpackException):
            checked = None
        if isinstance(checked, list) and len(checked) == 2 and checked[0] in self._mine:
            earlier, theirs = checked
            self.checks += 1
            mine = self._mine[earlier]
            if mine != theirs and self.mismatch is None:
                self.mismatch = Mismatch(earlier, mine, theirs, proposer)
                log.error(
                    "partition.digest_mismatch",
                    extra=fields(
                        partition=self.partition,
                        index=earlier,
                        mine=mine.hex(),
                        theirs=theirs.hex(),
                        node_id=proposer,
                        action="this replica's state and node's differ at the same log index: one of them is "
                        "damaged; see docs/OPERATIONS.md, the corruption alarm",
                    ),
                )
        self._mine[index] = digest
        for old in sorted(self._mine)[:-KEPT]:
            del self._mine[old]


def proposal(latest: tuple[int, bytes] | None) -> bytes:
    """The payload of a digest entry: the proposer's own digest at its latest digest entry, if any."""
    return msgpack.packb(list(latest), use_bin_type=True) if latest is not None else b""
