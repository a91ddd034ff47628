"""Every replica reports the same events for the same log entries, with their Raft log index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.protocol import records as r
from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.settings import RaftSettings
from tests.raft.test_partition import SECRET, Cluster, _barrier, _commit, _offset, _wait


class EventCluster(Cluster):
    def __init__(self, tmp: Path) -> None:
        self.seen: dict[int, list[dict]] = {1: [], 2: [], 3: []}
        super().__init__(tmp)

    def start(self, i: int) -> PartitionReplica:
        peers = [a for a in self.addresses if a != self.addresses[i]]
        return PartitionReplica(
            0, i + 1, self.addresses[i], peers, SECRET, str(self.tmp / f"n{i}-p0"), RaftSettings(),
            on_events=self.seen[i + 1].extend,
        )  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EventCluster]:
    c = EventCluster(tmp_path)
    yield c
    c.close()


def test_replicas_report_identical_events_in_log_order(cluster: EventCluster):
    leader = cluster.leader()
    assert _barrier(leader)
    for i in range(10):
        assert _commit(leader, [_offset(2 * i), _offset(2 * i + 1)])
    assert _commit(leader, [r.MemberRemoved("g", "nobody", r.RemovalCause.LEAVE, "", 1)])  # no effect: no event
    assert _commit(leader, [_offset(20)])
    _wait(lambda: all(len(events) == 22 for events in cluster.seen.values()))
    first = cluster.seen[leader.node_id]
    assert all(events == first for events in cluster.seen.values())
    assert first[0]["kind"] == "barrier_committed" and first[0]["term"] == leader.term()
    keys = [(e["index"], e["position"]) for e in first]
    assert keys == sorted(set(keys)), "unique (index, position), in log order"
    assert [e["position"] for e in first[1:3]] == [0, 1] and first[1]["index"] == first[2]["index"]
    assert all(e["kind"] == "offsets_committed" and e["node"] == leader.node_id for e in first[1:])

    # Each entry names the previous one that took effect: the no-op entry leaves a gap, not a hole.
    entries = sorted({(e["index"], e["prev_index"]) for e in first})
    assert all(prev == before for (_, prev), (before, _) in zip(entries[1:], entries, strict=False))
    assert entries[-1][0] > entries[-2][0] + 1, "the entry without effect is a gap in the indexes"
