"""kafkajs 2.2.4 (tests/kafka/js, installed by `make js` from its lock file) on Node.js against a real 3-node
cluster's Kafka listeners: a client with its own protocol code, neither librdkafka nor Java's, forms a group,
commits, leaves, and its admin reads the group back. `KAFKAJS_LOG_LEVEL=DEBUG` logs every request and response
(shown when the script fails)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from groupcoord.client.admin import Admin
from tests.cluster.test_three_nodes import Cluster
from tests.kafka.conftest import TOPIC, TOPIC_PARTITIONS

JS = Path(__file__).parent / "js"
SCRIPT_TIMEOUT_S = 40  # the script stops itself after 25 s, with what it saw so far


def _node() -> str:
    """Fails, not skips, without Node.js or kafkajs: `make test` installs both, so missing means broken setup."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is not installed: scripts/system-deps installs it (as root)", pytrace=False)
    if not (JS / "node_modules" / "kafkajs" / "package.json").is_file():
        pytest.fail("kafkajs is not installed: `make js` (npm ci in tests/kafka/js)", pytrace=False)
    return node


def _run(script: str, *args: str) -> list[dict[str, Any]]:
    """Runs a script in tests/kafka/js and returns the JSON records it printed, one a line."""
    done = subprocess.run(
        [_node(), str(JS / script), *args],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{done.stdout}\n{done.stderr[-6000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_three_kafkajs_consumers_share_twelve_partitions_commit_and_leave_an_empty_group(
    cluster: tuple[Cluster, str],
) -> None:
    c, bootstrap = cluster
    group = "kafkajs-three"
    records = _run("three-consumers.js", bootstrap, TOPIC, group, str(TOPIC_PARTITIONS))
    by_event: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_event.setdefault(record["event"], []).append(record)

    # Each consumer's assignment when the script committed: its last GROUP_JOIN before the first commit (the
    # members that stay rebalance again as the others disconnect).
    first_commit = next(i for i, r in enumerate(records) if r["event"] == "committed")
    owned = {r["consumer"]: r["partitions"] for r in records[:first_commit] if r["event"] == "assigned"}
    assert sorted(len(parts) for parts in owned.values()) == [4, 4, 4], records
    assert sorted(p for parts in owned.values() for p in parts) == list(range(TOPIC_PARTITIONS))
    assert {r["consumer"]: r["partitions"] for r in by_event["committed"]} == owned

    # kafkajs's admin, after every consumer disconnected (LeaveGroup): DescribeGroups, OffsetFetch, ListGroups.
    (described,) = by_event["described"]
    assert described["groups"] == [
        {"groupId": group, "state": "Empty", "members": 0, "protocolType": "consumer", "errorCode": 0}
    ]
    (offsets,) = by_event["offsets"]
    assert [t["topic"] for t in offsets["topics"]] == [TOPIC]
    assert sorted((p["partition"], p["offset"]) for p in offsets["topics"][0]["partitions"]) == [
        (p, 100 + p) for p in range(TOPIC_PARTITIONS)
    ]
    (listed,) = by_event["listed"]
    assert group in listed["groups"]

    # And as groupcoord itself holds it, over gRPC.
    async def held() -> tuple[str, int, dict[tuple[str, int], tuple[int, str]]]:
        async with Admin([c.address(0)]) as admin:
            (description,) = await admin.describe_groups([group])
            return description.state, len(description.members), await admin.list_offsets(group)

    state, members, committed = asyncio.run(held())
    assert (state, members) == ("Empty", 0)
    assert {tp: offset for tp, (offset, _) in committed.items()} == {
        (TOPIC, p): 100 + p for p in range(TOPIC_PARTITIONS)
    }
