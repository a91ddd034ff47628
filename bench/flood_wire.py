"""The flood's own side of `groupcoord bench flood` (bench/flood.py): plaintext HTTP/2 written by hand, in a child
process, so that opening thousands of connections does not stall the good client's event loop and get counted as the
node's latency. It runs on the standard library's event loop: on uvloop 0.23 the child once died of SIGSEGV while
opening a flood in CI. `H2Connection` sends the preface, SETTINGS and PING ACKs, then HEADERS (and DATA) for as many
streams as it is told, with no regard for the server's SETTINGS_MAX_CONCURRENT_STREAMS. Protocol with the parent,
one JSON line each way:

    argv[1]  JSON config: host, port, kind (`connections`: `count` connections, each through the preface and
             SETTINGS, from `sources` local addresses; `streams`: `count` streams on one connection, HEADERS of a
             Heartbeat without its message, so the node holds every call waiting for it; `requests`: the same with
             the message, so the node answers them all), open_timeout_s
    stdout   {"opened": ..., "open_s": ..., "failed": {...}} once everything is open (or has failed)
    stdin    any line, or EOF → resets the streams still open, closes every connection, prints what the server sent
             ({"closed_by_server": ..., "goaway": ..., "rst_stream": ..., "grpc_status": ...}) and exits
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import resource
import sys
import time
from collections import Counter, deque
from typing import Any, cast

import grpc

from groupcoord.protocol.v1 import groupcoord_pb2 as pb

KINDS = ("connections", "streams", "requests")
HEARTBEAT_PATH = b"/groupcoord.v1.GroupCoordinator/Heartbeat"

# -- HTTP/2, just what a flood needs (RFC 9113) --------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE = 2, 3, 4
DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
H2_ERRORS = (
    "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED",
    "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
)  # fmt: skip
CANCEL = H2_ERRORS.index("CANCEL")
GRPC_STATUS = {str(code.value[0]): code.name for code in grpc.StatusCode}


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def h2_error(code: int) -> str:
    return H2_ERRORS[code] if code < len(H2_ERRORS) else f"0x{code:x}"


def _literal(name: bytes, value: bytes) -> bytes:
    """HPACK literal without indexing, new name, no Huffman: the same bytes in every header block (no table state),
    so one block serves every stream. Lengths under 127."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def request_headers(path: bytes, authority: bytes) -> bytes:
    """The header block of a gRPC call to `path`."""
    fields = (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path), (b":authority", authority),
        (b"content-type", b"application/grpc"), (b"te", b"trailers"),
    )  # fmt: skip
    return b"".join(_literal(name, value) for name, value in fields)


def grpc_message(message: bytes) -> bytes:
    """A gRPC length-prefixed, uncompressed message."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class ConnectionClosed(Exception):
    """The server closed the connection before its SETTINGS."""


class H2Connection(asyncio.Protocol):
    """One client connection: sends the preface and SETTINGS (push off, the largest windows, so the server is never
    held by flow control), ACKs the server's SETTINGS and PINGs, opens streams on request, and counts what the
    server sends: RST_STREAM and GOAWAY codes, and the grpc-status of each answered stream (when `decode_headers`;
    HPACK needs hpack, of the dev extra, only then)."""

    def __init__(self, decode_headers: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.server_settings: dict[int, int] = {}
        self.goaway: list[tuple[str, int, bytes]] = []  # (error code, last stream id, debug data)
        self.rst_stream: Counter[str] = Counter()
        self.grpc_status: Counter[str] = Counter()
        self.pings_acked = 0
        self.unfinished: set[int] = set()
        self.next_stream = 1
        self._window = DEFAULT_WINDOW  # what the server lets us send, connection-wide
        self._pending: deque[bytes] = deque()  # DATA frames waiting for that window
        self._buffer = bytearray()
        self._block = bytearray()
        self._block_end_stream = False
        self._transport: asyncio.Transport | None = None
        self._decoder: Any = None
        if decode_headers:
            from hpack import Decoder  # of the dev extra: imported only where a stream flood needs it

            self._decoder = Decoder()

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        settings = SETTINGS_ENABLE_PUSH.to_bytes(2, "big") + (0).to_bytes(4, "big")
        settings += SETTINGS_INITIAL_WINDOW_SIZE.to_bytes(2, "big") + MAX_WINDOW.to_bytes(4, "big")
        grow = (MAX_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big")
        self._transport.write(PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, grow))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionClosed("closed before the server's SETTINGS"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        at = 0
        while len(buffer) - at >= 9:
            length = int.from_bytes(buffer[at : at + 3], "big")
            end = at + 9 + length
            if len(buffer) < end:
                break
            stream = int.from_bytes(buffer[at + 5 : at + 9], "big") & 0x7FFF_FFFF
            self._frame(buffer[at + 3], buffer[at + 4], stream, bytes(buffer[at + 9 : end]))
            at = end
        del buffer[:at]

    # -- what a flood does

    def send(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def open_streams(self, count: int, headers: bytes, body: bytes | None) -> None:
        """HEADERS for `count` new streams, with END_STREAM and the DATA of `body` after each when given (as far as
        the connection's flow-control window allows; the rest follows WINDOW_UPDATEs), else without: a call that
        waits for its message."""
        frames = []
        for _ in range(count):
            stream = self.next_stream
            self.next_stream += 2
            self.unfinished.add(stream)
            frames.append(frame(HEADERS, END_HEADERS, stream, headers))
            if body is not None:
                self._pending.append(frame(DATA, END_STREAM, stream, body))
        self.send(b"".join(frames))
        self._flush()

    def reset_open_streams(self) -> int:
        """RST_STREAM CANCEL for every stream the server has not ended; how many."""
        code = CANCEL.to_bytes(4, "big")
        self.send(b"".join(frame(RST_STREAM, 0, s, code) for s in sorted(self.unfinished)))
        count = len(self.unfinished)
        self.unfinished.clear()
        return count

    def ping(self, payload: bytes = b"floodpng") -> None:
        self.send(frame(PING, 0, 0, payload))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def unsent(self) -> int:
        """Bytes not yet handed to the kernel, DATA held back by flow control included."""
        buffered = self._transport.get_write_buffer_size() if self._transport is not None else 0
        return buffered + sum(len(f) for f in self._pending)

    # -- frames from the server

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                self.server_settings[int.from_bytes(payload[i : i + 2], "big")] = int.from_bytes(
                    payload[i + 2 : i + 6], "big"
                )
            self.send(frame(SETTINGS, ACK, 0))
            if not self.ready.done():
                self.ready.set_result(None)
        elif kind == PING:
            if flags & ACK:
                self.pings_acked += 1
            else:
                self.send(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            code, last = int.from_bytes(payload[4:8], "big"), int.from_bytes(payload[:4], "big")
            self.goaway.append((h2_error(code), last, payload[8:]))
        elif kind == WINDOW_UPDATE and stream == 0:
            self._window += int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
            self._flush()
        elif kind == RST_STREAM:
            self.rst_stream[h2_error(int.from_bytes(payload[:4], "big"))] += 1
            self.unfinished.discard(stream)
        elif kind == HEADERS:
            start, end = 0, len(payload)
            if flags & PADDED:
                start, end = 1, end - payload[0]
            if flags & PRIORITY:
                start += 5
            self._block = bytearray(payload[start:end])
            self._block_end_stream = bool(flags & END_STREAM)
            if flags & END_HEADERS:
                self._headers(stream)
        elif kind == CONTINUATION:
            self._block += payload
            if flags & END_HEADERS:
                self._headers(stream)
        elif kind == DATA and flags & END_STREAM:
            self.unfinished.discard(stream)

    def _headers(self, stream: int) -> None:
        if self._decoder is not None:
            for name, value in self._decoder.decode(bytes(self._block)):
                if name == "grpc-status":
                    self.grpc_status[GRPC_STATUS.get(value, value)] += 1
        if self._block_end_stream:
            self.unfinished.discard(stream)

    def _flush(self) -> None:
        frames = []
        while self._pending and len(self._pending[0]) - 9 <= self._window:
            data = self._pending.popleft()
            self._window -= len(data) - 9
            frames.append(data)
        if frames:
            self.send(b"".join(frames))


async def connect(
    host: str, port: int, timeout_s: float, decode_headers: bool = False, source: str | None = None
) -> tuple[H2Connection | None, str | None]:
    """A connection (from local address `source` when given) through the preface and the server's SETTINGS, or
    None and why not."""
    loop = asyncio.get_running_loop()
    local = (source, 0) if source is not None else None
    try:
        async with asyncio.timeout(timeout_s):
            _, conn = await loop.create_connection(lambda: H2Connection(decode_headers), host, port, local_addr=local)
            try:
                await conn.ready
            except ConnectionClosed as exc:
                return None, str(exc)
            except BaseException:
                conn.close()
                raise
            return conn, None
    except TimeoutError:
        return None, "timeout"
    except OSError as exc:
        return None, type(exc).__name__


# -- the flood's own process -----------------------------------------------------------------------------------------

# Handshakes in progress at once: thousands of SYNs at once would overflow the listen backlog and measure the
# client's retries instead of the node.
OPEN_AT_ONCE = 100
FIRST_SOURCE = 101
STREAM_BATCH = 500  # streams written per batch, between waits for the socket to drain


def heartbeat_body() -> bytes:
    """A Heartbeat of a member no group has: the node answers it (UNKNOWN_MEMBER_ID or NOT_COORDINATOR)."""
    request = pb.HeartbeatRequest(group_id="flood", generation_id=1, member_id="flood-member")
    return grpc_message(request.SerializeToString())


async def _drained(conns: list[H2Connection], deadline: float) -> None:
    while any(c.unsent() for c in conns if not c.closed.done()) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def source_address(i: int, sources: int) -> str | None:
    """The local address of the i-th flood connection: any (the kernel's choice, 127.0.0.1 for a node there) for one
    source, else round-robin over `sources` addresses from 127.0.0.101 on, clear of the bench's nodes (127.0.0.1-3)."""
    return None if sources == 1 else f"127.0.0.{FIRST_SOURCE + i % sources}"


async def open_connections(
    host: str, port: int, count: int, timeout_s: float, sources: int = 1
) -> tuple[list[H2Connection], dict[str, Any]]:
    """`count` connections through the preface and SETTINGS, from `sources` addresses, OPEN_AT_ONCE at a time."""
    at_once = asyncio.Semaphore(OPEN_AT_ONCE)
    failed: Counter[str] = Counter()

    async def one(i: int) -> H2Connection | None:
        async with at_once:
            conn, why = await connect(host, port, timeout_s, source=source_address(i, sources))
        if why is not None:
            failed[why] += 1
        return conn

    started = time.monotonic()
    conns = [c for c in await asyncio.gather(*(one(i) for i in range(count))) if c is not None]
    return conns, {"opened": len(conns), "open_s": round(time.monotonic() - started, 3), "failed": dict(failed)}


async def open_streams(
    host: str, port: int, count: int, body: bytes | None, timeout_s: float
) -> tuple[list[H2Connection], dict[str, Any]]:
    """`count` streams on one connection, written in batches, ignoring the server's stream limit."""
    started = time.monotonic()
    conn, why = await connect(host, port, timeout_s, decode_headers=True)
    if conn is None:
        return [], {"opened": 0, "open_s": round(time.monotonic() - started, 3), "failed": {why: count}}
    headers = request_headers(HEARTBEAT_PATH, f"{host}:{port}".encode())
    deadline = started + timeout_s
    sent = 0
    while sent < count and not conn.closed.done() and time.monotonic() < deadline:
        batch = min(STREAM_BATCH, count - sent)
        conn.open_streams(batch, headers, body)
        sent += batch
        await _drained([conn], deadline)
    return [conn], {
        "opened": sent,
        "open_s": round(time.monotonic() - started, 3),
        "failed": {} if sent == count else {"not sent": count - sent},
        "server_max_concurrent_streams": conn.server_settings.get(SETTINGS_MAX_CONCURRENT_STREAMS),
    }


def close_all(conns: list[H2Connection]) -> dict[str, Any]:
    """Resets every open stream and closes every connection; what the server did to them meanwhile."""
    closed_by_server = sum(c.closed.done() for c in conns)
    reset = sum(c.reset_open_streams() for c in conns if not c.closed.done())
    for c in conns:
        c.close()
    rst: Counter[str] = Counter()
    status: Counter[str] = Counter()
    goaway: Counter[str] = Counter()
    for c in conns:
        rst.update(c.rst_stream)
        status.update(c.grpc_status)
        goaway.update(code for code, _, _ in c.goaway)
    return {
        "closed_by_server": closed_by_server,
        "goaway": dict(goaway),
        "rst_stream": dict(rst),
        "grpc_status": dict(status),
        "reset_by_us": reset,
    }


async def _child(config: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    host, port, count, timeout_s = config["host"], config["port"], config["count"], config["open_timeout_s"]
    if config["kind"] == "connections":
        conns, opened = await open_connections(host, port, count, timeout_s, config["sources"])
    else:
        body = heartbeat_body() if config["kind"] == "requests" else None
        conns, opened = await open_streams(host, port, count, body, timeout_s)
    print(json.dumps(opened), flush=True)
    await stdin.readline()
    closed = close_all(conns)
    await _drained(conns, time.monotonic() + 5)  # the RST_STREAMs and FINs are out before the process exits
    print(json.dumps(closed), flush=True)


def _raise_fd_limit(wanted: int) -> None:
    """The flood holds a socket per connection: a soft descriptor limit of 1,024 would stop it before the node."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (hard if hard == resource.RLIM_INFINITY else min(wanted, hard), hard)
        )


def main() -> None:
    faulthandler.enable()  # a crash of the flood itself says where, not just "exited with -11"
    config = json.loads(sys.argv[1])
    _raise_fd_limit(config["count"] + 100)
    asyncio.run(_child(config))


if __name__ == "__main__":
    main()
