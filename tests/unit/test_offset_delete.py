"""OffsetDelete (Kafka's OffsetMetadataManager.deleteOffsets and ClassicGroup.validateOffsetDelete) and the
subscribed topics it reads from a "consumer" group's member metadata (protocol/consumer.py)."""

from __future__ import annotations

import io

import pytest
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription
from kio.serial import entity_writer

from groupcoord.client.protocol import Subscription, encode_subscription
from groupcoord.coordinator.events import record_event
from groupcoord.coordinator.state import GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.consumer import subscribed_topics
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, STABLE, Harness, code, records_of

NOT_FOUND, SUBSCRIBED = Errors.GROUP_ID_NOT_FOUND, Errors.GROUP_SUBSCRIBED_TO_TOPIC


def kafka_subscription(*topics: str) -> bytes:
    """What a Kafka consumer sends: the int16 version, then ConsumerProtocolSubscription of that version."""
    subscription = ConsumerProtocolSubscription(
        topics=topics, user_data=None, owned_partitions=(), generation_id=3, rack_id=None
    )
    out = io.BytesIO((3).to_bytes(2, "big"))
    out.seek(2)
    entity_writer(ConsumerProtocolSubscription)(out, subscription)
    return out.getvalue()


def sdk_subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(dict.fromkeys(topics, 4)))


def deleted(eff) -> dict[tuple[str, int], Errors]:
    return {(t.name, p.partition_index): Errors(p.error_code) for t in eff.response.topics for p in t.partitions}


def offsets(h: Harness, group_id: str = "g") -> set[tuple[str, int]]:
    return set(h.group(group_id).offsets)


COMMITTED = {("t", 0): 1, ("t", 1): 2, ("u", 0): 3}


# -- request-level errors --------------------------------------------------------------------------------------


def test_an_absent_group_is_group_id_not_found():
    h = Harness()
    eff = h.delete_offsets(topics={"t": [0]})
    assert (code(eff.response), list(eff.response.topics), eff.records) == (NOT_FOUND, [], [])
    assert not h.has_group()


def test_a_too_long_group_id_is_invalid_and_an_unloaded_partition_is_not_the_coordinator():
    h = Harness()
    assert code(h.delete_offsets("g" * 256, {"t": [0]}).response) == Errors.INVALID_GROUP_ID
    h.commit(offsets=COMMITTED)
    h.unload()
    eff = h.delete_offsets(topics={"t": [0]})
    assert (code(eff.response), eff.records) == (Errors.COORDINATOR_NOT_AVAILABLE, [])


def test_the_empty_group_id_is_a_group_like_any_other():
    h = Harness()
    h.commit(group_id="", offsets=COMMITTED)
    eff = h.delete_offsets("", {"t": [0]})
    assert (code(eff.response), deleted(eff)) == (Errors.NONE, {("t", 0): Errors.NONE})
    assert offsets(h, "") == {("t", 1), ("u", 0)}


@pytest.mark.parametrize("state", [PREPARING, COMPLETING, STABLE])
def test_a_live_group_of_another_protocol_type_is_non_empty(state):
    h = Harness()
    a, _b = h.form("a", "b", sync=state != COMPLETING, protocol_type="connect")
    if state == PREPARING:
        a.join()
    assert h.group().state == state
    eff = h.delete_offsets(topics={"t": [0]})
    assert (code(eff.response), list(eff.response.topics), eff.records) == (Errors.NON_EMPTY_GROUP, [], [])


def test_more_partitions_than_a_commit_may_name_is_a_policy_violation():
    h = Harness(offset_commit_max_partitions=2)
    h.commit(offsets={("t", 0): 1})
    eff = h.delete_offsets(topics={"t": [0, 1, 2]})
    assert (code(eff.response), eff.records) == (Errors.POLICY_VIOLATION, [])
    assert "offset_commit_max_partitions" in eff.response.error_message


# -- Empty groups -----------------------------------------------------------------------------------------------


def test_an_empty_group_loses_the_offsets_named_and_a_partition_without_one_is_answered_none():
    h = Harness()
    h.commit(offsets=COMMITTED)
    eff = h.delete_offsets(topics={"t": [0, 7], "v": [0]})
    assert code(eff.response) == Errors.NONE
    assert deleted(eff) == {("t", 0): Errors.NONE, ("t", 7): Errors.NONE, ("v", 0): Errors.NONE}
    (rec,) = eff.records
    assert isinstance(rec, r.OffsetsExpired)
    assert (rec.cause, [row[:2] for row in rec.partitions]) == (r.OffsetsRemovalCause.OFFSET_DELETE, [("t", 0)])
    assert offsets(h) == {("t", 1), ("u", 0)}
    h.assert_replay()


def test_an_empty_group_that_had_consumers_is_subscribed_to_nothing():
    h = Harness()
    a, b = h.form("a", "b", protocols=[("range", kafka_subscription("t"))])
    a.commit(COMMITTED)
    a.leave()
    b.leave()
    assert h.group().state == EMPTY
    eff = h.delete_offsets(topics={"t": [0, 1]})
    assert deleted(eff) == {("t", 0): Errors.NONE, ("t", 1): Errors.NONE}
    assert offsets(h) == {("u", 0)}


def test_a_partition_named_twice_is_deleted_once():
    h = Harness()
    h.commit(offsets=COMMITTED)
    eff = h.delete_offsets(topics={"t": [0, 0]})
    assert [p.error_code for p in eff.response.topics[0].partitions] == [Errors.NONE, Errors.NONE]
    assert len(records_of(eff, r.OffsetsExpired)[0].partitions) == 1


def test_deleting_every_offset_leaves_an_empty_shell_that_retention_removes():
    h = Harness(offsets_retention_check_interval_ms=10_000)
    h.commit(offsets={("t", 0): 1})
    h.delete_offsets(topics={"t": [0]})
    assert h.has_group()
    eff = h.advance(10_000)
    assert [type(x) for x in eff.records] == [r.GroupDeleted]
    h.assert_replay()


# -- live "consumer" groups keep the offsets of the topics they subscribe to ------------------------------------


@pytest.mark.parametrize("encode", [kafka_subscription, sdk_subscription], ids=["kafka-client", "sdk"])
def test_a_stable_consumer_group_keeps_its_subscribed_topics(encode):
    h = Harness()
    (a,) = h.form("a", protocols=[("range", encode("t"))])
    a.commit(COMMITTED)
    eff = h.delete_offsets(topics={"t": [0, 1], "u": [0], "w": [5]})
    assert code(eff.response) == Errors.NONE
    assert deleted(eff) == {("t", 0): SUBSCRIBED, ("t", 1): SUBSCRIBED, ("u", 0): Errors.NONE, ("w", 5): Errors.NONE}
    assert offsets(h) == {("t", 0), ("t", 1)}
    h.assert_replay()


@pytest.mark.parametrize("state", [PREPARING, COMPLETING])
def test_a_rebalancing_consumer_group_keeps_the_topics_of_every_member(state):
    h = Harness()
    _a, b = h.form("a", "b", sync=state != COMPLETING, protocols=[("range", kafka_subscription("t"))])
    if state == PREPARING:
        b.join(protocols=[("range", kafka_subscription("t", "u"))])
    assert h.group().state == state
    eff = h.delete_offsets(topics={"t": [0], "u": [0], "v": [0]})
    u = SUBSCRIBED if state == PREPARING else Errors.NONE
    assert deleted(eff) == {("t", 0): SUBSCRIBED, ("u", 0): u, ("v", 0): Errors.NONE}


def test_a_consumer_group_with_one_unreadable_subscription_is_subscribed_to_nothing():
    """Kafka's rule: the coordinator is then "not aware of the subscribed topics", and deletes."""
    h = Harness()
    a, _b = h.form("a", "b", protocols=[("range", kafka_subscription("t"))])
    a.commit({("t", 0): 1})
    x = h.member("x", protocols=[("range", b"\x00\x01\xff")])
    assert code(x.join().response) == Errors.MEMBER_ID_REQUIRED
    x.join()
    assert h.group().state == PREPARING
    eff = h.delete_offsets(topics={"t": [0]})
    assert deleted(eff) == {("t", 0): Errors.NONE}
    assert offsets(h) == set()


def test_subscribed_topics_reads_both_encodings_and_refuses_garbage():
    assert subscribed_topics([kafka_subscription("a", "b"), sdk_subscription("c")]) == {"a", "b", "c"}
    assert subscribed_topics([]) == frozenset()
    for garbage in (b"", b"\x00", b"\x00\x00\xff\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe", b"junk"):
        assert subscribed_topics([kafka_subscription("a"), garbage]) == frozenset(), garbage


# -- the record -------------------------------------------------------------------------------------------------


def test_the_removal_is_an_offsets_deleted_event_and_retention_stays_offsets_expired():
    h = Harness()
    h.commit(offsets=COMMITTED)
    (rec,) = h.delete_offsets(topics={"t": [0, 1]}).records
    event = record_event(rec, h.group(), 0, 1, 0, 1, 1)
    assert (event["kind"], event["reason"], event["details"]) == (
        "offsets_deleted",
        "offset_delete",
        {"count": 2, "offsets": [["t", 0], ["t", 1]]},
    )
    retention = r.OffsetsExpired("g", (("u", 0, 0),), 5)
    assert record_event(retention, h.group(), 0, 2, 0, 1, 1)["kind"] == "offsets_expired"


def test_a_node_of_the_first_record_version_applies_the_removal_as_retention_does():
    """A version-1 OffsetsExpired (no `cause`) decodes as retention; a version-2 one read without its cause (what a
    version-1 node keeps of it) removes the same offsets, so replicas agree during a rolling upgrade."""
    h = Harness()
    h.commit(offsets=COMMITTED)
    (rec,) = h.delete_offsets(topics={"t": [0]}).records
    old_view = r.OffsetsExpired(rec.group_id, rec.partitions, rec.time_ms)
    assert old_view.cause == r.OffsetsRemovalCause.RETENTION
    replica = GroupStore()
    for earlier in h.records[:-1]:
        replica.apply(earlier)
    assert replica.apply(old_view)
    assert replica.snapshot() == h.core.store.snapshot()
