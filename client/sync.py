"""`SyncGroupMember`: a blocking wrapper around `GroupMember` for scripts.

The member runs on a private event loop in a daemon thread; each method submits a coroutine to that loop and
waits for it. Callbacks (`on_assigned` / `on_revoked`) run on that background thread.

    with SyncGroupMember(["127.0.0.1:9000"], "group", {"events": 8}) as member:
        assignment = member.wait_stable(30)
        member.commit({("events", 0): 42})
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment

T = TypeVar("T")


class SyncGroupMember:
    """Same arguments as `GroupMember`; `start()` / `close()` or use it as a context manager."""

    def __init__(self, bootstrap: list[str], group_id: str, topics: dict[str, int], **options: Any) -> None:
        self._args = (list(bootstrap), group_id, dict(topics))
        self._options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._member: GroupMember | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> SyncGroupMember:
        """Starts the loop thread and the member (returns at once; see `wait_stable`)."""
        if self._loop is not None:
            raise RuntimeError("already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="groupcoord-member", daemon=True)
        self._thread.start()
        self._member = self._run(self._create())
        return self

    async def _create(self) -> GroupMember:
        member = GroupMember(*self._args, **self._options)
        await member.start()
        return member

    def close(self, timeout_s: float = 30.0) -> None:
        """Closes the member (a dynamic one leaves the group) and stops the loop thread."""
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        try:
            if self._member is not None:
                asyncio.run_coroutine_threadsafe(self._member.close(), loop).result(timeout_s)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout_s)
            if not thread.is_alive():
                loop.close()

    def __enter__(self) -> SyncGroupMember:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the member ----------------------------------------------------------------------------------

    @property
    def member(self) -> GroupMember:
        if self._member is None:
            raise RuntimeError("not started")
        return self._member

    @property
    def assignment(self) -> Assignment:
        """The partitions owned now (empty while rebalancing)."""
        return self.member.assignment

    def wait_stable(self, timeout_s: float = 30.0) -> Assignment:
        """Blocks until the member holds an assignment; raises `MemberFailed` if it failed, `TimeoutError`."""
        return self._run(self._stable(timeout_s))

    async def _stable(self, timeout_s: float) -> Assignment:
        stable = asyncio.ensure_future(self.member.wait_stable(timeout_s))
        # Shielded: cancelling a waiter must not cancel the member's own task.
        failed = asyncio.ensure_future(asyncio.shield(self.member.wait_failed()))
        try:
            await asyncio.wait({stable, failed}, return_when=asyncio.FIRST_COMPLETED)
            if not stable.done():
                failed.result()  # raises the fatal error
                raise RuntimeError("member stopped")
            return stable.result()
        finally:
            stable.cancel()
            failed.cancel()

    def commit(self, offsets: dict[tuple[str, int], int], timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """Commits offsets; returns the error code per partition (NONE = acknowledged)."""
        return self._run(asyncio.wait_for(self.member.commit(offsets), timeout_s))

    def committed(self, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """The group's committed offsets."""
        return self._run(asyncio.wait_for(self.member.committed(), timeout_s))

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("not started")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
