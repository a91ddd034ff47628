"""Event files of a real 3-node cluster across a coordinator failover, merged by `groupcoord events export`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_three_nodes import PARTITIONS, Cluster, _coordinator, _node_index, _rpc, _stable_static_group


def _commit(group: str, member_id: str, offset: int) -> pb.OffsetCommitRequest:
    commit = pb.OffsetCommitRequest(group_id=group, generation_id=1, member_id=member_id)
    commit.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset)
    return commit


def _export(out: Path, *source: str) -> tuple[dict, list[dict]]:
    """`groupcoord events export` from `source`: (manifest, events)."""
    done = subprocess.run(
        [sys.executable, "-m", "groupcoord", "events", "export", "--out", str(out), *source],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return json.loads((out / "manifest.json").read_text()), events


def _own_events(data_dir: Path, partition: int) -> list[dict]:
    files = sorted((data_dir / "events" / f"partition-{partition}").glob("*.jsonl"))
    return [json.loads(line) for path in files for line in path.read_text().splitlines()]


async def test_export_after_a_failover_has_every_event_once(tmp_path: Path):
    cluster = Cluster(tmp_path)
    try:
        group = "exported"
        coordinator, (a,) = await _stable_static_group(cluster, group)
        for offset in (1, 2, 3):
            reply = await _rpc(coordinator, "OffsetCommit", _commit(group, a.member_id, offset))
            assert reply.topics[0].partitions[0].error_code == Errors.NONE
        dead = _node_index(cluster, coordinator)
        cluster.kill(dead)
        survivor = (dead + 1) % 3
        new, deadline = "", time.monotonic() + 10
        while not new or new == coordinator:
            assert time.monotonic() < deadline, "no new coordinator"
            await asyncio.sleep(0.05)
            new = await _coordinator(cluster, group, survivor)
        for offset in (4, 5):
            reply = await _rpc(new, "OffsetCommit", _commit(group, a.member_id, offset))
            assert reply.topics[0].partitions[0].error_code == Errors.NONE
        # From the running cluster, over the API, with the killed node still down: the majority has it all.
        bootstrap = ",".join(cluster.address(i) for i in range(3))
        live, live_events = _export(tmp_path / "live", "--bootstrap", bootstrap)
        assert (
            len(live["sources"]) == 2
            and len(live["unreachable"]) == 1
            and f"node {dead + 1} " in live["unreachable"][0]
        )
        cluster.start(dead)
        cluster.wait_serving()
    finally:
        cluster.stop_all()

    data_dirs = [tmp_path / f"data{i + 1}" for i in range(3)]
    manifest, events = _export(tmp_path / "export", *(arg for d in data_dirs for arg in ("--data-dir", str(d))))
    assert manifest["conflicts"] == [] and manifest["bad_lines"] == [] and manifest["holes"] == []
    assert live["conflicts"] == [] and live["holes"] == []
    by_key = {(e["partition"], e["index"], e["position"]): e for e in events}
    assert all(by_key[(e["partition"], e["index"], e["position"])] == e for e in live_events)
    live_commits = [e["details"]["offsets"][0][2] for e in live_events if e["kind"] == "offsets_committed"]
    assert live_commits == [1, 2, 3, 4, 5]
    keys = [(e["partition"], e["index"], e["position"]) for e in events]
    assert keys == sorted(set(keys)), "each event once, in log order"
    assert manifest["duplicates_dropped"] > 0, "every replica wrote the same events"

    partition = partition_for(group, PARTITIONS)
    mine = [e for e in events if e["partition"] == partition]
    # Nothing a node wrote is missing from the export, and the nodes agree on every event they share.
    for data_dir in data_dirs:
        own = {(e["index"], e["position"]): e for e in _own_events(data_dir, partition)}
        exported = {(e["index"], e["position"]): e for e in mine}
        assert own and all(exported[key] == event for key, event in own.items())
    commits = [e["details"]["offsets"][0][2] for e in mine if e["kind"] == "offsets_committed"]
    assert commits == [1, 2, 3, 4, 5]
    barriers = [e for e in mine if e["kind"] == "barrier_committed"]
    assert len({b["term"] for b in barriers}) >= 2, "the new leader's barrier is an event of a later term"
    # Between the last commit at the killed coordinator and the first at the new one: the survivor's barrier.
    before = next(e["index"] for e in mine if e["kind"] == "offsets_committed" and e["details"]["offsets"][0][2] == 3)
    takeover = next(b for b in barriers if b["index"] > before)
    assert takeover["node"] != dead + 1 and takeover["time_ms"] is not None
    kinds = [e["kind"] for e in mine]
    assert kinds.index("member_joined") < kinds.index("generation_completed") < kinds.index("offsets_committed")
