"""Unmodified Kafka clients against a real 3-node cluster's Kafka listeners (docs/KAFKA.md): librdkafka through
confluent-kafka, and kafka-python. Each client speaks its own protocol versions and checks our answers with its
own expectations."""

from __future__ import annotations

import asyncio
import threading
import time

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from groupcoord.client.admin import Admin
from tests.cluster.test_three_nodes import Cluster
from tests.kafka.conftest import TOPIC, TOPIC_PARTITIONS


def _consumer(bootstrap: str, group: str, **extra: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
            **extra,
        }
    )


def _poll_until(consumers: list[Consumer], done: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, [c.assignment() for c in consumers]
        for consumer in consumers:
            message = consumer.poll(0.05)
            assert message is None or message.error() is None or message.error().code() < 0, message.error()


def test_three_librdkafka_consumers_share_twelve_partitions_commit_and_leave_an_empty_group(cluster) -> None:
    _, bootstrap = cluster
    group = "lrk-three"
    consumers = [_consumer(bootstrap, group) for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe([TOPIC])
        _poll_until(consumers, lambda: sorted(len(c.assignment()) for c in consumers) == [4, 4, 4])
        owned = sorted(tp.partition for c in consumers for tp in c.assignment())
        assert owned == list(range(TOPIC_PARTITIONS))
        for consumer in consumers:
            offsets = [TopicPartition(TOPIC, tp.partition, 100 + tp.partition) for tp in consumer.assignment()]
            committed = consumer.commit(offsets=offsets, asynchronous=False)
            assert all(tp.error is None for tp in committed), committed
        # What one member committed, another reads back through OffsetFetch.
        readback = consumers[0].committed([TopicPartition(TOPIC, p) for p in range(TOPIC_PARTITIONS)], timeout=10)
        assert [tp.offset for tp in readback] == [100 + p for p in range(TOPIC_PARTITIONS)]
    finally:
        for consumer in consumers:
            consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    assert described.state == ConsumerGroupState.EMPTY
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [
        (p, 100 + p) for p in range(TOPIC_PARTITIONS)
    ]
    groups = admin.list_consumer_groups().result(timeout=10)
    assert group in {g.group_id for g in groups.valid}


def test_kafka_python_consumer_joins_commits_and_reads_back(cluster) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    _, bootstrap = cluster
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id="kp-one",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        consumer_timeout_ms=200,
    )
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < TOPIC_PARTITIONS:
            assert time.monotonic() < deadline, consumer.assignment()
            consumer.poll(timeout_ms=100)
        consumer.commit({KTopicPartition(TOPIC, 3): OffsetAndMetadata(42, "", -1)})
        assert consumer.committed(KTopicPartition(TOPIC, 3)) == 42
    finally:
        consumer.close()


def _generation(cluster: Cluster, group: str) -> tuple[str, int, list[str]]:
    async def describe() -> tuple[str, int, list[str]]:
        async with Admin([cluster.address(0)]) as admin:
            (group_description,) = await admin.describe_groups([group])
        members = sorted(m.group_instance_id for m in group_description.members)
        return group_description.state, group_description.generation_id, members

    return asyncio.run(describe())


def test_a_static_librdkafka_member_restarted_within_its_session_keeps_its_partitions_and_the_generation(
    cluster,
) -> None:
    c, bootstrap = cluster
    group = "lrk-static"
    first = [_consumer(bootstrap, group, **{"group.instance.id": name, "session.timeout.ms": 10000}) for name in "ab"]
    for consumer in first:
        consumer.subscribe([TOPIC])
    _poll_until(first, lambda: sorted(len(consumer.assignment()) for consumer in first) == [6, 6])
    owned = sorted(tp.partition for tp in first[1].assignment())
    state, generation, members = _generation(c, group)
    assert (state, members) == ("Stable", ["a", "b"])
    first[1].close()  # a static member sends no LeaveGroup: the coordinator keeps its place for the session
    again = _consumer(bootstrap, group, **{"group.instance.id": "b", "session.timeout.ms": 10000})
    try:
        again.subscribe([TOPIC])
        _poll_until([first[0], again], lambda: len(again.assignment()) == 6)
        assert sorted(tp.partition for tp in again.assignment()) == owned
        assert _generation(c, group) == ("Stable", generation, ["a", "b"])
    finally:
        again.close()
        first[0].close()


def test_a_mixed_group_of_librdkafka_kafka_python_and_aiokafka_forms_and_rebalances(cluster) -> None:
    """Each client polls in a thread of its own: a client that rejoins only while it is polled must not wait on
    another that is blocked in a rebalance."""
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    c, bootstrap = cluster
    group = "mixed"
    settings = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "enable_auto_commit": False}
    owned: dict[str, frozenset[int]] = {}
    failures: list[BaseException] = []
    python_done, all_done = threading.Event(), threading.Event()

    def python() -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **settings)
        try:
            # kafka-python leads with whatever metadata it has: one that joins before its first metadata answer
            # assigns nothing ("No partition metadata for topic") and waits for a later refresh (twice in CI the
            # group stayed so for 90 s). It learns the topic first, then subscribes; the join is the test's subject.
            deadline = time.monotonic() + 30
            while not consumer.partitions_for_topic(TOPIC):
                assert time.monotonic() < deadline, "kafka-python never saw the topic in Metadata"
                time.sleep(0.1)
            consumer.subscribe([TOPIC])
            while not python_done.is_set():
                consumer.poll(timeout_ms=50)
                owned["kafka-python"] = frozenset(tp.partition for tp in consumer.assignment())
        except BaseException as exc:
            failures.append(exc)
        finally:
            consumer.close()  # leaves: the other two take its partitions
            owned.pop("kafka-python", None)

    async def aio() -> None:
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, **settings)
        await consumer.start()
        try:
            while not all_done.is_set():
                await consumer.getmany(timeout_ms=50)
                owned["aiokafka"] = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            await consumer.stop()

    def aio_thread() -> None:
        try:
            asyncio.run(aio())
        except BaseException as exc:
            failures.append(exc)

    librdkafka = _consumer(bootstrap, group)
    librdkafka.subscribe([TOPIC])
    threads = [threading.Thread(target=python), threading.Thread(target=aio_thread)]
    for thread in threads:
        thread.start()

    def until(names: set[str], size: int) -> None:
        # The group settles in 1-1.5 s here (the module alone); 45 s once ran out while a chaos run loaded both
        # cores (kafka-python, the group leader, had no metadata for the topic yet). A liveness bound, not a speed
        # check.
        deadline = time.monotonic() + 90
        while set(owned) != names or any(len(p) != size for p in owned.values()):
            assert time.monotonic() < deadline and not failures, (owned, failures)
            librdkafka.poll(0.05)
            owned["librdkafka"] = frozenset(tp.partition for tp in librdkafka.assignment())

    try:
        until({"librdkafka", "kafka-python", "aiokafka"}, 4)
        assert sorted(p for parts in owned.values() for p in parts) == list(range(TOPIC_PARTITIONS))
        python_done.set()
        threads[0].join(30)
        until({"librdkafka", "aiokafka"}, 6)
    finally:
        python_done.set()
        all_done.set()
        for thread in threads:
            thread.join(30)
        librdkafka.close()
    assert not failures, failures
    state, _, members = _generation(c, group)
    assert (state, members) == ("Empty", [])


def test_metadata_names_every_node_and_a_subscription_creates_its_topic(cluster) -> None:
    c, bootstrap = cluster
    port = int(bootstrap.rsplit(":", 1)[1])
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    brokers = sorted((b.id, b.host, b.port) for b in metadata.brokers.values())
    assert brokers == [(i + 1, c.hosts[i], port) for i in range(3)]
    assert metadata.topics[TOPIC].error is None and len(metadata.topics[TOPIC].partitions) == TOPIC_PARTITIONS
    assert "made-by-subscribing" not in metadata.topics
    from kafka import KafkaConsumer

    # kafka-python asks for auto-creation in its Metadata requests (librdkafka's consumer does not).
    consumer = KafkaConsumer("made-by-subscribing", bootstrap_servers=bootstrap, group_id="auto")
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) != 1:  # Kafka's default: one partition
            assert time.monotonic() < deadline, consumer.assignment()
            consumer.poll(timeout_ms=100)
    finally:
        consumer.close()
    again = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert len(again.topics["made-by-subscribing"].partitions) == 1
