"""The Kafka listener's framing on a real node: answers in request order, Kafka's ApiVersions rule, and hostile
frames that close their own connection (with a log line) and nothing else."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0

from groupcoord.protocol.kafka.codec import APIS
from tests.e2e.support import NodeProcess
from tests.e2e.test_metrics import Scrape, metrics_address, scrape_until
from tests.kafka.wire import MAX_FRAME, connect, kafka_node, read, request, response


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, int]]:
    yield from kafka_node(tmp_path_factory)


def test_pipelined_requests_are_answered_in_request_order(node) -> None:
    _, port = node
    with connect(port) as sock:
        # A Fetch that waits goes first: the answers behind it still come after it.
        fetch = request(1, 12, 1, replica_id=-1, max_wait=200, min_bytes=1, topics=(), forgotten_topics_data=())
        beat = request(12, 4, 2, group_id="nobody", generation_id=1, member_id="m")
        versions = request(18, 3, 3, client_software_name="test", client_software_version="1")
        sock.sendall(fetch + beat + versions)
        ids = [response(read(sock), 1, 12)[0]]
        correlation, heartbeat = response(read(sock), 12, 4)
        ids.append(correlation)
        correlation, listed = response(read(sock), 18, 3, ResponseHeaderV0)
        ids.append(correlation)
    assert ids == [1, 2, 3]
    assert heartbeat.error_code == ErrorCode.unknown_member_id
    assert {(k.api_key, k.min_version, k.max_version) for k in listed.api_keys} == {
        (key, lo, hi) for key, (_, lo, hi) in APIS.items()
    }


def test_an_unknown_api_versions_version_is_answered_at_v0_with_unsupported_version(node) -> None:
    _, port = node
    with connect(port) as sock:
        sock.sendall(struct.pack(">ihhi", 10, 18, 99, 5) + b"\0\x01x" + b"\0")
        correlation, body = response(read(sock), 18, 0, ResponseHeaderV0)
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
    with connect(port) as sock:
        sock.sendall(frame)
        assert read(sock) == b""  # closed by the node
    with connect(port) as sock:  # and the next client is served
        sock.sendall(request(18, 3, 9, client_software_name="t", client_software_version="1"))
        correlation, body = response(read(sock), 18, 3, ResponseHeaderV0)
    assert (correlation, body.error_code) == (9, ErrorCode.none)
    assert sum(1 for e in proc.events() if e.get("event") == event) == before + 1
    assert proc.alive()


def test_connections_client_software_and_requests_by_api_version_and_code_are_measured_and_logged(node) -> None:
    proc, port = node
    address = metrics_address(proc)
    software = {"software_name": "test-client", "software_version": "1.2.3"}
    with connect(port) as sock:
        sock.sendall(request(18, 3, 1, client_software_name="test-client", client_software_version="1.2.3"))
        assert response(read(sock), 18, 3, ResponseHeaderV0)[1].error_code == ErrorCode.none
        sock.sendall(request(12, 4, 2, group_id="nobody", generation_id=1, member_id="m"))
        read(sock)
        during = Scrape(address)
    assert during.value("groupcoord_kafka_connections") >= 1
    assert during.value("groupcoord_kafka_client_connections", **software) == 1
    assert during.value("groupcoord_kafka_requests_total", api="ApiVersions", version="3", error_code="NONE") >= 1
    assert (
        during.value("groupcoord_kafka_requests_total", api="Heartbeat", version="4", error_code="UNKNOWN_MEMBER_ID")
        >= 1
    )
    after = asyncio.run(
        scrape_until(address, lambda s: s.value("groupcoord_kafka_client_connections", **software) == 0)
    )
    assert after.value("groupcoord_kafka_client_connections", **software) == 0
    logged = [e for e in proc.events() if e.get("event") == "kafka.client"]
    assert any(e["software_name"] == "test-client" and e["software_version"] == "1.2.3" for e in logged), logged


def test_a_client_software_name_outside_kafkas_pattern_is_an_invalid_request(node) -> None:
    _, port = node
    with connect(port) as sock:
        sock.sendall(request(18, 3, 1, client_software_name="bad name!", client_software_version="1"))
        body = response(read(sock), 18, 3, ResponseHeaderV0)[1]
    assert (body.error_code, body.api_keys) == (ErrorCode.invalid_request, ())
