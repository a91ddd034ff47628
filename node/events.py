"""The node's event files: every event its replicas apply, as JSON Lines segments per partition.

    <data_dir>/events/partition-<k>/<first index, 20 digits>.jsonl

A segment is closed once it reaches `segment_bytes`; the oldest are deleted beyond `max_segments`, so the
files are size-bounded. Each entry's events go out in one write. A restarted node replays its journal through
the same apply: events at or below the last index already written are skipped, and a torn last line (a
crash mid-write) is cut off first. Every replica writes the same events, so a reader merges the files of all
nodes and de-duplicates by (partition, index, position) (`groupcoord events export`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.coordinator.events import Event
from groupcoord.logfields import fields

log = logging.getLogger(__name__)

EVENTS_DIR = "events"
SUFFIX = ".jsonl"


@dataclass(frozen=True, slots=True)
class EventFiles:
    segment_bytes: int
    max_segments: int  # 0: no event files

    def writer(self, data_dir: Path, partition: int) -> PartitionEvents | None:
        if not self.max_segments:
            return None
        return PartitionEvents(partition_dir(data_dir, partition), self.segment_bytes, self.max_segments)


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
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events).encode()
        fd = os.open(self._file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._size += len(data)
        self.last_index = index

    def _rotate(self, first_index: int) -> None:
        segments = self._segments()
        if self._file is None and segments and segments[-1].stat().st_size < self.segment_bytes:
            self._file, self._size = segments[-1], segments[-1].stat().st_size  # go on after a restart
            return
        self._file, self._size = self.directory / f"{first_index:020d}{SUFFIX}", 0
        for old in segments[: max(len(segments) + 1 - self.max_segments, 0)]:
            old.unlink(missing_ok=True)


@dataclass
class Export:
    """The merged events of several nodes' data dirs, and what was found wrong on the way."""

    events: list[Event] = field(default_factory=list)
    duplicates: int = 0  # the same event from several nodes (expected: every replica writes it)
    bad_lines: list[str] = field(default_factory=list)  # "file:line: why": reported, never silently dropped
    conflicts: list[str] = field(default_factory=list)  # same key, different content: replicas diverged


def merge(data_dirs: list[Path]) -> Export:
    """Every event of every partition found under the data dirs, once, ordered by (partition, index, position)."""
    seen: dict[tuple[int, int, int], Event] = {}
    result = Export()
    for data_dir in data_dirs:
        for path in sorted((data_dir / EVENTS_DIR).glob(f"partition-*/*{SUFFIX}")):
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                try:
                    event = json.loads(line)
                    key = (int(event["partition"]), int(event["index"]), int(event["position"]))
                except (ValueError, KeyError, TypeError) as exc:
                    result.bad_lines.append(f"{path}:{number}: {type(exc).__name__}: {exc}")
                    continue
                known = seen.get(key)
                if known is None:
                    seen[key] = event
                elif known == event:
                    result.duplicates += 1
                else:
                    result.conflicts.append(f"{path}:{number}: partition {key[0]} index {key[1]} position {key[2]}")
    result.events = [seen[key] for key in sorted(seen)]
    return result
