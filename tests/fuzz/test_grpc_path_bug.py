"""grpcio's aio server and a `:path` that is not UTF-8: the minimal reproducer, the node's guard, the fallback.

grpcio 1.85's aio server decodes the path of a call to an unregistered method as strict UTF-8 in its accept loop;
one such call shuts the whole server down. `node/hostile.py` guards against it. The first test is the reproducer
on a bare grpcio server: it fails once a grpcio release fixes the bug, which is the sign to drop the guard (and
this file's first test with it).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest
from grpc._cython import cygrpc

from groupcoord.base.errors import StartupError
from groupcoord.node.hostile import UNREGISTERED_PATH, MalformedInput, guarded_server
from tests.e2e.support import start_node, stop_node
from tests.fuzz import http2
from tests.fuzz.profiles import time_limit

BAD_PATH = b"He\xb4rtbeat"
# Runs a node whose server is grpcio's own (no guard), so that the path still kills it: the fallback's test.
UNGUARDED_NODE = (
    "-c",
    "import sys, grpc\n"
    "from groupcoord.node import hostile\n"
    "hostile.guarded_server = lambda options, malformed: grpc.aio.server(options=options)\n"
    "from groupcoord.cli import main\n"
    "sys.exit(main())\n",
)


def send(port: int, method: bytes) -> bytes:
    """A gRPC call to `/groupcoord.v1.GroupCoordinator/<method>` built by hand; whatever comes back in 1 s."""
    return http2.answer(("127.0.0.1", port), http2.grpc_request(method, b""))


async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def serve(server: grpc.aio.Server) -> int:
    server.add_registered_method_handlers(http2.SERVICE, {"Heartbeat": grpc.unary_unary_rpc_method_handler(echo)})
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return port


async def connectable(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


@time_limit(30)
async def test_grpcio_still_stops_serving_on_a_path_that_is_not_utf8():
    """The reproducer. If this fails, grpcio no longer dies of the path: remove the guard in node/hostile.py."""
    server = grpc.aio.server()
    port = await serve(server)
    try:
        await asyncio.to_thread(send, port, BAD_PATH)
        with pytest.raises(UnicodeDecodeError):
            await asyncio.wait_for(server.wait_for_termination(), 10)
        assert not await connectable(port)
    finally:
        with contextlib.suppress(UnicodeDecodeError):
            await server.stop(None)


@time_limit(30)
async def test_the_guarded_server_answers_unimplemented_and_keeps_serving():
    counted: list[str] = []
    server = guarded_server([], MalformedInput(counted.append))
    port = await serve(server)
    try:
        for method in (BAD_PATH, b"\xff", b"NoSuchMethod"):
            answer = await asyncio.to_thread(send, port, method)
            assert http2.grpc_status(answer) == b"12", answer  # UNIMPLEMENTED, as grpcio answers an unknown method
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await channel.unary_unary(f"/{http2.SERVICE}/Heartbeat")(b"still here", timeout=5) == b"still here"
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await channel.unary_unary(f"/{http2.SERVICE}/NoSuchMethod")(b"", timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert counted == [UNREGISTERED_PATH] * 4
    finally:
        await server.stop(None)


@time_limit(60)
def test_a_node_whose_server_dies_hands_over_and_exits(tmp_path: Path):
    """Should a server die under the node all the same (here grpcio's own server, without the guard), the node
    does not linger with a closed client port: it hands over and exits with 1, and a supervisor restarts it."""
    node = start_node(tmp_path / "node.log", "--partitions=1", entry=UNGUARDED_NODE)
    try:
        send(node.port, BAD_PATH)
        assert node.proc.wait(20) == 1
        assert [e for e in node.events() if e.get("event") == "node.server_died"]
        assert [e for e in node.events() if e.get("event") == "node.stopped"]
    finally:
        stop_node(node)


def test_a_grpcio_without_what_the_guard_needs_stops_the_start(monkeypatch: pytest.MonkeyPatch):
    """A grpcio upgrade that renames one of the internals must fail the start with one line, not leave the node
    without its guard."""
    monkeypatch.delattr(cygrpc, "_RequestCallError")
    with pytest.raises(StartupError, match="_RequestCallError"):
        guarded_server([], MalformedInput())
