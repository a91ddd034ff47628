"""librdkafka consumers through the Kafka listeners of a 3-node cluster of their own, while the node coordinating
their group is killed with SIGKILL: the group's state is replicated, so the members carry on at the new
coordinator (found with FindCoordinator) without a rebalance and no acknowledged commit is lost; killed in the
middle of a rebalance, the rebalance completes there. Also librdkafka's cooperative-sticky assignor scaling out
from 2 to 3 members: the partitions that do not move stay owned throughout (KIP-429)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from groupcoord.client.admin import Admin, GroupDescription
from tests.cluster.test_three_nodes import Cluster
from tests.kafka.conftest import TOPIC, TOPIC_PARTITIONS, common_port, create_topic

# Longer than the failover takes, so that a member that had to wait for the new coordinator still has a session.
SESSION_MS = 10_000


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    hosts = [f"127.0.0.{i + 1}" for i in range(3)]
    port = common_port(hosts)
    c = Cluster(Path(tmp_path_factory.mktemp("kafka-failover")), f"--kafka-port={port}")
    try:
        create_topic(c)
        yield c, ",".join(f"{h}:{port}" for h in hosts)
    finally:
        c.stop_all()


class Member:
    """A consumer and what its rebalance callbacks saw: every assign and revoke, in order."""

    def __init__(self, bootstrap: str, group: str, **extra: str) -> None:
        self.events: list[tuple[str, list[int]]] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
                "socket.connection.setup.timeout.ms": 1000,
                "reconnect.backoff.max.ms": 200,
                **extra,
            }
        )
        self.consumer.subscribe(
            [TOPIC],
            on_assign=lambda _, tps: self.events.append(("assign", sorted(tp.partition for tp in tps))),
            on_revoke=lambda _, tps: self.events.append(("revoke", sorted(tp.partition for tp in tps))),
        )

    def owned(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())


def _poll(members: list[Member], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for member in members:
            member.consumer.poll(0.02)


def _poll_until(members: list[Member], done: object, timeout_s: float = 40.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, [(m.owned(), m.events) for m in members]
        _poll(members, 0.05)


def _describe(c: Cluster, group: str) -> GroupDescription:
    async def describe() -> GroupDescription:
        alive = [i for i, node in enumerate(c.nodes) if node is not None]
        async with Admin([c.address(i) for i in alive]) as admin:
            return (await admin.describe_groups([group]))[0]

    return asyncio.run(describe())


def _commit(member: Member, offsets: dict[int, int]) -> bool:
    """One synchronous commit of `offsets` for the member's partitions; True when acknowledged."""
    try:
        answered = member.consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False
        )
    except KafkaException:
        return False
    return answered is not None and all(tp.error is None for tp in answered)


def _restart(c: Cluster, i: int) -> None:
    c.start(i)
    c.wait_serving(60)


def test_killing_the_coordinator_of_a_stable_group_moves_it_without_a_rebalance_or_a_lost_commit(own_cluster) -> None:
    c, bootstrap = own_cluster
    group = "failover-stable"
    members = [Member(bootstrap, group) for _ in range(3)]
    killed = -1
    try:
        _poll_until(members, lambda: sorted(len(m.owned()) for m in members) == [4, 4, 4])
        before = _describe(c, group)
        assert before.state == "Stable"
        events_before = [list(m.events) for m in members]
        acked: dict[int, int] = {}
        offset = 0

        def commit_round() -> int:
            nonlocal offset
            offset += 1
            ok = 0
            for member in members:
                offsets = dict.fromkeys(member.owned(), offset)
                if _commit(member, offsets):
                    acked.update(offsets)
                    ok += 1
            _poll(members, 0.05)
            return ok

        for _ in range(5):
            assert commit_round() == 3
        killed = before.coordinator_node_id - 1
        c.kill(killed)
        killed_at = time.monotonic()
        # Commits go on at the new coordinator: every member has one acknowledged after the kill.
        deadline = killed_at + 30
        while commit_round() < 3:
            assert time.monotonic() < deadline, "commits did not resume at the new coordinator"
        resumed_s = time.monotonic() - killed_at
        for _ in range(5):
            assert commit_round() == 3
        after = _describe(c, group)
        assert (after.state, after.generation_id) == ("Stable", before.generation_id), (resumed_s, after)
        assert after.coordinator_node_id != before.coordinator_node_id
        assert [m.events for m in members] == events_before, "a member was revoked or assigned: a rebalance"
        committed = members[0].consumer.committed([TopicPartition(TOPIC, p) for p in acked], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == acked  # the last acknowledged of each, none lost
    finally:
        for member in members:
            member.consumer.close()
        if killed >= 0:
            _restart(c, killed)


def test_killing_the_coordinator_in_the_middle_of_a_rebalance_still_ends_in_a_stable_group(own_cluster) -> None:
    c, bootstrap = own_cluster
    group = "failover-rebalance"
    members = [Member(bootstrap, group) for _ in range(2)]
    killed = -1
    try:
        _poll_until(members, lambda: sorted(len(m.owned()) for m in members) == [6, 6])
        before = _describe(c, group)
        members.append(Member(bootstrap, group))
        # Only the newcomer is polled: the old members rejoin only once their revoke callback has been served by a
        # poll, so the group waits in PreparingRebalance, with the newcomer's JoinGroup parked, for the kill.
        _poll_until(members[2:], lambda: _describe(c, group).state == "PreparingRebalance")
        killed = before.coordinator_node_id - 1
        c.kill(killed)
        _poll_until(members, lambda: sorted(len(m.owned()) for m in members) == [4, 4, 4], timeout_s=60)
        owned = sorted(p for m in members for p in m.owned())
        assert owned == list(range(TOPIC_PARTITIONS))
        after = _describe(c, group)
        assert after.state == "Stable" and len(after.members) == 3, after
        assert after.generation_id > before.generation_id
        assert after.coordinator_node_id != before.coordinator_node_id
    finally:
        for member in members:
            member.consumer.close()
        if killed >= 0:
            _restart(c, killed)


def test_cooperative_sticky_scale_out_from_two_to_three_keeps_unmoved_partitions_owned(own_cluster) -> None:
    """KIP-429 over the classic protocol: the new member gets partitions only after their owners revoked them in a
    first rebalance; a partition that stays with its owner is never revoked."""
    c, bootstrap = own_cluster
    group = "cooperative"
    cooperative = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [Member(bootstrap, group, **cooperative) for _ in range(2)]
    try:
        _poll_until(members, lambda: sorted(len(m.owned()) for m in members) == [6, 6])
        first = {p: i for i, m in enumerate(members) for p in m.owned()}
        marks = [len(m.events) for m in members]
        members.append(Member(bootstrap, group, **cooperative))
        _poll_until(members, lambda: sorted(len(m.owned()) for m in members) == [4, 4, 4])
        final = {p: i for i, m in enumerate(members) for p in m.owned()}
        assert sorted(final) == list(range(TOPIC_PARTITIONS))
        stayed = {p for p, i in first.items() if final[p] == i}
        moved = set(first) - stayed
        assert len(moved) == 4, (first, final)  # 2 from each old member to the new one
        for i in (0, 1):
            later = members[i].events[marks[i] :]
            revoked = {p for kind, ps in later if kind == "revoke" for p in ps}
            assigned = {p for kind, ps in later if kind == "assign" for p in ps}
            # Incremental: only the moved partitions are revoked, nothing is taken back and given again.
            assert revoked == {p for p in moved if first[p] == i}, later
            assert not assigned & stayed, later
        assert {p for kind, ps in members[2].events if kind == "assign" for p in ps} == moved
        assert _describe(c, group).state == "Stable"
    finally:
        for member in members:
            member.consumer.close()
