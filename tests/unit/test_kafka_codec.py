"""protocol/kafka/codec.py: frames parsed and written through kio, and the version rules around them."""

from __future__ import annotations

import io
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from groupcoord.protocol.kafka.codec import APIS, MalformedFrame, build, read_request, write_response


def _frame(api_key: int, version: int, body: object, correlation_id: int = 7) -> bytes:
    schema = load_request_schema(api_key, version)
    header_type = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="c1"
        ),
    )
    entity_writer(schema)(buffer, body)
    return buffer.getvalue()


def test_a_flexible_request_is_read_with_its_header_and_body() -> None:
    schema = load_request_schema(10, 4)
    request = read_request(_frame(10, 4, schema(key_type=0, coordinator_keys=("g1", "g2"))))
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (10, 4, 7, "c1")
    assert request.body.coordinator_keys == ("g1", "g2")


def test_a_version_not_served_has_no_body_and_an_unknown_api_neither() -> None:
    low = APIS[8][1] - 1  # OffsetCommit below the lowest served version
    frame = struct.pack(">hhi", 8, low, 3) + b"\0\0"
    assert read_request(frame).body is None
    assert read_request(struct.pack(">hhi", 999, 0, 3)).body is None


@pytest.mark.parametrize("cut", [4, 9, 13])
def test_a_truncated_frame_is_malformed_not_an_exception_of_kio(cut: int) -> None:
    frame = _frame(10, 4, load_request_schema(10, 4)(key_type=0, coordinator_keys=("group",)))
    with pytest.raises(MalformedFrame):
        read_request(frame[:cut])


def test_bytes_after_the_request_are_ignored_as_kafka_does() -> None:
    frame = _frame(12, 4, load_request_schema(12, 4)(group_id="g", generation_id=1, member_id="m"))
    assert read_request(frame + b"\x01\0\0").body.member_id == "m"


def test_api_versions_responses_keep_header_v0_even_when_flexible() -> None:
    frame = write_response(18, 3, 41, {"error_code": 0, "api_keys": [], "throttle_time": 0})
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    header, used = entity_reader(ResponseHeaderV0)(frame, 4)
    assert header.correlation_id == 41
    body, size = entity_reader(load_response_schema(18, 3))(frame, 4 + used)
    assert 4 + used + size == len(frame)
    assert body.error_code == ErrorCode.none


def test_other_flexible_responses_use_header_v1_and_one_dict_serves_every_version() -> None:
    values = {
        "throttle_time": 5,
        "error_code": 15,
        "error_message": "no leader",
        "node_id": -1,
        "host": "",
        "port": -1,
        "coordinators": [],
    }
    flexible = write_response(10, 3, 9, values)
    header, used = entity_reader(ResponseHeaderV1)(flexible, 4)
    body, _ = entity_reader(load_response_schema(10, 3))(flexible, 4 + used)
    assert (header.correlation_id, body.error_code, body.error_message) == (
        9,
        ErrorCode.coordinator_not_available,
        "no leader",
    )
    assert body.throttle_time.total_seconds() == 0.005
    old = write_response(10, 0, 9, values)  # v0 has neither throttle time nor message
    header, used = entity_reader(ResponseHeaderV0)(old, 4)
    body, _ = entity_reader(load_response_schema(10, 0))(old, 4 + used)
    assert (body.error_code, body.port) == (ErrorCode.coordinator_not_available, -1)


# A tagged field no version of Kafka has: tag 99 carrying three bytes.
UNKNOWN_TAG = b"\x63\x03abc"


def test_unknown_tagged_fields_are_skipped_in_the_header_the_body_and_a_nested_struct() -> None:
    """Kafka's rule (KIP-482): a reader skips a tag it does not know, which kio's native reader refuses to do."""
    schema = load_request_schema(11, 6)
    body = build(
        schema,
        {
            "group_id": "g",
            "session_timeout": 6000,
            "rebalance_timeout": 9000,
            "member_id": "",
            "group_instance_id": "i1",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"xy"}, {"name": "sticky", "metadata": b""}],
        },
    )
    clean = _frame(11, 6, body)
    # The header's tag section is its last byte (a count of 0); the body ends with the last protocol's tag section
    # and its own, both empty.
    header_end = len(clean) - len(_body_bytes(schema, body))
    tagged = clean[: header_end - 1] + b"\x01" + UNKNOWN_TAG + clean[header_end:-2] + (b"\x01" + UNKNOWN_TAG) * 2
    read = read_request(tagged)
    assert read.body == read_request(clean).body == body
    assert read.client_id == "c1"


def test_known_tagged_fields_are_still_read_beside_an_unknown_one() -> None:
    schema = load_request_schema(1, 15)
    values = {
        "max_wait": 500, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    clean = _frame(1, 15, build(schema, values))
    assert clean.endswith(b"\x00")  # no tagged field written: replica_state and cluster_id have their defaults
    replica_state = struct.pack(">iq", 7, 3) + b"\x00"
    tags = b"\x03" + b"\x00\x03\x03c1" + b"\x01" + bytes([len(replica_state)]) + replica_state + UNKNOWN_TAG
    read = read_request(clean[:-1] + tags).body
    assert read.cluster_id == "c1"
    assert (read.replica_state.replica_id, read.replica_state.replica_epoch) == (7, 3)
    assert read.max_wait.total_seconds() == 0.5


def test_a_tagged_field_longer_than_the_frame_is_malformed() -> None:
    frame = _frame(12, 4, load_request_schema(12, 4)(group_id="g", generation_id=1, member_id="m"))
    with pytest.raises(MalformedFrame):
        read_request(frame[:-1] + b"\x01\x63\x7fabc")


def _body_bytes(schema: object, body: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, body)
    return buffer.getvalue()


def test_a_null_where_the_schema_allows_none_is_malformed_as_kafkas_parser_says() -> None:
    """ListOffsets' topics are not nullable: a length of -1 there is refused before any handler sees it."""
    schema = load_request_schema(2, 7)
    frame = _frame(2, 7, build(schema, {"replica_id": -1, "isolation_level": 0, "topics": []}))
    assert read_request(frame).body.topics == ()
    with pytest.raises(MalformedFrame, match="topics is null"):
        read_request(frame[:-2] + b"\x00\x00")  # compact array length 0 is null; then the empty tag section
