"""Just enough HTTP/2 to build a gRPC call by hand (no h2 dependency): frames, HPACK literals, the gRPC prefix.

The fuzz target cuts and mutates these bytes; `exchange` is the control that they are a valid call as built.
"""

from __future__ import annotations

import socket
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, CONTINUATION = 0, 1, 4, 9
END_STREAM, END_HEADERS = 0x1, 0x4
SERVICE = "groupcoord.v1.GroupCoordinator"


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def literal(name: bytes, value: bytes) -> bytes:
    """HPACK "literal header field without indexing, new name", no Huffman coding (both under 127 bytes)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def headers(method: str | bytes) -> bytes:
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path(method)),
        (b":authority", b"fuzz"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    return b"".join(literal(name, value) for name, value in fields)


def path(method: str | bytes) -> bytes:
    """The `:path` of a call; a method given as bytes is taken as is (it need not be UTF-8)."""
    return f"/{SERVICE}/".encode() + (method if isinstance(method, bytes) else method.encode())


def grpc_request(method: str | bytes, message: bytes, declared: int | None = None, compressed: int = 0) -> bytes:
    """Preface, SETTINGS, HEADERS and one DATA frame on stream 1 carrying a length-prefixed gRPC message."""
    size = len(message) if declared is None else declared
    body = bytes([compressed]) + size.to_bytes(4, "big") + message
    return (
        PREFACE
        + frame(SETTINGS, 0, 0, b"")
        + frame(HEADERS, END_HEADERS, 1, headers(method))
        + frame(DATA, END_STREAM, 1, body)
    )


def lying_grpc_request(message: bytes, declared: int, compressed: int) -> bytes:
    """A Heartbeat whose gRPC prefix may claim another length or a compression that was never negotiated."""
    return grpc_request("Heartbeat", message, declared, compressed)


def exchange(address: tuple[str, int], request: bytes, timeout_s: float = 10.0) -> bytes:
    """Sends `request`; returns the gRPC message of the first DATA frame on stream 1 of the answer."""
    deadline = time.monotonic() + timeout_s
    with socket.create_connection(address, timeout=timeout_s) as sock:
        sock.sendall(request)
        buffer = b""
        while time.monotonic() < deadline:
            while len(buffer) >= 9:
                length, kind, stream = int.from_bytes(buffer[:3], "big"), buffer[3], int.from_bytes(buffer[5:9], "big")
                if len(buffer) < 9 + length:
                    break
                payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
                if kind == DATA and stream == 1:
                    return payload[5:]
            chunk = sock.recv(65_536)
            if not chunk:
                break
            buffer += chunk
    raise AssertionError("no DATA frame on stream 1 in the answer")


def answer(address: tuple[str, int], request: bytes, wait_s: float = 1.0) -> bytes:
    """Sends `request`; every byte the server sends back until it hangs up or is silent for `wait_s`."""
    received = b""
    with socket.create_connection(address, timeout=wait_s + 1) as sock:
        sock.sendall(request)
        sock.settimeout(wait_s)
        try:
            while chunk := sock.recv(65_536):
                received += chunk
        except (TimeoutError, ConnectionError):
            pass
    return received


def grpc_status(received: bytes) -> bytes | None:
    """The grpc-status value in an answer (grpc core sends it as a literal with an unindexed name, not Huffman)."""
    at = received.find(b"grpc-status")
    if at < 0:
        return None
    start = at + len(b"grpc-status") + 1
    return received[start : start + received[start - 1]]
