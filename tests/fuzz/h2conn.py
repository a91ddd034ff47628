"""One fuzzer connection (tests/fuzz/h2fuzz.py): the socket, the h2 state machine that opened it, what came back
(`Tally`, `Report`), and `Attack`, the kind of abuse a connection carries.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
from h2.connection import ConnectionState
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    WindowUpdateFrame,
)

from tests.fuzz.h2wire import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PRIORITY_FLAG,
    RST_STREAM,
    SETTINGS,
    call_headers,
    code_name,
    frame,
    frames_in,
    grpc_message,
)

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

    def encode(self, headers: Iterable[Any], huffman: bool = True) -> bytes:
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
                self.tally.goaway[code_name(event.error_code)] += 1  # type: ignore[arg-type]  # h2 always sets it
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
                    self._headers(self.h2.decoder.decode(block, raw=True))
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
