"""The Raft journal of one partition replica: checksummed records, written (never mmap'd), flushed on demand.

It replaces pysyncobj's `FileJournal` (an mmap'd file with no checksums: a bit flip was served as data, a torn
tail died with `struct.error`, a full disk killed the node with SIGBUS) through the `journal` our patch of
pysyncobj reads from its conf (raft/patch_durability.py). The file is a header and then checksummed records of
Raft's entries, term and vote, commit hints, boots and trust (raft/journal_records.py: the format and its replay).

Damage found on open (a checksum mismatch, a length past the end, a zeroed record in the middle, an entry out of
sequence) is never applied: the records from the first bad one on are dropped, the original file is kept beside
as `<file>.damaged-<time>`, one log line names the file and offset, and the journal is marked untrusted. An
untrusted replica grants no vote and stands for no election until it has caught up (raft/patch_catch_up.py,
`catch_up_*`), so a lost entry it had acknowledged is always still on the majority that elects the next leader.

Durability: with `fsync`, every record is written at once and `sync()` (fdatasync) runs before any Raft message
leaves the node (raft/transport.py), so term, vote and entries are on stable storage before the replies that
depend on them, and one fdatasync covers every record of a tick (group commit). With `memory`, records reach only
the page cache; the BOOT record tells a restart after an OS crash or reboot, and such a journal is untrusted.

A write that fails (disk full, I/O error) keeps its bytes pending and marks the journal failed: the replica
sends nothing while failed (so it neither acknowledges nor leads), and each `sync()` retries the pending bytes,
so it recovers by itself once there is space. Space is preallocated ahead of the end (posix_fallocate), so a full
disk is found before the bytes are needed.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import time
from pathlib import Path
from typing import Any

from pysyncobj.journal import Journal

from groupcoord.base.logfields import fields
from groupcoord.raft.journal_records import (
    BOOT,
    COMMIT,
    DURABILITY_MODES,
    ENTRY,
    ENTRY_HEADER,
    FRESH,
    HARD,
    MAGIC,
    TRUNCATE,
    TRUST,
    TRUSTED,
    U64,
    UNTRUSTED,
    Damage,
    Replay,
    encode_record,
    read_records,
)

log = logging.getLogger(__name__)

PREALLOCATE_BYTES = 1024 * 1024
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class JournalError(RuntimeError):
    """The journal cannot be opened or written (the message names the file and the cause)."""


def current_boot_id() -> str:
    """The kernel's boot id: a journal written with durability=memory under another one may have lost writes."""
    try:
        return Path(BOOT_ID_PATH).read_text().strip()
    except OSError:
        return ""


def _fsync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckedJournal(Journal):  # type: ignore[misc]  # pysyncobj has no type hints
    """pysyncobj's `Journal` interface over our record file (see the module docstring)."""

    def __init__(
        self,
        path: str,
        durability: str = "fsync",
        legacy_path: str | None = None,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, not {durability!r}")
        self.path = path
        self.durability = durability
        self._pending = bytearray()  # bytes not yet written (a write failed)
        self._dirty = False  # written but not yet fdatasync'ed (fsync mode)
        self._commit_written = 1
        self.write_error: OSError | None = None
        self.write_errors: collections.Counter[str] = collections.Counter()  # by errno name, for metrics
        self.fsyncs = 0
        self._durable_index = 0  # the last entry index on stable storage as of the last fdatasync
        self.fsync_seconds = 0.0
        self.damage: Damage | None = None
        self._bootstrap_refused = False
        self._fd = -1  # no file open yet
        if not os.path.exists(path) and legacy_path is not None and os.path.exists(legacy_path):
            self._rewrite(_migrate(legacy_path))
            for old in (legacy_path, f"{legacy_path}.meta"):
                if os.path.exists(old):
                    os.replace(old, f"{old}.migrated")
        try:
            data = Path(path).read_bytes() if os.path.exists(path) else b""
        except OSError as exc:
            raise JournalError(f"cannot read the journal {path}: {exc.strerror}") from exc
        replay = read_records(path, data) if data else Replay(entries=[], trust=FRESH)
        boot_id = current_boot_id()
        if replay.damage is not None:
            self.damage = replay.damage
            replay.trust = UNTRUSTED
            kept = f"{path}.damaged-{int(time.time())}"
            os.replace(path, kept)
            log.error(
                "journal.torn_tail" if replay.damage.torn_tail else "journal.corrupt",
                extra=fields(
                    file=path,
                    offset=replay.damage.offset,
                    reason=replay.damage.reason,
                    kept_as=kept,
                    entries_kept=len(replay.entries),
                    action="records from the offset on dropped; this replica takes no part in elections until "
                    "it has caught up from the leader",
                ),
            )
        elif replay.boot_durability == "memory" and replay.boot_id != boot_id and replay.trust == TRUSTED:
            replay.trust = UNTRUSTED
            log.warning(
                "journal.unflushed_before_reboot",
                extra=fields(
                    file=path,
                    action="written with durability=memory before the machine restarted, so it may lack entries it "
                    "acknowledged: this replica takes no part in elections until it has caught up from the leader",
                ),
            )
        if replay.entries:
            replay.commit_index = min(replay.commit_index, replay.entries[-1][1])
        self._entries = replay.entries
        self._term = replay.term
        self._voted_for = replay.voted_for
        self._commit_index = self._commit_written = replay.commit_index
        self.trusted = replay.trust == TRUSTED
        # Made at this start (or never held more than pysyncobj's first no-op since): see `fresh_peers_agree`.
        self.fresh = replay.trust == FRESH
        self._boot_id = boot_id
        if self.damage is not None or not data:
            self._rewrite(replay)
        else:
            self._open_for_append(replay.end)
        self._append(encode_record(BOOT, bytes((DURABILITY_MODES.index(durability),)) + boot_id.encode()))
        self._sync_now()
        if self.write_error is not None:
            raise JournalError(f"cannot write the journal {path}: {self.write_error.strerror}")

    # -- files ---------------------------------------------------------------------------------------

    def _open_for_append(self, end: int) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        try:
            self._fd = os.open(self.path, os.O_RDWR)
        except OSError as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc.strerror}") from exc
        self._offset = end
        self._allocated = os.fstat(self._fd).st_size

    def _rewrite(self, replay: Replay) -> None:
        """Writes the journal's whole state to a new file and renames it into place (durably)."""
        records = [MAGIC, encode_record(HARD, U64.pack(replay.term) + (replay.voted_for or "").encode())]
        records.append(encode_record(COMMIT, U64.pack(replay.commit_index)))
        records.append(encode_record(TRUST, bytes((replay.trust,))))
        records.extend(
            encode_record(ENTRY, ENTRY_HEADER.pack(index, term) + bytes(command))
            for command, index, term in replay.entries
        )
        data = b"".join(records)
        tmp = f"{self.path}.tmp"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, len(data) + PREALLOCATE_BYTES)
                os.pwrite(fd, data, 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_directory(self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise JournalError(f"cannot write the journal {self.path}: {exc.strerror}") from exc
        self._open_for_append(len(data))
        self._pending.clear()
        self._dirty = False
        self._recovered()

    def _append(self, record: bytes) -> None:
        self._pending += record
        if self.write_error is None:  # while failing, only `sync()` (once a tick) retries
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        try:
            end = self._offset + len(self._pending)
            if end > self._allocated:
                os.posix_fallocate(self._fd, self._allocated, end - self._allocated + PREALLOCATE_BYTES)
                self._allocated = end + PREALLOCATE_BYTES
            os.pwrite(self._fd, self._pending, self._offset)
        except OSError as exc:
            self._fail(exc)
            return
        self._offset = end
        self._pending.clear()
        self._dirty = self.durability == "fsync"
        self._recovered()

    def _fail(self, exc: OSError) -> None:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self.write_errors[code] += 1
        if self.write_error is None:
            log.error(
                "journal.write_failed",
                extra=fields(
                    file=self.path,
                    error=code,
                    reason=exc.strerror,
                    action="this replica stops sending (no acknowledgements, no leadership) and retries every tick",
                ),
            )
        self.write_error = exc

    def _recovered(self) -> None:
        if self.write_error is not None:
            self.write_error = None
            log.warning("journal.write_recovered", extra=fields(file=self.path))

    def _sync_now(self) -> None:
        self._write_pending()
        if not self._dirty or self.write_error is not None:
            return
        started = time.perf_counter()
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            self._fail(exc)
            return
        self.fsync_seconds += time.perf_counter() - started
        self.fsyncs += 1
        self._dirty = False
        self._durable_index = self._entries[-1][1] if self._entries else 0

    # -- durability barrier (raft/transport.py) ------------------------------------------------------

    def sync(self) -> bool:
        """Makes everything recorded so far durable (in fsync mode); False while the journal cannot be written."""
        self._sync_now()
        return self.write_error is None

    @property
    def size(self) -> int:
        return self._offset

    @property
    def durable(self) -> bool:
        return not self._dirty and not self._pending and self.write_error is None

    @property
    def durableIndex(self) -> int:
        """The last entry on stable storage: what a leader may count as its own acknowledgement."""
        last = self._entries[-1][1] if self._entries else 0
        return last if self.durable else min(self._durable_index, last)

    @property
    def pristine(self) -> bool:
        """Holds no entry but pysyncobj's first no-op: this replica has never acknowledged anything."""
        return all((index, term) == (1, 0) for _, index, term in self._entries)

    @property
    def _trust(self) -> int:
        return TRUSTED if self.trusted else FRESH if self.fresh else UNTRUSTED

    def discard(self, reason: str) -> None:
        """Drops every entry (the state they continue is lost, e.g. a damaged snapshot); untrusted until caught up."""
        self.damage = Damage(self.path, 0, reason, torn_tail=False)
        self.trusted = self.fresh = False
        self._entries = []
        self._commit_index = 1
        if not self._rewrite_state():
            raise JournalError(f"cannot rewrite the journal {self.path} after {reason}")

    def bootstrap_refused(self) -> None:
        """Every replica of the partition holds nothing, but `initial_cluster_state` is `existing`: said once."""
        if not self._bootstrap_refused:
            self._bootstrap_refused = True
            log.error(
                "journal.bootstrap_refused",
                extra=fields(
                    file=self.path,
                    action="every replica of this partition is empty and initial_cluster_state is existing, so no "
                    "new cluster is formed: restore a data directory, or start the nodes with "
                    "initial_cluster_state=new to begin an empty cluster",
                ),
            )

    def set_trusted(self, why: str = "caught up from the leader") -> None:
        if not self.trusted:
            self.trusted, self.fresh = True, False
            self._append(encode_record(TRUST, bytes((TRUSTED,))))
            self._sync_now()
            log.warning("journal.trusted", extra=fields(file=self.path, why=why))

    # -- pysyncobj's Journal interface ---------------------------------------------------------------

    def add(self, command: Any, idx: int, term: int) -> None:
        command = bytes(command)
        if self.fresh and (idx, term) != (1, 0):  # pysyncobj's own first no-op does not count
            self.fresh = False  # from now on it may acknowledge entries: an ordinary untrusted replica
            self._append(encode_record(TRUST, bytes((UNTRUSTED,))))
        self._entries.append((command, idx, term))
        self._append(encode_record(ENTRY, ENTRY_HEADER.pack(idx, term) + command))

    def clear(self) -> None:
        self._entries = []
        if not self._rewrite_state():
            self._append(encode_record(TRUNCATE, U64.pack(0)))

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        index = self._entries[entryFrom][1]
        del self._entries[entryFrom:]
        self._append(encode_record(TRUNCATE, U64.pack(index)))

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._entries = self._entries[entryTo:]
        self._rewrite_state()

    def _rewrite_state(self) -> bool:
        """Compacts the file to the current state; False (and the old file kept, still valid) when it cannot."""
        state = Replay(list(self._entries), self._term, self._voted_for, self._commit_index, trust=self._trust)
        try:
            self._rewrite(state)
        except JournalError as exc:
            log.warning("journal.compaction_failed", extra=fields(file=self.path, reason=str(exc.__cause__ or exc)))
            return False
        return True

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self._write_commit()
        self._sync_now()
        os.close(self._fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._commit_index = raftCommitIndex

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        voted = None if votedForNodeId is None else str(votedForNodeId)
        if (term, voted) == (self._term, self._voted_for):
            return
        self._term, self._voted_for = term, voted
        self._append(encode_record(HARD, U64.pack(term) + (voted or "").encode()))

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> str | None:
        return self._voted_for

    def onOneSecondTimer(self) -> None:
        self._write_commit()

    def _write_commit(self) -> None:
        if self._commit_index != self._commit_written:
            self._commit_written = self._commit_index
            self._append(encode_record(COMMIT, U64.pack(self._commit_index)))


def _migrate(legacy_path: str) -> Replay:
    """Reads a pysyncobj 0.3.17 FileJournal (and its .meta) into a replay, for the first start after an upgrade."""
    from pysyncobj.journal import FileJournal

    try:
        old = FileJournal(legacy_path)
    except Exception as exc:  # its reader raises anything on a damaged file (struct.error, pickle errors)
        raise JournalError(
            f"cannot read the pysyncobj journal {legacy_path} to migrate it ({type(exc).__name__}: {exc}); "
            "move it away to rebuild this replica from the others"
        ) from exc
    replay = Replay(
        entries=[(bytes(old[i][0]), old[i][1], old[i][2]) for i in range(len(old))],
        term=old.getCurrentTerm(),
        voted_for=old.getVotedForNodeId(),
        commit_index=old.getRaftCommitIndex(),
    )
    old._destroy()
    log.warning("journal.migrated", extra=fields(file=legacy_path, entries=len(replay.entries)))
    return replay
