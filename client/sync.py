"""`SyncGroupMember`: a blocking wrapper around `GroupMember` for scripts.

The member runs on a private event loop in a daemon thread; each method submits a coroutine to that loop and
waits for it. Callbacks (`on_assigned` / `on_revoked`) run on that background thread, and must not call the
blocking methods (they would wait for the thread they run on).

    with SyncGroupMember(["127.0.0.1:9000"], "group", {"events": 8}) as member:
        assignment = member.wait_stable(30)
        member.commit({("events", 0): 42})

Closing tears the loop down as `asyncio.run` does: the member closes (a dynamic one leaves the group), then every
task still pending on the loop is cancelled and awaited — gRPC's own tasks of a cancelled stream included, which
otherwise are destroyed pending ("Task was destroyed but it is pending!") — then async generators and the default
executor are shut down, and only then is the loop stopped and closed. A member (or `SyncAdmin`,
client/sync_admin.py) never closed is closed this way at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from groupcoord.base.logfields import fields
from groupcoord.client.errors import WaitTimedOut
from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment
from groupcoord.client.stats import MemberStats

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long interpreter exit waits for each client still open (closing a member that cannot reach its coordinator
# would otherwise hold the exit for its LeaveGroup retries).
EXIT_TIMEOUT_S = 10.0
# How long the teardown after the client's own close may take: cancelled tasks end within a few loop iterations,
# so this is only reached by a task that ignores its cancellation (or an executor thread that hangs).
TEARDOWN_S = 5.0


class _LoopThread:
    """An event loop in a daemon thread that runs coroutines for blocking callers; shared by the sync clients.

    `on_close`, when set, is awaited first on `close()` (the client's own `close()`); the loop is then torn down
    as `asyncio.run` does. Until closed, the instance is kept in `_OPEN`, which interpreter exit closes."""

    def __init__(self, name: str) -> None:
        self.on_close: Callable[[], Awaitable[None]] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        # Guards `_closed` against a call submitted while `close()` runs: every call is submitted before the
        # teardown (which then cancels it) or refused.
        self._lock = threading.Lock()
        self._closed = False
        self._thread.start()
        with _OPEN_LOCK:
            _OPEN.add(self)

    def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """The result of `call()`, awaited on the loop; the caller's thread blocks until then. `call` runs on the
        loop thread, so that a refused call leaves no coroutine behind that was never awaited."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the client is closed")
            if threading.current_thread() is self._thread:
                raise RuntimeError("a blocking call from the client's own loop thread (a callback) would never return")
            future = asyncio.run_coroutine_threadsafe(_await(call), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the caller: the call must not go on alone on the loop
            raise

    def close(self, timeout_s: float) -> None:
        """Awaits `on_close` (cancelled after `timeout_s`), then tears the loop down; idempotent. Raises what
        `on_close` raised, `WaitTimedOut` if it did not finish in time: either way the loop is gone."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("close() from the client's own loop thread (a callback) would never return")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with _OPEN_LOCK:
            _OPEN.discard(self)
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(timeout_s), self._loop).result(timeout_s + TEARDOWN_S + 1)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self._loop.close()

    async def _shutdown(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        error: Exception | None = None
        if self.on_close is not None:
            try:
                await _bounded(self.on_close(), timeout_s, "close")
            except Exception as exc:  # the loop is torn down all the same; the caller gets the error after
                error = exc
        deadline = loop.time() + TEARDOWN_S
        await _cancel_remaining(deadline)
        # Bounded: an async generator that hangs in its `finally`, or a thread of the default executor that hangs
        # (a blocking call in run_in_executor), cannot be interrupted; it is left behind rather than holding the
        # caller.
        for step in (loop.shutdown_asyncgens, loop.shutdown_default_executor):
            try:
                await asyncio.wait_for(step(), max(deadline - loop.time(), 0.1))
            except TimeoutError:
                log.warning("sync.teardown_incomplete", extra=fields(step=step.__name__, timeout_s=TEARDOWN_S))
        if error is not None:
            raise error


async def _await(call: Callable[[], Awaitable[T]]) -> T:
    return await call()


async def _cancel_remaining(deadline: float) -> None:
    """Cancels every other task of the running loop and waits for them (until `deadline`), as `asyncio.run` does;
    a task that failed while being cancelled goes to the loop's exception handler. In rounds: a task being
    cancelled may start others (gRPC does, closing a call)."""
    loop = asyncio.get_running_loop()
    this = asyncio.current_task()
    while True:
        tasks = [task for task in asyncio.all_tasks() if task is not this]
        left = deadline - loop.time()
        if not tasks or left <= 0:
            return
        for task in tasks:
            task.cancel()
        done, _ = await asyncio.wait(tasks, timeout=left)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                message = "a task failed while the loop was shut down"
                loop.call_exception_handler({"message": message, "exception": task.exception(), "task": task})


async def _bounded(awaitable: Awaitable[T], timeout_s: float, what: str) -> T:
    """`awaitable`'s result; `WaitTimedOut` (a TimeoutError) once `timeout_s` has passed, not any TimeoutError of
    its own."""
    timeout = asyncio.timeout(timeout_s)
    try:
        async with timeout:
            return await awaitable
    except TimeoutError as exc:
        if timeout.expired():
            raise WaitTimedOut(f"{what} did not finish within {timeout_s:g} s") from exc
        raise


_OPEN: set[_LoopThread] = set()
_OPEN_LOCK = threading.Lock()


@atexit.register
def _close_at_exit() -> None:
    """Closes the clients never closed while their loop threads still run (daemon threads are frozen later, in
    the interpreter's finalization, and their loops with them)."""
    with _OPEN_LOCK:
        still_open = list(_OPEN)
    for runner in still_open:
        try:
            runner.close(EXIT_TIMEOUT_S)
        except Exception as exc:
            log.warning("sync.close_at_exit_failed", extra=fields(error=repr(exc)))


class SyncGroupMember:
    """Same arguments as `GroupMember`; `start()` / `close()` or use it as a context manager. One never closed is
    closed at interpreter exit (a dynamic member leaves the group then)."""

    def __init__(self, bootstrap: list[str], group_id: str, topics: dict[str, int], **options: Any) -> None:
        self._args = (list(bootstrap), group_id, dict(topics))
        self._options = options
        self._runner: _LoopThread | None = None
        self._member: GroupMember | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> SyncGroupMember:
        """Starts the loop thread and the member (returns at once; see `wait_stable`)."""
        if self._runner is not None:
            raise RuntimeError("already started")
        runner = _LoopThread("groupcoord-member")
        try:
            self._member = runner.run(lambda: self._create(runner))
        except BaseException:
            runner.close(EXIT_TIMEOUT_S)
            raise
        self._runner = runner
        return self

    async def _create(self, runner: _LoopThread) -> GroupMember:
        member = GroupMember(*self._args, **self._options)
        runner.on_close = member.close  # before the start: from now on, a close (or the exit) closes the member
        await member.start()
        return member

    def close(self, timeout_s: float = 30.0) -> None:
        """Closes the member (a dynamic one leaves the group) and tears down the loop thread; idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close(timeout_s)

    def __enter__(self) -> SyncGroupMember:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the member ----------------------------------------------------------------------------------

    @property
    def member(self) -> GroupMember:
        """The async member, for reading its state (calls must go through this wrapper: they run on its loop)."""
        if self._member is None:
            raise RuntimeError("not started")
        return self._member

    @property
    def assignment(self) -> Assignment:
        """The partitions owned now (empty while rebalancing)."""
        return self.member.assignment

    def wait_stable(self, timeout_s: float = 30.0) -> Assignment:
        """Blocks until the member holds an assignment; raises the error that stopped the member (client/errors.py)
        if it stops first, `WaitTimedOut` (a `TimeoutError`) after `timeout_s`."""
        return self._run(lambda: self.member.wait_stable(timeout_s))

    def commit(self, offsets: dict[tuple[str, int], int], timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """Commits offsets; returns the error code per partition (NONE = acknowledged). `WaitTimedOut` after
        `timeout_s`."""
        return self._run(lambda: _bounded(self.member.commit(offsets), timeout_s, "commit"))

    def committed(self, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """The group's committed offsets. `WaitTimedOut` after `timeout_s`."""
        return self._run(lambda: _bounded(self.member.committed(), timeout_s, "committed"))

    def stats(self) -> MemberStats:
        """The member's stats (client/stats.py), taken on its loop thread, where its counters change."""
        return self._run(self._stats)

    async def _stats(self) -> MemberStats:
        return self.member.stats()

    def _run(self, call: Callable[[], Awaitable[T]]) -> T:
        if self._runner is None:
            raise RuntimeError("not started")
        return self._runner.run(call)
