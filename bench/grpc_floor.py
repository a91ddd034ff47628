"""The floor of the transport: a gRPC server that does nothing but answer, on the node's stack (grpc.aio on
uvloop, one process), driven like the `etcd` scenario drives both systems. Its CPU per call and its latency are
what any Python gRPC server pays before it parses, routes, replicates or fsyncs anything, so `bench etcd` reports
it next to etcd's whole write: a goal below the floor cannot be met by work inside the node.

Run as `python -m groupcoord.bench.grpc_floor HOST PORT` by `EchoServer`, stopped by its pid.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from typing import Any

import grpc
import uvloop

from groupcoord.bench import workloads
from groupcoord.bench.cluster import proc_cpu_s
from groupcoord.node.launcher import free_base
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

METHOD = "/groupcoord.bench.Floor/Echo"
START_TIMEOUT_S = 20.0
STOP_WAIT_S = 10.0


def _same(data: bytes) -> bytes:
    return data


def payload() -> bytes:
    """An OffsetCommit of one partition as the commit scenarios send it, so the bytes on the wire are alike."""
    partition = pb.OffsetCommitRequest.Partition(partition_index=3, committed_offset=123_456)
    return pb.OffsetCommitRequest(
        group_id="bench-in-flight-0",
        generation_id=1,
        member_id="bench-in-flight-0-" + "0" * 36,
        topics=[pb.OffsetCommitRequest.Topic(name="orders", partitions=[partition])],
    ).SerializeToString()


async def _serve(host: str, port: int) -> None:
    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handler = grpc.unary_unary_rpc_method_handler(echo, request_deserializer=_same, response_serializer=_same)
    service = grpc.method_handlers_generic_handler("groupcoord.bench.Floor", {"Echo": handler})
    server.add_generic_rpc_handlers((service,))
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    await server.stop(None)


class EchoServer:
    """The echo server in a process of its own on a free loopback port, so its CPU is measured as a node's is."""

    MODULE = "groupcoord.bench.grpc_floor"  # run as `python -m MODULE HOST PORT`

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_base(host, 1, set())
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", self.MODULE, self.host, str(self.port)]
        quiet = subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdin=quiet, stdout=quiet, stderr=quiet)

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"{self.host}:{self.port}")

    async def wait_ready(self) -> None:
        assert self.proc is not None
        async with self.channel() as channel:
            try:
                await asyncio.wait_for(channel.channel_ready(), START_TIMEOUT_S)
            except TimeoutError:
                self.stop()
                raise RuntimeError(f"the gRPC floor's echo server did not answer in {START_TIMEOUT_S:.0f} s") from None

    def cpu_s(self) -> dict[int, float]:
        if self.proc is None or (cpu := proc_cpu_s(self.proc.pid)) is None:
            return {}
        return {1: cpu}

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def sequential(server: EchoServer, ops: int) -> dict[str, Any]:
    """One client, one call at a time → latency and the server's CPU per call."""
    data = payload()
    async with server.channel() as channel:
        call = channel.unary_unary(METHOD, request_serializer=_same, response_deserializer=_same)
        return await workloads.sequential(server, lambda _: call(data), ops)


async def in_flight(server: EchoServer, in_flight: int, duration_s: float) -> dict[str, Any]:
    """`in_flight` loops over one channel for `duration_s` after a second's warm-up → calls/s and CPU per call."""
    data = payload()
    async with server.channel() as channel:
        call = channel.unary_unary(METHOD, request_serializer=_same, response_deserializer=_same)
        return await workloads.in_flight(server, lambda _: call(data), in_flight, duration_s)


def main(argv: list[str]) -> None:
    host, port = argv
    uvloop.run(_serve(host, int(port)))


if __name__ == "__main__":
    main(sys.argv[1:])
