"""The topic registry: CreateTopics / DeleteTopics in the core (coordinator/topics.py), its records, its snapshots
(version 2, and version 1 from nodes before it), its settings, and the node's TopicRegistry over several
partitions (node/topics.py)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from groupcoord.coordinator import GroupConfig, GroupCoordinator, GroupStore
from groupcoord.coordinator.state import Topic
from groupcoord.node import config as node_config
from groupcoord.node.config_types import ConfigError
from groupcoord.node.responses import error_response
from groupcoord.node.topics import TopicRegistry
from groupcoord.node.topology import partition_for
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.limits import MAX_TOPICS_PER_REQUEST
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import FakeClock, SeqIds
from tests.unit.harness import Harness, code, records_of

CreateTopic = pb.CreateTopicsRequest.Topic


def _create(h: Harness, *topics: tuple[str, int], validate_only: bool = False) -> Any:
    request = pb.CreateTopicsRequest(topics=[CreateTopic(name=n, num_partitions=p) for n, p in topics],
                                     validate_only=validate_only)  # fmt: skip
    return h.call("create_topics", request)


def _delete(h: Harness, *names: str) -> Any:
    return h.call("delete_topics", pb.DeleteTopicsRequest(names=list(names)))


def _results(effects: Any) -> list[tuple[str, Errors, str, int]]:
    return [(x.name, code(x), x.topic_id, x.num_partitions) for x in effects.response.results]


# -- CreateTopics ---------------------------------------------------------------------------------------


def test_created_topics_get_ids_from_the_injected_source_in_request_order():
    h = Harness()
    eff = _create(h, ("orders", 3), ("audit", 1))
    assert _results(eff) == [("orders", Errors.NONE, "u1", 3), ("audit", Errors.NONE, "u2", 1)]
    assert records_of(eff, r.TopicCreated) == [
        r.TopicCreated("orders", 3, "u1", h.clock.wall_ms()),
        r.TopicCreated("audit", 1, "u2", h.clock.wall_ms()),
    ]
    assert h.core.store.topics == {"orders": Topic("orders", 3, "u1"), "audit": Topic("audit", 1, "u2")}
    h.assert_replay()


def test_an_existing_topic_fails_alone_and_keeps_its_id():
    h = Harness()
    _create(h, ("orders", 3))
    eff = _create(h, ("new", 2), ("orders", 5))
    assert _results(eff) == [("new", Errors.NONE, "u2", 2), ("orders", Errors.TOPIC_ALREADY_EXISTS, "", -1)]
    assert eff.response.results[1].error_message == "Topic 'orders' already exists."
    assert records_of(eff, r.TopicCreated) == [r.TopicCreated("new", 2, "u2", h.clock.wall_ms())]
    assert h.core.store.topics["orders"] == Topic("orders", 3, "u1")


def test_a_name_listed_twice_is_invalid_request_for_each_listing_and_not_created():
    h = Harness()
    eff = _create(h, ("twice", 1), ("once", 1), ("twice", 2))
    assert [(n, c) for n, c, _, _ in _results(eff)] == [
        ("twice", Errors.INVALID_REQUEST), ("once", Errors.NONE), ("twice", Errors.INVALID_REQUEST),
    ]  # fmt: skip
    assert set(h.core.store.topics) == {"once"}


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a/b", "a b", "é", "a\x00", "orders:0"])
def test_an_illegal_name_is_invalid_topic_exception(name: str):
    h = Harness()
    eff = _create(h, (name, 1), ("fine", 1))
    assert _results(eff)[0] == (name, Errors.INVALID_TOPIC_EXCEPTION, "", -1)
    assert eff.response.results[0].error_message
    assert code(eff.response.results[1]) == Errors.NONE
    assert set(h.core.store.topics) == {"fine"}


def test_kafkas_legal_names_are_accepted():
    h = Harness()
    names = ["a" * 249, "...", "_-.", "Orders.v2_x-1", "__consumer_offsets"]
    eff = _create(h, *((n, 1) for n in names))
    assert [c for _, c, _, _ in _results(eff)] == [Errors.NONE] * len(names)


@pytest.mark.parametrize("partitions", [0, -2, -1_000, 10_001])
def test_partitions_below_one_or_above_the_limit_are_invalid_partitions(partitions: int):
    h = Harness()
    eff = _create(h, ("orders", partitions))
    assert _results(eff) == [("orders", Errors.INVALID_PARTITIONS, "", -1)]
    assert eff.response.results[0].error_message and not eff.records


def test_the_limit_is_the_setting():
    h = Harness(max_topic_partitions=4)
    eff = _create(h, ("four", 4), ("five", 5))
    assert [c for _, c, _, _ in _results(eff)] == [Errors.NONE, Errors.INVALID_PARTITIONS]
    assert "max_topic_partitions = 4" in eff.response.results[1].error_message


def test_minus_one_partitions_is_the_default_and_the_record_carries_the_count():
    h = Harness(default_num_partitions=3)
    eff = _create(h, ("orders", -1))
    assert _results(eff) == [("orders", Errors.NONE, "u1", 3)]
    assert records_of(eff, r.TopicCreated)[0].num_partitions == 3
    assert _results(_create(Harness(), ("orders", -1)))[0][3] == 1  # Kafka's num.partitions default


def test_validate_only_answers_as_if_created_and_writes_nothing():
    h = Harness()
    _create(h, ("taken", 1))
    eff = _create(h, ("new", -1), ("taken", 1), ("bad/name", 1), validate_only=True)
    assert _results(eff) == [
        ("new", Errors.NONE, "", 1),
        ("taken", Errors.TOPIC_ALREADY_EXISTS, "", -1),
        ("bad/name", Errors.INVALID_TOPIC_EXCEPTION, "", -1),
    ]
    assert not eff.records and set(h.core.store.topics) == {"taken"}


# -- DeleteTopics ---------------------------------------------------------------------------------------


def test_delete_removes_known_topics_and_names_unknown_ones():
    h = Harness()
    _create(h, ("orders", 3), ("audit", 1))
    eff = _delete(h, "orders", "nope", "orders.x")
    assert [(x.name, code(x)) for x in eff.response.results] == [
        ("orders", Errors.NONE), ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("orders.x", Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]  # fmt: skip
    assert records_of(eff, r.TopicDeleted) == [r.TopicDeleted("orders", h.clock.wall_ms())]
    assert set(h.core.store.topics) == {"audit"}
    h.assert_replay()


def test_delete_of_a_name_listed_twice_is_invalid_request_and_deletes_nothing():
    h = Harness()
    _create(h, ("orders", 3))
    eff = _delete(h, "orders", "orders")
    assert [code(x) for x in eff.response.results] == [Errors.INVALID_REQUEST] * 2
    assert "orders" in h.core.store.topics


def test_a_recreated_topic_gets_a_new_id():
    h = Harness()
    _create(h, ("orders", 3))
    _delete(h, "orders")
    eff = _create(h, ("orders", 6))
    assert _results(eff) == [("orders", Errors.NONE, "u2", 6)]
    h.assert_replay()


# -- records, replay, soft state -------------------------------------------------------------------------


def test_replayed_records_rebuild_the_registry_and_a_second_replay_changes_nothing():
    h = Harness()
    _create(h, ("a", 1), ("b", 2), ("c", 3))
    _delete(h, "b")
    _create(h, ("b", 4), ("d", -1))
    records = r.decode_batch(r.encode_batch(h.records))
    fresh = GroupStore()
    assert all(fresh.apply(rec) for rec in records)
    assert fresh.topics == h.core.store.topics
    assert list(fresh.topics) == list(h.core.store.topics)  # the same order, so the same snapshot and digest
    created = [rec for rec in records if isinstance(rec, r.TopicCreated)]
    assert not any(fresh.apply(rec) for rec in created)  # a topic keeps its first id
    assert fresh.topics == h.core.store.topics


def test_a_topic_named_like_a_group_leaves_the_group_and_its_timers_alone():
    h = Harness()
    h.form("a", group_id="orders")
    before, deadline = h.core.store.snapshot()["groups"], h.core.next_deadline()
    _create(h, ("orders", 2))
    _delete(h, "orders")
    assert h.core.store.snapshot()["groups"] == before and h.core.next_deadline() == deadline
    assert h.describe_one("orders").group_state == "Stable" and not h.core.store.topics
    h.assert_replay()


# -- snapshots -------------------------------------------------------------------------------------------


def _packed(snapshot: dict) -> dict:
    """Through msgpack as a snapshot file holds it (tuples back, as raft/partition.py reads them)."""
    return msgpack.unpackb(msgpack.packb(snapshot, use_bin_type=True), raw=False, use_list=False)


def test_a_snapshot_with_topics_is_version_2_and_restores_them_in_order():
    h = Harness()
    _create(h, ("zeta", 2), ("alpha", 5))
    snapshot = h.core.store.snapshot()
    assert snapshot["version"] == 2 and snapshot["topics"] == [["zeta", 2, "u1"], ["alpha", 5, "u2"]]
    restored = GroupStore.restore(_packed(snapshot))
    assert list(restored.topics.values()) == [Topic("zeta", 2, "u1"), Topic("alpha", 5, "u2")]
    assert _packed(restored.snapshot()) == _packed(snapshot)


def test_a_store_without_topics_is_written_as_version_1_exactly():
    """What nodes before the registry write and read: they restore it, and their digests of it agree."""
    h = Harness()
    h.form("a")
    snapshot = h.core.store.snapshot()
    assert snapshot["version"] == 1 and set(snapshot) == {"version", "groups"}


def test_a_version_1_snapshot_restores_with_no_topics():
    h = Harness()
    h.form("a")
    v1 = {"version": 1, "groups": h.core.store.snapshot()["groups"]}
    restored = GroupStore.restore(_packed(v1))
    assert restored.topics == {} and restored.snapshot() == h.core.store.snapshot()
    core = GroupCoordinator(GroupConfig(), FakeClock(), new_uuid=SeqIds(), store=restored)
    created = core.create_topics(pb.CreateTopicsRequest(topics=[CreateTopic(name="t", num_partitions=1)]))
    assert code(created.response.results[0]) == Errors.NONE and core.store.snapshot()["version"] == 2


def test_an_unknown_snapshot_version_is_refused():
    with pytest.raises(ValueError, match="unsupported snapshot version 3"):
        GroupStore.restore({"version": 3, "groups": [], "topics": []})


# -- settings --------------------------------------------------------------------------------------------


def _load(args: list[str], environ: dict[str, str] | None = None) -> GroupConfig:
    parser = argparse.ArgumentParser()
    node_config.add_arguments(parser)
    return node_config.load(parser.parse_args(args), environ or {}).group


def test_topic_settings_default_to_kafkas_and_reach_the_cores():
    group = _load([])
    assert (group.auto_create_topics, group.default_num_partitions, group.max_topic_partitions) == (True, 1, 10_000)
    group = _load(["--auto-create-topics=false", "--default-num-partitions=3", "--max-topic-partitions=5"])
    assert (group.auto_create_topics, group.default_num_partitions, group.max_topic_partitions) == (False, 3, 5)
    assert _load([], {"GROUPCOORD_AUTO_CREATE_TOPICS": "FALSE"}).auto_create_topics is False
    assert _load(["--auto-create-topics", "True"], {"GROUPCOORD_AUTO_CREATE_TOPICS": "false"}).auto_create_topics


def test_topic_settings_from_a_file_are_toml_booleans(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text("auto_create_topics = false\n")
    assert _load(["--config", str(path)]).auto_create_topics is False
    path.write_text('auto_create_topics = "no"\n')
    with pytest.raises(ConfigError, match="auto_create_topics: expected true or false"):
        _load(["--config", str(path)])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--auto-create-topics=1"], "expected true or false"),
        (["--default-num-partitions=0"], "must be between 1"),
        (["--default-num-partitions=6", "--max-topic-partitions=5"], "default_num_partitions <= max_topic_partitions"),
    ],
)
def test_bad_topic_settings_stop_the_node(args: list[str], message: str):
    with pytest.raises(ConfigError, match=message):
        _load(args)


# -- the node's registry over several partitions ----------------------------------------------------------

PARTITIONS = 4


class FakeHost:
    """A partition host: its core's store stands for the committed replica store; one it does not lead answers as
    PartitionHost.call does."""

    def __init__(self, partition: int, leading: bool, config: GroupConfig) -> None:
        ids = itertools.count(1)
        self.core = GroupCoordinator(config, FakeClock(), new_uuid=lambda: f"id-{partition}-{next(ids)}")
        self.replica = SimpleNamespace(lock=threading.Lock(), store=self.core.store)
        self.leading = leading
        self.calls: list[Any] = []

    async def call(self, request: Any, invoke: Callable[[GroupCoordinator, int], Any]) -> Any:
        self.calls.append(request)
        if not self.leading:
            return error_response(request, Errors.COORDINATOR_NOT_AVAILABLE)
        return invoke(self.core, 1).response


def _registry(not_led: int = -1, **config: Any) -> tuple[TopicRegistry, list[FakeHost]]:
    group_config = GroupConfig(**config)
    hosts = [FakeHost(k, k != not_led, group_config) for k in range(PARTITIONS)]
    cluster = SimpleNamespace(partitions=PARTITIONS, hosts=hosts, group_config=group_config)
    return TopicRegistry(cluster), hosts  # type: ignore[arg-type]


def _names_in_every_partition(count: int = 3) -> list[str]:
    """`count` names of each partition, the partitions interleaved in the order asked."""
    names: dict[int, list[str]] = {}
    i = 0
    while any(len(names.get(k, [])) < count for k in range(PARTITIONS)):
        name = f"topic-{i}"
        names.setdefault(partition_for(name, PARTITIONS), []).append(name)
        i += 1
    return [names[k][j] for j in range(count) for k in reversed(range(PARTITIONS))]


def _ask(registry: TopicRegistry, method: str, request: Any) -> Any:
    """One RPC through the registry, as the service hands it over (the context is not used)."""
    return asyncio.run(getattr(registry, method)(request, None))


def _create_request(names: list[str], partitions: int = 1) -> pb.CreateTopicsRequest:
    return pb.CreateTopicsRequest(topics=[CreateTopic(name=n, num_partitions=partitions) for n in names])


def test_the_registry_asks_each_partition_once_and_answers_in_request_order():
    registry, hosts = _registry(default_num_partitions=2)
    names = _names_in_every_partition()
    response = _ask(registry, "create_topics", _create_request(names, -1))
    assert [x.name for x in response.results] == names
    assert all(code(x) == Errors.NONE and x.num_partitions == 2 for x in response.results)
    for x in response.results:
        assert x.topic_id.startswith(f"id-{partition_for(x.name, PARTITIONS)}-")  # made by its partition's core
    assert [len(h.calls) for h in hosts] == [1] * PARTITIONS
    listed = registry.topics()
    assert [t.name for t in listed] == sorted(names)
    assert {t.name: t.topic_id for t in listed} == {x.name: x.topic_id for x in response.results}
    assert [t.name for t in registry.topics(["nope", names[0], names[0]])] == [names[0]]
    assert (registry.auto_create, registry.default_num_partitions) == (True, 2)


def test_a_partition_this_node_does_not_lead_answers_for_its_topics_only():
    registry, _ = _registry(not_led=1)
    names = _names_in_every_partition(1)
    response = _ask(registry, "create_topics", _create_request(names))
    expected = [Errors.COORDINATOR_NOT_AVAILABLE if partition_for(n, PARTITIONS) == 1 else Errors.NONE for n in names]
    assert [code(x) for x in response.results] == expected


def test_illegal_names_are_answered_by_any_node_without_a_core():
    registry, hosts = _registry(not_led=partition_for("", PARTITIONS))
    created = _ask(registry, "create_topics", _create_request([""]))
    deleted = _ask(registry, "delete_topics", pb.DeleteTopicsRequest(names=["a/b"]))
    assert [code(x) for x in created.results] == [Errors.INVALID_TOPIC_EXCEPTION]
    assert [code(x) for x in deleted.results] == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
    assert not any(h.calls for h in hosts)


def test_delete_and_list_through_the_registry():
    registry, _ = _registry()
    names = _names_in_every_partition(2)
    _ask(registry, "create_topics", _create_request(names))
    gone = names[::2]
    deleted = _ask(registry, "delete_topics", pb.DeleteTopicsRequest(names=[*gone, "nope"]))
    assert [(x.name, code(x)) for x in deleted.results] == [
        *((n, Errors.NONE) for n in gone),
        ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    listed = _ask(registry, "list_topics", pb.ListTopicsRequest())
    assert code(listed) == Errors.NONE and [t.name for t in listed.topics] == sorted(set(names) - set(gone))
    some = _ask(registry, "list_topics", pb.ListTopicsRequest(names=[names[1], names[0]]))
    assert [t.name for t in some.topics] == [names[1]]


def test_too_many_topics_in_one_request_are_refused_whole_before_any_change():
    registry, hosts = _registry()
    names = [f"t-{i}" for i in range(MAX_TOPICS_PER_REQUEST + 1)]
    created = _ask(registry, "create_topics", _create_request(names))
    deleted = _ask(registry, "delete_topics", pb.DeleteTopicsRequest(names=names))
    for response in (created, deleted):
        assert code(response) == Errors.INVALID_REQUEST and "at most 10000" in response.error_message
        assert not response.results
    assert not any(h.calls for h in hosts) and not registry.topics()
    assert all(code(x) == Errors.NONE for x in _ask(registry, "create_topics", _create_request(names[1:])).results)
