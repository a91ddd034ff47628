"""The floor of the Kafka listener's transport: a server on the listener's stack (asyncio streams on uvloop, kio
for the request and response headers, one process) that answers every OffsetCommit with the same prepared body,
driven by the `kafka` scenario's client like the node is. What it costs per call, and how fast it answers, is what
the Kafka listener pays before it routes, replicates or fsyncs anything: `bench etcd` reports it next to etcd's
whole write, as it reports the gRPC floor (bench/grpc_floor.py).

Run as `python -m groupcoord.bench.kafka_floor HOST PORT` by `KafkaEchoServer`, stopped by its pid.
"""

from __future__ import annotations

import asyncio
import io
import signal
import struct
import sys
import time
from typing import Any

import uvloop
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from groupcoord.bench import kafka_bench, offsets, workloads
from groupcoord.bench.grpc_floor import START_TIMEOUT_S, EchoServer
from groupcoord.bench.kafka_client import (
    API_VERSIONS,
    OFFSET_COMMIT,
    QUICK_LANES,
    VERSIONS,
    KafkaClient,
    schemas,
)
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import build

_LENGTH = struct.Struct(">i")
GROUP_ID = "bench-in-flight-0"


def commit_values() -> dict[str, Any]:
    """An OffsetCommit of one partition as `kafka_bench.commit_once` sends it."""
    return kafka_bench.commit_values(GROUP_ID, 1, GROUP_ID + "-" + "0" * 36, 3, 123_456)


def _body(api_key: int, values: dict[str, Any]) -> bytes:
    """A response body of the client's version of `api_key`, written once by kio."""
    schema = schemas(api_key, VERSIONS[api_key])[2]
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, build(schema, values))
    return buffer.getvalue()


def prepared_bodies() -> dict[int, bytes]:
    """What the floor answers: ApiVersions (so a client can check the versions it sends) and OffsetCommit."""
    versions = {
        "error_code": Errors.NONE,
        "api_keys": [{"api_key": k, "min_version": v, "max_version": v} for k, v in VERSIONS.items()],
        "throttle_time": 0,
    }
    partition = {"partition_index": 3, "error_code": Errors.NONE}
    commit = {"throttle_time": 0, "topics": [{"name": offsets.TOPIC, "partitions": [partition]}]}
    return {API_VERSIONS: _body(API_VERSIONS, versions), OFFSET_COMMIT: _body(OFFSET_COMMIT, commit)}


async def _serve(host: str, port: int) -> None:
    bodies = prepared_bodies()
    read_header = entity_reader(RequestHeader)
    write_v0, write_v1 = entity_writer(ResponseHeaderV0), entity_writer(ResponseHeaderV1)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
                header, _ = read_header(await reader.readexactly(size), 0)
                body = bodies.get(int(header.request_api_key))
                if body is None:
                    break  # not a request this floor answers: the client sees the connection close
                out = io.BytesIO()
                out.write(b"\0\0\0\0")
                if header.request_api_key == API_VERSIONS:  # ApiVersions answers with header v0, as brokers do
                    write_v0(out, ResponseHeaderV0(correlation_id=header.correlation_id))
                else:
                    write_v1(out, ResponseHeaderV1(correlation_id=header.correlation_id))
                out.write(body)
                frame = out.getbuffer()
                _LENGTH.pack_into(frame, 0, len(frame) - _LENGTH.size)
                writer.write(bytes(frame))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, host, port)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    server.close()


class KafkaEchoServer(EchoServer):
    """The Kafka floor in a process of its own, started, measured and stopped as the gRPC one is."""

    MODULE = "groupcoord.bench.kafka_floor"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(
                        f"the Kafka floor's echo server did not answer in {START_TIMEOUT_S:.0f} s"
                    ) from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return


async def sequential(server: KafkaEchoServer, ops: int) -> dict[str, Any]:
    """One client, one OffsetCommit at a time → latency and the server's CPU per call."""
    client, values = KafkaClient([server.address]), commit_values()
    try:
        connection = await client.connection(server.address)
        return await workloads.sequential(server, lambda _: connection.request(OFFSET_COMMIT, values), ops)
    finally:
        await client.close()


async def in_flight(server: KafkaEchoServer, in_flight: int, duration_s: float) -> dict[str, Any]:
    """`in_flight` loops over the client's quick lanes for `duration_s` after a warm-up → calls/s, CPU per call."""
    client, values = KafkaClient([server.address]), commit_values()
    try:
        lanes = [await client.connection(server.address, f"quick-{lane}") for lane in range(QUICK_LANES)]
        return await workloads.in_flight(
            server, lambda worker: lanes[worker % QUICK_LANES].request(OFFSET_COMMIT, values), in_flight, duration_s
        )
    finally:
        await client.close()


def main(argv: list[str]) -> None:
    host, port = argv
    uvloop.run(_serve(host, int(port)))


if __name__ == "__main__":
    main(sys.argv[1:])
