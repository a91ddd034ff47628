"""Fuzz target 5: hostile bytes on a node's Kafka listener (docs/KAFKA.md).

Frames go to the listener of the package's node: random bodies behind a correct header of every API and version
it serves (most die in the codec), and real requests with bytes overwritten, cut or inserted (many still parse,
and carry odd values into the request layer: negative partitions, huge timeouts, odd group ids, unknown tags).
After each, the node still answers a good request on a new connection; after the target, its acknowledged offsets
and Raft leadership are unchanged and its log has no traceback or error (the `node` and `unchanged` fixtures).
"""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0

from groupcoord.protocol.kafka.codec import APIS
from tests.fuzz.profiles import campaign, fuzz_settings, time_limit
from tests.fuzz.support import FuzzNode
from tests.fuzz.test_ports_fuzz import edits, unchanged
from tests.kafka.wire import read, request, response

SERVED = [(key, version) for key, (_, lo, hi) in sorted(APIS.items()) for version in range(lo, hi + 1)]
OFFSET = {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1, "committed_metadata": "m"}
# Real requests to mutate: the ones a consumer sends most, in flexible and older versions.
SEEDS = [
    request(18, 3, 1, client_software_name="fz", client_software_version="1"),
    request(3, 12, 2, topics=[{"name": "fz-topic", "topic_id": None}], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False),
    request(10, 4, 3, key_type=0, coordinator_keys=["fz-a", "fz-b"]),
    request(11, 5, 4, group_id="fz-join", session_timeout=6000, rebalance_timeout=6000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=[{"name": "range", "metadata": b"\0\1"}]),
    request(12, 4, 5, group_id="fz-join", generation_id=1, member_id="m", group_instance_id=None),
    request(8, 8, 6, group_id="fz-commit", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[{"name": "fz-topic", "partitions": [OFFSET]}]),
    request(9, 7, 7, group_id="fz-commit", topics=None, require_stable=False),
    request(13, 3, 8, group_id="fz-join", members=[{"member_id": "m", "group_instance_id": None}]),
    request(15, 5, 9, groups=["fz-join", ""], include_authorized_operations=False),
    request(42, 2, 10, groups_names=["fz-none"]),
]  # fmt: skip

pytestmark = pytest.mark.usefixtures("unchanged")
__all__ = ["unchanged"]  # the fixture, imported for its use above


def _send(port: int, frame: bytes) -> None:
    """Sends one frame and waits for the first bytes of an answer, the node closing, or a short wait to pass."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(frame)
            sock.settimeout(0.2)
            sock.recv(65_536)
        except (TimeoutError, ConnectionError):
            pass


def _still_serves(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request(18, 3, 99, client_software_name="good", client_software_version="1"))
        correlation, body = response(read(sock), 18, 3, ResponseHeaderV0)
    assert (correlation, body.error_code) == (99, ErrorCode.none)


@time_limit(300)
def test_random_bodies_behind_every_served_header(node: FuzzNode) -> None:
    port = node.kafka_port

    @fuzz_settings(300)
    @given(st.sampled_from(SERVED), st.binary(max_size=300), st.booleans())
    def one(api: tuple[int, int], body: bytes, flexible_header: bool) -> None:
        key, version = api
        # Header v1 (client id "fz"), or v2 with its empty tag section.
        header = struct.pack(">hhih", key, version, 1, 2) + b"fz" + (b"\0" if flexible_header else b"")
        frame = header + body
        _send(port, struct.pack(">i", len(frame)) + frame)
        _still_serves(port)

    campaign(one)


@time_limit(300)
def test_real_requests_with_bytes_overwritten_cut_or_inserted(node: FuzzNode) -> None:
    port = node.kafka_port

    @fuzz_settings(300)
    @given(
        st.sampled_from(SEEDS),
        st.lists(st.tuples(st.integers(4, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
        st.integers(0, 3),
        st.binary(max_size=16),
    )
    def one(seed: bytes, changes: list[tuple[int, int]], how: int, extra: bytes) -> None:
        body = edits(seed[4:], changes)
        if how == 1:
            body = body[: changes[0][0] % len(body)]
        elif how == 2:
            at = changes[0][0] % len(body)
            body = body[:at] + extra + body[at:]
        elif how == 3:
            body = seed[4:] + extra  # bytes after a whole request: ignored, as Kafka does
        _send(port, struct.pack(">i", len(body)) + body)
        _still_serves(port)

    campaign(one)
