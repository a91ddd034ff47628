"""A partition replica's snapshots: the store's msgpack snapshot, the fence and pysyncobj's own raft data, under a
magic and a CRC-32, written and read with a custom serializer (no pickle of our objects, and no fork of the gRPC
process: pysyncobj only forks for its default serializer).
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from collections.abc import Iterable
from typing import Any

import msgpack
from pysyncobj.node import TCPNode

from groupcoord.base.logfields import fields

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
# Snapshots start with this and a CRC-32 of the msgpack body that follows.
SNAPSHOT_MAGIC = b"GCSNAP\x00\x01"
SNAPSHOT_CRC = struct.Struct("<I")


class SnapshotDamaged(ValueError):
    """A snapshot whose checksum or encoding is wrong (the message names the file)."""


def snapshot_body(path: str) -> dict[str, Any]:
    """The snapshot's decoded body, checked; snapshots written before checksums (plain msgpack) are read as such."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(SNAPSHOT_MAGIC):
        header = len(SNAPSHOT_MAGIC) + SNAPSHOT_CRC.size
        (crc,) = SNAPSHOT_CRC.unpack_from(data, len(SNAPSHOT_MAGIC))
        data = data[header:]
        if zlib.crc32(data) != crc:
            raise SnapshotDamaged(f"snapshot {path}: checksum mismatch")
    try:
        body = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise SnapshotDamaged(f"snapshot {path}: {exc}") from None
    if not isinstance(body, dict):
        raise SnapshotDamaged(f"snapshot {path}: not a snapshot")
    return body


def set_aside_damaged_snapshot(path: str) -> str | None:
    """Moves a damaged snapshot out of pysyncobj's way; the reason, or None when it is sound or absent."""
    if not os.path.exists(path):
        return None
    try:
        snapshot_body(path)
    except SnapshotDamaged as exc:
        kept = f"{path}.damaged-{int(time.time())}"
        os.replace(path, kept)
        log.error(
            "snapshot.corrupt",
            extra=fields(
                file=path,
                reason=str(exc),
                kept_as=kept,
                action="journal discarded too; this replica is rebuilt from the leader and takes no part in "
                "elections until it has caught up",
            ),
        )
        return str(exc)
    return None


def raft_node(address: str, spec: str | None = None) -> TCPNode:
    """A pysyncobj node; `spec` is its node's entry in `peers` form (node/topology.py), kept with the node in
    membership entries and snapshots so every replica learns where a node added online serves clients."""
    return TCPNode(address, spec=spec) if spec else TCPNode(address)


def _member(node: TCPNode) -> list[str]:
    return [node.address, getattr(node, "spec", None) or ""]


def member_list(cluster: Iterable[TCPNode]) -> list[list[str]]:
    """The voters as a snapshot keeps them: [address, spec] pairs, sorted so that equal clusters write equal bytes."""
    return sorted(_member(node) for node in cluster)


def cluster_nodes(members: Iterable[str | list[str]]) -> set[TCPNode]:
    """The voters a snapshot names; members were bare addresses before they carried their node's spec."""
    pairs = [(m, None) if isinstance(m, str) else (m[0], m[1] or None) for m in members]
    return {raft_node(a, spec) for a, spec in pairs}


def write_snapshot_file(path: str, body: dict[str, Any], packed: tuple[str, ...]) -> None:
    """Writes a snapshot and fdatasyncs it: pysyncobj renames it into place and compacts the journal after this.

    The values of the `packed` keys are msgpack bytes already (the store's cached encoding), spliced in as they are."""
    packer = msgpack.Packer(use_bin_type=True)
    parts = [packer.pack_map_header(len(body))]
    for key, value in body.items():
        parts += (packer.pack(key), value if key in packed else packer.pack(value))
    data = b"".join(parts)
    with open(path, "wb") as f:
        f.write(SNAPSHOT_MAGIC + SNAPSHOT_CRC.pack(zlib.crc32(data)) + data)
        f.flush()
        os.fdatasync(f.fileno())


def read_snapshot_body(path: str, partition_id: int) -> dict[str, Any]:
    """A snapshot's body, checked to be one of ours for `partition_id`."""
    body = snapshot_body(path)
    if body.get("version") != SNAPSHOT_VERSION or body.get("partition") != partition_id:
        raise ValueError(f"snapshot {path} is not a v{SNAPSHOT_VERSION} snapshot of partition {partition_id}")
    return body
