"""The entries of a partition's Raft log: our own versioned envelope, so that what an entry means never depends on
pysyncobj's method numbering (raft/partition.py has exactly one `@replicated` method):

    msgpack [ENTRY_VERSION, kind, term, node_id, payload]

* `barrier` — committed by a new leader before it serves the partition (its own term). Applying it
  raises the partition's fence to that term. Its payload is the leader's wall time in ms (msgpack int;
  empty in entries written before events existed).
* `digest` — a cross-replica state check (raft/digest.py): each replica hashes its state when it applies one, and
  compares the proposer's hash for the previous one with its own.
* `digest_report` — a replica's own hash at a digest entry (its index), proposed by every replica that applied it;
  the reports of a round decide which replicas are odd (raft/digest.py).
* `cluster_id` — partition 0 only: the cluster's id (UTF-8), minted by its first serving leader. The first one
  applied is the cluster's; later ones (a leader that proposed one before it learned of another) are ignored.
* `records` — `protocol.records.encode_batch` bytes. Applied only if `term` is not below the fence, so a
  batch written by a node that had already lost leadership (pysyncobj forwards a follower's commands to
  the leader) is never applied: term fencing.
"""

from __future__ import annotations

import msgpack

ENTRY_VERSION = 1
BARRIER, RECORDS, DIGEST, CLUSTER_ID = "barrier", "records", "digest", "cluster_id"
DIGEST_REPORT = "digest_report"


def encode_entry(kind: str, term: int, node_id: int, payload: bytes) -> bytes:
    """One log entry in the envelope; `PartitionReplica.apply_entry` is what reads it back."""
    return msgpack.packb([ENTRY_VERSION, kind, term, node_id, payload], use_bin_type=True)


def barrier_time(payload: bytes) -> int | None:
    """A barrier's wall time in ms; None for the empty payload of entries written before events existed."""
    try:
        value = msgpack.unpackb(payload) if payload else None
    except (ValueError, msgpack.UnpackException):
        return None
    return value if isinstance(value, int) else None
