"""Raw Kafka frames for tests that speak the protocol themselves (through kio, as the listener does), and a
single node with its Kafka listener on a free port."""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from groupcoord.protocol.kafka.codec import build
from tests.e2e.support import NodeProcess, start_node, stop_node

MAX_FRAME = 4096


def kafka_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, int]]:
    log = Path(tmp_path_factory.mktemp("kafka-listener")) / "node.log"
    proc = start_node(
        log,
        "--kafka-port=0",
        f"--kafka-max-frame-bytes={MAX_FRAME}",
        "--kafka-fetch-max-wait-ms=200",
        "--metrics-port=0",
    )
    try:
        started = next(e for e in proc.events() if e.get("event") == "node.started")
        yield proc, int(started["kafka_address"].rsplit(":", 1)[1])
    finally:
        stop_node(proc)


def request(api_key: int, version: int, correlation_id: int, **fields: object) -> bytes:
    schema = load_request_schema(api_key, version)
    header = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header)(
        buffer,
        header(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="t"),
    )
    entity_writer(schema)(buffer, build(schema, fields))
    return struct.pack(">i", buffer.tell()) + buffer.getvalue()


def read(sock: socket.socket) -> bytes:
    """One response frame without its length; b"" when the node closed the connection."""
    head = exactly(sock, 4)
    return exactly(sock, struct.unpack(">i", head)[0]) if head else b""


def exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def response(frame: bytes, api_key: int, version: int, header: type = ResponseHeaderV1) -> tuple[int, object]:
    head, used = entity_reader(header)(frame, 0)
    body, _ = entity_reader(load_response_schema(api_key, version))(frame, used)
    return head.correlation_id, body


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def call(port: int, api_key: int, version: int, **fields: object) -> object:
    """One request on a connection of its own; the response body."""
    with connect(port) as sock:
        sock.sendall(request(api_key, version, 1, **fields))
        frame = read(sock)
    schema = load_response_schema(api_key, version)
    return response(frame, api_key, version, ResponseHeaderV1 if schema.__flexible__ else ResponseHeaderV0)[1]
