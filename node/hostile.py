"""What keeps hostile bytes on the client port from stopping the node or flooding its log.

grpcio 1.85's aio server decodes the `:path` of every call for a method it has no *registered* handler for as
strict UTF-8, inside its accept loop; a path that is not UTF-8 (`/groupcoord.v1.GroupCoordinator/He\\xb4rtbeat`)
raises there, and the crash handler shuts the whole server down. Calls to registered methods never reach that
decode: core matches their path byte for byte and the loop takes the name from the registration.

So the node registers every method it serves (its own service, health, reflection) and builds its server with
`guarded_server()`, whose accept loop answers every *unregistered* call UNIMPLEMENTED itself before the loop can
decode the path. That is what grpcio answers an unknown method anyway, so a client sees no difference; no path
is decoded at all, and registered calls take exactly the path they took before (nothing on their way changes).

It relies on three names inside grpcio's Cython module (`AioServer._request_call`, `_ServicerContext`,
`_RequestCallError`); `check_grpcio()` fails the node's start if one is missing, and
`tests/fuzz/test_grpc_path_bug.py` keeps the minimal reproducer of the bug, which fails once a grpcio release
fixes it, so the guard can be dropped then. docs/FUZZING.md has the candidates that were measured.

grpcio also logs some hostile input with a traceback at ERROR (a header value that is not UTF-8, a client that
goes away in the middle of a reply). `MalformedLogFilter` turns those into one rate-limited line and a counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc._cython import cygrpc  # type: ignore[attr-defined]  # grpcio's Cython internals have no stubs

from groupcoord.base.errors import StartupError
from groupcoord.node.logs import LogBudget, fields

log = logging.getLogger(__name__)

# The grpcio internals the guard needs; a grpcio without them gets a clear start-up error, not a silent gap.
_INTERNALS = ("_ServicerContext", "_RequestCallError", "AbortError")
# Lines per second about hostile input, at most; the counter counts every one.
MALFORMED_LOG_PER_S = 10
# The kinds of hostile input the node counts (`groupcoord_malformed_requests_total{kind}`), bound up front.
UNREGISTERED_PATH = "unregistered_path"
HEADER_ENCODING = "header_encoding"
CLIENT_GONE = "client_gone"
BAD_PAYLOAD = "bad_payload"
METRICS_CONNECTION = "metrics_connection"
KINDS = (UNREGISTERED_PATH, HEADER_ENCODING, CLIENT_GONE, BAD_PAYLOAD, METRICS_CONNECTION)

OnMalformed = Callable[[str], None]


def check_grpcio() -> None:
    missing = [name for name in _INTERNALS if not hasattr(cygrpc, name)]
    if missing or not hasattr(cygrpc.AioServer, "_request_call"):
        raise StartupError(
            f"grpcio {grpc.__version__} lacks {missing or ['AioServer._request_call']}: node/hostile.py must be "
            "brought up to date with it"
        )


class MalformedInput:
    """Counts hostile input by kind and logs at most MALFORMED_LOG_PER_S lines a second about it."""

    def __init__(self, on_count: OnMalformed | None = None) -> None:
        self._on_count = on_count
        self._budget = LogBudget(MALFORMED_LOG_PER_S)

    def report(self, kind: str, **details: Any) -> None:
        if self._on_count is not None:
            self._on_count(kind)
        skipped = self._budget.take(time.monotonic())
        if skipped is not None:
            log.warning("client.malformed", extra=fields(kind=kind, not_logged_before=skipped, **details))


class _GuardedAioServer(cygrpc.AioServer):  # type: ignore[misc]  # cygrpc has no stubs: its AioServer is Any
    """grpcio's AioServer whose accept loop never sees an unregistered call (see the module docstring)."""

    malformed: MalformedInput | None = None
    # The answers being sent; the loop keeps only weak references to tasks.
    _answering: set[asyncio.Task[None]] = set()

    async def _request_call(self) -> Any:
        rpc_state = await super()._request_call()
        context = cygrpc._ServicerContext(rpc_state, None, None, asyncio.get_running_loop())
        if self.malformed is not None:
            self.malformed.report(UNREGISTERED_PATH, peer=context.peer())
        # Answered in a task of its own: a client that never reads must not hold up the next unregistered call.
        task = asyncio.get_running_loop().create_task(_unimplemented(context))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)
        # The accept loop's own "that call failed, ask for the next one" path: it re-arms and decodes nothing.
        raise cygrpc._RequestCallError("unregistered method answered UNIMPLEMENTED")


async def _unimplemented(context: Any) -> None:
    """What grpcio answers a method it does not know; a client already gone makes grpcio's send fail, which ends
    that call and nothing else."""
    # AbortError once it is sent; ExecuteBatchError when the client has left.
    with contextlib.suppress(Exception):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


def guarded_server(options: Sequence[tuple[str, Any]], malformed: MalformedInput) -> grpc.aio.Server:
    """`grpc.aio.server(options=...)` with the guarded accept loop. Only registered handlers are ever called."""
    check_grpcio()
    original = cygrpc.AioServer
    cygrpc.AioServer = _GuardedAioServer
    try:
        server = grpc.aio.server(options=options)
    finally:
        cygrpc.AioServer = original
    server._server.malformed = malformed  # type: ignore[attr-defined]  # the stubs leave out grpc.aio's Cython server
    return server


class MalformedLogFilter(logging.Filter):
    """On grpcio's Cython logger: its per-request tracebacks about hostile input become `MalformedInput` reports.

    Anything else it logs passes unchanged."""

    # Message prefixes of grpcio's log lines (grpc/_cython/_cygrpc) and the kind each one is.
    # `Unexpected [DecodeError]`: a body that is not the request message, to grpcio's health or reflection servicer
    # (the node's own service parses its requests itself and answers INVALID_ARGUMENT).
    PREFIXES = (
        ("Invalid encoding on", HEADER_ENCODING),
        ("ExecuteBatchError", CLIENT_GONE),
        ("Failed sending error status from server", CLIENT_GONE),
        ("Unexpected [DecodeError]", BAD_PAYLOAD),
    )

    def __init__(self, malformed: MalformedInput) -> None:
        super().__init__()
        self._malformed = malformed

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        for prefix, kind in self.PREFIXES:
            if message.startswith(prefix):
                self._malformed.report(kind, detail=record.getMessage()[:200])
                return False
        return True

    def remove(self) -> None:
        logging.getLogger(cygrpc.__name__).removeFilter(self)


def install_log_filter(malformed: MalformedInput) -> MalformedLogFilter:
    flt = MalformedLogFilter(malformed)
    logging.getLogger(cygrpc.__name__).addFilter(flt)
    return flt
