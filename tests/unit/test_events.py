"""Committed records as events (coordinator/events.py) and the node's event files (node/events.py)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from groupcoord.coordinator.events import DESCRIBE, EVENT_VERSION, barrier_event, record_event
from groupcoord.coordinator.state import GroupStore
from groupcoord.node.events import EventFiles, Merger, PartitionEvents, merge, partition_dir, read_partition
from groupcoord.protocol import records as r

T = 1_700_000_000_000


def _joined(member: str, instance: str = "") -> r.MemberAdded:
    return r.MemberAdded("g", member, instance, "client", "/10.0.0.1", 10_000, 30_000, "consumer",
                         (("range", b"m"),), T)  # fmt: skip


def _events(records: list[r.Record]) -> list[dict]:
    store, out = GroupStore(), []
    for position, rec in enumerate(records):
        if store.apply(rec):
            group = store.get(rec.group_id) if isinstance(rec, r.GroupRecord) else None
            out.append(record_event(rec, group, 3, 42, position, 7, 2))
    return out


def test_every_record_type_has_an_event():
    assert set(DESCRIBE) == set(r._REGISTRY.values())


def test_a_topic_event_belongs_to_no_group_even_one_named_like_the_topic():
    events = _events([
        r.OffsetsCommitted("orders", "", -1, (("orders", 0, 5, -1, ""),), T),
        r.TopicCreated("orders", 3, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", T + 1),
        r.TopicCreated("orders", 5, "another-id", T + 2),  # the topic exists: no effect, no event
        r.TopicDeleted("orders", T + 3),
    ])  # fmt: skip
    assert [e["kind"] for e in events] == ["offsets_committed", "topic_created", "topic_deleted"]
    created, deleted = events[1], events[2]
    assert (created["group"], created["state"], created["generation"], created["member"]) == ("", "", None, "")
    assert created["details"] == {
        "topic": "orders", "topic_id": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "num_partitions": 3,
    }  # fmt: skip
    assert (deleted["group"], deleted["state"], deleted["details"]) == ("", "", {"topic": "orders"})
    json.dumps(events)


def test_a_rebalance_reads_as_who_why_and_which_members():
    events = _events([
        _joined("a"),
        r.RebalanceStarted("g", r.RebalanceCause.MEMBER_JOINED, "a", "", 0, "", T + 1),
        r.GenerationCompleted("g", 1, "range", "a", T + 2),
        r.AssignmentsSynced("g", 1, {"a": b"x"}, T + 3),
        r.OffsetsCommitted("g", "a", 1, (("orders", 0, 5, -1, ""),), T + 4),
        r.MemberRemoved("g", "a", r.RemovalCause.SESSION_EXPIRED, "", T + 5),
    ])  # fmt: skip
    assert [e["kind"] for e in events] == [
        "member_joined", "rebalance_started", "generation_completed", "sync_completed", "offsets_committed",
        "member_expired",
    ]  # fmt: skip
    started, completed, committed = events[1], events[2], events[4]
    assert (started["reason"], started["member"], started["details"]["members"]) == ("member_joined", "a", ["a"])
    assert (completed["generation"], completed["details"]) == (
        1,
        {"protocol": "range", "leader": "a", "members": ["a"]},
    )
    assert committed["details"] == {"count": 1, "offsets": [["orders", 0, 5]]}
    assert events[-1]["reason"] == "session_expired"
    first = events[0]
    assert {k: first[k] for k in ("v", "time_ms", "partition", "index", "position", "term", "node", "group")} == {
        "v": EVENT_VERSION, "time_ms": T, "partition": 3, "index": 42, "position": 0, "term": 7, "node": 2,
        "group": "g",
    }  # fmt: skip
    json.dumps(events)  # JSON-ready as they are


def test_a_record_that_took_no_effect_is_no_event():
    assert _events([r.MemberRemoved("g", "nobody", r.RemovalCause.LEAVE, "", T)]) == []


def test_the_barrier_is_the_new_leader_serving():
    event = barrier_event(T, 5, 9, 3, 1)
    assert (event["kind"], event["partition"], event["index"], event["term"], event["node"]) == (
        "barrier_committed", 5, 9, 3, 1,
    )  # fmt: skip


def _batch(index: int, n: int = 2) -> list[dict]:
    return [{"index": index, "position": p, "kind": "x", "pad": "y" * 100} for p in range(n)]


def _written(directory: Path) -> list[tuple[int, int]]:
    return [
        (e["index"], e["position"])
        for path in sorted(directory.glob("*.jsonl"))
        for e in map(json.loads, path.read_text().splitlines())
    ]


def test_segments_rotate_and_the_oldest_go_beyond_the_bound(tmp_path: Path):
    directory = partition_dir(tmp_path, 0)
    events = PartitionEvents(directory, segment_bytes=1000, max_segments=3)
    for index in range(1, 41):
        events.write(_batch(index))
    segments = sorted(directory.glob("*.jsonl"))
    assert len(segments) == 3
    written = _written(directory)
    assert written == sorted(written) and written[-1] == (40, 1)
    assert int(segments[0].stem) == written[0][0], "a segment is named after its first index"


def test_a_restart_skips_what_is_written_and_cuts_a_torn_line(tmp_path: Path):
    directory = partition_dir(tmp_path, 1)
    first = PartitionEvents(directory, segment_bytes=1 << 20, max_segments=4)
    for index in (1, 2, 3):
        first.write(_batch(index))
    segment = next(directory.glob("*.jsonl"))
    with segment.open("ab") as f:
        f.write(b'{"index": 4, "posi')  # the node died mid-write
    again = PartitionEvents(directory, segment_bytes=1 << 20, max_segments=4)
    assert again.last_index == 3
    for index in (2, 3, 4, 5):  # the journal replays from before the end
        again.write(_batch(index))
    assert _written(directory) == [(i, p) for i in range(1, 6) for p in (0, 1)]


def _node_dir(root: Path, name: str, lines: list[str]) -> Path:
    directory = partition_dir(root / name, 0)
    directory.mkdir(parents=True)
    (directory / f"{1:020d}.jsonl").write_text("".join(line + "\n" for line in lines))
    return root / name


def _line(index: int, kind: str = "x") -> str:
    return json.dumps({"partition": 0, "index": index, "position": 0, "kind": kind})


def test_merge_keeps_each_event_once_and_reports_bad_lines_and_conflicts(tmp_path: Path):
    a = _node_dir(tmp_path, "a", [_line(1), _line(2), "{torn", _line(3)])
    b = _node_dir(tmp_path, "b", [_line(2), _line(3, kind="other"), _line(4)])
    merged = merge([a, b])
    assert [e["index"] for e in merged.events] == [1, 2, 3, 4]
    assert merged.duplicates == 1
    assert len(merged.bad_lines) == 1 and ":3: " in merged.bad_lines[0]
    assert len(merged.conflicts) == 1 and "index 3" in merged.conflicts[0]


def test_export_needs_data_dirs_with_events(tmp_path: Path):
    from groupcoord.cli import main

    assert main(["events", "export", "--out", str(tmp_path / "out")]) == 2
    assert main(["events", "export", "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path)]) == 2
    good = _node_dir(tmp_path, "n1", [_line(1), _line(2)])
    assert main(["events", "export", "--out", str(tmp_path / "out"), "--data-dir", str(good)]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["events"] == 2 and manifest["partitions"]["0"] == {"events": 2, "first_index": 1, "last_index": 2}


def _chained(index: int, prev_index: int, position: int = 0) -> str:
    return json.dumps({"partition": 0, "index": index, "position": position, "prev_index": prev_index, "kind": "x"})


def test_a_hole_in_the_chain_of_entries_is_reported_and_a_gap_is_not():
    merger = Merger()
    merger.add("a", [_chained(5, 2), _chained(5, 2, position=1), _chained(9, 5), _chained(14, 12)])
    merger.add("b", [_chained(20, 14)])
    merged = merger.result()
    assert [e["index"] for e in merged.events] == [5, 5, 9, 14, 20]
    assert (
        len(merged.holes) == 1
        and "index 14 follows index 12" in merged.holes[0]
        and "end at index 9" in merged.holes[0]
    )
    merger.add("c", [_chained(12, 9)])  # another node had the entry in between
    assert merger.result().holes == []


def test_a_node_streams_whole_lines_only(tmp_path: Path):
    directory = partition_dir(tmp_path, 0)
    events = PartitionEvents(directory, segment_bytes=500, max_segments=10)
    for index in range(1, 21):
        events.write(_batch(index))
    newest = sorted(directory.glob("*.jsonl"))[-1]
    with newest.open("ab") as f:
        f.write(b'{"index": 21, "posi')  # being written right now
    chunks = list(read_partition(tmp_path, 0, chunk_bytes=64))
    assert all(chunk.endswith(b"\n") for chunk in chunks)
    streamed = [json.loads(line) for chunk in chunks for line in chunk.splitlines()]
    assert [(e["index"], e["position"]) for e in streamed] == [(i, p) for i in range(1, 21) for p in (0, 1)]


def test_event_files_that_could_fill_the_data_directory_are_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    stat = os.statvfs(tmp_path)
    disk = stat.f_blocks * stat.f_frsize
    with caplog.at_level(logging.WARNING):
        assert EventFiles(disk // 64, 8).check_room(tmp_path, 4)  # half the disk: the bound still fits
        assert not caplog.records
        assert not EventFiles(disk // 32 + 1, 8).check_room(tmp_path, 4)
    assert [r.message for r in caplog.records] == ["events.disk_too_small"]
