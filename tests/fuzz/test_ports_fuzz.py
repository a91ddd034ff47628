"""Fuzz target 3: hostile bytes on a node's TCP ports, and a Raft peer that does not know the cluster secret.

* The client port: random bytes, and HTTP/2 built by hand (tests/fuzz/http2.py) truncated, mutated, with
  random frames or a gRPC message prefix that lies about its length or compression.
* The Raft ports (one per partition): random bytes, pysyncobj length-prefixed frames of garbage, negative
  and huge lengths, and an unencrypted pickle that would create a file if the node ever unpickled it.
* A pysyncobj replica with another secret, pointed at the node's partition 0 for a few seconds.
* The node heartbeat's UDP port (the Raft base port): random datagrams and unsigned heartbeat-shaped ones.

Each time the node must keep serving with its state unchanged: the offsets committed before are fetched
unchanged after, every partition has the same leader in the same term (no election was provoked), health
is SERVING, a real RPC answers, and the node's log has no traceback or error (the `node` fixture).
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from grpc_health.v1 import health_pb2
from hypothesis import given
from hypothesis import strategies as st

from groupcoord.node.launcher import free_base
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.settings import RaftSettings
from tests.e2e.support import health_status
from tests.e2e.test_metrics import Scrape, metrics_address
from tests.fuzz import http2
from tests.fuzz.profiles import campaign, fuzz_settings, time_limit
from tests.fuzz.support import FuzzNode, anchor, anchored, raft_view

HEARTBEAT = pb.HeartbeatRequest(group_id="fz-h2", generation_id=1, member_id="nobody").SerializeToString()


@pytest.fixture
def unchanged(node: FuzzNode) -> Iterator[FuzzNode]:
    """The node's acknowledged offsets and Raft leadership are the same after the test, and it still serves."""
    anchor(node.stub, 2_000)
    before = (anchored(node.stub), raft_view(node.stub))
    yield node
    assert (anchored(node.stub), raft_view(node.stub)) == before
    assert health_status(node.process.address) == health_pb2.HealthCheckResponse.SERVING
    beat = node.stub.Heartbeat(pb.HeartbeatRequest(group_id="fz-after", member_id="m"), timeout=10)
    assert beat.error_code == Errors.UNKNOWN_MEMBER_ID


def poke(address: tuple[str, int], payload: bytes, linger_s: float = 0.02) -> bytes:
    """Connects, sends `payload`, reads whatever comes back within `linger_s`, and hangs up."""
    with socket.create_connection(address, timeout=5) as sock:
        try:
            sock.sendall(payload)
            sock.settimeout(linger_s)
            return sock.recv(65_536)
        except (TimeoutError, ConnectionError):
            return b""


# -- the client (gRPC) port ------------------------------------------------------------------------------


REQUEST = http2.grpc_request("Heartbeat", HEARTBEAT)
PATH_AT = REQUEST.index(http2.path("Heartbeat"))
PATH_END = PATH_AT + len(http2.path("Heartbeat"))


def edits(data: bytes, changes: list[tuple[int, int]]) -> bytes:
    """Bytes overwritten anywhere, the path included (any byte: a path that is not UTF-8 once stopped the node)."""
    out = bytearray(data)
    for position, value in changes:
        out[position % len(out)] = value
    return bytes(out)


def path_edits(data: bytes, changes: list[tuple[int, int]]) -> bytes:
    """Bytes of the `:path` value overwritten: most such paths name no method, many are not UTF-8."""
    out = bytearray(data)
    for position, value in changes:
        out[PATH_AT + position % (PATH_END - PATH_AT)] = value
    return bytes(out)


changes = st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=6)
random_frames = st.lists(
    st.builds(
        http2.frame,
        st.integers(0, 12) | st.integers(0, 255),
        st.integers(0, 255),
        st.sampled_from([0, 1, 2, 3, 2**31 - 1]),
        st.binary(max_size=64),
    ),
    max_size=6,
)
CLIENT_PAYLOADS = st.one_of(
    st.binary(max_size=512),
    st.integers(0, len(REQUEST) - 1).map(lambda n: REQUEST[:n]),
    changes.map(lambda c: edits(REQUEST, c)),
    changes.map(lambda c: path_edits(REQUEST, c)),
    random_frames.map(lambda frames: http2.PREFACE + http2.frame(http2.SETTINGS, 0, 0, b"") + b"".join(frames)),
    st.builds(http2.lying_grpc_request, st.binary(max_size=64), st.integers(0, 2**32 - 1), st.integers(0, 255)),
)


def test_the_hand_built_http2_request_gets_an_answer(node: FuzzNode):
    """The control for the target below: unmutated, the hand-built bytes are a valid gRPC call."""
    reply = http2.exchange(("127.0.0.1", node.process.port), REQUEST)
    assert pb.HeartbeatResponse.FromString(reply).error_code == Errors.UNKNOWN_MEMBER_ID


@time_limit(120)
def test_garbage_on_the_client_port(unchanged: FuzzNode):
    address = ("127.0.0.1", unchanged.process.port)

    @fuzz_settings(150)
    @given(payload=CLIENT_PAYLOADS)
    def run(payload: bytes) -> None:
        poke(address, payload)

    campaign(run)


@time_limit(60)
def test_regression_a_path_that_is_not_utf8_leaves_the_node_serving(unchanged: FuzzNode):
    """Found by the mutated HTTP/2 requests: one call to `/groupcoord.v1.GroupCoordinator/He\\xb4rtbeat` made
    grpcio's aio server raise in its accept loop and shut down, and the node then handed its partitions over and
    exited. Now such a call is answered UNIMPLEMENTED (node/hostile.py), like any method the node does not serve,
    and the node keeps serving: same process, same leaders in the same terms (`unchanged`), no hand-over."""
    process = unchanged.process
    for bad in (b"He\xb4rtbeat", b"\xff\xfe", b"Heartbeat\xc3"):
        answer = http2.answer(("127.0.0.1", process.port), http2.grpc_request(bad, HEARTBEAT))
        assert http2.grpc_status(answer) == b"12", answer  # UNIMPLEMENTED
    assert process.alive()
    events = {e.get("event") for e in process.events()}
    assert not events & {"node.server_died", "node.stopping", "node.handed_over"}, events
    assert [e for e in process.events() if e.get("event") == "client.malformed" and e["kind"] == "unregistered_path"]


@time_limit(60)
def test_a_header_that_is_not_utf8_is_one_warning_not_a_traceback(node: FuzzNode):
    """grpcio logs such a header with a traceback at ERROR, at the client's will; the node turns it into a
    rate-limited `client.malformed` warning (the `node` fixture fails on any error line or traceback)."""
    fields = http2.headers("Heartbeat") + http2.literal(b"x-bad", b"\xff\xfe")
    request = (
        http2.PREFACE
        + http2.frame(http2.SETTINGS, 0, 0, b"")
        + http2.frame(http2.HEADERS, http2.END_HEADERS, 1, fields)
        + http2.frame(http2.DATA, http2.END_STREAM, 1, bytes(5))
    )
    for _ in range(3):
        assert http2.grpc_status(http2.answer(("127.0.0.1", node.process.port), request)) == b"0"
    warned = [e for e in node.process.events() if e.get("event") == "client.malformed"]
    assert any(e["kind"] == "header_encoding" and "xff" in e["detail"] for e in warned), warned


# -- the Raft ports --------------------------------------------------------------------------------------


class Probe:
    """Unpickling this creates `marker`: proof that the node unpickled unauthenticated bytes."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.marker),))


def pysyncobj_frame(data: bytes, length: int | None = None) -> bytes:
    """pysyncobj's framing: a native signed 32-bit length, then the (normally encrypted) message."""
    return struct.pack("i", len(data) if length is None else length) + data


def raft_payloads(marker: Path) -> st.SearchStrategy[bytes]:
    probe = zlib.compress(pickle.dumps(Probe(marker)), 3)
    return st.one_of(
        st.binary(max_size=512),
        st.binary(max_size=256).map(pysyncobj_frame),
        st.binary(max_size=256).map(lambda b: pysyncobj_frame(zlib.compress(b))),
        st.builds(pysyncobj_frame, st.binary(max_size=64), st.integers(-(2**31), 2**31 - 1)),
        st.just(pysyncobj_frame(probe)),
        st.binary(max_size=32).map(lambda prefix: pysyncobj_frame(prefix + probe)),
    )


@time_limit(120)
def test_garbage_on_the_raft_ports(unchanged: FuzzNode, tmp_path: Path):
    marker = tmp_path / "unpickled"

    @fuzz_settings(100)
    @given(payload=raft_payloads(marker), partition=st.sampled_from(unchanged.raft_addresses))
    def run(payload: bytes, partition: tuple[str, int]) -> None:
        poke(partition, payload)

    campaign(run)
    assert not marker.exists(), "the node unpickled bytes from a peer that does not know the secret"


@time_limit(60)
def test_garbage_on_the_node_heartbeat_port(unchanged: FuzzNode):
    """UDP on the Raft base port (raft/quiescence.py): random datagrams, and ones shaped like a heartbeat (a tag and a
    msgpack body) but not signed with the cluster secret, are dropped without a trace in the log."""
    target = ("127.0.0.1", unchanged.raft_port)
    shaped = st.builds(
        lambda tag, body: tag + msgpack.packb(body),
        st.binary(min_size=16, max_size=16),
        st.lists(st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=8), st.binary(max_size=8)), max_size=8),
    )

    dropped = "groupcoord_node_heartbeats_dropped_total"
    before = Scrape(metrics_address(unchanged.process)).value(dropped)
    sent = 0

    @fuzz_settings(300)
    @given(payload=st.one_of(st.binary(max_size=2048), shaped))
    def run(payload: bytes) -> None:
        nonlocal sent
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(payload, target)
        sent += 1
        time.sleep(0.001)  # within the socket's receive buffer between two reads of the heartbeat thread

    campaign(run)
    time.sleep(0.2)
    counted = Scrape(metrics_address(unchanged.process)).value(dropped) - before
    assert 0 < counted <= sent, (counted, sent)


@time_limit(120)
def test_a_peer_without_the_cluster_secret_gets_nothing_and_changes_nothing(unchanged: FuzzNode, tmp_path: Path):
    """As tests/raft/test_partition.py's intruder, but against a running node: a replica with another secret
    that lists the node's partition 0 as its peer keeps asking for votes (ever higher terms) for a while."""
    host, port = unchanged.raft_addresses[0]
    own = f"127.0.0.1:{free_base('127.0.0.1', 1, set())}"
    intruder = PartitionReplica(
        0, 99, own, [f"{host}:{port}"], "not-the-secret", str(tmp_path / "intruder"), RaftSettings()
    )
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not intruder.is_connected(f"{host}:{port}")
            time.sleep(0.1)
        assert intruder.copy_store().snapshot()["groups"] == []
        assert not intruder.is_leader()
        assert intruder.raftCommitIndex <= 1, "the intruder got log entries from the node"
    finally:
        intruder.destroy_synchronous()
