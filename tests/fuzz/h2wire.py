"""The HTTP/2 and gRPC wire pieces the fuzzer (tests/fuzz/h2fuzz.py) and its tests build requests from by hand:
frames hyperframe will not build, gRPC messages that lie, call headers, HPACK literals.
"""

from __future__ import annotations

from h2.errors import ErrorCodes
from hpack.hpack import encode_integer

from groupcoord.protocol.v1 import groupcoord_pb2 as pb

LOCALHOST = "127.0.0.1"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CONNECT_TIMEOUT_S = 2.0
# A send the server does not take within this long ends the connection (counted as `stalled`).
SEND_TIMEOUT_S = 0.5
# Frame types by number, for frames hyperframe will not build (bad lengths, flags, stream ids).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
MAX_WINDOW = 2**31 - 1
# Calls the node serves, with a valid request body: a malformed request is one of these, damaged.
HEARTBEAT = pb.HeartbeatRequest(group_id="fz-h2", generation_id=1, member_id="nobody").SerializeToString()
CALLS = (
    (b"/groupcoord.v1.GroupCoordinator/Heartbeat", HEARTBEAT),
    (b"/groupcoord.v1.GroupCoordinator/DescribeCluster", b""),
    (b"/grpc.health.v1.Health/Check", b""),
)
DESCRIBE_CLUSTER = CALLS[1]
# The calls that get garbage bodies: the node's own service answers INVALID_ARGUMENT. Not grpcio's health servicer:
# it answers UNKNOWN, and when the client is gone by then grpcio prints a traceback to stderr (a known finding:
# test_h2_regressions.py::test_regression_a_garbage_health_request_of_a_client_gone_is_no_traceback).
BODY_CALLS = CALLS[:2]


def frame(kind: int, flags: int, stream: int, payload: bytes, length: int | None = None) -> bytes:
    """Any frame, the reserved bit and a lying length included (`stream` up to 2**32 - 1)."""
    size = len(payload) if length is None else length
    return size.to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def grpc_message(body: bytes, compressed: int = 0, declared: int | None = None) -> bytes:
    return bytes([compressed]) + (len(body) if declared is None else declared).to_bytes(4, "big") + body


def call_headers(path: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", LOCALHOST.encode()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


def frames_in(data: bytes) -> int:
    """How many frames h2 queued (after the preface, if it is there)."""
    at, count = len(PREFACE) if data.startswith(PREFACE) else 0, 0
    while at + 9 <= len(data):
        at += 9 + int.from_bytes(data[at : at + 3], "big")
        count += 1
    return count


def code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return hex(code)


def literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal without indexing (new name, no Huffman): it leaves the server's table as it was."""
    return b"\x00" + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value
