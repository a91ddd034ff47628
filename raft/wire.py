"""The framing of pysyncobj's Raft messages, without its compression: zlib streams of stored blocks.

pysyncobj's `TcpConnection.send` compresses every pickled message with `zlib.compress(data, 3)`. For the small
messages of a commit (an AppendEntries of one entry is about 400 bytes, its acknowledgement about 180) that cost
53 and 19 µs here, most of it zlib setting up its 256 KiB of compression state, and bought nothing on loopback or a
LAN; it was the largest part of each message's CPU on the commit path (docs/PERFORMANCE.md). The receiving side
calls `zlib.decompress` on whatever arrives, so a stream of *stored* (uncompressed) deflate blocks is read by every
node, ours or one still running pysyncobj's own sending: a rolling upgrade mixes both without a new message format.
With the smallest window and memory level zlib allows, such a stream costs under a microsecond to make.

`install()` swaps the `zlib` that pysyncobj's tcp_connection module sees for one whose `compress` makes such
streams (its `decompress` is zlib's). It refuses a tcp_connection.py that is not the pinned version's, as
raft/syncobj_patch.py does for syncobj.py, so an upgrade fails loudly instead of running unchecked.
"""

from __future__ import annotations

import hashlib
import importlib
import types
import zlib
from pathlib import Path
from typing import Any

# pysyncobj 0.3.17's tcp_connection.py: its one call of zlib.compress is what `install` replaces.
TCP_CONNECTION_SHA256 = "7784ed8da031369fe36f805cb186a2e94a3bd6f10fed2dd59c8cc3713fd6331c"
# zlib's smallest window (2^9 bytes) and memory level: stored blocks need neither, and their setup is what costs.
_WINDOW_BITS, _MEM_LEVEL = 9, 1


class WireError(RuntimeError):
    """The installed pysyncobj's tcp_connection.py is not the one this was written for."""


def compress(data: bytes, level: int = 0) -> bytes:
    """A zlib stream of `data` in stored blocks, whatever `level` pysyncobj asks for (its argument is kept only to
    stand in for zlib.compress's signature)."""
    stream = zlib.compressobj(0, zlib.DEFLATED, _WINDOW_BITS, _MEM_LEVEL)
    return stream.compress(data) + stream.flush()


def install() -> None:
    """Makes pysyncobj's connections send stored zlib streams; idempotent."""
    module: Any = importlib.import_module("pysyncobj.tcp_connection")  # pysyncobj has no type hints
    if getattr(module.zlib, "compress", None) is compress:
        return
    origin = module.__file__
    digest = hashlib.sha256(Path(origin).read_bytes()).hexdigest() if origin else None
    if digest != TCP_CONNECTION_SHA256:
        raise WireError(
            f"{origin} is not pysyncobj 0.3.17's tcp_connection.py (sha256 {digest}): raft/wire.py must be brought "
            "up to date with it"
        )
    module.zlib = types.SimpleNamespace(compress=compress, decompress=zlib.decompress)
