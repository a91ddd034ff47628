"""A new leader's working copy of the committed store (`GroupStore.copy`) and the cached encoding behind digests and
compaction snapshots (`GroupStore.packed_snapshot`)."""

from __future__ import annotations

import msgpack

from groupcoord.coordinator import GroupState, GroupStore
from groupcoord.protocol import records as r

PROTOCOLS = (("range", b"meta"),)


def _stable_group(store: GroupStore, group_id: str, members: list[str]) -> None:
    for member_id in members:
        added = r.MemberAdded(group_id, member_id, "", "client", "/127.0.0.1", 10_000, 30_000, "consumer", PROTOCOLS, 1)
        assert store.apply(added)
    assert store.apply(r.RebalanceStarted(group_id, "join", members[0], "", 0, "", 2))
    assert store.apply(r.GenerationCompleted(group_id, 1, "range", members[0], 3))
    assert store.apply(r.AssignmentsSynced(group_id, 1, {m: m.encode() for m in members}, 4))
    assert store.apply(r.OffsetsCommitted(group_id, members[0], 1, (("t", 0, 42, -1, ""),), 5))


def _packed(store: GroupStore) -> bytes:
    return msgpack.packb(store.snapshot(), use_bin_type=True)


def test_a_copy_is_equal_and_shares_nothing_that_records_change():
    committed = GroupStore()
    _stable_group(committed, "g", ["a", "b"])
    assert committed.apply(r.TopicCreated("orders", 3, "id-1", 1))
    before = _packed(committed)
    working = committed.copy()
    assert _packed(working) == before
    # Every kind of in-place change a record makes, on the copy only.
    assert working.apply(r.MemberUpdated("g", "a", 20_000, 40_000, (("sticky", b"x"),), 6))
    assert working.apply(r.RebalanceStarted("g", "join", "b", "", 0, "", 6))  # clears every assignment in place
    assert working.apply(r.PendingMemberAdded("g", "c", 10_000, 6))
    assert working.apply(r.OffsetsCommitted("g", "a", 1, (("t", 0, 43, -1, ""),), 7))
    assert working.apply(r.InstancesRegistered("g", ("i-1",), 7))
    assert working.apply(r.TopicDeleted("orders", 8))
    assert _packed(committed) == before
    group = committed.get("g")
    assert group is not None and group.state is GroupState.STABLE
    assert group.members["a"].assignment == b"a" and group.protocol_support == {"range": 2}
    assert working.get("g").protocol_support == {"range": 1, "sticky": 1}  # type: ignore[union-attr]


def test_the_cached_encoding_follows_every_record_byte_for_byte():
    store = GroupStore()
    assert store.packed_snapshot() == _packed(store)
    _stable_group(store, "g1", ["a", "b"])
    _stable_group(store, "g2", ["c"])
    assert store.packed_snapshot() == _packed(store)
    assert store.apply(r.TopicCreated("orders", 3, "id-1", 1))  # version 2 of the snapshot, with topics
    assert store.packed_snapshot() == _packed(store)
    assert store.apply(r.MemberRemoved("g2", "c", "leave", "", 6))
    assert store.apply(r.RebalanceStarted("g2", "leave", "c", "", 0, "", 6))
    assert store.apply(r.GenerationCompleted("g2", 2, "", "", 7))
    assert store.apply(r.OffsetsExpired("g2", (("t", 0, 5),), 8))
    assert store.apply(r.GroupDeleted("g2", "admin", 9))
    assert store.apply(r.MemberUpdated("g1", "a", 20_000, 40_000, PROTOCOLS, 9))
    assert store.packed_snapshot() == _packed(store)
    assert store.apply(r.TopicDeleted("orders", 10))
    assert store.packed_snapshot() == _packed(store)
