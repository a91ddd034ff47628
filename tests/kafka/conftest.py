"""A module-scoped 3-node cluster with its Kafka listeners on one common port, and a 12-partition topic."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.client.admin import Admin
from groupcoord.node.launcher import free_base
from tests.cluster.test_three_nodes import Cluster

TOPIC = "orders"
TOPIC_PARTITIONS = 12


def common_port(hosts: list[str]) -> int:
    """One port free on every host: every node's Kafka listener uses the same port (node/kafka/apis.py)."""
    taken: set[int] = set()
    while True:
        port = free_base(hosts[0], 1, taken)
        try:
            for host in hosts[1:]:
                with socket.socket() as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        return port


def create_topic(c: Cluster) -> None:
    """TOPIC, created through node 1 and then listed by every node: a follower learns of a commit with the leader's
    next AppendEntries (up to a heartbeat later), and a Kafka client's Metadata is answered from the node it asks (a
    consumer group's leader that saw no partitions assigned none, and did not rebalance when they showed up)."""

    async def create() -> list[int]:
        async with Admin([c.address(0)]) as admin:
            return [r.error_code for r in await admin.create_topics([(TOPIC, TOPIC_PARTITIONS)])]

    async def listed_everywhere() -> None:
        deadline = time.monotonic() + 10
        for node in range(3):
            async with Admin([c.address(node)]) as admin:
                while [t.name for t in await admin.list_topics([TOPIC])] != [TOPIC]:
                    assert time.monotonic() < deadline, f"node {node + 1} does not list {TOPIC}"
                    await asyncio.sleep(0.01)

    assert asyncio.run(create()) == [0]
    asyncio.run(listed_everywhere())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    port = common_port([f"127.0.0.{i + 1}" for i in range(3)])
    c = Cluster(Path(tmp_path_factory.mktemp("kafka")), f"--kafka-port={port}")
    try:
        create_topic(c)
        yield c, f"127.0.0.1:{port}"
    finally:
        c.stop_all()
