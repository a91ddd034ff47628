"""An HTTP/2 fuzzer for a node's TCP ports, built on h2 (with hpack and hyperframe for what h2 refuses to send).

Why a library and not hypothesis: the hostile behaviours are stateful (floods, slow and never-reading peers,
streams held open, resets racing replies) and a useful run is tens of thousands of them, far more than hypothesis
examples can pay for. A run is reproducible from its seed instead: the seed's `random.Random` picks each
connection's attack kind and the seed of the generator that makes every byte it sends, so the k-th connection of a
seed sends the same bytes however the server answered (an answer can only end a connection sooner).

A run opens connections to one port of 127.0.0.1, each carrying one attack kind. h2 drives the connections
whose abuse HTTP/2 allows (h2 with outbound validation off sends any header name and value); on the others h2
only writes the preface and SETTINGS, and then frames and header blocks are built by hand (hyperframe, hpack
with h2's own encoder and decoder, so the HPACK tables stay in step with the server's). Every loop is bounded in
count and time: sends give up after SEND_TIMEOUT_S, a run after its `seconds`.
"""

from __future__ import annotations

import random
import selectors
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
from h2.connection import ConnectionState
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hpack.hpack import encode_integer
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

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
# test_h2_fuzz.py::test_regression_a_garbage_health_request_of_a_client_gone_is_no_traceback).
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


# -- what a run saw ---------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one attack kind sent and what came back."""

    connections: int = 0
    requests: int = 0
    frames: int = 0
    bytes_sent: int = 0
    rst_stream: Counter[str] = field(default_factory=Counter)
    goaway: Counter[str] = field(default_factory=Counter)
    grpc_status: Counter[str] = field(default_factory=Counter)
    http_status: Counter[str] = field(default_factory=Counter)
    # Connections the server closed (EOF or reset) before the fuzzer hung up.
    closed: int = 0
    # Sends the server did not take within SEND_TIMEOUT_S (it stopped reading).
    stalled: int = 0
    # Connections the server did not accept within CONNECT_TIMEOUT_S.
    refused: int = 0
    # Server bytes h2 or the frame scanner could not make sense of: not expected of a server, worth a look.
    undecodable: Counter[str] = field(default_factory=Counter)
    # GOAWAY debug data seen (a few distinct ones): why grpc core sent a connection away.
    goaway_reasons: Counter[str] = field(default_factory=Counter)
    # Not a count: the time before which this kind's connections send nothing more (a rate over all of them).
    paced_until: float = 0.0

    def reason(self, text: str) -> None:
        if text in self.goaway_reasons or len(self.goaway_reasons) < 12:
            self.goaway_reasons[text] += 1


@dataclass
class Report:
    seed: int
    seconds: float
    tallies: dict[str, Tally]

    @property
    def requests(self) -> int:
        return sum(t.requests for t in self.tallies.values())

    def table(self) -> str:
        """One line per kind, for the test's output and docs/FUZZING.md."""
        lines = [
            f"seed {self.seed}: {self.requests} malformed requests in {self.seconds:.1f} s",
            f"{'kind':<22}{'conns':>7}{'reqs':>8}{'frames':>9}{'MB':>7}{'closed':>7}{'stall':>6}  replies",
        ]
        for name, t in sorted(self.tallies.items()):
            replies = ", ".join(
                f"{label} {dict(counter.most_common(4))}"
                for label, counter in (
                    ("rst", t.rst_stream),
                    ("goaway", t.goaway),
                    ("grpc-status", t.grpc_status),
                    ("http", t.http_status),
                    ("undecodable", t.undecodable),
                )
                if counter
            )
            counts = (
                f"{t.connections:>7}{t.requests:>8}{t.frames:>9}{t.bytes_sent / 1e6:>7.1f}{t.closed:>7}{t.stalled:>6}"
            )
            lines.append(f"{name:<22}{counts}  {replies}")
        reasons = sum((t.goaway_reasons for t in self.tallies.values()), Counter())
        if reasons:
            lines.append(f"GOAWAY reasons: {dict(reasons.most_common(12))}")
        return "\n".join(lines)


# -- one connection ---------------------------------------------------------------------------------------


class _Encoder(hpack.Encoder):
    """h2's HPACK encoder, Huffman-coding only small blocks: pure-Python Huffman costs ~4 us a byte."""

    def encode(self, headers: Iterable, huffman: bool = True) -> bytes:  # type: ignore[override]
        headers = list(headers)
        return super().encode(headers, huffman=huffman and sum(len(h[0]) + len(h[1]) for h in headers) < 2048)


class Conn:
    """A socket to the port, the h2 state machine that opened it, and what the attack keeps between steps."""

    def __init__(self, sock: socket.socket, tally: Tally, mode: str, reads: bool) -> None:
        self.sock = sock
        self.tally = tally
        config = h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.h2 = h2.connection.H2Connection(config)
        self.h2.encoder = _Encoder()
        # Received bytes go through h2 (connections h2 drives) or through the frame scanner (all others).
        self.tracked = mode == "h2"
        # The scanner acknowledges SETTINGS and PING only once the fuzzer's own preface is out.
        self.acks = mode != "bare"
        self.reads = reads
        self.dead = False
        self.finished = False
        self.steps_left = 1
        self.opened_at = time.monotonic()
        self.close_at = 0.0
        self.last_id = -1
        # The server's SETTINGS as the scanner saw them, the header block being received, DATA not yet credited.
        self.remote: dict[int, int] = {}
        self.block = b""
        self.unacked = 0
        self.received = 0
        self.http1 = False
        self.inbuf = bytearray()
        # What an attack carries from one step to the next.
        self.todo: list[bytes] = []
        self.count = 0

    def stream_id(self) -> int:
        self.last_id += 2
        return self.last_id

    def write(self, data: bytes, frames: int = 1) -> None:
        if self.dead or not data:
            return
        try:
            self.sock.sendall(data)
        except TimeoutError:
            self.tally.stalled += 1
            self.dead = True
        except OSError:
            self.tally.closed += 1
            self.dead = True
        else:
            self.tally.frames += frames
            self.tally.bytes_sent += len(data)

    def flush(self) -> None:
        """What h2 has queued."""
        data = self.h2.data_to_send()
        self.write(data, frames=frames_in(data))

    def send(self, *frames: Frame | bytes) -> None:
        self.write(b"".join(f if isinstance(f, bytes) else f.serialize() for f in frames), frames=len(frames))

    def headers_block(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        """A header block in step with the server's HPACK table (h2's encoder)."""
        return self.h2.encoder.encode(headers)

    def call(self, path: bytes, body: bytes, end: bool = True) -> int:
        """A well-formed call through h2 (the control inside a hostile connection); returns its stream."""
        sid = self.stream_id()
        self.h2.send_headers(sid, call_headers(path))
        self.send_body(sid, grpc_message(body), end)
        return sid

    def send_body(self, sid: int, data: bytes, end: bool) -> None:
        """DATA through h2 as far as its flow-control windows allow, in frames it accepts."""
        try:
            room = min(len(data), self.h2.local_flow_control_window(sid))
            for at in range(0, room, self.h2.max_outbound_frame_size):
                chunk = data[at : min(room, at + self.h2.max_outbound_frame_size)]
                self.h2.send_data(sid, chunk, end_stream=end and at + len(chunk) >= len(data))
            if end and not data:
                self.h2.end_stream(sid)
        except h2.exceptions.H2Error:
            pass  # the stream was reset by the server meanwhile: the attack goes on without it
        self.flush()

    def raw_call(self, path: bytes, body: bytes) -> int:
        """A well-formed call written by hand, on a connection h2 does not drive."""
        sid = self.stream_id()
        block = self.headers_block(call_headers(path))
        self.send(
            HeadersFrame(sid, block, flags=["END_HEADERS"]), DataFrame(sid, grpc_message(body), flags=["END_STREAM"])
        )
        return sid

    # -- receiving

    def receive(self) -> None:
        if self.dead:
            return
        try:
            chunk = self.sock.recv(65_536)
        except (TimeoutError, BlockingIOError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.tally.closed += 1
            self.dead = True
            return
        if not self.received and chunk.startswith(b"HTTP/"):
            self.http1 = True  # an HTTP/1.1 server's answer (the metrics port): its status is all that counts
            self.tally.http_status[chunk[9:12].decode(errors="replace")] += 1
        self.received += len(chunk)
        if self.http1:
            return
        if self.tracked:
            self._through_h2(chunk)
        else:
            self.inbuf += chunk
            self._scan()

    def _through_h2(self, chunk: bytes) -> None:
        try:
            events = self.h2.receive_data(chunk)
        except h2.exceptions.StreamClosedError:
            self.dead = True  # a reply to a stream h2 reset and then forgot (it keeps only so many): h2's limit
            return
        except h2.exceptions.ProtocolError as exc:
            # Once either side sent GOAWAY, h2 refuses every frame, even those RFC 9113 still allows: h2's limit.
            if self.h2.state_machine.state != ConnectionState.CLOSED:
                self.tally.undecodable[f"h2: {type(exc).__name__}: {str(exc)[:80]}"] += 1
            self.dead = True
            return
        for event in events:
            if isinstance(event, h2.events.StreamReset):
                self.tally.rst_stream[code_name(event.error_code)] += 1
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.tally.goaway[code_name(event.error_code)] += 1
                self.tally.reason((event.additional_data or b"").decode(errors="replace")[:80])
            elif isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                self._headers(event.headers)
            elif isinstance(event, h2.events.DataReceived) and self.reads:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        self.flush()

    def _headers(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        for name, value in headers:
            if name == b"grpc-status":
                self.tally.grpc_status[value.decode(errors="replace")] += 1
            elif name == b":status" and value != b"200":
                self.tally.http_status[value.decode(errors="replace")] += 1

    def _scan(self) -> None:
        """Frames from the server on a connection h2 does not drive: counted, SETTINGS and PING acknowledged."""
        while len(self.inbuf) >= 9:
            length = int.from_bytes(self.inbuf[:3], "big")
            if len(self.inbuf) < 9 + length:
                return
            kind, flags = self.inbuf[3], self.inbuf[4]
            payload = bytes(self.inbuf[9 : 9 + length])
            del self.inbuf[: 9 + length]
            self._frame(kind, flags, payload)

    def _frame(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload) - 5, 6):
                setting, value = struct.unpack_from(">HL", payload, at)
                self.remote[setting] = value
            if self.acks:
                self.write(frame(SETTINGS, ACK, 0, b""))
        elif kind == PING and not flags & ACK and self.acks:
            self.write(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM and len(payload) == 4:
            self.tally.rst_stream[code_name(int.from_bytes(payload, "big"))] += 1
        elif kind == GOAWAY and len(payload) >= 8:
            self.tally.goaway[code_name(int.from_bytes(payload[4:8], "big"))] += 1
            self.tally.reason(payload[8:88].decode(errors="replace"))
        elif kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                payload = payload[1 + payload[0] :] if flags & PADDED else payload
                payload = payload[5:] if flags & PRIORITY_FLAG else payload
            self.block += payload
            if flags & END_HEADERS:
                block, self.block = self.block, b""
                try:
                    self._headers(self.h2.decoder.decode(block, raw=True))  # type: ignore[arg-type]
                except hpack.HPACKError as exc:
                    self.tally.undecodable[f"hpack: {type(exc).__name__}"] += 1
        elif kind == DATA and self.reads:
            self.unacked += len(payload)
            if self.unacked >= 32_768:
                self.write(WindowUpdateFrame(0, self.unacked).serialize())
                self.unacked = 0


# -- the attacks: each step is one malformed request (or a part of a slow one) ------------------------------

Step = Callable[[random.Random, Conn], int]


@dataclass(frozen=True)
class Attack:
    step: Step
    # How much of a run's requests this kind gets, relative to the others.
    share: float
    # Steps on one connection (the step may end the connection sooner, or set another count).
    steps: tuple[int, int] = (1, 1)
    # "h2": h2 drives the connection; "raw": h2 writes preface and SETTINGS, the rest is by hand; "bare": nothing.
    mode: str = "raw"
    # False: the fuzzer never reads what the server sends (its TCP window closes).
    reads: bool = True
    # The connection is held open for the run's `hold_s` after its last step (slow and never-reading peers).
    hold: bool = False
    # At most one connection of this kind at a time (each one holds thousands of calls open).
    alone: bool = False


def pick_call(rng: random.Random, garbage_body: bool = False) -> tuple[bytes, bytes]:
    return rng.choice(BODY_CALLS if garbage_body else CALLS)


def debug_text(rng: random.Random) -> bytes:
    """GOAWAY debug data: printable ASCII only. grpc core writes a client's debug data to the node's stderr as it
    is (a known finding: test_h2_fuzz.py::test_regression_goaway_debug_data_forges_no_log_line), and a line
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


def literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal without indexing (new name, no Huffman): it leaves the server's table as it was."""
    return b"\x00" + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value


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
# of every client: a known finding (test_h2_fuzz.py::test_regression_a_call_burst_cancels_no_other_clients_call).
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


PREFACE_VARIANTS = (
    b"",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
    b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello's start on a plaintext port
    b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
)


def slow_preface(rng: random.Random, conn: Conn) -> int:
    """A connection that sends the preface a byte or a few at a time, stops half-way, sends another protocol's
    opening, or never sends anything; held open for the run's hold time."""
    if not conn.todo and conn.count == 0:
        conn.count = 1
        choice = rng.randrange(4)
        if choice == 0:
            whole = PREFACE + frame(SETTINGS, 0, 0, b"")
        elif choice == 1:
            whole = PREFACE[: rng.randrange(len(PREFACE))]
        elif choice == 2:
            whole = rng.choice(PREFACE_VARIANTS)
        else:
            whole = b""
        size = rng.choice([1, 2, 5])
        conn.todo = [whole[at : at + size] for at in range(0, len(whole), size)]
        conn.steps_left = len(conn.todo) + 1
        return 1
    if conn.todo:
        conn.write(conn.todo.pop(0))
    return 0


def random_bytes(rng: random.Random, conn: Conn) -> int:
    """Bytes of no protocol, or the HTTP/2 preface and then bytes of no protocol."""
    head = PREFACE if rng.random() < 0.5 else b""
    conn.write(head + rng.randbytes(rng.randint(1, 1_024)))
    return 1


HTTP1_METHODS = (b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"CONNECT", b"FOO", b"\xff")


def http1_garbage(rng: random.Random, conn: Conn) -> int:
    """HTTP/1.1 no server should accept: bad methods, versions, paths and headers, overlong lines, too many
    headers, lying bodies, and pipelined floods of requests."""
    method = rng.choice(HTTP1_METHODS)
    target = rng.choice([b"/metrics", b"/", b"*", b"http://x/metrics", b"/metrics?name[]=" + garbage(rng, long=False)])
    version = rng.choice([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"HTTP/1.1x", b""])
    headers = [b"Host: x"]
    choice = rng.randrange(7)
    if choice == 0:
        target = b"/" + b"a" * rng.choice([1_000, 70_000])
    elif choice == 1:
        headers += [b"X-%d: %d" % (k, k) for k in range(rng.choice([50, 101, 1_000]))]
    elif choice == 2:
        headers.append(b"X-Big: " + b"v" * rng.choice([10_000, 70_000]))
    elif choice == 3:
        headers.append(b"Content-Length: " + rng.choice([b"-1", b"99999999999", b"x", b"10, 20"]))
    elif choice == 4:
        headers += [b"Transfer-Encoding: chunked", b"", b"ffffffffffff\r\n" + rng.randbytes(16)]
    elif choice == 5:
        headers.append(rng.choice([b"Accept-Encoding: gzip", b"Expect: 100-continue", b": x", b"X\x00: y"]))
        target = rng.choice([b"/metrics", b"/metrics\x00", b"/" + rng.choice(NON_UTF8)])
    else:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        conn.write(request * rng.choice([10, 100]))
        return 1
    conn.write(method + b" " + target + b" " + version + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n")
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


# Every kind, for a node's client (gRPC) port. Shares: the stream-level kinds are cheap and carry the bulk; the
# connection-level ones cost a connection each.
CLIENT_PORT: dict[str, Attack] = {
    "garbage_header_values": Attack(garbage_header_values, 14, (5, 50), mode="h2"),
    "bad_pseudo_headers": Attack(bad_pseudo_headers, 14, (5, 50), mode="h2"),
    "bad_header_names": Attack(bad_header_names, 10, (5, 50), mode="h2"),
    "huge_header_block": Attack(huge_header_block, 1, (1, 3), mode="h2"),
    "lying_grpc_prefix": Attack(lying_grpc_prefix, 16, (5, 80), mode="h2"),
    "rapid_reset": Attack(rapid_reset, 16, (5, 50), mode="h2"),
    "zero_window_reader": Attack(zero_window_reader, 2, (1, 20), mode="h2", reads=False, hold=True),
    "client_goaway": Attack(client_goaway, 2, mode="h2"),
    "continuation_flood": Attack(continuation_flood, 1),
    "invalid_hpack": Attack(invalid_hpack, 4),
    "random_frames": Attack(random_frames, 5, (1, 5)),
    "stream_state": Attack(stream_state, 4, (1, 4)),
    "flow_control": Attack(flow_control, 4, (1, 4)),
    "settings_abuse": Attack(settings_abuse, 3, (1, 4)),
    "ping_flood": Attack(ping_flood, 2, (1, 3)),
    "priority_abuse": Attack(priority_abuse, 3, (1, 5)),
    "too_many_streams": Attack(too_many_streams, 0.5, (2, 2), alone=True),
    "slow_preface": Attack(slow_preface, 0.5, mode="bare", hold=True),
    "random_bytes": Attack(random_bytes, 1, mode="bare"),
}


# For the Raft ports, which speak pysyncobj: HTTP/2 as a lost client would send it, and bytes of no protocol. Not
# the CONTINUATION flood: megabytes on one connection stall the partition's Raft thread (pysyncobj buffers a frame
# of any declared length, copying the whole buffer on every read): a known finding
# (test_h2_fuzz.py::test_regression_a_raft_port_flood_stalls_no_commit).
RAFT_PORT: dict[str, Attack] = {
    name: CLIENT_PORT[name]
    for name in (
        "garbage_header_values",
        "bad_pseudo_headers",
        "lying_grpc_prefix",
        "rapid_reset",
        "invalid_hpack",
        "random_frames",
        "settings_abuse",
        "ping_flood",
        "slow_preface",
        "random_bytes",
    )
}
# For the metrics (HTTP/1.1) port: HTTP/1.1 garbage, and HTTP/2 with prior knowledge.
METRICS_PORT: dict[str, Attack] = {
    "http1_garbage": Attack(http1_garbage, 10, mode="bare"),
    **{name: RAFT_PORT[name] for name in ("bad_pseudo_headers", "random_frames", "ping_flood", "random_bytes")},
    "slow_preface": Attack(slow_preface, 1, mode="bare", hold=True),
}


# -- the runner -------------------------------------------------------------------------------------------


def quotas(requests: int, kinds: Mapping[str, Attack]) -> dict[str, int]:
    """Each kind's part of `requests`, at least one, adding up to `requests` (largest remainders round up)."""
    total = sum(a.share for a in kinds.values())
    exact = {name: requests * a.share / total for name, a in kinds.items()}
    parts = {name: max(1, int(part)) for name, part in exact.items()}
    by_remainder = sorted(exact, key=lambda name: exact[name] - int(exact[name]), reverse=True)
    for name in by_remainder[: max(0, requests - sum(parts.values()))]:
        parts[name] += 1
    return parts


def connect(port: int, attack: Attack, tally: Tally) -> Conn | None:
    try:
        sock = socket.create_connection((LOCALHOST, port), timeout=CONNECT_TIMEOUT_S)
    except OSError:
        tally.refused += 1
        return None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(SEND_TIMEOUT_S)
    tally.connections += 1
    conn = Conn(sock, tally, attack.mode, attack.reads)
    if attack.mode != "bare":
        conn.h2.initiate_connection()
        conn.flush()
    return conn


def hang_up(rng: random.Random, conn: Conn, resets: bool) -> None:
    """Closes the socket; with `resets`, one time in five with a TCP reset instead of a FIN."""
    if resets and rng.random() < 0.2:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.sock.close()


@dataclass
class _Open:
    name: str
    conn: Conn
    # The connection's own generator: the k-th connection of a seed sends the same bytes however the server
    # answered the ones before (which decides when each step runs, not what it sends).
    rng: random.Random


def step(attack: Attack, entry: _Open) -> int:
    """One step; h2 refusing to send (the server reset the stream or sent the connection away meanwhile) ends
    the connection."""
    try:
        return attack.step(entry.rng, entry.conn)
    except h2.exceptions.H2Error:
        entry.conn.finished = True
        return 0


def run(
    port: int,
    requests: int,
    seed: int,
    kinds: Mapping[str, Attack] = CLIENT_PORT,
    seconds: float = 60.0,
    connections: int = 8,
    linger_s: float = 0.05,
    hold_s: float = 1.0,
    resets: bool = True,
    rate: float = 0.0,
    on_progress: Callable[[Report], None] | None = None,
) -> Report:
    """Sends `requests` malformed requests (split among `kinds` by their shares) to 127.0.0.1:`port` over up to
    `connections` connections at a time, at most `rate` a second (0: as fast as it can), for at most `seconds`.
    What comes back is read and counted until `linger_s` after a connection's last step (`hold_s` for the kinds
    that hold connections open). `resets`: some connections end with a TCP reset. `on_progress` sees the report
    every 10 s."""
    rng = random.Random(seed)
    order = random.Random(seed + 1)  # which open connection takes the next step: no bearing on any bytes
    tallies = {name: Tally() for name in kinds}
    left = quotas(requests, kinds)
    selector = selectors.DefaultSelector()
    active: list[_Open] = []
    closing: list[_Open] = []
    start = time.monotonic()
    deadline = start + seconds
    progress_at = start + 10
    report = Report(seed, 0.0, tallies)
    sent = 0

    def close(entry: _Open) -> None:
        if entry.conn.reads:
            selector.unregister(entry.conn.sock)
        hang_up(entry.rng, entry.conn, resets)

    while time.monotonic() < deadline and (active or closing or any(n > 0 for n in left.values())):
        busy = {e.name for e in active + closing if kinds[e.name].alone}
        while len(active) < connections:
            names = [n for n, count in left.items() if count > 0 and n not in busy]
            if not names:
                break
            name = rng.choices(names, weights=[kinds[n].share for n in names])[0]
            if kinds[name].alone:
                busy.add(name)
            entry_rng = random.Random(rng.getrandbits(64))
            conn = connect(port, kinds[name], tallies[name])
            if conn is None:
                left[name] -= 1  # counted as refused; a port that refuses everything still ends the run
                continue
            conn.steps_left = entry_rng.randint(*kinds[name].steps)
            if conn.reads:
                selector.register(conn.sock, selectors.EVENT_READ, conn)
            active.append(_Open(name, conn, entry_rng))
        wait = 0.0 if active else 0.01
        if active and rate and sent > (time.monotonic() - start) * rate:
            wait = 0.005  # ahead of `rate`: this time round only read
        elif active:
            at = order.randrange(len(active))
            entry = active[at]
            conn = entry.conn
            if not conn.dead:
                count = step(kinds[entry.name], entry)
                tallies[entry.name].requests += count
                left[entry.name] -= count
                sent += count
                conn.steps_left -= 1
            if conn.dead or conn.finished or conn.steps_left <= 0 or left[entry.name] <= 0:
                active.pop(at)
                conn.finished = True
                conn.close_at = time.monotonic() + (hold_s if kinds[entry.name].hold else linger_s)
                closing.append(entry)
        for key, _ in selector.select(wait):
            key.data.receive()
        now = time.monotonic()
        for entry in [e for e in closing if e.conn.close_at <= now or (e.conn.dead and e.conn.reads)]:
            closing.remove(entry)
            close(entry)
        if on_progress is not None and now >= progress_at:
            report.seconds = now - start
            on_progress(report)
            progress_at = now + 10
    for entry in closing + active:
        close(entry)
    selector.close()
    report.seconds = time.monotonic() - start
    return report
