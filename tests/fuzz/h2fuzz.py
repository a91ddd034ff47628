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

The pieces: tests/fuzz/h2wire.py (hand-built frames), h2conn.py (a connection, what came back), h2headers.py
and h2frames.py (the HTTP/2 attacks); here the attacks that speak no HTTP/2, the kinds each port gets, and the
runner.
"""

from __future__ import annotations

import random
import selectors
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import h2.exceptions

from tests.fuzz.h2conn import Attack, Conn, Report, Tally
from tests.fuzz.h2frames import (
    client_goaway,
    flow_control,
    lying_grpc_prefix,
    ping_flood,
    priority_abuse,
    random_frames,
    rapid_reset,
    settings_abuse,
    stream_state,
    too_many_streams,
    zero_window_reader,
)
from tests.fuzz.h2headers import (
    NON_UTF8,
    bad_header_names,
    bad_pseudo_headers,
    continuation_flood,
    garbage,
    garbage_header_values,
    huge_header_block,
    invalid_hpack,
)
from tests.fuzz.h2wire import CONNECT_TIMEOUT_S, LOCALHOST, PREFACE, SEND_TIMEOUT_S, SETTINGS, frame

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
# (test_h2_regressions.py::test_regression_a_raft_port_flood_stalls_no_commit).
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
