"""The "consumer" protocol payloads: round trips, a pinned wire format, forward compatibility, garbage."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.client.protocol import (
    MAX_PARTITIONS,
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tests.unit.profiles import examples

TOPIC = st.text(min_size=1, max_size=12)
PARTITION = st.integers(0, MAX_PARTITIONS - 1)
PAIRS = st.lists(st.tuples(TOPIC, PARTITION), unique=True, max_size=20).map(tuple)
SUBSCRIPTIONS = st.builds(
    Subscription,
    topics=st.dictionaries(TOPIC, st.integers(0, MAX_PARTITIONS), max_size=8),
    owned=PAIRS,
    user_data=st.binary(max_size=32),
    previous=PAIRS,
)
ASSIGNMENTS = st.builds(Assignment, partitions=PAIRS, user_data=st.binary(max_size=32))
# Any value msgpack can carry, to build structurally wrong payloads.
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


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def test_protocol_type_is_kafkas() -> None:
    assert PROTOCOL_TYPE == "consumer"


@settings(max_examples=examples(200), database=None, suppress_health_check=[HealthCheck.too_slow])
@given(SUBSCRIPTIONS)
def test_subscription_round_trip(sub: Subscription) -> None:
    data = encode_subscription(sub)
    assert decode_subscription(data) == sub
    # Canonical: re-encoding what was decoded gives the same bytes.
    assert encode_subscription(decode_subscription(data)) == data


@settings(max_examples=examples(200), database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ASSIGNMENTS)
def test_assignment_round_trip(assignment: Assignment) -> None:
    data = encode_assignment(assignment)
    assert decode_assignment(data) == assignment
    assert list(decode_assignment(data).partitions) == sorted(assignment.partitions)


def test_wire_format_is_pinned() -> None:
    """Members of different versions share these bytes; changing the layout breaks mixed groups."""
    sub = Subscription({"b": 2, "a": 1}, owned=(("b", 1), ("a", 0), ("b", 0)), user_data=b"u")
    assert msgpack.unpackb(encode_subscription(sub)) == {
        "version": 1,
        "topics": {"a": 1, "b": 2},
        "owned": {"a": [0], "b": [0, 1]},
        "user_data": b"u",
    }
    # `previous` (an eager member's last assignment) is left out when empty, so payloads without it keep their bytes.
    with_previous = Subscription({"a": 1}, previous=(("a", 0),))
    assert msgpack.unpackb(encode_subscription(with_previous))["previous"] == {"a": [0]}
    assignment = Assignment((("t", 3), ("s", 0), ("t", 1)))
    assert msgpack.unpackb(encode_assignment(assignment)) == {
        "version": 1,
        "partitions": {"s": [0], "t": [1, 3]},
        "user_data": b"",
    }


def test_equal_content_encodes_to_equal_bytes() -> None:
    """The coordinator compares metadata bytes to tell whether a rejoin changed the protocols."""
    one = Subscription({"x": 1, "y": 2}, owned=(("y", 1), ("x", 0)))
    two = Subscription({"y": 2, "x": 1}, owned=(("x", 0), ("y", 1)))
    assert encode_subscription(one) == encode_subscription(two)
    assert encode_assignment(Assignment((("b", 0), ("a", 1)))) == encode_assignment(Assignment((("a", 1), ("b", 0))))


def test_subscription_copies_the_callers_topics() -> None:
    topics = {"t": 3}
    sub = Subscription(topics)
    topics["t"] = 99
    assert sub.topics == {"t": 3}
    assert hash(sub) == hash(Subscription({"t": 3}))


def test_newer_version_with_unknown_fields_decodes() -> None:
    """A v2 client adds fields; a v1 leader reads the fields it knows and ignores the rest."""
    sub = pack({"version": 2, "topics": {"t": 4}, "owned": {"t": [1]}, "rack": "r1", "extra": {"nested": [1, b"x"]}})
    assert decode_subscription(sub) == Subscription({"t": 4}, owned=(("t", 1),))
    assignment = pack({"version": 7, "partitions": {"t": [2, 0]}, "user_data": b"d", "epoch": 12})
    assert decode_assignment(assignment) == Assignment((("t", 0), ("t", 2)), user_data=b"d")


def test_optional_fields_take_their_defaults() -> None:
    assert decode_subscription(pack({"version": 1, "topics": {}})) == Subscription({})
    assert decode_assignment(pack({"version": 1, "partitions": {}})) == Assignment(())


BAD_SUBSCRIPTIONS = {
    "empty bytes": b"",
    "not msgpack": b"\xc1",
    "truncated": encode_subscription(Subscription({"topic": 3}))[:-3],
    "trailing bytes": encode_subscription(Subscription({"t": 1})) + b"\x00",
    "not a map": pack([1, {"t": 1}]),
    "no version": pack({"topics": {"t": 1}}),
    "version 0": pack({"version": 0, "topics": {"t": 1}}),
    "negative version": pack({"version": -1, "topics": {"t": 1}}),
    "string version": pack({"version": "1", "topics": {"t": 1}}),
    "bool version": pack({"version": True, "topics": {"t": 1}}),
    "no topics": pack({"version": 1}),
    "topics not a map": pack({"version": 1, "topics": ["t"]}),
    "empty topic name": pack({"version": 1, "topics": {"": 1}}),
    "bytes topic name": pack({"version": 1, "topics": {b"t": 1}}),
    "integer map key": msgpack.packb({"version": 1, 5: 1}),
    "negative count": pack({"version": 1, "topics": {"t": -1}}),
    "count above cap": pack({"version": 1, "topics": {"t": MAX_PARTITIONS + 1}}),
    "float count": pack({"version": 1, "topics": {"t": 1.0}}),
    "bool count": pack({"version": 1, "topics": {"t": True}}),
    "null count": pack({"version": 1, "topics": {"t": None}}),
    "owned not a map": pack({"version": 1, "topics": {}, "owned": [["t", 0]]}),
    "owned partitions not a list": pack({"version": 1, "topics": {}, "owned": {"t": 0}}),
    "negative owned partition": pack({"version": 1, "topics": {}, "owned": {"t": [-1]}}),
    "string owned partition": pack({"version": 1, "topics": {}, "owned": {"t": ["0"]}}),
    "duplicate owned partition": pack({"version": 1, "topics": {}, "owned": {"t": [0, 0]}}),
    "empty owned topic": pack({"version": 1, "topics": {}, "owned": {"": [0]}}),
    "user_data not bytes": pack({"version": 1, "topics": {}, "user_data": "text"}),
}

BAD_ASSIGNMENTS = {
    "empty bytes": b"",
    "not msgpack": b"\xc1",
    "not a map": pack("partitions"),
    "no version": pack({"partitions": {}}),
    "no partitions": pack({"version": 1}),
    "partitions not a map": pack({"version": 1, "partitions": [["t", 0]]}),
    "partition list not a list": pack({"version": 1, "partitions": {"t": 0}}),
    "negative partition": pack({"version": 1, "partitions": {"t": [-2]}}),
    "partition above cap": pack({"version": 1, "partitions": {"t": [MAX_PARTITIONS]}}),
    "nested partition": pack({"version": 1, "partitions": {"t": [[0]]}}),
    "duplicate partition": pack({"version": 1, "partitions": {"t": [3, 3]}}),
    "user_data not bytes": pack({"version": 1, "partitions": {}, "user_data": 1}),
}


@pytest.mark.parametrize("data", BAD_SUBSCRIPTIONS.values(), ids=BAD_SUBSCRIPTIONS.keys())
def test_bad_subscription_raises_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"^malformed subscription payload: "):
        decode_subscription(data)


@pytest.mark.parametrize("data", BAD_ASSIGNMENTS.values(), ids=BAD_ASSIGNMENTS.keys())
def test_bad_assignment_raises_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"^malformed assignment payload: "):
        decode_assignment(data)


@pytest.mark.parametrize("data", [None, "text", 42, bytearray(b"\xc1")])
def test_non_bytes_input_raises_value_error(data: object) -> None:
    with pytest.raises(ValueError):
        decode_subscription(data)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        decode_assignment(data)  # type: ignore[arg-type]


@settings(max_examples=examples(400), database=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_value_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        with contextlib.suppress(ValueError):
            decode(data)


@settings(max_examples=examples(300), database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    MSGPACK_VALUES,
    st.dictionaries(st.sampled_from(["version", "topics", "owned", "partitions", "user_data"]), MSGPACK_VALUES),
)
def test_wrong_shapes_decode_or_raise_value_error(value: object, fields: dict[str, object]) -> None:
    """Valid msgpack of the wrong shape, at the top level and in every known field."""
    for data in (pack(value), pack(fields), pack({**fields, "version": 1})):
        for decode in (decode_subscription, decode_assignment):
            with contextlib.suppress(ValueError):
                decode(data)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Subscription(["t"]),  # type: ignore[arg-type]
        lambda: Subscription({"t": -1}),
        lambda: Subscription({"t": 1}, owned=(("t", 0, 1),)),  # type: ignore[arg-type]
        lambda: Subscription({"t": 1}, owned=5),  # type: ignore[arg-type]
        lambda: Subscription({"t": 1}, user_data="x"),  # type: ignore[arg-type]
        lambda: Assignment((("t", 0), ("t", 0))),
        lambda: Assignment((("", 0),)),
    ],
)
def test_construction_validates(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]
