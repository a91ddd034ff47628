"""The Kafka listener's framing on a real node: answers in request order, Kafka's ApiVersions rule, and hostile
frames that close their own connection (with a log line) and nothing else."""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from groupcoord.protocol.kafka.codec import APIS, build
from tests.e2e.support import NodeProcess, start_node, stop_node

MAX_FRAME = 4096


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, int]]:
    log = Path(tmp_path_factory.mktemp("kafka-listener")) / "node.log"
    proc = start_node(log, "--kafka-port=0", f"--kafka-max-frame-bytes={MAX_FRAME}", "--kafka-fetch-max-wait-ms=200")
    try:
        started = next(e for e in proc.events() if e.get("event") == "node.started")
        yield proc, int(started["kafka_address"].rsplit(":", 1)[1])
    finally:
        stop_node(proc)


def _request(api_key: int, version: int, correlation_id: int, **fields: object) -> bytes:
    schema = load_request_schema(api_key, version)
    header = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header)(
        buffer,
        header(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="t"),
    )
    entity_writer(schema)(buffer, build(schema, fields))
    return struct.pack(">i", buffer.tell()) + buffer.getvalue()


def _read(sock: socket.socket) -> bytes:
    """One response frame without its length; b"" when the node closed the connection."""
    head = _exactly(sock, 4)
    return _exactly(sock, struct.unpack(">i", head)[0]) if head else b""


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _response(frame: bytes, api_key: int, version: int, header: type = ResponseHeaderV1) -> tuple[int, object]:
    head, used = entity_reader(header)(frame, 0)
    body, _ = entity_reader(load_response_schema(api_key, version))(frame, used)
    return head.correlation_id, body


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def test_pipelined_requests_are_answered_in_request_order(node) -> None:
    _, port = node
    with _connect(port) as sock:
        # A Fetch that waits goes first: the answers behind it still come after it.
        fetch = _request(1, 12, 1, replica_id=-1, max_wait=200, min_bytes=1, topics=(), forgotten_topics_data=())
        beat = _request(12, 4, 2, group_id="nobody", generation_id=1, member_id="m")
        versions = _request(18, 3, 3, client_software_name="test", client_software_version="1")
        sock.sendall(fetch + beat + versions)
        ids = [_response(_read(sock), 1, 12)[0]]
        correlation, heartbeat = _response(_read(sock), 12, 4)
        ids.append(correlation)
        correlation, listed = _response(_read(sock), 18, 3, ResponseHeaderV0)
        ids.append(correlation)
    assert ids == [1, 2, 3]
    assert heartbeat.error_code == ErrorCode.unknown_member_id
    assert {(k.api_key, k.min_version, k.max_version) for k in listed.api_keys} == {
        (key, lo, hi) for key, (_, lo, hi) in APIS.items()
    }


def test_an_unknown_api_versions_version_is_answered_at_v0_with_unsupported_version(node) -> None:
    _, port = node
    with _connect(port) as sock:
        sock.sendall(struct.pack(">ihhi", 10, 18, 99, 5) + b"\0\x01x" + b"\0")
        correlation, body = _response(_read(sock), 18, 0, ResponseHeaderV0)
    assert correlation == 5
    assert body.error_code == ErrorCode.unsupported_version
    assert 11 in {k.api_key for k in body.api_keys}


@pytest.mark.parametrize(
    ("frame", "event"),
    [
        (struct.pack(">i", MAX_FRAME + 1), "kafka.frame_refused"),
        (struct.pack(">i", -5), "kafka.frame_refused"),
        (struct.pack(">ihhi", 8, 999, 0, 1), "kafka.unsupported_request"),
        (struct.pack(">ihhi", 12, 11, 5, 1) + b"\xff\xff\xff\xff", "kafka.malformed_request"),
    ],
    ids=["oversized", "negative-length", "unknown-api", "garbage-join"],
)
def test_a_hostile_frame_closes_its_connection_with_a_log_line_and_the_node_serves_on(node, frame, event) -> None:
    proc, port = node
    before = sum(1 for e in proc.events() if e.get("event") == event)
    with _connect(port) as sock:
        sock.sendall(frame)
        assert _read(sock) == b""  # closed by the node
    with _connect(port) as sock:  # and the next client is served
        sock.sendall(_request(18, 3, 9, client_software_name="t", client_software_version="1"))
        correlation, body = _response(_read(sock), 18, 3, ResponseHeaderV0)
    assert (correlation, body.error_code) == (9, ErrorCode.none)
    assert sum(1 for e in proc.events() if e.get("event") == event) == before + 1
    assert proc.alive()
