"""Kafka's AdminClient (librdkafka through confluent-kafka) administering groupcoord over its Kafka listeners on a
real 3-node cluster: topics created and deleted whichever node leads them, offsets altered and read back, groups
listed, described and deleted."""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import version

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KTopicPartition

from groupcoord.client.admin import Admin
from groupcoord.client.member import GroupMember

TIMEOUT_S = 15


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def test_topics_are_created_and_deleted_through_any_node(cluster) -> None:
    """Ten topics spread over the coordinator partitions, so most are led by another node than the one asked: the
    node hands those on, and every node's registry ends up with them."""
    c, bootstrap = cluster
    names = [f"admin-topic-{i}" for i in range(10)]
    admin = _admin(bootstrap)
    for future in admin.create_topics([NewTopic(n, num_partitions=i + 1) for i, n in enumerate(names)]).values():
        future.result(TIMEOUT_S)
    again = admin.create_topics([NewTopic(names[0], num_partitions=1)])[names[0]]
    try:
        again.result(TIMEOUT_S)
        raise AssertionError("a topic created twice was accepted")
    except KafkaException as exc:
        assert exc.args[0].name() == "TOPIC_ALREADY_EXISTS", exc

    async def registries() -> list[dict[str, int]]:
        out = []
        for i in range(3):
            async with Admin([c.address(i)]) as node_admin:
                out.append({t.name: t.num_partitions for t in await node_admin.list_topics(names)})
        return out

    expected = {n: i + 1 for i, n in enumerate(names)}
    assert _eventually(lambda: asyncio.run(registries()) == [expected] * 3)
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert {n: len(metadata.topics[n].partitions) for n in names} == expected

    for future in admin.delete_topics(names, operation_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    assert _eventually(lambda: asyncio.run(registries()) == [{}] * 3)


def test_offsets_are_altered_read_back_deleted_and_the_group_listed_described_and_deleted(cluster) -> None:
    _, bootstrap = cluster
    group = "admin-offsets"
    admin = _admin(bootstrap)
    wanted = [TopicPartition("orders", p, 1000 + p) for p in range(4)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group].result(TIMEOUT_S)
    assert sorted((tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions) == [
        (p, 1000 + p, None) for p in range(4)
    ]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in listed.topic_partitions) == [
        ("orders", p, 1000 + p) for p in range(4)
    ]
    # confluent-kafka has no OffsetDelete; kafka-python's admin client has.
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        deleted = python_admin.delete_group_offsets(group, [KTopicPartition("orders", p) for p in (0, 1)])
    finally:
        python_admin.close()
    assert sorted((tp.partition, error.errno) for tp, error in deleted.items()) == [(0, 0), (1, 0)]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions if tp.offset >= 0) == [
        (2, 1002),
        (3, 1003),
    ]
    groups = admin.list_consumer_groups().result(TIMEOUT_S)
    assert group in {g.group_id for g in groups.valid}
    described = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    assert (described.group_id, described.state.name, described.members) == (group, "EMPTY", [])
    admin.delete_consumer_groups([group])[group].result(TIMEOUT_S)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid}


def _eventually(check: object, timeout_s: float = TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return bool(check())  # type: ignore[operator]


def test_describe_groups_shows_the_client_software_each_member_named(cluster) -> None:
    """librdkafka names its software in ApiVersions v3; the SDK in its JoinGroup. The member record keeps it."""
    c, bootstrap = cluster
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "software-kafka", "session.timeout.ms": 6000})

    async def sdk_and_describe() -> dict[str, tuple[str, str]]:
        member = GroupMember([c.address(1)], "software-sdk", {"orders": 12}, session_timeout_ms=6000)
        await member.start()
        try:
            await member.wait_stable(20)
            async with Admin([c.address(0)]) as admin:
                described = await admin.describe_groups(["software-kafka", "software-sdk"])
        finally:
            await member.close()
        return {
            d.group_id: (d.members[0].client_software_name, d.members[0].client_software_version) for d in described
        }

    try:
        consumer.subscribe(["orders"])
        assert _eventually(lambda: consumer.poll(0.1) is None and bool(consumer.assignment()), 30)
        software = asyncio.run(sdk_and_describe())
    finally:
        consumer.close()
    assert software["software-sdk"] == ("groupcoord-python", version("groupcoord"))
    name, kafka_version = software["software-kafka"]
    assert (name, kafka_version.endswith(f"-rdkafka-{libversion()[0]}")) == ("confluent-kafka-python", True)
