"""Cross-replica state check: replicas compare a digest of their state at the same log index (etcd's corruption
check, done through the log itself).

A leader proposes a `digest` entry now and then (node/partitions.py). Every replica, when it applies one at
index i, hashes its committed state (the `GroupStore` snapshot and the fence) and remembers it for i. The next
`digest` entry carries its proposer's own hash for the previous one's index; each replica that remembers its own
hash for that index compares. Apply is deterministic, so replicas that applied the same log hold the same state
and the same hash; a mismatch means one replica's state went wrong (a disk that returned bad data past its
checksum, a bug), so it raises the alarm: one `partition.digest_mismatch` log line and the
`groupcoord_replica_digest_mismatch` gauge.

Which replica is the odd one takes a majority's view, and the log gives every replica the same one: each replica
that applies a digest entry live (not while replaying its own journal) proposes a `digest_report` entry with its own
hash for that index. When the next digest entry is applied, the reports of the earlier round are judged: if one
hash has a strict majority of them (two at least), the nodes that reported another are *odd*. Every replica reaches
the same verdict at the same log index, so a leader knows not to hand a partition to an odd replica, and an odd
replica knows to take itself out of service (it stops leading and stands for no election; it still votes, as its
log's length and terms are as good as anyone's). The next verdict without it puts it back (a replica rebuilt
from the others' copy: docs/OPERATIONS.md, the corruption alarm).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass

import msgpack

from groupcoord.base.logfields import fields

log = logging.getLogger(__name__)

KEPT = 4  # digests remembered: a check compares against the previous one, with room for a late proposal


def state_digest(packed_store: bytes, fence_term: int) -> bytes:
    """The hash of `msgpack.packb([store.snapshot(), fence_term])`, given the store's `packed_snapshot()`: the same
    bytes every version has hashed, so replicas of different versions agree during a rolling upgrade."""
    digest = hashlib.blake2b(b"\x92", digest_size=16)  # a msgpack array of two
    digest.update(packed_store)
    digest.update(msgpack.packb(fence_term))
    return digest.digest()


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
        # The reports of the rounds not judged yet (digest index -> node -> its hash; a node's first report counts),
        # and the latest verdict: the nodes whose state differed from the majority's.
        self._reports: dict[int, dict[int, bytes]] = {}
        self.odd_nodes: frozenset[int] = frozenset()
        self.verdicts = 0
        self._judged = 0

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
        for earlier in sorted(i for i in self._reports if i < index):
            self._judge(earlier, self._reports.pop(earlier))

    def on_report(self, index: int, node: int, digest: bytes) -> None:
        """A `digest_report` entry: `node`'s own hash at the digest entry at `index`."""
        if index > self._judged:  # a late report of a round already judged changes nothing
            self._reports.setdefault(index, {}).setdefault(node, digest)

    def _judge(self, index: int, reports: dict[int, bytes]) -> None:
        self._judged = index
        if not reports:
            return
        agreed, count = Counter(reports.values()).most_common(1)[0]
        if count < 2 or 2 * count <= len(reports):
            return  # no majority among the reports: no verdict this round
        odd = frozenset(node for node, digest in reports.items() if digest != agreed)
        self.verdicts += 1
        if odd != self.odd_nodes:
            log.log(
                logging.ERROR if odd else logging.WARNING,
                "partition.odd_replicas",
                extra=fields(
                    partition=self.partition,
                    index=index,
                    odd_nodes=sorted(odd),
                    agreed_by=sorted(node for node, digest in reports.items() if digest == agreed),
                    action="an odd replica leads no more and stands for no election; rebuild it "
                    "(docs/OPERATIONS.md, the corruption alarm)"
                    if odd
                    else "every replica that reported agrees again",
                ),
            )
        self.odd_nodes = odd


def report(index: int, digest: bytes) -> bytes:
    """The payload of a digest_report entry."""
    return msgpack.packb([index, digest], use_bin_type=True)


def read_report(payload: bytes) -> tuple[int, bytes] | None:
    try:
        value = msgpack.unpackb(payload) if payload else None
    except (ValueError, msgpack.UnpackException):
        return None
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], int) and isinstance(value[1], bytes):
        return value[0], value[1]
    return None


def proposal(latest: tuple[int, bytes] | None) -> bytes:
    """The payload of a digest entry: the proposer's own digest at its latest digest entry, if any."""
    return msgpack.packb(list(latest), use_bin_type=True) if latest is not None else b""
