"""The fuzzer's frame and stream attacks (tests/fuzz/h2fuzz.py): random frames, streams in the wrong state, flow
control, SETTINGS, PING and PRIORITY abuse, rapid resets, more streams than allowed, a client GOAWAY, and gRPC
message prefixes that lie.
"""

from __future__ import annotations

import random
import struct
import time

from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import (
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tests.fuzz.h2conn import Conn
from tests.fuzz.h2headers import debug_text, pick_call
from tests.fuzz.h2wire import (
    ACK,
    DATA,
    DESCRIBE_CLUSTER,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    call_headers,
    frame,
    grpc_message,
    literal,
)


def random_frames(rng: random.Random, conn: Conn) -> int:
    """Frames of random type, flags, stream and payload; some oversized, some with a length that lies."""
    frames = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice([rng.randrange(10), rng.randrange(256)])
        stream = rng.choice([0, 1, conn.last_id, conn.last_id + 2, MAX_WINDOW, 2**32 - 1, rng.getrandbits(32)])
        payload = rng.randbytes(rng.choice([0, 1, 4, 5, 8, rng.randint(0, 64)]))
        choice = rng.randrange(10)
        length = None
        if kind == GOAWAY:
            payload = payload[:8].ljust(8, b"\x00") + debug_text(rng)
        elif choice == 0:
            payload = rng.randbytes(rng.randint(16_385, 70_000))  # over SETTINGS_MAX_FRAME_SIZE
        elif choice == 1:
            length = rng.randint(0, 2**24 - 1)
        frames.append(frame(kind, rng.randrange(256), max(stream, 0), payload, length))
    if rng.random() < 0.5:
        path, body = pick_call(rng)
        sid = conn.stream_id()
        frames.append(HeadersFrame(sid, conn.headers_block(call_headers(path)), flags=["END_HEADERS"]).serialize())
        frames.append(DataFrame(sid, grpc_message(body), flags=["END_STREAM"]).serialize())
    conn.write(b"".join(frames), frames=len(frames))
    return 1


def stream_state(rng: random.Random, conn: Conn) -> int:
    """Frames the stream's state forbids: DATA on idle, closed or stream 0, HEADERS on even or reused ids, second
    HEADERS, RST_STREAM on idle streams, PUSH_PROMISE from a client, padding longer than the frame."""
    path, body = pick_call(rng)
    choice = rng.randrange(11)
    if choice == 0:
        conn.send(frame(DATA, END_STREAM, conn.last_id + 2 * rng.randint(1, 1_000), grpc_message(body)))
    elif choice == 1:
        sid = conn.raw_call(path, body)
        conn.send(frame(DATA, rng.choice([0, END_STREAM]), sid, grpc_message(body)))
    elif choice == 2:
        conn.send(frame(DATA, 0, 0, grpc_message(body)))
    elif choice == 3:
        conn.send(
            frame(HEADERS, END_HEADERS | END_STREAM, conn.stream_id() + 1, conn.headers_block(call_headers(path)))
        )
    elif choice == 4:
        sid = conn.raw_call(path, body)
        conn.send(frame(HEADERS, END_HEADERS | END_STREAM, max(1, sid - 2), conn.headers_block(call_headers(path))))
    elif choice == 5:
        sid = conn.stream_id()
        block = conn.headers_block(call_headers(path))
        trailers = [(b"x-fz", b"1")]
        conn.send(
            frame(HEADERS, END_HEADERS, sid, block), frame(HEADERS, END_HEADERS, sid, conn.headers_block(trailers))
        )
        conn.send(frame(HEADERS, END_HEADERS | END_STREAM, sid, conn.headers_block(trailers)))
    elif choice == 6:
        conn.send(frame(RST_STREAM, 0, conn.last_id + 2 * rng.randint(1, 100), bytes(4)))
    elif choice == 7:
        conn.send(frame(RST_STREAM, 0, rng.choice([0, max(1, conn.last_id)]), rng.randbytes(rng.choice([0, 3, 5]))))
    elif choice == 8:
        promised = (conn.last_id + 3).to_bytes(4, "big")
        conn.send(frame(PUSH_PROMISE, END_HEADERS, max(1, conn.last_id), promised + literal(b":path", b"/")))
    elif choice == 9:
        sid = conn.stream_id()
        conn.send(HeadersFrame(sid, conn.headers_block(call_headers(path)), flags=["END_HEADERS"]))
        padding = rng.choice([5, 6, 255])
        conn.send(frame(DATA, PADDED | END_STREAM, sid, bytes([padding]) + grpc_message(body)[: padding - 1]))
    else:
        sid = conn.stream_id()
        dependency = (sid | rng.choice([0, 0x80000000])).to_bytes(4, "big") + b"\x10"  # on itself
        block = conn.headers_block(call_headers(path))
        conn.send(frame(HEADERS, END_HEADERS | PRIORITY_FLAG, sid, dependency + block))
        conn.send(DataFrame(sid, grpc_message(body), flags=["END_STREAM"]))
    return 1


def flow_control(rng: random.Random, conn: Conn) -> int:
    """WINDOW_UPDATE of 0, of the wrong length, overflowing a window past 2**31 - 1, on idle streams; a window
    size setting out of range; DATA beyond the window the server granted."""
    path, body = pick_call(rng)
    choice = rng.randrange(8)
    if choice == 0:
        conn.send(frame(WINDOW_UPDATE, 0, rng.choice([0, conn.stream_id()]), bytes(4)))
    elif choice == 1:
        conn.send(WindowUpdateFrame(0, MAX_WINDOW), WindowUpdateFrame(0, rng.randint(1, MAX_WINDOW)))
    elif choice == 2:
        sid = conn.stream_id()
        conn.send(HeadersFrame(sid, conn.headers_block(call_headers(path)), flags=["END_HEADERS"]))
        conn.send(WindowUpdateFrame(sid, MAX_WINDOW), WindowUpdateFrame(sid, MAX_WINDOW))
    elif choice == 3:
        conn.send(frame(WINDOW_UPDATE, 0, rng.choice([0, conn.last_id + 2]), rng.randbytes(rng.choice([0, 3, 5, 8]))))
    elif choice == 4:
        conn.send(frame(WINDOW_UPDATE, 0, conn.last_id + 2 * rng.randint(1, 50), (1).to_bytes(4, "big")))
    elif choice == 5:
        conn.send(
            frame(SETTINGS, 0, 0, struct.pack(">HL", SettingsFrame.INITIAL_WINDOW_SIZE, rng.randint(2**31, 2**32 - 1)))
        )
    elif choice == 6:
        sid = conn.stream_id()
        conn.send(HeadersFrame(sid, conn.headers_block(call_headers(path)), flags=["END_HEADERS"]))
        conn.send(WindowUpdateFrame(sid, MAX_WINDOW - 65_535))
        conn.send(SettingsFrame(0, {SettingsFrame.INITIAL_WINDOW_SIZE: MAX_WINDOW}))  # pushes the stream past 2**31
    else:
        window = min(conn.remote.get(SettingsFrame.INITIAL_WINDOW_SIZE, 65_535), 1 << 20)
        target = pick_call(rng, garbage_body=True)[0]
        sid = conn.stream_id()
        conn.send(HeadersFrame(sid, conn.headers_block(call_headers(target)), flags=["END_HEADERS"]))
        data = grpc_message(bytes(window + rng.randint(1, 10_000)))
        conn.send(*(DataFrame(sid, data[at : at + 16_384]) for at in range(0, len(data), 16_384)))
    if rng.random() < 0.5:
        conn.raw_call(path, body)
    return 1


def zero_window_reader(rng: random.Random, conn: Conn) -> int:
    """Calls whose replies can never be sent: no stream window (SETTINGS_INITIAL_WINDOW_SIZE 0), and the socket
    is never read. Held open for the run's hold time."""
    if conn.count == 0:
        conn.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 0})
    calls = rng.randint(1, 10)
    for _ in range(calls):
        conn.call(*(DESCRIBE_CLUSTER if rng.random() < 0.7 else pick_call(rng)))
    conn.count += calls
    return calls


def settings_abuse(rng: random.Random, conn: Conn) -> int:
    """SETTINGS with values out of range, bad lengths, on a stream, ACKs with payloads; legal but hostile values;
    floods of SETTINGS the server must acknowledge one by one."""
    choice = rng.randrange(6)
    if choice == 0:
        setting, value = rng.choice(
            [
                (SettingsFrame.ENABLE_PUSH, rng.randint(2, 2**32 - 1)),
                (SettingsFrame.INITIAL_WINDOW_SIZE, rng.randint(2**31, 2**32 - 1)),
                (SettingsFrame.MAX_FRAME_SIZE, rng.choice([0, 16_383, 2**24, 2**32 - 1])),
            ]
        )
        conn.send(frame(SETTINGS, 0, 0, struct.pack(">HL", setting, value)))
    elif choice == 1:
        conn.send(
            frame(SETTINGS, rng.choice([0, ACK]), rng.choice([0, 1, 3]), rng.randbytes(rng.choice([1, 5, 7, 12])))
        )
    elif choice == 2:
        conn.send(frame(SETTINGS, ACK, 0, b""))  # acknowledges nothing
    elif choice == 3:
        values = {
            SettingsFrame.HEADER_TABLE_SIZE: rng.choice([0, 1, 2**32 - 1]),
            SettingsFrame.MAX_HEADER_LIST_SIZE: rng.choice([0, 1, 100]),
            SettingsFrame.MAX_CONCURRENT_STREAMS: rng.choice([0, 2**32 - 1]),
            SettingsFrame.MAX_FRAME_SIZE: rng.choice([16_384, 2**24 - 1]),
            SettingsFrame.INITIAL_WINDOW_SIZE: rng.choice([0, 1, MAX_WINDOW]),
            rng.randint(7, 2**16 - 1): rng.getrandbits(32),
        }
        conn.send(SettingsFrame(0, dict(rng.sample(sorted(values.items()), rng.randint(1, len(values))))))
    else:
        settings = SettingsFrame(0, {SettingsFrame.INITIAL_WINDOW_SIZE: 65_535, 0x99: 1}).serialize()
        count = rng.choice([100, 1_000, 10_000])
        conn.write(settings * count, frames=count)
    if rng.random() < 0.7:
        conn.raw_call(*pick_call(rng))
    return 1


def ping_flood(rng: random.Random, conn: Conn) -> int:
    """PINGs by the thousand (each one the server must answer), with and without calls in flight; PINGs of the
    wrong length, on a stream, or acknowledging nothing."""
    choice = rng.randrange(4)
    if choice < 2:
        if choice == 0:
            conn.raw_call(*pick_call(rng))
        count = rng.choice([10, 100, 1_000, 10_000])
        ping = PingFrame(0, rng.randbytes(8)).serialize()
        conn.write(ping * count, frames=count)
    elif choice == 2:
        conn.send(frame(PING, rng.choice([0, ACK]), rng.choice([0, 1]), rng.randbytes(rng.choice([0, 7, 9, 64]))))
    else:
        conn.send(PingFrame(0, rng.randbytes(8), flags=["ACK"]))
    return 1


def priority_abuse(rng: random.Random, conn: Conn) -> int:
    """PRIORITY frames by the thousand on idle streams (a dependency tree the server may build), on themselves,
    on stream 0, of the wrong length."""
    choice = rng.randrange(4)
    if choice == 0:
        base = conn.last_id + 2
        frames = [
            PriorityFrame(base + 2 * k, depends_on=base + 2 * rng.randrange(k + 1), stream_weight=rng.randrange(256))
            for k in range(rng.choice([10, 100, 2_000]))
        ]
        conn.write(b"".join(f.serialize() for f in frames), frames=len(frames))
    elif choice == 1:
        sid = conn.last_id + 2
        conn.send(frame(PRIORITY, 0, sid, sid.to_bytes(4, "big") + b"\x0f"))
    elif choice == 2:
        conn.send(frame(PRIORITY, 0, rng.choice([0, conn.last_id + 2]), rng.randbytes(rng.choice([0, 4, 5, 6, 16]))))
    else:
        sid = conn.raw_call(*pick_call(rng))
        conn.send(PriorityFrame(sid, depends_on=sid + 2, exclusive=True, stream_weight=255))
    return 1


def rapid_reset(rng: random.Random, conn: Conn) -> int:
    """The "rapid reset" pattern (CVE-2023-44487): calls opened and cancelled at once, many per connection."""
    count = rng.randint(1, 20)
    for _ in range(count):
        path, body = pick_call(rng)
        sid = conn.stream_id()
        conn.h2.send_headers(sid, call_headers(path), end_stream=rng.random() < 0.3)
        if rng.random() < 0.5 and conn.h2.streams[sid].open:
            conn.h2.send_data(sid, grpc_message(body))
        conn.h2.reset_stream(sid, rng.choice([ErrorCodes.CANCEL, ErrorCodes.CANCEL, ErrorCodes.NO_ERROR, 0xFFFF]))
    conn.flush()
    return count


# Streams opened at most this fast by all `too_many_streams` connections together. A burst of thousands of calls
# overflows grpc core's server-wide queue of calls the application has not taken yet, and core then cancels calls
# of every client: a known finding (test_h2_regressions.py::test_regression_a_call_burst_cancels_no_other_clients_call).
STREAMS_PER_S = 2_000
STREAM_BATCH = 100
# How long `too_many_streams` waits for the server's SETTINGS (its MAX_CONCURRENT_STREAMS).
SETTINGS_WAIT_S = 5.0


def too_many_streams(rng: random.Random, conn: Conn) -> int:
    """Calls left open (HEADERS, no END_STREAM) up to the server's MAX_CONCURRENT_STREAMS, then a batch more: only
    those beyond the limit count as malformed requests."""
    limit = conn.remote.get(SettingsFrame.MAX_CONCURRENT_STREAMS)
    if limit is None or time.monotonic() < conn.tally.paced_until:  # no SETTINGS from the server yet, or too soon
        conn.steps_left = 2 if limit is not None or time.monotonic() < conn.opened_at + SETTINGS_WAIT_S else 0
        return 0
    opened = (conn.last_id + 1) // 2
    batch = min(STREAM_BATCH, limit - opened) if opened < limit else rng.randint(10, STREAM_BATCH)
    path = pick_call(rng)[0]
    frames = [
        frame(HEADERS, END_HEADERS, conn.stream_id(), conn.headers_block(call_headers(path))) for _ in range(batch)
    ]
    conn.write(b"".join(frames), frames=batch)
    conn.tally.paced_until = time.monotonic() + batch / STREAMS_PER_S
    if opened < limit:
        conn.steps_left = 2
        return 0
    conn.finished = True
    return batch


def client_goaway(rng: random.Random, conn: Conn) -> int:
    """GOAWAY from the client (any error code, last stream and debug data), with calls in flight, and frames
    after it: new calls, more GOAWAYs, GOAWAYs of the wrong length or on a stream."""
    for _ in range(rng.randint(0, 3)):
        conn.call(*pick_call(rng), end=rng.random() < 0.7)
    conn.h2.close_connection(
        error_code=rng.choice([0, 1, 2, 8, 11, rng.getrandbits(32)]),
        additional_data=debug_text(rng),
        last_stream_id=rng.choice([0, conn.last_id, MAX_WINDOW]),
    )
    conn.flush()
    choice = rng.randrange(4)
    if choice == 0:
        path, body = pick_call(rng)
        sid = conn.stream_id()
        conn.send(HeadersFrame(sid, conn.headers_block(call_headers(path)), flags=["END_HEADERS"]))
        conn.send(DataFrame(sid, grpc_message(body), flags=["END_STREAM"]))
    elif choice == 1:
        conn.send(GoAwayFrame(0, last_stream_id=MAX_WINDOW, error_code=0), GoAwayFrame(0, last_stream_id=1))
    elif choice == 2:
        conn.send(frame(GOAWAY, 0, rng.choice([0, 1]), rng.randbytes(rng.choice([0, 4, 7]))))
    conn.finished = True
    return 1


def lying_grpc_prefix(rng: random.Random, conn: Conn) -> int:
    """Calls whose gRPC message prefix lies: about the length (short, long, 4 GiB), about compression (a flag
    with no grpc-encoding, an encoding the body is not in, an unknown one), or cut short; and garbage bodies."""
    path, body = pick_call(rng, garbage_body=True)
    extra: list[tuple[bytes, bytes]] = []
    if rng.random() < 0.3:
        extra.append((b"grpc-encoding", rng.choice([b"gzip", b"deflate", b"identity", b"snappy", b"\xff"])))
    message = rng.choice([body, rng.randbytes(rng.randint(0, 64)), b"\xff" * 10, bytes(rng.randint(0, 2_000))])
    flag = rng.choice([0, 0, 1, 1, 2, 0x80, 0xFF])
    declared = rng.choice(
        [len(message), len(message) + rng.randint(1, 100), max(0, len(message) - 1), 0, 2**32 - 1, 4 * 2**20 + 1]
    )
    data = grpc_message(message, flag, declared)
    choice = rng.randrange(5)
    if choice == 0:
        data = data[: rng.randrange(5)]  # a prefix cut short
    elif choice == 1:
        data += grpc_message(message) * rng.randint(1, 3)  # more messages than a unary call takes
    sid = conn.stream_id()
    conn.h2.send_headers(sid, call_headers(path) + extra)
    conn.send_body(sid, data, end=rng.random() < 0.9)
    return 1
