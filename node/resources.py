"""The process's own resources under load it does not choose: file descriptors, and memory handed back.

A flood of connections or calls makes grpc core allocate and then free many small blocks from its threads. glibc's
malloc keeps what they freed in per-thread arenas, fragmented, so a node stayed about 8 KB per connection of the
flood's peak above its baseline for good; neither `malloc_trim` nor fewer arenas gave it back (docs/FUZZING.md).
jemalloc, with its background thread returning dirty pages after a second, does: `use_jemalloc` re-executes the
node with it preloaded when it is installed (Debian: libjemalloc2). `trim_memory` still hands glibc's free pages
back sooner where the node runs without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path

from groupcoord.node.logs import fields

log = logging.getLogger(__name__)

JEMALLOC = "libjemalloc.so.2"
JEMALLOC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
# Dirty pages go back to the system after a second, by jemalloc's own thread; no muzzy stage in between.
JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0"
# Set in the re-executed process, so that a jemalloc that does not load cannot make the node exec forever.
REEXEC_MARK = "GROUPCOORD_ALLOCATOR_REEXEC"


def jemalloc_loaded() -> bool:
    try:
        return JEMALLOC in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def _find_jemalloc() -> str | None:
    for directory in JEMALLOC_DIRS:
        path = os.path.join(directory, JEMALLOC)
        if os.path.exists(path):
            return path
    return None


def use_jemalloc() -> str:
    """Re-executes this process with jemalloc preloaded, unless it already runs with it; returns (in the process
    that carries on) why the node runs with the allocator it has."""
    if jemalloc_loaded():
        return "jemalloc"
    if os.environ.get(REEXEC_MARK):
        return "system: jemalloc was preloaded but did not load"
    path = _find_jemalloc()
    if path is None:
        return f"system: {JEMALLOC} not found (Debian: apt-get install libjemalloc2)"
    env = dict(os.environ)
    env["LD_PRELOAD"] = f"{path} {env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else path
    env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    # Python's own small-object arenas are freed only when wholly empty; through jemalloc, what a flood of calls
    # left behind goes back too (no measurable cost per call: docs/FUZZING.md).
    env.setdefault("PYTHONMALLOC", "malloc")
    env[REEXEC_MARK] = "1"
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    raise AssertionError("unreachable: execve returned")


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
    return trim  # type: ignore[no-any-return]  # a ctypes foreign function: int → int, as argtypes say


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
