"""The fuzzer's header attacks (tests/fuzz/h2fuzz.py): header values, pseudo-headers and names no server should
accept, header blocks too big, CONTINUATION floods and HPACK that does not decode.
"""

from __future__ import annotations

import random

from hpack.hpack import encode_integer
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from tests.fuzz.h2conn import Conn
from tests.fuzz.h2wire import (
    BODY_CALLS,
    CALLS,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PING,
    SETTINGS,
    call_headers,
    frame,
    grpc_message,
    literal,
)


def pick_call(rng: random.Random, garbage_body: bool = False) -> tuple[bytes, bytes]:
    return rng.choice(BODY_CALLS if garbage_body else CALLS)


def debug_text(rng: random.Random) -> bytes:
    """GOAWAY debug data: printable ASCII only. grpc core writes a client's debug data to the node's stderr as it
    is (a known finding: test_h2_regressions.py::test_regression_goaway_debug_data_forges_no_log_line), and a line
    break in it would forge log lines that no check of the node's log could then tell from its own."""
    return bytes(rng.randint(0x20, 0x7E) for _ in range(rng.choice([0, 8, 64, 1_000])))


NON_UTF8 = (b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"He\xb4rtbeat", b"\xf4\x90\x80\x80")
CONTROL = (b"\x00", b"\r\n", b"\n", b"\x7f", b"\t", b" ", b"\x1b[31m")


def garbage(rng: random.Random, long: bool = True) -> bytes:
    """A header value, path or name that no client should send."""
    choice = rng.randrange(9 if long else 7)
    if choice == 0:
        return rng.randbytes(rng.randint(0, 64))
    if choice == 1:
        return rng.choice(NON_UTF8) + rng.randbytes(rng.randint(0, 4))
    if choice == 2:
        return b"x" + rng.choice(CONTROL) + b"y"
    if choice == 3:
        return b""
    if choice == 4:
        return "☃💥".encode() * rng.randint(1, 8)
    if choice == 5:
        return b"%00%ff" + rng.choice(NON_UTF8)
    if choice == 6:
        return bytes(rng.choice(b"!\"#$%&'()*+,/:;<=>?@[\\]^`{|}~") for _ in range(rng.randint(1, 16)))
    if choice == 7:
        return bytes([rng.choice(b"aZ9.")]) * rng.randint(1_000, 20_000)
    return rng.randbytes(rng.randint(256, 4_096))


GRPC_HEADERS = (
    b"grpc-timeout",
    b"grpc-encoding",
    b"grpc-accept-encoding",
    b"grpc-message-type",
    b"user-agent",
    b"authorization",
    b"grpc-trace-bin",
    b"grpc-tags-bin",
    b"x-fz-bin",
    b"grpc-previous-rpc-attempts",
    b"content-length",
    b"grpc-status",
    b"grpc-message",
    b"x-fz",
)
TIMEOUTS = (b"1n", b"0S", b"-1S", b"99999999H", b"123456789S", b"1x", b"S", b"1.5S", b"00000000001m", b"\xffS")


def garbage_header_values(rng: random.Random, conn: Conn) -> int:
    """Well-formed calls whose ordinary and gRPC headers carry garbage, non-UTF-8 or overlong values."""
    path, body = pick_call(rng)
    headers = call_headers(path)
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.3:
            at = rng.randrange(3, len(headers))  # :authority, content-type or te
            headers[at] = (headers[at][0], garbage(rng))
        else:
            name = rng.choice(GRPC_HEADERS)
            value = rng.choice(TIMEOUTS) if name == b"grpc-timeout" and rng.random() < 0.5 else garbage(rng)
            headers.append((name, value))
    sid = conn.stream_id()
    conn.h2.send_headers(sid, headers)
    conn.send_body(sid, grpc_message(body), end=True)
    return 1


def bad_pseudo_headers(rng: random.Random, conn: Conn) -> int:
    """Pseudo-headers missing, repeated, unknown, after the regular ones, or with values no server expects."""
    path, body = pick_call(rng)
    headers = call_headers(path)
    choice = rng.randrange(6)
    if choice == 0:
        gone = rng.sample([b":path", b":method", b":scheme", b":authority"], rng.randint(1, 3))
        headers = [h for h in headers if h[0] not in gone]
    elif choice == 1:
        headers.insert(rng.randrange(len(headers)), rng.choice(headers[:4]))
    elif choice == 2:
        headers.append(headers.pop(rng.randrange(4)))
    elif choice == 3:
        headers.insert(rng.randrange(5), (rng.choice([b":protocol", b":status", b":fz", b":", b":PATH"]), b"x"))
    elif choice == 4:
        values = {
            b":method": [b"GET", b"PUT", b"CONNECT", b"", b"POST\x00", b"post", b"PRI"],
            b":scheme": [b"", b"ftp", b"https", b"HTTP", b"h\xfft"],
            b":path": [b"", b"*", b"/", b"foo", b"//", b"/grpc.health.v1.Health/Check?x=1", b"/a/b/c/d", path + b"/"],
        }
        name = rng.choice(list(values))
        headers = [(n, rng.choice(values[name]) if n == name else v) for n, v in headers]
    else:
        service = rng.choice([b"/groupcoord.v1.GroupCoordinator/", b"/grpc.health.v1.Health/", b"/", b"/x.Y/"])
        headers[2] = (b":path", service + garbage(rng))
    sid = conn.stream_id()
    end_now = rng.random() < 0.3
    conn.h2.send_headers(sid, headers, end_stream=end_now)
    if not end_now:
        conn.send_body(sid, grpc_message(body), end=True)
    else:
        conn.flush()
    return 1


CONNECTION_HEADERS = (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"host")


def bad_header_names(rng: random.Random, conn: Conn) -> int:
    """Header names HTTP/2 forbids: uppercase, empty, separators, control and non-ASCII bytes, connection-specific."""
    path, body = pick_call(rng)
    headers = call_headers(path)
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(6)
        if choice == 0:
            name = rng.choice([b"Content-Type", b"X-FZ", b"TE", b"Grpc-Timeout", b"USER-AGENT"])
        elif choice == 1:
            name = rng.choice([b"", b"x fz", b"x:fz", b"x\x00fz", b"x\x7f", b"x\r\nfz", b"(x)", b"x/y"])
        elif choice == 2:
            name = rng.choice(NON_UTF8) + b"fz"
        elif choice == 3:
            name = b"x-" + b"n" * rng.randint(1_000, 16_000)
        elif choice == 4:
            name = rng.choice(CONNECTION_HEADERS)
        else:
            name = b"te"
        headers.insert(rng.randrange(len(headers) + 1), (name, rng.choice([b"gzip", b"close", b"1", garbage(rng)])))
    sid = conn.stream_id()
    conn.h2.send_headers(sid, headers)
    conn.send_body(sid, grpc_message(body), end=True)
    return 1


def huge_header_block(rng: random.Random, conn: Conn) -> int:
    """Header lists far over any limit: a few huge values or thousands of fields (h2 splits them into
    CONTINUATION frames)."""
    path, body = pick_call(rng)
    headers = call_headers(path)
    if rng.random() < 0.5:
        size = rng.choice([8_192, 16_385, 65_536, 262_144])
        headers += [(b"x-fz-%d" % k, b"v" * (size // 4)) for k in range(4)]
    else:
        headers += [(b"x-fz-%d" % k, b"%d" % k) for k in range(rng.choice([200, 1_000, 5_000]))]
    sid = conn.stream_id()
    conn.h2.send_headers(sid, headers)
    conn.send_body(sid, grpc_message(body), end=True)
    return 1


def continuation_flood(rng: random.Random, conn: Conn) -> int:
    """A HEADERS frame followed by thousands of CONTINUATION frames (empty, tiny, or each adding a field), ending
    the block or never, or broken by a frame of another stream or kind."""
    sid = conn.stream_id()
    block = conn.headers_block(call_headers(pick_call(rng)[0]))
    count = rng.choice([100, 1_000, 5_000, 20_000])
    filler = rng.choice([b"", literal(b"x-fz", b"a"), literal(b"x-fz", b"a" * 1_000)])
    frames = [frame(HEADERS, 0, sid, block)] + [frame(CONTINUATION, 0, sid, filler)] * count
    ending = rng.randrange(5)
    if ending == 0:
        frames.append(frame(CONTINUATION, END_HEADERS, sid, b""))
    elif ending == 1:
        frames.append(frame(CONTINUATION, END_HEADERS, sid + 2, b""))
    elif ending == 2:
        frames.append(frame(rng.choice([DATA, PING, SETTINGS, HEADERS]), 0, rng.choice([0, sid]), bytes(8)))
    elif ending == 3:
        frames = [frame(CONTINUATION, END_HEADERS, sid, block)]  # CONTINUATION without HEADERS
    conn.write(b"".join(frames), frames=len(frames))
    conn.finished = True  # the server is still inside a header block (or has sent this connection away)
    return 1


HUFFMAN = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


def size_update(size: int) -> bytes:
    """An HPACK dynamic table size update."""
    encoded = encode_integer(size, 5)
    encoded[0] |= 0x20
    return bytes(encoded)


def bad_hpack(rng: random.Random) -> bytes:
    """A header block that no HPACK decoder may accept."""
    choice = rng.randrange(11)
    if choice == 0:
        return b"\x80"  # index 0
    if choice == 1:
        return bytes([0x80 | 0x7F]) + encode_integer(rng.randint(100, 2**32), 7)[1:]  # index beyond the table
    if choice == 2:  # a table size update above SETTINGS_HEADER_TABLE_SIZE (4,096)
        return size_update(rng.choice([4_097, 65_536, 2**32 - 1, 2**40]))
    if choice == 3:  # a table size update after a field
        return b"\x82" + size_update(0)
    if choice == 4:
        return b"\xff" + b"\xff" * rng.randint(1, 4)  # an integer cut short
    if choice == 5:
        return b"\xff" + b"\xff" * rng.randint(8, 20) + b"\x01"  # an integer far past 2**32
    if choice == 6:
        return b"\x00\x05ab"  # a string longer than the block
    if choice == 7:  # Huffman: EOS inside a string
        return b"\x00\x01a" + bytes([0x80 | 4]) + b"\xff\xff\xff\xff"
    if choice == 8:  # Huffman: padding longer than 7 bits, or not all ones
        good = HUFFMAN.encode(b"value")
        return b"\x00\x01a" + bytes([0x80 | (len(good) + 1)]) + good + rng.choice([b"\xff", b"\x00"])
    if choice == 9:
        return b"\x82\x86\x84" + rng.randbytes(rng.randint(1, 32))  # valid start, garbage after
    return rng.randbytes(rng.randint(1, 64))


def invalid_hpack(rng: random.Random, conn: Conn) -> int:
    """Header blocks that break HPACK: bad indexes, table-size updates over the limit or misplaced, truncated or
    overflowing integers, bad Huffman. A decoder error is a connection error (COMPRESSION_ERROR)."""
    sid = conn.stream_id()
    conn.send(frame(HEADERS, END_HEADERS | rng.choice([0, END_STREAM]), sid, bad_hpack(rng)))
    conn.finished = True
    return 1
