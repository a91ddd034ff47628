"""What a heartbeat costs in gRPC itself: unary calls against one bidirectional stream per client, and against
batches of heartbeats per message, with the node's own server stack (grpc.aio on uvloop, raw-bytes handlers that
parse and answer protobuf) and no coordinator behind it.

    .venv/bin/python bench/grpc_transport.py [--heartbeats 20000] [--concurrency 64] [--batch 50] [--runs 3]
        [--servers guarded,generic,registered,forwarded]

A server process on 127.0.0.1 and this client; it prints µs of CPU per heartbeat for each side and the
heartbeats per second, per mode, and the latency of sequential unary calls. Nothing is asserted
(docs/PERFORMANCE.md and docs/FUZZING.md record the choices).

The servers are the ways of serving the client port that were weighed against grpcio's `:path` bug
(docs/FUZZING.md): `generic` is grpcio's aio server with a generic handler (how the node served before),
`registered` the same with registered method handlers, `guarded` the node's server (node/hostile.py: registered
handlers and the guarded accept loop), and `forwarded` the guarded server behind a byte-for-byte TCP forwarder on
the same event loop: the least any validating layer in front of grpcio would cost, before it parses a frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import uvloop

from groupcoord.node.hostile import MalformedInput, guarded_server
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

SERVICE = "bench.Transport"
REQUEST = pb.HeartbeatRequest(
    group_id="orders-app", generation_id=7, member_id="bench-3f1c9a2e-4b7d-4e0a-9d61-2f6b8c1e7a55"
).SerializeToString()


def _answer(raw: bytes) -> bytes:
    request = pb.HeartbeatRequest.FromString(raw)
    return pb.HeartbeatResponse(error_code=0 if request.generation_id else 22).SerializeToString()


def _split(raw: bytes) -> list[bytes]:
    """A batch is length-prefixed messages (4 bytes big-endian, then the message)."""
    out, at = [], 0
    while at < len(raw):
        size = int.from_bytes(raw[at : at + 4], "big")
        out.append(raw[at + 4 : at + 4 + size])
        at += 4 + size
    return out


def _join(parts: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


async def _unary(raw: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return _answer(raw)


async def _batch(raw: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return _join([_answer(part) for part in _split(raw)])


async def _stream(
    requests: AsyncIterator[bytes], _context: grpc.aio.ServicerContext[bytes, bytes]
) -> AsyncIterator[bytes]:
    async for raw in requests:
        yield _answer(raw)


class _Pipe(asyncio.Protocol):
    """One direction of a forwarded connection: what arrives on this side is written to the other."""

    def __init__(self) -> None:
        self.peer: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream protocol is handed a Transport

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.early.append(data)
        else:
            self.peer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()


async def _forward(listen_port: int, target_port: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    connecting: set[asyncio.Task[None]] = set()

    def accepted() -> _Pipe:
        client = _Pipe()

        async def connect() -> None:
            _, upstream = await loop.create_connection(_Pipe, "127.0.0.1", target_port)
            assert client.transport is not None and upstream.transport is not None
            upstream.peer, client.peer = client.transport, upstream.transport
            for data in client.early:
                upstream.transport.write(data)

        task = loop.create_task(connect())
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    return await loop.create_server(accepted, "127.0.0.1", listen_port)


async def _serve(port: int, kind: str) -> None:
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "Batch": grpc.unary_unary_rpc_method_handler(_batch),
        "Stream": grpc.stream_stream_rpc_method_handler(_stream),
    }
    server = grpc.aio.server() if kind in ("generic", "registered") else guarded_server([], MalformedInput())
    if kind == "generic":
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    else:
        server.add_registered_method_handlers(SERVICE, handlers)
    forwarder = None
    if kind == "forwarded":
        forwarder = await _forward(port, server.add_insecure_port("127.0.0.1:0"))
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    if forwarder is not None:
        forwarder.close()
    await server.stop(0)


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _unary_mode(channel: grpc.aio.Channel, heartbeats: int, concurrency: int, _batch_size: int) -> None:
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Unary")
    per_worker = heartbeats // concurrency

    async def worker() -> None:
        for _ in range(per_worker):
            await call(REQUEST)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _stream_mode(channel: grpc.aio.Channel, heartbeats: int, concurrency: int, _batch_size: int) -> None:
    """One stream per worker: a request, then its answer, in turn (as one member's heartbeats would go)."""
    per_worker = heartbeats // concurrency

    async def worker() -> None:
        stream: grpc.aio.StreamStreamCall[bytes, bytes] = channel.stream_stream(f"/{SERVICE}/Stream")()
        for _ in range(per_worker):
            await stream.write(REQUEST)
            await stream.read()
        await stream.done_writing()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _batch_mode(channel: grpc.aio.Channel, heartbeats: int, concurrency: int, batch_size: int) -> None:
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Batch")
    payload = _join([REQUEST] * batch_size)
    per_worker = heartbeats // concurrency // batch_size

    async def worker() -> None:
        for _ in range(per_worker):
            assert len(_split(await call(payload))) == batch_size

    await asyncio.gather(*(worker() for _ in range(concurrency)))


MODES: dict[str, Callable[[grpc.aio.Channel, int, int, int], Awaitable[None]]] = {
    "unary": _unary_mode,
    "stream": _stream_mode,
    "batch": _batch_mode,
}


async def _sequential(channel: grpc.aio.Channel, calls: int) -> dict[str, float]:
    """One unary call at a time: the latency a lone client sees."""
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Unary")
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await call(REQUEST)
        times.append(time.perf_counter() - start)
    times.sort()
    return {"p50_us": round(times[len(times) // 2] * 1e6), "p99_us": round(times[int(len(times) * 0.99)] * 1e6)}


async def _measure(port: int, server_pid: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    out = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await _sequential(channel, 200)  # warm-up
        out["sequential"] = await _sequential(channel, args.sequential)
        for name, mode in MODES.items():
            await mode(channel, args.concurrency * 20, args.concurrency, args.batch)  # warm-up
            server_cpu, own_cpu, start = _proc_cpu_s(server_pid), _own_cpu_s(), time.perf_counter()
            await mode(channel, args.heartbeats, args.concurrency, args.batch)
            wall = time.perf_counter() - start
            out[name] = {
                "heartbeats_per_s": round(args.heartbeats / wall),
                "server_cpu_us": round((_proc_cpu_s(server_pid) - server_cpu) / args.heartbeats * 1e6, 1),
                "client_cpu_us": round((_own_cpu_s() - own_cpu) / args.heartbeats * 1e6, 1),
            }
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heartbeats", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64, help="calls (or streams) in flight")
    parser.add_argument("--batch", type=int, default=50, help="heartbeats per message in batch mode")
    parser.add_argument("--sequential", type=int, default=2_000, help="sequential unary calls for the latency")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--servers", default="guarded", help="comma-separated: guarded, generic, registered, forwarded (see above)"
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="guarded", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        uvloop.run(_serve(args.serve, args.kind))
        return
    kinds = args.servers.split(",")
    runs: dict[str, list[dict[str, dict[str, float]]]] = {kind: [] for kind in kinds}
    for _ in range(args.runs):
        for kind in kinds:  # alternated, so that each server sees the same machine
            port = _free_port()
            cmd = [sys.executable, "-m", "groupcoord.bench.grpc_transport", "--serve", str(port), "--kind", kind]
            with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as server:
                assert server.stdout is not None and server.stdin is not None
                if server.stdout.readline().strip() != "ready":
                    raise SystemExit("the transport bench server did not start")
                runs[kind].append(uvloop.run(_measure(port, server.pid, args)))
                server.stdin.close()
    medians = {
        kind: {
            mode: {key: statistics.median(run[mode][key] for run in kind_runs) for key in kind_runs[0][mode]}
            for mode in kind_runs[0]
        }
        for kind, kind_runs in runs.items()
    }
    print(json.dumps({"load_1m": os.getloadavg()[0], "runs": runs, "median": medians}, indent=1))


if __name__ == "__main__":
    main()
