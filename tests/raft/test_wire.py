"""raft/wire.py: pysyncobj's connections send stored zlib streams, which every node reads, ours and pysyncobj's own.

The first test fails without `install()`: pysyncobj's `zlib.compress(data, 3)` makes a fixed or dynamic Huffman
block, not a stored one.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pysyncobj.tcp_connection as tcp_connection
import pytest
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import TcpConnection

import groupcoord.raft.transport  # noqa: F401  # installs raft/wire.py, as every node does
from groupcoord.raft import wire

MESSAGE = {"type": "append_entries", "term": 7, "entries": [(b"records" * 60, 12, 7)], "commit_index": 11}


def block_types(stream: bytes) -> int:
    """The BTYPE of a zlib stream's first deflate block: 0 stored, 1 fixed Huffman, 2 dynamic Huffman."""
    return (stream[2] >> 1) & 0b11


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    for sock in (a, b):
        sock.settimeout(5)  # a missing frame fails the test instead of hanging it
    yield a, b
    a.close()
    b.close()


def read_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack("i", sock.recv(4))
    data = b""
    while len(data) < length:
        data += sock.recv(length - len(data))
    return data


def test_a_connection_sends_a_stored_zlib_stream_that_plain_zlib_reads(pair: tuple[socket.socket, ...]) -> None:
    sender, peer = pair
    connection = TcpConnection(createPoller("auto"), socket=sender)
    connection.send(MESSAGE)
    frame = read_frame(peer)
    assert block_types(frame) == 0, "pysyncobj's own compression, not a stored block"
    assert pickle.loads(zlib.decompress(frame)) == MESSAGE  # what a node running pysyncobj's own code does
    assert len(frame) > len(pickle.dumps(MESSAGE))  # stored, not compressed: the repeated bytes stay


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "pysyncobj's compression"])
def test_a_connection_reads_both_stored_and_compressed_streams(
    pair: tuple[socket.socket, ...], compressed: bool
) -> None:
    peer, receiver = pair
    poller = createPoller("auto")
    received: list[Any] = []
    receiver.setblocking(False)  # as pysyncobj's own sockets are: it reads until the socket would block
    TcpConnection(poller, onMessageReceived=received.append, socket=receiver)
    data = pickle.dumps(MESSAGE)
    body = zlib.compress(data, 3) if compressed else wire.compress(data)
    peer.sendall(struct.pack("i", len(body)) + body)
    for _ in range(20):
        poller.poll(0.05)
        if received:
            break
    assert received == [MESSAGE]


@pytest.mark.parametrize("size", [0, 1, 400, 65_535, 65_536, 1 << 20])
def test_every_size_round_trips(size: int) -> None:
    data = os.urandom(size // 2) + b"a" * (size - size // 2)
    stream = wire.compress(data, 3)
    assert block_types(stream) == 0
    assert zlib.decompress(stream) == data
    assert len(stream) <= len(data) + 6 + 5 * (size // 512 + 1)  # header, checksum, a block header per block


def test_an_unknown_tcp_connection_module_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "TCP_CONNECTION_SHA256", "0" * 64)
    monkeypatch.setattr(tcp_connection, "zlib", zlib)
    with pytest.raises(wire.WireError, match="must be brought up to date"):
        wire.install()
