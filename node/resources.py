"""The process's own resources under load it does not choose: file descriptors and memory handed back.

A flood of connections or calls makes grpc core and the interpreter allocate and then free a lot of small blocks;
glibc keeps freed memory in its arenas, so without a trim the node stays at the flood's peak size for good
(measured in docs/FUZZING.md). `trim_memory` gives it back periodically.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import resource
from collections.abc import Callable

from groupcoord.node.logs import fields

log = logging.getLogger(__name__)

# Descriptors the node needs besides client connections: Raft ports and peer links, journals, event files, logs.
RESERVED_FDS = 256


def raise_fd_limit(max_connections: int) -> None:
    """Lifts the soft descriptor limit to the hard one, and warns when `max_connections` still does not fit: past
    the limit, accepting a connection fails inside grpc core instead of being refused by the node's own cap."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft != resource.RLIM_INFINITY and max_connections + RESERVED_FDS > soft:
        log.warning(
            "node.fd_limit",
            extra=fields(
                max_connections=max_connections,
                open_files_limit=soft,
                hint=f"raise the open files limit (ulimit -n) to at least {max_connections + RESERVED_FDS}",
            ),
        )


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


async def trim_memory(interval_s: float) -> None:
    """Runs until cancelled. ctypes releases the GIL during the call, and it runs in a thread: the event loop never
    waits for it."""
    trim = _malloc_trim()
    if trim is None:
        log.info("node.memory_trim", extra=fields(available=False))
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(trim, 0)
