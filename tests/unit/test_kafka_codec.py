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

from groupcoord.protocol.kafka.codec import APIS, MalformedFrame, read_request, write_response


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
