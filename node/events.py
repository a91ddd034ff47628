"""The node's event files: every event its replicas apply, as JSON Lines segments per partition.

    <data_dir>/events/partition-<k>/<first index, 20 digits>.jsonl

A segment is closed once it reaches `segment_bytes`; the oldest are deleted beyond `max_segments`, so the
files are size-bounded. Each entry's events go out in one write. A restarted node replays its journal through
the same apply: events at or below the last index already written are skipped, and a torn last line (a
crash mid-write) is cut off first. Every replica writes the same events, so a reader merges the files of all
nodes and de-duplicates by (partition, index, position) (`groupcoord events export`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.base.logfields import fields
from groupcoord.coordinator.events import Event

log = logging.getLogger(__name__)

EVENTS_DIR = "events"
SUFFIX = ".jsonl"
# One encoder for every line: `json.dumps` with its own separators builds a new one per call. Events are plain
# data, so the circular-reference check is skipped too.
_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


@dataclass(frozen=True, slots=True)
class EventFiles:
    segment_bytes: int
    max_segments: int  # 0: no event files

    def writer(self, data_dir: Path, partition: int) -> PartitionEvents | None:
        if not self.max_segments:
            return None
        return PartitionEvents(partition_dir(data_dir, partition), self.segment_bytes, self.max_segments)

    def check_room(self, data_dir: Path, partitions: int) -> bool:
        """False, and one warning, when the event files may take more than half of the data directory's file
        system: they would fill it in time, and a full disk stops the journals too (seen in a 30-minute chaos run)."""
        bound = self.segment_bytes * self.max_segments * partitions
        try:
            stat = os.statvfs(data_dir)
        except OSError:
            return True
        size = stat.f_blocks * stat.f_frsize
        if bound <= size // 2:
            return True
        log.warning(
            "events.disk_too_small",
            extra=fields(
                data_dir=str(data_dir),
                events_bound_bytes=bound,
                disk_bytes=size,
                action="lower events_segment_bytes or events_max_segments, or give the data directory more space: "
                "the event files can grow to segment size x segments x partitions",
            ),
        )
        return False


def partition_dir(data_dir: Path, partition: int) -> Path:
    return data_dir / EVENTS_DIR / f"partition-{partition}"


class PartitionEvents:
    """Writes one partition's events; called only from that partition's Raft thread."""

    def __init__(self, directory: Path, segment_bytes: int, max_segments: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.max_segments = max_segments
        directory.mkdir(parents=True, exist_ok=True)
        self.last_index = self._recover()
        self._file: Path | None = None
        self._size = 0
        self._failing = False

    def _segments(self) -> list[Path]:
        return sorted(self.directory.glob(f"*{SUFFIX}"))

    def _recover(self) -> int:
        """The last index on disk, after cutting a torn last line of the newest segment."""
        segments = self._segments()
        if not segments:
            return 0
        newest = segments[-1]
        data = newest.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        if len(whole) != len(data):
            with newest.open("r+b") as f:
                f.truncate(len(whole))
            log.warning("events.torn_line_cut", extra=fields(file=str(newest), dropped_bytes=len(data) - len(whole)))
        for line in reversed(whole.splitlines()):
            try:
                return int(json.loads(line)["index"])
            except (ValueError, KeyError, TypeError):
                continue
        return int(newest.stem)

    def write(self, events: list[Event]) -> None:
        index = events[0]["index"]
        if index <= self.last_index:
            return
        if self._file is None or self._size >= self.segment_bytes:
            self._rotate(index)
        assert self._file is not None
        data = "".join([_encode(e) + "\n" for e in events]).encode()
        try:
            fd = os.open(self._file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self._failed(exc)
            return
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)  # no half line for the next write to continue
            self._failed(exc)
            return
        finally:
            os.close(fd)
        if self._failing:
            self._failing = False
            log.warning("events.write_recovered", extra=fields(file=str(self._file)))
        self._size += len(data)
        self.last_index = index

    def _failed(self, exc: OSError) -> None:
        """These events are lost from this node's files (readers see the hole through `prev_index`); said once."""
        if not self._failing:
            self._failing = True
            log.error(
                "events.write_failed",
                extra=fields(file=str(self._file), error=errno.errorcode.get(exc.errno or 0, ""), reason=exc.strerror),
            )

    def _rotate(self, first_index: int) -> None:
        segments = self._segments()
        if self._file is None and segments and segments[-1].stat().st_size < self.segment_bytes:
            self._file, self._size = segments[-1], segments[-1].stat().st_size  # go on after a restart
            return
        self._file, self._size = self.directory / f"{first_index:020d}{SUFFIX}", 0
        for old in segments[: max(len(segments) + 1 - self.max_segments, 0)]:
            old.unlink(missing_ok=True)


def read_partition(data_dir: Path, partition: int, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """A partition's event files, oldest first, in chunks of whole lines (the writer may be mid-line at the end).

    A segment deleted by rotation before it is opened is skipped: those events are gone from this node.
    """
    for path in sorted(partition_dir(data_dir, partition).glob(f"*{SUFFIX}")):
        try:
            f = path.open("rb")
        except FileNotFoundError:
            continue
        with f:
            rest = b""
            while chunk := f.read(chunk_bytes):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                rest = data[cut:]
                if cut:
                    yield data[:cut]


@dataclass
class Export:
    """The merged events of several nodes, and what was found wrong on the way."""

    events: list[Event] = field(default_factory=list)
    duplicates: int = 0  # the same event from several nodes (expected: every replica writes it)
    bad_lines: list[str] = field(default_factory=list)  # "source:line: why": reported, never silently dropped
    conflicts: list[str] = field(default_factory=list)  # same key, different content: replicas diverged
    holes: list[str] = field(default_factory=list)  # entries that took effect but no source had (prev_index)


class Merger:
    """De-duplicates the events of several sources (a node's files, or what a node streamed) by their key."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int, int], Event] = {}
        self._result = Export()

    def add(self, source: str, lines: Iterable[str]) -> None:
        """`lines` are JSON Lines; `source` names them in what is reported."""
        result = self._result
        for number, line in enumerate(lines, 1):
            try:
                event = json.loads(line)
                key = (int(event["partition"]), int(event["index"]), int(event["position"]))
            except (ValueError, KeyError, TypeError) as exc:
                result.bad_lines.append(f"{source}:{number}: {type(exc).__name__}: {exc}")
                continue
            known = self._seen.get(key)
            if known is None:
                self._seen[key] = event
            elif known == event:
                result.duplicates += 1
            else:
                result.conflicts.append(f"{source}:{number}: partition {key[0]} index {key[1]} position {key[2]}")

    def result(self) -> Export:
        """Every event once, ordered by (partition, index, position), with the holes in each partition's chain."""
        self._result.events = [self._seen[key] for key in sorted(self._seen)]
        self._result.holes = holes(self._result.events)
        return self._result


def holes(events: list[Event]) -> list[str]:
    """Where an entry's `prev_index` is not the entry before it: the events in between are missing.

    The first entry of a partition may follow events that are gone (retention); events written before
    `prev_index` existed cannot be checked.
    """
    found: list[str] = []
    previous: dict[int, int] = {}  # partition -> index of the last entry seen
    for event in events:
        partition, index, prev_index = event["partition"], event["index"], event.get("prev_index")
        before = previous.get(partition)
        previous[partition] = index
        if before is None or before == index or prev_index is None or prev_index == before:
            continue
        found.append(
            f"partition {partition}: index {index} follows index {prev_index}, but the events before it end at "
            f"index {before}"
        )
    return found


def merge(data_dirs: list[Path]) -> Export:
    """Every event found under the data dirs' event files, once."""
    merger = Merger()
    for data_dir in data_dirs:
        for path in sorted((data_dir / EVENTS_DIR).glob(f"partition-*/*{SUFFIX}")):
            merger.add(str(path), path.read_text(errors="replace").splitlines())
    return merger.result()
