"""The record format of a partition replica's journal (raft/journal.py), and the replay that reads a file back. The
file is a header and then records:

    u32 length | u32 crc32(kind + body) | u8 kind | body

* ENTRY    u64 index, u64 term, command — one Raft log entry.
* TRUNCATE u64 index — the entries from `index` on are gone (a follower's conflicting suffix).
* HARD     u64 term, voted-for node id (utf-8, empty for none) — Raft's persistent term and vote.
* COMMIT   u64 commit index — a hint for the replay after a restart, written once a second, never flushed.
* BOOT     u8 durability, kernel boot id — written at every open.
* TRUST    u8 state — 1 trusted; 0 untrusted: this replica's log may lack entries it acknowledged (a damaged
  journal, a page-cache journal after a reboot), until it holds a committed entry of a current leader's term;
  2 fresh: a journal made at this start, which cannot tell a brand-new cluster from a wiped data directory.

The replay stops at the first record that is damage (a checksum mismatch, a length past the end, a zeroed record in
the middle, an entry out of sequence) and says where and why; what to do about it is the journal's.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = b"GCJOURNAL\x00\x00\x01"  # name and format version 1
RECORD_HEADER = struct.Struct("<II")
ENTRY_HEADER = struct.Struct("<QQ")
U64 = struct.Struct("<Q")
ENTRY, TRUNCATE, HARD, COMMIT, BOOT, TRUST = range(1, 7)
KINDS = {ENTRY, TRUNCATE, HARD, COMMIT, BOOT, TRUST}
# A record longer than this is damage, not data (pysyncobj's own commands are far smaller: 64 KiB messages).
MAX_RECORD_BYTES = 256 * 1024 * 1024
DURABILITY_MODES = ("fsync", "memory")
UNTRUSTED, TRUSTED, FRESH = 0, 1, 2


@dataclass(frozen=True)
class Damage:
    """Where a journal's records stopped being sound, and why."""

    path: str
    offset: int
    reason: str
    torn_tail: bool  # nothing was written after the bad record: a write the node did not finish


def encode_record(kind: int, body: bytes) -> bytes:
    """One record: its length and CRC-32 cover the kind and the body, so a torn or flipped record is found."""
    payload = bytes((kind,)) + body
    return RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


@dataclass
class Replay:
    """A journal's state as its records leave it: what a replay reads and what a rewrite writes."""

    entries: list[tuple[bytes, int, int]]
    term: int = 0
    voted_for: str | None = None
    commit_index: int = 1
    boot_durability: str = ""
    boot_id: str = ""
    trust: int = TRUSTED
    end: int = len(MAGIC)
    damage: Damage | None = None


def read_records(path: str, data: bytes) -> Replay:
    """The state `data` (the file at `path`) records, up to its first damaged record if any."""
    result = Replay(entries=[])
    if not data.startswith(MAGIC):
        result.damage = Damage(path, 0, "not a groupcoord journal (bad header)", torn_tail=False)
        result.end = 0
        return result
    offset = len(MAGIC)
    while offset + RECORD_HEADER.size <= len(data):
        length, crc = RECORD_HEADER.unpack_from(data, offset)
        if length == 0 and crc == 0:
            break  # the preallocated zeros after the last record
        start, end = offset + RECORD_HEADER.size, offset + RECORD_HEADER.size + length
        payload = data[start:end]
        reason = ""
        if length == 0 or length > MAX_RECORD_BYTES or end > len(data):
            reason = f"record length {length} runs past the end of the file"
        elif zlib.crc32(payload) != crc:
            reason = "checksum mismatch"
        elif payload[0] not in KINDS:
            reason = f"unknown record kind {payload[0]}"
        else:
            reason = _apply(result, payload[0], payload[1:])
        if reason:
            torn = end >= len(data) or (not any(data[end:]) and reason == "checksum mismatch")
            result.damage = Damage(path, offset, reason, torn_tail=torn)
            break
        offset = end
    result.end = offset
    if result.damage is None and any(data[offset:]):
        if len(data) - offset < RECORD_HEADER.size:
            result.damage = Damage(path, offset, "record header cut short", torn_tail=True)
        else:
            result.damage = Damage(path, offset, "data after the end marker", torn_tail=False)
    return result


def _apply(result: Replay, kind: int, body: bytes) -> str:
    """Applies one verified record to the replay; returns why it is damage, or ''."""
    try:
        if kind == ENTRY:
            index, term = ENTRY_HEADER.unpack_from(body)
            if result.entries and index != result.entries[-1][1] + 1:
                return "entry out of sequence"
            result.entries.append((body[ENTRY_HEADER.size :], index, term))
        elif kind == TRUNCATE:
            (index,) = U64.unpack_from(body)
            while result.entries and result.entries[-1][1] >= index:
                result.entries.pop()
        elif kind == HARD:
            (result.term,) = U64.unpack_from(body)
            voted = body[U64.size :].decode()
            result.voted_for = voted or None
        elif kind == COMMIT:
            (result.commit_index,) = U64.unpack_from(body)
        elif kind == BOOT:
            result.boot_durability = DURABILITY_MODES[body[0]]
            result.boot_id = body[1:].decode()
        elif kind == TRUST:
            if body[0] not in (UNTRUSTED, TRUSTED, FRESH):
                return f"unknown trust state {body[0]}"
            result.trust = body[0]
    except (struct.error, IndexError, UnicodeDecodeError):
        return f"malformed record of kind {kind}"
    return ""
