"""The versioned msgpack record codec: round trips, stable type ids, forward/backward compatibility, garbage."""

from __future__ import annotations

import dataclasses
import logging
import types
import typing

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from groupcoord.protocol import records as r
from tests.unit.profiles import examples

# The wire contract: these ids are written into every replicated log forever. Renumbering or reusing one
# makes old logs replay as the wrong record type, so this mapping is frozen here on purpose.
TYPE_IDS = {
    "PendingMemberAdded": 1,
    "PendingMemberRemoved": 2,
    "MemberAdded": 3,
    "MemberUpdated": 4,
    "MemberRemoved": 5,
    "StaticMemberReplaced": 6,
    "RebalanceStarted": 7,
    "GenerationCompleted": 8,
    "AssignmentsSynced": 9,
    "OffsetsCommitted": 10,
    "OffsetsExpired": 11,
    "GroupDeleted": 12,
    "InstancesRegistered": 13,
    "RebalanceAvoided": 14,
    "TopicCreated": 15,
    "TopicDeleted": 16,
    "InstancesUnregistered": 17,
}

# Field names of version 1 of each record: the keys old logs carry. A field may be added later (with a
# default), but none of these may be renamed or removed, or logs written today stop replaying.
V1_FIELDS = {
    "PendingMemberAdded": ("group_id", "member_id", "session_timeout_ms", "time_ms"),
    "PendingMemberRemoved": ("group_id", "member_id", "cause", "time_ms"),
    "MemberAdded": (
        "group_id",
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocol_type",
        "protocols",
        "time_ms",
    ),
    "MemberUpdated": ("group_id", "member_id", "session_timeout_ms", "rebalance_timeout_ms", "protocols", "time_ms"),
    "MemberRemoved": ("group_id", "member_id", "cause", "reason", "time_ms"),
    "StaticMemberReplaced": (
        "group_id",
        "group_instance_id",
        "old_member_id",
        "new_member_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocols",
        "time_ms",
    ),
    "RebalanceStarted": ("group_id", "cause", "member_id", "group_instance_id", "join_reason", "reason", "time_ms"),
    "GenerationCompleted": ("group_id", "generation_id", "protocol_name", "leader_id", "time_ms"),
    "AssignmentsSynced": ("group_id", "generation_id", "assignments", "time_ms"),
    "OffsetsCommitted": ("group_id", "member_id", "generation_id", "offsets", "time_ms"),
    "OffsetsExpired": ("group_id", "partitions", "time_ms"),
    "GroupDeleted": ("group_id", "cause", "time_ms"),
    "InstancesRegistered": ("group_id", "group_instance_ids", "time_ms"),
    "RebalanceAvoided": ("group_id", "member_id", "group_instance_id", "join_reason", "cause", "time_ms"),
    "TopicCreated": ("topic", "num_partitions", "topic_id", "time_ms"),
    "TopicDeleted": ("topic", "time_ms"),
    "InstancesUnregistered": ("group_id", "group_instance_ids", "time_ms"),
}

T = 1_700_000_123_456
PROTOCOLS = (("range", b"\x00\x01topic-a"), ("roundrobin", b""))

# One hand-written sample per record type, with non-trivial values (unicode, empty bytes, negatives, 64-bit ints).
SAMPLES: list[r.Record] = [
    r.PendingMemberAdded("g1", "client-1-u1", 6_000, T),
    r.PendingMemberRemoved("g1", "client-1-u1", r.RemovalCause.PENDING_EXPIRED, T),
    r.MemberAdded("g1", "inst-1-u2", "inst-1", "client-1", "10.0.0.1", 6_000, 30_000, "consumer", PROTOCOLS, T),
    r.MemberAdded("gröup-ü", "c-u3", "", "c", "", 1_800_000, 0, "consumer", (("x", b"\xff" * 10),), 0),
    r.MemberUpdated("g1", "inst-1-u2", 7_000, 40_000, (("roundrobin", b"v2"),), T + 1),
    r.MemberRemoved("g1", "c-u3", r.RemovalCause.SESSION_EXPIRED, "session timeout", T + 2),
    r.StaticMemberReplaced("g1", "inst-1", "inst-1-u2", "inst-1-u4", "client-1", "h", 6_000, 30_000, PROTOCOLS, T),
    r.RebalanceStarted("g1", r.RebalanceCause.JOIN_REASON, "inst-1-u4", "inst-1", 2, "topic metadata changed", T),
    r.RebalanceStarted("g1", r.RebalanceCause.SESSION_EXPIRED, "", "", 0, "", T),
    r.GenerationCompleted("g1", 7, "range", "inst-1-u4", T),
    r.GenerationCompleted("g1", 8, "", "", T),
    r.AssignmentsSynced("g1", 7, {"inst-1-u4": b"\x00\x01", "c-u5": b""}, T),
    r.AssignmentsSynced("g1", 7, {}, T),
    r.OffsetsCommitted("g1", "inst-1-u4", 7, (("topic-a", 0, 42, -1, ""), ("topic-b", 3, 2**62, 5, "md ✓")), T),
    r.OffsetsCommitted("", "", -1, (("t", 0, 0, 0, "x" * 4096),), T),
    r.OffsetsExpired("g1", (("topic-a", 0, T - 1), ("topic-b", 3, T)), T + 10),
    r.OffsetsExpired("", (("topic-a", 0, T - 1),), T + 11, r.OffsetsRemovalCause.OFFSET_DELETE),
    r.GroupDeleted("g1", "admin", T),
    r.InstancesRegistered("g1", ("inst-2", "inst-3"), T),
    r.RebalanceAvoided("g1", "m-1", "inst-1", 1, r.AvoidedCause.RESTART, T),
    r.TopicCreated("orders.v2_x-1", 10_000, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", T),
    r.TopicDeleted("orders.v2_x-1", T + 1),
    r.InstancesUnregistered("g1", ("inst-3",), T + 2),
]


def _cls(name: str) -> type[r.Record]:
    return getattr(r, name)


def _wire(rec: r.Record) -> list[typing.Any]:
    """What an encoded record looks like to a plain msgpack reader."""
    return msgpack.unpackb(r.encode(rec), raw=False)


# -- registry -----------------------------------------------------------------------------------------


def test_type_ids_are_frozen():
    registered = {cls.__name__: type_id for type_id, cls in r._REGISTRY.items()}
    assert registered == TYPE_IDS
    for name, type_id in TYPE_IDS.items():
        assert type_id == _cls(name).TYPE


def test_type_ids_are_unique():
    ids = [cls.TYPE for cls in r._REGISTRY.values()]
    assert len(ids) == len(set(ids))
    assert len({cls.__name__ for cls in r._REGISTRY.values()}) == len(ids)


def test_reusing_a_type_id_is_refused():
    with pytest.raises(ValueError, match="used twice"):

        @r.record(TYPE_IDS["MemberAdded"])
        @dataclasses.dataclass(frozen=True, slots=True)
        class Impostor(r.Record):
            group_id: str

    assert r._REGISTRY[TYPE_IDS["MemberAdded"]] is r.MemberAdded


def test_every_registered_type_has_a_sample():
    assert {type(s) for s in SAMPLES} == set(r._REGISTRY.values()), "add a SAMPLES entry for the new record type"


@pytest.mark.parametrize("name", sorted(V1_FIELDS))
def test_v1_field_names_still_exist(name: str):
    fields = tuple(f.name for f in dataclasses.fields(_cls(name)))
    assert set(V1_FIELDS[name]) <= set(fields), f"{name} lost fields {set(V1_FIELDS[name]) - set(fields)}"


# -- round trips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rec", SAMPLES, ids=lambda rec: type(rec).__name__)
def test_round_trip_one(rec: r.Record):
    data = r.encode(rec)
    assert isinstance(data, bytes)
    out = r.decode(data)
    assert out == rec
    assert type(out) is type(rec)
    # Deterministic: the same record always encodes to the same bytes (replicas compare logs).
    assert r.encode(out) == data


@pytest.mark.parametrize("rec", SAMPLES, ids=lambda rec: type(rec).__name__)
def test_wire_envelope(rec: r.Record):
    type_id, version, fields = _wire(rec)
    assert type_id == TYPE_IDS[type(rec).__name__]
    assert version == type(rec).VERSION >= 1
    assert set(fields) == {f.name for f in dataclasses.fields(rec)}


def test_round_trip_batch():
    data = r.encode_batch(SAMPLES)
    report = r.DecodeReport()
    assert r.decode_batch(data, report) == SAMPLES
    assert report.unknown_types == []
    assert r.decode_batch(r.encode_batch([])) == []


def _strategy(tp: typing.Any) -> st.SearchStrategy[typing.Any]:
    """Values msgpack can carry for a record field annotation (ints within 64 bits)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is str:
        return st.text(max_size=20)
    if tp is int:
        return st.integers(min_value=-(2**63), max_value=2**64 - 1)
    if tp is bytes:
        return st.binary(max_size=20)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(_strategy(args[0]), max_size=4).map(tuple)
    if origin is tuple:
        return st.tuples(*(_strategy(a) for a in args))
    if origin is dict:
        return st.dictionaries(_strategy(args[0]), _strategy(args[1]), max_size=4)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_strategy(a) for a in args))
    raise AssertionError(f"no strategy for field type {tp!r}")


def _record_strategy(cls: type[r.Record]) -> st.SearchStrategy[r.Record]:
    hints = typing.get_type_hints(cls, vars(r))
    return st.builds(cls, **{f.name: _strategy(hints[f.name]) for f in dataclasses.fields(cls)})


ANY_RECORD = st.one_of(*(_record_strategy(cls) for cls in r._REGISTRY.values()))


@settings(max_examples=examples(300), database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_RECORD)
def test_round_trip_random_records(rec: r.Record):
    assert r.decode(r.encode(rec)) == rec


@settings(max_examples=examples(100), database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ANY_RECORD, max_size=8))
def test_round_trip_random_batches(recs: list[r.Record]):
    assert r.decode_batch(r.encode_batch(recs)) == recs


# -- compatibility -------------------------------------------------------------------------------------


def _unknown(type_id: int) -> list[typing.Any]:
    return [type_id, 1, {"group_id": "g1", "something": [1, 2, 3]}]


def test_unknown_type_is_skipped_and_reported(caplog: pytest.LogCaptureFixture):
    a, b = SAMPLES[0], SAMPLES[2]
    unused = max(TYPE_IDS.values()) + 1000
    data = msgpack.packb([_wire(a), _unknown(unused), _wire(b), _unknown(unused + 1)], use_bin_type=True)
    report = r.DecodeReport()
    with caplog.at_level(logging.WARNING, logger=r.log.name):
        out = r.decode_batch(data, report)
    assert out == [a, b]
    assert report.unknown_types == [unused, unused + 1]
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING and rec.name == r.log.name]
    assert len(warnings) == 2
    assert str(unused) in warnings[0].getMessage()


def test_unknown_single_record_decodes_to_none(caplog: pytest.LogCaptureFixture):
    report = r.DecodeReport()
    with caplog.at_level(logging.WARNING, logger=r.log.name):
        assert r.decode(msgpack.packb(_unknown(999)), report) is None
    assert report.unknown_types == [999]
    assert any("999" in rec.getMessage() for rec in caplog.records)


def test_unknown_type_without_report_still_decodes_the_rest():
    data = msgpack.packb([_unknown(500), _wire(SAMPLES[0])], use_bin_type=True)
    assert r.decode_batch(data) == [SAMPLES[0]]


@pytest.mark.parametrize("rec", SAMPLES, ids=lambda rec: type(rec).__name__)
def test_newer_version_with_extra_fields_decodes(rec: r.Record):
    type_id, version, fields = _wire(rec)
    newer = [type_id, version + 1, {**fields, "added_in_v2": {"nested": [1, b"x"]}, "zz_flag": True}]
    assert r.decode(msgpack.packb(newer, use_bin_type=True)) == rec
    batch = msgpack.packb([newer, _wire(rec)], use_bin_type=True)
    assert r.decode_batch(batch) == [rec, rec]


@pytest.mark.parametrize("name", sorted(V1_FIELDS))
def test_v1_wire_records_replay(name: str):
    """A record written by version 1 (exactly its v1 fields) decodes with today's code."""
    sample = next(s for s in SAMPLES if type(s).__name__ == name)
    fields = {f: getattr(sample, f) for f in V1_FIELDS[name]}
    data = msgpack.packb([TYPE_IDS[name], 1, fields], use_bin_type=True)
    assert r.decode(data) == sample


# -- garbage -------------------------------------------------------------------------------------------

# Errors a decoder may raise for bad input: ValueError (msgpack's FormatError, StackError, ExtraData are
# ValueErrors) or one of msgpack's own unpack exceptions. Anything else (TypeError, KeyError, ...) is a bug.
DECODE_ERRORS = (ValueError, msgpack.UnpackException)

GARBAGE = [
    b"",
    b"\xc1",  # never used in msgpack
    b"\x93\x01",  # truncated array
    b"\xdd\xff\xff\xff\xff",  # array claiming 4 G items
    b"\x91" * 10_000,  # nesting deeper than any record
    b"not msgpack at all",
    msgpack.packb(42),
    msgpack.packb("a string"),
    msgpack.packb({"a": 1}),
    msgpack.packb([1, 1]),  # envelope too short
    msgpack.packb([1, 1, {}, 4]),  # envelope too long
    msgpack.packb([1, 1, [1, 2]]),  # fields not a map
    msgpack.packb([3, 1, {}]),  # known type, no fields
    msgpack.packb([1, 1, {"group_id": "g"}]),  # known type, missing fields
    msgpack.packb([1, 1, {"group_id": "g", "member_id": "m", "session_timeout_ms": 1, "time_ms": 1, 7: 1}]),
    r.encode(SAMPLES[2])[:-3],  # truncated record
    r.encode(SAMPLES[2]) + b"\x00",  # trailing bytes
]


def _decode_both(data: bytes) -> None:
    for fn in (r.decode, r.decode_batch):
        try:
            out = fn(data)
        except DECODE_ERRORS:
            continue
        if fn is r.decode:
            assert out is None or isinstance(out, r.Record)
        else:
            assert isinstance(out, list) and all(isinstance(x, r.Record) for x in out)


@pytest.mark.parametrize("data", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_raises_value_error(data: bytes):
    with pytest.raises(DECODE_ERRORS):
        r.decode(data)
    _decode_both(data)


def test_garbage_inside_a_batch_raises_value_error():
    good = _wire(SAMPLES[0])
    for bad in ([3, 1, {}], 42, [1, 1], "x"):
        with pytest.raises(DECODE_ERRORS):
            r.decode_batch(msgpack.packb([good, bad], use_bin_type=True))


def _mutate(base: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    data = bytearray(base)
    for pos, value in edits:
        data[pos % len(data)] = value
    return bytes(data[: max(cut, 0) or None])


@settings(max_examples=examples(400), database=None)
@given(
    base=st.sampled_from([r.encode(s) for s in SAMPLES] + [r.encode_batch(SAMPLES[:3])]),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(-1, 200),
)
def test_mutated_encodings_never_crash(base: bytes, edits: list[tuple[int, int]], cut: int):
    _decode_both(_mutate(base, edits, cut))


@settings(max_examples=examples(300), database=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_crash(data: bytes):
    _decode_both(data)


MSGPACK_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(300), database=None)
@given(st.tuples(MSGPACK_VALUES, MSGPACK_VALUES, st.dictionaries(st.text(max_size=8), MSGPACK_VALUES, max_size=4)))
@example(({}, 1, {}))
def test_any_envelope_shaped_value_never_crashes(envelope: tuple[typing.Any, typing.Any, dict[str, typing.Any]]):
    """Any msgpack values in the envelope's type id / version / fields decode or raise ValueError."""
    data = msgpack.packb(list(envelope), use_bin_type=True)
    _decode_both(data)
    _decode_both(msgpack.packb([list(envelope)], use_bin_type=True))


@pytest.mark.parametrize("type_id", [{}, {"a": 1}, [{}]], ids=["empty-map", "map", "array-of-map"])
def test_map_as_type_id_raises_value_error(type_id: dict[str, int]):
    """Regression: an unhashable type id used to raise TypeError from the registry lookup."""
    data = msgpack.packb([type_id, 1, {}], use_bin_type=True)
    with pytest.raises(DECODE_ERRORS):
        r.decode(data)
    with pytest.raises(DECODE_ERRORS):
        r.decode_batch(msgpack.packb([[type_id, 1, {}]], use_bin_type=True))


@pytest.mark.parametrize(
    "type_id", [None, "", "1", 1.0, True, [1]], ids=["nil", "empty-str", "str", "float", "bool", "array"]
)
def test_non_integer_type_id_is_malformed(type_id: typing.Any):
    """Regression: None / str / array type ids used to be skipped as "unknown type" (garbage dropped
    silently), and 1.0 / True (equal to 1) decoded as PendingMemberAdded."""
    fields = {f: getattr(SAMPLES[0], f) for f in V1_FIELDS["PendingMemberAdded"]}
    with pytest.raises(DECODE_ERRORS):
        r.decode(msgpack.packb([type_id, 1, fields], use_bin_type=True))


@pytest.mark.parametrize("version", [None, "1", 1.5, [1]], ids=["nil", "str", "float", "array"])
def test_non_integer_version_is_malformed(version: typing.Any):
    fields = {f: getattr(SAMPLES[0], f) for f in V1_FIELDS["PendingMemberAdded"]}
    with pytest.raises(DECODE_ERRORS):
        r.decode(msgpack.packb([TYPE_IDS["PendingMemberAdded"], version, fields], use_bin_type=True))
