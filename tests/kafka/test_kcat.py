"""The real kcat (Debian's 1.7.1, librdkafka 2.0.2 built in) against a real 3-node cluster's Kafka listeners: its
metadata listing names every node and the topic, and three `kcat -G` balanced consumers share a topic and leave.

kcat cannot commit here: in -G mode it commits (librdkafka's auto-commit) only offsets it stored for messages it
printed, and groupcoord stores no records (Fetch is always empty), so a kcat consumer never has an offset to commit.
The test commits the offsets beforehand through the Admin instead, and checks that kcat resumes each partition at
its committed offset (librdkafka's OffsetFetch, seen in its cgrp debug log) and leaves them as they were.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from groupcoord.client.admin import Admin
from tests.cluster.test_three_nodes import Cluster
from tests.kafka.conftest import TOPIC, TOPIC_PARTITIONS

TIMEOUT_S = 30
# librdkafka's debug lines ("%7|<time>|<facility>|...") are written whole, but kcat prints a rebalance notice in
# several writes, so a debug line from another thread can land inside one: cutting them out mends the notice.
DEBUG_LINE = re.compile(r"%7\|[^\n]*\n?")
LOUD = re.compile(r"^%[0-4]\|")
NOTICE = re.compile(r"^% Group (?P<group>\S+) rebalanced \(memberid [^)]*\): (?P<kind>assigned|revoked): (?P<tps>.*)$")
PARTITION = re.compile(rf"{re.escape(TOPIC)} \[(\d+)\]")
# librdkafka 2.0.2 (src/rdkafka_assignment.c), once OffsetFetch answered with a committed offset.
RESUMED = re.compile(rf"Starting pending assigned partition {re.escape(TOPIC)} \[(\d+)\] at offset (\d+)")


def _kcat() -> str:
    """Fails, not skips, without kcat: scripts/system-deps (run by `make test`) installs it."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: apt-get install kcat (scripts/system-deps does, as root)", pytrace=False)
    return kcat


def test_kcat_lists_every_node_and_the_topic(cluster: tuple[Cluster, str]) -> None:
    c, bootstrap = cluster
    port = int(bootstrap.rsplit(":", 1)[1])
    kcat = _kcat()
    listing = subprocess.run(
        [kcat, "-L", "-J", "-b", bootstrap, "-m", "10"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True
    )
    metadata = json.loads(listing.stdout)
    nodes = [(i + 1, f"{c.hosts[i]}:{port}") for i in range(c.size)]
    assert sorted((b["id"], b["name"]) for b in metadata["brokers"]) == nodes
    assert metadata["controllerid"] in {1, 2, 3}
    topics = {t["topic"]: t for t in metadata["topics"]}
    orders = topics[TOPIC]
    assert "error" not in orders, orders
    assert sorted(p["partition"] for p in orders["partitions"]) == list(range(TOPIC_PARTITIONS))
    assert all(p["leader"] in {1, 2, 3} and "error" not in p for p in orders["partitions"]), orders

    # The human-readable listing of one topic says the same.
    text = subprocess.run(
        [kcat, "-L", "-b", bootstrap, "-t", TOPIC, "-m", "10"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    ).stdout
    assert " 3 brokers:\n" in text, text
    for node_id, address in nodes:
        assert re.search(rf"^  broker {node_id} at {re.escape(address)}( \(controller\))?$", text, re.M), text
    assert f' topic "{TOPIC}" with {TOPIC_PARTITIONS} partitions:\n' in text, text


class KcatConsumer:
    """One `kcat -G` process; its stderr (notices and librdkafka's cgrp debug log) goes to a file read as it grows."""

    def __init__(self, kcat: str, bootstrap: str, group: str, log: Path) -> None:
        self.log, self.out = log, log.with_suffix(".out")
        with self.log.open("wb") as stderr, self.out.open("wb") as stdout:
            self.proc = subprocess.Popen(
                [
                    kcat, "-b", bootstrap, "-G", group, "-d", "cgrp",
                    "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", TOPIC,
                ],
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            )  # fmt: skip

    def _text(self) -> tuple[str, str]:
        """(kcat's own lines, librdkafka's debug lines)."""
        raw = self.log.read_text(errors="replace")
        return DEBUG_LINE.sub("", raw), "".join(DEBUG_LINE.findall(raw))

    def notices(self) -> list[str]:
        return [line for line in self._text()[0].splitlines() if line.strip()]

    def assignment(self) -> list[int]:
        """The partitions its last rebalance notice assigned (none after a revoke)."""
        owned: list[int] = []
        for line in self.notices():
            if match := NOTICE.match(line):
                owned = [int(p) for p in PARTITION.findall(match["tps"])] if match["kind"] == "assigned" else []
        return sorted(owned)

    def resumed(self) -> dict[int, set[int]]:
        """Partition -> the offsets librdkafka started it at, from the committed offsets OffsetFetch returned."""
        out: dict[int, set[int]] = {}
        for partition, offset in RESUMED.findall(self._text()[1]):
            out.setdefault(int(partition), set()).add(int(offset))
        return out

    def stop(self, timeout_s: float = 15) -> int:
        """SIGTERM, as Ctrl-C would: kcat closes its consumer (LeaveGroup) and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _group(c: Cluster, group: str) -> tuple[str, int, dict[tuple[str, int], int]]:
    """(state, member count, committed offsets) as groupcoord holds them, over gRPC."""

    async def describe() -> tuple[str, int, dict[tuple[str, int], int]]:
        async with Admin([c.address(0)]) as admin:
            (description,) = await admin.describe_groups([group])
            offsets = await admin.list_offsets(group)
        return description.state, len(description.members), {tp: offset for tp, (offset, _) in offsets.items()}

    return asyncio.run(describe())


def test_three_kcat_group_consumers_share_twelve_partitions_resume_at_committed_offsets_and_leave(
    cluster: tuple[Cluster, str], tmp_path: Path
) -> None:
    c, bootstrap = cluster
    kcat = _kcat()
    group = "kcat-three"
    committed = {(TOPIC, p): 100 + p for p in range(TOPIC_PARTITIONS)}

    async def commit() -> dict[tuple[str, int], int]:
        async with Admin([c.address(0)]) as admin:
            return await admin.alter_offsets(group, committed)

    assert set(asyncio.run(commit()).values()) == {0}

    consumers: list[KcatConsumer] = []
    try:
        for i in range(3):
            consumers.append(KcatConsumer(kcat, bootstrap, group, tmp_path / f"kcat{i}.log"))

        def shared() -> bool:
            owned = [k.assignment() for k in consumers]
            resumed = [k.resumed() for k in consumers]
            return sorted(p for parts in owned for p in parts) == list(range(TOPIC_PARTITIONS)) and all(
                p in r for parts, r in zip(owned, resumed, strict=True) for p in parts
            )

        deadline = time.monotonic() + 20
        while not shared():
            assert all(k.proc.poll() is None for k in consumers), [k.notices() for k in consumers]
            assert time.monotonic() < deadline, [k.notices() for k in consumers]
            time.sleep(0.1)
        assert sorted(len(k.assignment()) for k in consumers) == [4, 4, 4], [k.notices() for k in consumers]
        for k in consumers:
            assert {p: offsets for p, offsets in k.resumed().items() if p in k.assignment()} == {
                p: {100 + p} for p in k.assignment()
            }, k.notices()
        state, members, _ = _group(c, group)
        assert (state, members) == ("Stable", 3)
    finally:
        codes = []
        for k in consumers:
            try:
                codes.append(k.stop())
            except subprocess.TimeoutExpired:
                k.kill()
                codes.append(None)
    assert codes == [0, 0, 0], [k.notices() for k in consumers]
    for k in consumers:
        assert k.out.read_bytes() == b"", "groupcoord has no records to print"
        # Neither kcat's own errors nor librdkafka's log lines from error up to warning (levels 0-4).
        assert not [line for line in k.notices() if "ERROR" in line or LOUD.match(line)], k.notices()
    # Every kcat sent LeaveGroup as it closed; it committed nothing, so the offsets are as they were.
    assert _group(c, group) == ("Empty", 0, committed)
