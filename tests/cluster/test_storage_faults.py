"""Storage faults on a real 3-node cluster (issue 21): a flipped bit or a torn tail in a journal is never applied or
served, and a full disk stops a replica cleanly and recovers by itself. Every acknowledged commit is read back."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.raft import journal_records as j
from tests.cluster.test_three_nodes import PARTITIONS, Cluster, _coordinator, _rpc
from tests.e2e.support import NodeProcess
from tests.e2e.test_metrics import Scrape

BASE = 0x5A5A0100


def groups_on(partition: int, count: int, prefix: str) -> list[str]:
    found, i = [], 0
    while len(found) < count:
        name = f"{prefix}-{i}"
        if partition_for(name, PARTITIONS) == partition:
            found.append(name)
        i += 1
    return found


async def commit(cluster: Cluster, group: str, offset: int, metadata: str = "", timeout_s: float = 20.0) -> None:
    """A simple (admin) commit, retried at whichever node coordinates the group until it is acknowledged."""
    request = pb.OffsetCommitRequest(group_id=group, generation_id=-1)
    request.topics.add(name="t").partitions.add(partition_index=0, committed_offset=offset, committed_metadata=metadata)
    deadline = time.monotonic() + timeout_s
    while True:
        for via in range(cluster.size):
            if cluster.nodes[via] is None:
                continue
            try:
                coordinator = await _coordinator(cluster, group, via)
                if coordinator:
                    reply = await _rpc(coordinator, "OffsetCommit", request)
                    if reply.topics[0].partitions[0].error_code == Errors.NONE:
                        return
            except Exception:  # a node on its way down: try the next one
                pass
        assert time.monotonic() < deadline, f"commit {group}={offset} was never acknowledged"
        await asyncio.sleep(0.05)


async def fetch(address: str, group: str) -> int:
    reply = await _rpc(address, "OffsetFetch", pb.OffsetFetchRequest(group_id=group))
    assert reply.error_code == Errors.NONE, reply
    parts = [p for t in reply.topics for p in t.partitions]
    return parts[0].committed_offset if parts else -1


async def fetch_all(cluster: Cluster, groups: list[str], timeout_s: float = 20.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    result: dict[str, int] = {}
    for group in groups:
        while True:
            try:
                coordinator = ""
                for via in (i for i in range(cluster.size) if cluster.nodes[i] is not None):
                    coordinator = coordinator or await _coordinator(cluster, group, via)
                if coordinator:
                    result[group] = await fetch(coordinator, group)
                    break
            except (AssertionError, grpc.aio.AioRpcError):  # not served yet, or by a node that is gone
                pass
            assert time.monotonic() < deadline, f"nobody served {group}"
            await asyncio.sleep(0.05)
    return result


def records(path: Path) -> list[tuple[int, int]]:
    """(offset, kind) of each record of a journal file."""
    data, found, offset = path.read_bytes(), [], len(j.MAGIC)
    while offset + j.RECORD_HEADER.size <= len(data):
        length, crc = j.RECORD_HEADER.unpack_from(data, offset)
        if (length, crc) == (0, 0):
            break
        found.append((offset, data[offset + j.RECORD_HEADER.size]))
        offset += j.RECORD_HEADER.size + length
    return found


def metrics_address(node: NodeProcess | None) -> str:
    """The metrics endpoint of the node's latest start (its log is appended to across restarts)."""
    assert node is not None
    return [e for e in node.events() if e.get("event") == "node.started"][-1]["metrics_address"]


def events(cluster: Cluster, i: int, name: str) -> list[dict]:
    """The node's `name` log lines since its latest start (its log is appended to across restarts)."""
    node = cluster.nodes[i]
    assert node is not None
    lines = node.events()
    starts = [k for k, e in enumerate(lines) if e.get("event") == "node.allocator"]
    return [e for e in lines[starts[-1] if starts else 0 :] if e.get("event") == name]


def no_tracebacks(tmp_path: Path) -> None:
    for log in tmp_path.glob("node*.log"):
        assert "Traceback" not in log.read_text(), f"{log.name} has a traceback"


async def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(predicate):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, "--metrics-port=0")
    yield c
    c.stop_all()


async def test_a_flipped_bit_and_a_torn_tail_are_never_served(cluster: Cluster, tmp_path: Path):
    partition = 0  # led by node 1 (index 0); nodes 2 and 3 follow
    groups = groups_on(partition, 6, "flip")
    acknowledged: dict[str, int] = {}
    label = str(partition)

    async def commit_round(round_: int) -> None:
        for i, group in enumerate(groups):
            acknowledged[group] = BASE + 16 * round_ + i
            await commit(cluster, group, acknowledged[group])

    def caught_up(i: int) -> bool:
        return Scrape(metrics_address(cluster.nodes[i])).value("groupcoord_raft_catching_up", partition=label) == 0

    for round_ in range(5):
        await commit_round(round_)
    # Node 2: four bytes flipped in the middle of an entry, while it is down.
    cluster.kill(1)
    flipped = tmp_path / "data2" / f"partition-{partition}.wal"
    entries = [o for o, kind in records(flipped) if kind == j.ENTRY]
    victim = entries[len(entries) // 2]
    data = bytearray(flipped.read_bytes())
    data[victim + 20 : victim + 24] = bytes(b ^ 0x5A for b in data[victim + 20 : victim + 24])
    flipped.write_bytes(bytes(data))
    cluster.start(1)
    cluster.wait_serving()
    [corrupt] = events(cluster, 1, "journal.corrupt")
    assert (corrupt["file"], corrupt["offset"], corrupt["reason"]) == (str(flipped), victim, "checksum mismatch")
    scrape = Scrape(metrics_address(cluster.nodes[1]))
    assert scrape.value("groupcoord_journal_damage_found", partition=label, kind="corrupt") == 1
    await commit_round(5)  # the leader's entries of its term: the damaged replica catches up with them
    await wait_for(lambda: caught_up(1), 20, "node 2 did not catch up from the leader")
    trusted = [e for e in events(cluster, 1, "journal.trusted") if e["file"] == str(flipped)]
    assert [e["why"] for e in trusted][-1] == "caught up from the leader"

    # Node 3: its last entry cut short, as a write that never finished leaves it.
    cluster.kill(2)
    torn = tmp_path / "data3" / f"partition-{partition}.wal"
    last_entry = [o for o, kind in records(torn) if kind == j.ENTRY][-1]
    with torn.open("r+b") as f:
        f.truncate(last_entry + 12)
    cluster.start(2)
    cluster.wait_serving()
    [cut] = events(cluster, 2, "journal.torn_tail")
    assert (cut["file"], cut["offset"]) == (str(torn), last_entry)
    scrape = Scrape(metrics_address(cluster.nodes[2]))
    assert scrape.value("groupcoord_journal_damage_found", partition=label, kind="torn_tail") == 1
    await commit_round(6)
    await wait_for(lambda: caught_up(2), 20, "node 3 did not catch up from the leader")

    # Now the two repaired replicas are the only ones left to serve the partition (two of three: a quorum).
    cluster.kill(0)
    assert await fetch_all(cluster, groups) == acknowledged
    no_tracebacks(tmp_path)


async def test_a_wiped_data_directory_never_loses_acknowledged_commits(cluster: Cluster, tmp_path: Path):
    """The issue's first case: C is down while A and B acknowledge 12 commits; B's data directory is lost; A is
    down. B and C must not serve those groups without the 12 commits; once A is back, all three agree."""
    groups = [g for p in range(PARTITIONS) for g in groups_on(p, 3, f"wiped-p{p}")]
    for group in groups:
        await commit(cluster, group, 1)
    cluster.kill(2)
    acknowledged = {group: BASE + i for i, group in enumerate(groups)}
    for group, offset in acknowledged.items():
        await commit(cluster, group, offset)
    cluster.kill(1)
    shutil.rmtree(tmp_path / "data2")  # a lost volume
    cluster.kill(0)
    cluster.start(1)
    cluster.start(2)
    deadline, answers = time.monotonic() + 6, 0
    while time.monotonic() < deadline:  # B and C: no answer but the acknowledged one, if any
        for via in (1, 2):
            for group in groups:
                try:
                    coordinator = await _coordinator(cluster, group, via)
                    if coordinator:
                        reply = await _rpc(coordinator, "OffsetFetch", pb.OffsetFetchRequest(group_id=group))
                        if reply.error_code == Errors.NONE:
                            answers += 1
                            offsets = [p.committed_offset for t in reply.topics for p in t.partitions]
                            assert offsets == [acknowledged[group]], f"{group} served {offsets}, not acknowledged"
                except grpc.aio.AioRpcError:
                    pass  # still starting
        await asyncio.sleep(0.2)
    print(f"wiped: {answers} answers from B and C while A was down, none stale")
    assert events(cluster, 1, "journal.trusted") == []  # B's fresh replicas heard no `fresh` from C
    cluster.start(0)
    cluster.wait_serving()
    assert await fetch_all(cluster, groups) == acknowledged

    def b_caught_up() -> bool:
        scrape = Scrape(metrics_address(cluster.nodes[1]))
        return all(scrape.value("groupcoord_raft_catching_up", partition=str(p)) == 0 for p in range(PARTITIONS))

    await commit(cluster, groups[0], acknowledged[groups[0]])
    await wait_for(b_caught_up, 20, "B's replicas did not catch up")
    cluster.kill(0)  # B and C alone again: now they serve every acknowledged commit
    assert await fetch_all(cluster, groups) == acknowledged
    no_tracebacks(tmp_path)


# -- cross-replica state checks -----------------------------------------------------------------------------------


def digest_checks(cluster: Cluster, i: int) -> tuple[float, list[float]]:
    scrape = Scrape(metrics_address(cluster.nodes[i]))
    mismatches = [scrape.value("groupcoord_replica_digest_mismatch", partition=str(p)) for p in range(PARTITIONS)]
    return scrape.value("groupcoord_replica_digest_checks_total"), mismatches


def diverge(cluster: Cluster, i: int, partition: int) -> None:
    """Node i's copy of the commit of BASE is changed in a way its checksum cannot see (the record's CRC is fixed
    up): a bug, or bad memory. Replaying it gives node i a state the others do not have."""
    cluster.kill(i)
    path = cluster.tmp / f"data{i + 1}" / f"partition-{partition}.wal"
    data = bytearray(path.read_bytes())
    # The offset as msgpack writes it (uint32), as it sits in pysyncobj's protocol-2 pickle (bytes as latin-1
    # text, UTF-8 encoded).
    old, new = (("\xce" + value.to_bytes(4, "big").decode("latin-1")).encode() for value in (BASE, BASE + 1))
    changed = 0
    for offset, kind in records(path):
        length, _ = j.RECORD_HEADER.unpack_from(data, offset)
        body = bytes(data[offset + 8 : offset + 8 + length])
        if kind == j.ENTRY and old in body:
            body = body.replace(old, new)
            data[offset : offset + 8 + length] = j.RECORD_HEADER.pack(length, zlib.crc32(body)) + body
            changed += 1
    assert changed == 1
    path.write_bytes(bytes(data))
    cluster.start(i)


async def test_replicas_that_agree_raise_no_alarm_and_a_diverged_one_does(tmp_path: Path):
    cluster = Cluster(tmp_path, "--metrics-port=0", "--raft-digest-interval-ms=300")
    try:
        partition = 0  # led by node 1; node 2 will diverge
        [group, *others] = groups_on(partition, 4, "digest")
        await commit(cluster, group, BASE)
        for i, other in enumerate(others):
            await commit(cluster, other, i)
        await wait_for(lambda: all(digest_checks(cluster, i)[0] >= 6 for i in range(3)), 20, "no digest checks")
        for i in range(3):  # no false alarm: apply is deterministic
            assert digest_checks(cluster, i)[1] == [0.0] * PARTITIONS
        diverge(cluster, 1, partition)
        cluster.wait_serving()
        await wait_for(lambda: digest_checks(cluster, 1)[1][partition] == 1, 20, "the diverged replica raised no alarm")
        [alarm] = events(cluster, 1, "partition.digest_mismatch")
        assert (alarm["partition"], alarm["node_id"]) == (partition, 1)  # its state differs from node 1's
        assert digest_checks(cluster, 0)[1] == digest_checks(cluster, 2)[1] == [0.0] * PARTITIONS
        no_tracebacks(tmp_path)
    finally:
        cluster.stop_all()


def out_of_service(cluster: Cluster, i: int) -> list[float]:
    scrape = Scrape(metrics_address(cluster.nodes[i]))
    return [scrape.value("groupcoord_replica_out_of_service", partition=str(p)) for p in range(PARTITIONS)]


async def test_the_odd_replica_is_found_by_the_majority_and_taken_out_of_service(tmp_path: Path):
    cluster = Cluster(tmp_path, "--metrics-port=0", "--raft-digest-interval-ms=300")
    try:
        partition = 1  # node 2's preferred partition: node 2 leads it, and its copy will diverge
        [group, *others] = groups_on(partition, 3, "odd")
        await commit(cluster, group, BASE)
        await wait_for(lambda: all(digest_checks(cluster, i)[0] >= 4 for i in range(3)), 20, "no digest checks")
        diverge(cluster, 1, partition)  # it may lead partition 1 again for a moment, its state now wrong

        def verdict() -> bool:
            try:
                return out_of_service(cluster, 1)[partition] == 1
            except (OSError, IndexError):  # not listening yet
                return False

        await wait_for(verdict, 20, "the majority never found node 2's replica odd")

        def logged() -> bool:  # each node logs the verdict as it applies the reports, maybe after node 2's metric
            return all(events(cluster, i, "partition.odd_replicas") for i in range(3))

        await wait_for(logged, 20, "a node never logged partition.odd_replicas")
        for i in range(3):
            [said] = events(cluster, i, "partition.odd_replicas")
            assert (said["partition"], said["odd_nodes"], said["agreed_by"]) == (partition, [2], [1, 3]), said
        assert out_of_service(cluster, 0) == out_of_service(cluster, 2) == [0.0] * PARTITIONS
        assert out_of_service(cluster, 1) == [1.0 if p == partition else 0.0 for p in range(PARTITIONS)]
        # It handed the partition over and is no one's preferred leader: the others keep it for good.
        deadline = time.monotonic() + 20
        while (
            leader := (await _rpc(cluster.address(0), "DescribeCluster", pb.DescribeClusterRequest()))
            .partitions[partition]
            .leader_node_id
        ) not in (1, 3):
            assert time.monotonic() < deadline, f"partition {partition} still led by {leader}"
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)  # a balancer round or more: it may move between nodes 1 and 3, never to node 2
        described = await _rpc(cluster.address(1), "DescribeCluster", pb.DescribeClusterRequest())
        assert described.partitions[partition].leader_node_id in (1, 3)
        assert out_of_service(cluster, 1)[partition] == 1
        # Its groups are served with the majority's state, and take commits.
        assert await fetch_all(cluster, [group]) == {group: BASE}
        for other in others:
            await commit(cluster, other, 7)
        assert await fetch_all(cluster, others) == {other: 7 for other in others}
        no_tracebacks(tmp_path)
    finally:
        cluster.stop_all()


# -- a full disk -------------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """Node 3's data directory on a 16 MiB tmpfs of its own."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "data3"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\xff" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


async def test_a_full_disk_stops_the_replica_cleanly_and_it_recovers_by_itself(small_disk: Path, tmp_path: Path):
    cluster = Cluster(tmp_path, "--metrics-port=0")
    try:
        await _full_disk(cluster, small_disk, tmp_path)
    finally:
        cluster.stop_all()


async def _full_disk(cluster: Cluster, disk: Path, tmp_path: Path) -> None:
    partition = 2  # led by node 3 (index 2), whose disk fills up
    [group] = groups_on(partition, 1, "full")
    node3 = metrics_address(cluster.nodes[2])
    filler = fill(disk)
    metadata = "m" * 3000
    acknowledged = 0
    label = str(partition)
    # Past the journal's preallocated megabyte: node 3 cannot write, the others carry on.
    for offset in range(1, 2000):
        await commit(cluster, group, offset, metadata)
        acknowledged = offset
        if offset % 50 == 0 and Scrape(node3).value("groupcoord_journal_write_failing", partition=label) == 1:
            break
    scrape = Scrape(node3)
    assert scrape.value("groupcoord_journal_write_failing", partition=label) == 1, "the disk never filled up"
    assert scrape.value("groupcoord_journal_write_errors_total", error="ENOSPC") >= 1
    [failed] = events(cluster, 2, "journal.write_failed")
    assert (failed["file"], failed["error"]) == (str(disk / f"partition-{partition}.wal"), "ENOSPC")
    for offset in range(acknowledged + 1, acknowledged + 21):  # served by another node meanwhile
        await commit(cluster, group, offset, metadata)
        acknowledged = offset
    assert cluster.nodes[2] is not None and cluster.nodes[2].alive()  # no SIGBUS
    assert (await fetch_all(cluster, [group]))[group] == acknowledged

    filler.unlink()

    def recovered() -> bool:
        return Scrape(node3).value("groupcoord_journal_write_failing", partition=label) == 0

    await wait_for(recovered, 10, "node 3 did not recover after space returned")
    assert events(cluster, 2, "journal.write_recovered")
    await commit(cluster, group, acknowledged + 1, metadata)
    acknowledged += 1
    # Node 3 leads its partition again (leadership goes back to its preferred node) and serves the latest value.
    deadline = time.monotonic() + 30
    while await _coordinator(cluster, group, 0) != cluster.address(2):
        assert time.monotonic() < deadline, "node 3 did not lead its partition again"
        await asyncio.sleep(0.2)
    assert await fetch(cluster.address(2), group) == acknowledged
    no_tracebacks(tmp_path)


def test_a_node_that_starts_on_a_full_disk_says_so_in_one_line(small_disk: Path):
    fill(small_disk)
    assert start_on(small_disk) == f"cannot write {small_disk}/cluster.json: No space left on device"
    # A data directory made before the disk filled: the journals are what cannot be written.
    (small_disk / "filler").unlink()
    meta = '{"version": 1, "partitions": 1, "node_ids": [1], "incarnation": "5e1f"}'
    (small_disk / "cluster.json").write_text(meta)
    fill(small_disk)
    assert start_on(small_disk) == f"cannot write the journal {small_disk}/partition-0.wal: No space left on device"


def start_on(data_dir: Path) -> str:
    """Starts a one-node cluster on `data_dir`, which must fail at once; its one line of complaint."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "groupcoord", "node", "--host=127.0.0.3", "--port=0", "--partitions=1"),
            f"--data-dir={data_dir}",
            "--kafka-port=-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    assert lines[-1].startswith("groupcoord: error: ")
    return lines[-1].removeprefix("groupcoord: error: ")
