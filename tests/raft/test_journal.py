"""The checksummed journal (raft/journal.py) on real files: what it keeps, what it refuses, what it says."""

from __future__ import annotations

import errno
import json
import logging
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from pysyncobj.journal import FileJournal

from groupcoord.base.logfields import FIELDS
from groupcoord.raft import journal as j
from groupcoord.raft import journal_records as records
from groupcoord.raft.journal import CheckedJournal


def entries(journal: CheckedJournal) -> list[tuple[bytes, int, int]]:
    return [journal[i] for i in range(len(journal))]


def filled(path: Path, count: int = 20, durability: str = "fsync") -> CheckedJournal:
    journal = CheckedJournal(str(path), durability)
    journal.set_trusted("test: as a replica of a formed cluster")
    for index in range(1, count + 1):
        journal.add(b"command-%03d" % index, index, 1 + index // 10)
    journal.setCurrentTerm(7, "127.0.0.1:9000")
    journal.setRaftCommitIndex(count - 2)
    journal.onOneSecondTimer()
    journal.sync()
    return journal


def record_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    offsets, offset = [], len(records.MAGIC)
    while offset + 8 <= len(data):
        length, crc = struct.unpack_from("<II", data, offset)
        if length == 0 and crc == 0:
            break
        offsets.append(offset)
        offset += 8 + length
    return offsets


def entry_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    return [o for o in record_offsets(path) if data[o + 8] == records.ENTRY]


def test_a_reopened_journal_has_every_entry_term_vote_and_commit(tmp_path: Path):
    path = tmp_path / "p.wal"
    before = filled(path)
    want = entries(before)
    before._destroy()
    after = CheckedJournal(str(path))
    assert entries(after) == want
    assert (after.getCurrentTerm(), after.getVotedForNodeId(), after.getRaftCommitIndex()) == (7, "127.0.0.1:9000", 18)
    assert after.trusted and after.damage is None
    after._destroy()


def test_a_new_journal_is_fresh_until_it_holds_an_entry_and_then_untrusted(tmp_path: Path):
    """A journal made at this start cannot tell a new cluster from a wiped data directory (raft/syncobj_patch.py)."""
    path = tmp_path / "p.wal"
    journal = CheckedJournal(str(path))
    assert (journal.fresh, journal.trusted, journal.pristine) == (True, False, True)
    journal.add(b"\x01", 1, 0)  # pysyncobj's own first no-op
    journal.setCurrentTerm(1, None)
    assert (journal.fresh, journal.pristine) == (True, True)
    journal._destroy()
    journal = CheckedJournal(str(path))
    assert (journal.fresh, journal.trusted) == (True, False)  # still fresh after a restart
    journal.add(b"entry", 2, 1)  # from a leader: from now on it may acknowledge entries
    assert (journal.fresh, journal.trusted, journal.pristine) == (False, False, False)
    journal._destroy()
    journal = CheckedJournal(str(path))
    assert (journal.fresh, journal.trusted) == (False, False)
    journal.set_trusted()
    journal._destroy()
    assert CheckedJournal(str(path)).trusted


def test_truncation_and_compaction_replay_to_the_same_log(tmp_path: Path):
    path = tmp_path / "p.wal"
    journal = filled(path)
    journal.deleteEntriesFrom(15)  # list position 15 = index 16 on
    journal.add(b"new-16", 16, 9)
    journal.deleteEntriesTo(5)  # compaction: the first 5 entries go
    journal.add(b"new-17", 17, 9)
    want = entries(journal)
    assert [e[1] for e in want] == list(range(6, 18))
    journal._destroy()
    again = CheckedJournal(str(path))
    assert entries(again) == want
    again._destroy()


def test_a_flipped_bit_in_the_middle_is_never_served_and_the_replica_is_untrusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = tmp_path / "p.wal"
    filled(path)._destroy()
    victim = entry_offsets(path)[10]  # index 11
    data = bytearray(path.read_bytes())
    data[victim + 8 + 1 + 16 + 3] ^= 0x01  # one bit of the command "command-011"
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, logger="groupcoord.raft.journal"):
        journal = CheckedJournal(str(path))
    assert [e[1] for e in entries(journal)] == list(range(1, 11))  # nothing from the damaged record on
    assert all(e[0] != b"command-011" for e in entries(journal))
    assert journal.damage is not None and journal.damage.offset == victim and not journal.damage.torn_tail
    assert journal.damage.reason == "checksum mismatch"
    assert not journal.trusted
    assert journal.getRaftCommitIndex() <= 10  # never above what is left
    (line,) = [r for r in caplog.records if r.getMessage() == "journal.corrupt"]
    said = getattr(line, FIELDS)
    assert said["file"] == str(path) and said["offset"] == victim and "caught up" in said["action"]
    kept = list(tmp_path.glob("p.wal.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)  # the original, for forensics
    journal._destroy()
    # Still untrusted after a restart, until it has caught up.
    again = CheckedJournal(str(path))
    assert not again.trusted and again.damage is None
    again.set_trusted()
    again._destroy()
    assert CheckedJournal(str(path)).trusted


def test_a_torn_tail_is_cut_where_the_write_stopped(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = tmp_path / "p.wal"
    filled(path)._destroy()
    last = record_offsets(path)[-1]
    data = path.read_bytes()
    # What a power loss in the middle of the last write leaves: its first bytes, then the preallocated zeros.
    path.write_bytes(data[: last + 9] + b"\0" * (len(data) - last - 9))
    with caplog.at_level(logging.ERROR, logger="groupcoord.raft.journal"):
        journal = CheckedJournal(str(path))
    assert journal.damage is not None and journal.damage.torn_tail and journal.damage.offset == last
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == ["journal.torn_tail"]
    assert len(journal) == 20  # the torn record was the COMMIT hint written last
    assert not journal.trusted
    journal._destroy()


def test_a_file_cut_short_is_a_torn_tail_not_a_crash(tmp_path: Path):
    path = tmp_path / "p.wal"
    filled(path)._destroy()
    victim = entry_offsets(path)[-1]
    path.write_bytes(path.read_bytes()[: victim + 5])  # length and part of the checksum
    journal = CheckedJournal(str(path))
    assert journal.damage is not None and journal.damage.torn_tail
    assert [e[1] for e in entries(journal)] == list(range(1, 20))
    journal._destroy()


def test_zeroed_bytes_in_the_middle_are_corruption_not_the_end(tmp_path: Path):
    path = tmp_path / "p.wal"
    filled(path)._destroy()
    offsets = entry_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[4] : offsets[6]] = b"\0" * (offsets[6] - offsets[4])  # a lost sector
    path.write_bytes(bytes(data))
    journal = CheckedJournal(str(path))
    assert journal.damage is not None and not journal.damage.torn_tail
    assert [e[1] for e in entries(journal)] == [1, 2, 3, 4]
    journal._destroy()


def test_a_file_that_is_not_a_journal_is_refused_as_damage(tmp_path: Path):
    path = tmp_path / "p.wal"
    path.write_bytes(b"\x80\x04garbage that is not ours")
    journal = CheckedJournal(str(path))
    assert journal.damage is not None and "header" in journal.damage.reason
    assert len(journal) == 0 and not journal.trusted and not journal.fresh
    journal._destroy()


def test_a_pysyncobj_journal_is_migrated_with_its_term_and_vote(tmp_path: Path):
    legacy = tmp_path / "p.journal"
    old = FileJournal(str(legacy))
    for index in range(1, 6):
        old.add(b"old-%d" % index, index, 2)
    old.setCurrentTerm(4, "127.0.0.1:9001")
    old.setRaftCommitIndex(3)
    old.onOneSecondTimer()
    old._destroy()
    journal = CheckedJournal(str(tmp_path / "p.wal"), legacy_path=str(legacy))
    assert entries(journal) == [(b"old-%d" % i, i, 2) for i in range(1, 6)]
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId(), journal.getRaftCommitIndex()) == (
        4,
        "127.0.0.1:9001",
        3,
    )
    assert journal.trusted
    assert not legacy.exists() and (tmp_path / "p.journal.migrated").exists()
    journal._destroy()


def test_fsync_mode_is_not_durable_until_synced_and_memory_mode_never_waits(tmp_path: Path):
    fsynced = CheckedJournal(str(tmp_path / "a.wal"), "fsync")
    fsynced.add(b"x", 1, 1)
    assert not fsynced.durable
    before = fsynced.fsyncs
    fsynced.setCurrentTerm(2, "n")
    fsynced.add(b"y", 2, 2)
    assert fsynced.sync() and fsynced.durable
    assert fsynced.fsyncs == before + 1  # one fdatasync for everything recorded since the last one
    memory = CheckedJournal(str(tmp_path / "b.wal"), "memory")
    memory.add(b"x", 1, 1)
    assert memory.durable
    fsynced._destroy()
    memory._destroy()


def test_a_page_cache_journal_from_before_a_reboot_is_untrusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "p.wal"
    filled(path, durability="memory")._destroy()
    assert CheckedJournal(str(path), "memory").trusted  # same boot: a killed process loses nothing
    boot = tmp_path / "boot_id"
    boot.write_text("another-boot\n")
    monkeypatch.setattr(j, "BOOT_ID_PATH", str(boot))
    journal = CheckedJournal(str(path), "memory")
    assert not journal.trusted and len(journal) == 20
    journal._destroy()
    # An fsync journal is trusted across reboots.
    fsynced = tmp_path / "f.wal"
    monkeypatch.setattr(j, "BOOT_ID_PATH", "/proc/sys/kernel/random/boot_id")
    filled(fsynced)._destroy()
    monkeypatch.setattr(j, "BOOT_ID_PATH", str(boot))
    assert CheckedJournal(str(fsynced)).trusted


# A child process with a file size limit: its writes past the limit fail with EFBIG as they would with ENOSPC
# on a full disk (SIGXFSZ ignored), without limiting this process.
CHILD = """
import json, resource, signal, sys
from groupcoord.raft.journal import CheckedJournal, JournalError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path, mode = sys.argv[1], sys.argv[2]
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
if mode == "create":
    resource.setrlimit(resource.RLIMIT_FSIZE, (10, hard))
    try:
        CheckedJournal(path)
    except JournalError as exc:
        print(json.dumps({"error": str(exc)}))
    sys.exit(0)
journal = CheckedJournal(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (journal.size, hard))
for index in range(1, 400):  # past the preallocated space
    journal.add(b"z" * 4000, index, 1)
failed = {"errno": journal.write_error and journal.write_error.errno, "synced": journal.sync(),
          "durable": journal.durable, "errors": dict(journal.write_errors)}
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
print(json.dumps({"failed": failed, "recovered": journal.sync() and journal.write_error is None}))
journal._destroy()
"""


def run_child(path: Path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_write_that_fails_is_kept_pending_and_retried_until_it_succeeds(tmp_path: Path):
    path = tmp_path / "p.wal"
    said = run_child(path, "fill")
    # The first failure, then one retry by `sync()`; the adds in between only queued their records.
    assert said["failed"] == {"errno": errno.EFBIG, "synced": False, "durable": False, "errors": {"EFBIG": 2}}
    assert said["recovered"]
    again = CheckedJournal(str(path))
    assert [e[1] for e in entries(again)] == list(range(1, 400)) and again.damage is None
    again._destroy()


def test_a_journal_that_cannot_be_created_is_one_clear_error(tmp_path: Path):
    said = run_child(tmp_path / "p.wal", "create")
    assert said["error"].startswith(f"cannot write the journal {tmp_path / 'p.wal'}: File too large")
