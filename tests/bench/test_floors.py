"""The transports' floors that `bench etcd` reports next to etcd (which CI does not install, so the floors are run
here on their own): bench/grpc_floor.py and bench/kafka_floor.py, each a real server process driven by the bench's
own clients, with complete figures."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import ModuleType

import pytest

from groupcoord.bench import grpc_floor, kafka_floor
from groupcoord.bench.kafka_client import API_VERSIONS, OFFSET_COMMIT, KafkaClient, KafkaError, decode_response
from tests.bench.test_bench import ordered


@contextlib.asynccontextmanager
async def running(server: grpc_floor.EchoServer) -> AsyncIterator[None]:
    server.start()
    try:
        await server.wait_ready()
        yield
    finally:
        server.stop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("module", "server"),
    [(grpc_floor, grpc_floor.EchoServer), (kafka_floor, kafka_floor.KafkaEchoServer)],
    ids=["grpc", "kafka"],
)
async def test_the_echo_server_answers_both_workloads_and_reports_its_cpu(
    module: ModuleType, server: type[grpc_floor.EchoServer]
) -> None:
    echo = server()
    async with running(echo):
        seq = await module.sequential(echo, 30)
        flight = await module.in_flight(echo, 4, 0.5)
    ordered(seq["latency"], 30)
    assert seq["ops"] == 30 and seq["ops_per_s"] > 0
    assert flight["in_flight"] == 4 and flight["ops"] == flight["latency"]["count"] > 0
    for figures in (seq, flight):
        assert set(figures["nodes_cpu_percent"]) == {"1"}  # the echo process was measured, and only it
    assert echo.proc is not None and echo.proc.returncode == 0  # SIGTERM stops it cleanly, by its pid


def test_the_grpc_payload_is_a_one_partition_offset_commit() -> None:
    from groupcoord.protocol.v1 import groupcoord_pb2 as pb

    request = pb.OffsetCommitRequest.FromString(grpc_floor.payload())
    assert [len(t.partitions) for t in request.topics] == [1]


@pytest.mark.timeout(60)
async def test_the_kafka_floor_answers_each_request_s_correlation_id_and_closes_on_what_it_does_not_serve() -> None:
    echo = kafka_floor.KafkaEchoServer()
    async with running(echo):
        client = KafkaClient([echo.address])
        try:
            connection = await client.connection(echo.address)  # ApiVersions checked by the client
            answers = [await connection.request(OFFSET_COMMIT, kafka_floor.commit_values()) for _ in range(3)]
            assert [int(a.topics[0].partitions[0].error_code) for a in answers] == [0, 0, 0]
            with pytest.raises(KafkaError, match="connection broken"):
                await connection.request(12, {"group_id": "g", "generation_id": 1, "member_id": "m"}, timeout_s=5)
        finally:
            await client.close()


def test_the_kafka_floor_s_bodies_are_the_client_s_versions_of_api_versions_and_offset_commit() -> None:
    bodies = kafka_floor.prepared_bodies()
    assert set(bodies) == {API_VERSIONS, OFFSET_COMMIT}
    # A whole response frame (header v1 with correlation id 7, then the body) reads back as one partition, no error.
    correlation_id, body = decode_response(OFFSET_COMMIT, 9, b"\0\0\0\x07\0" + bodies[OFFSET_COMMIT])
    assert correlation_id == 7
    assert [(t.name, [int(p.error_code) for p in t.partitions]) for t in body.topics] == [("orders", [0])]
