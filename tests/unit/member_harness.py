"""What the SDK member tests against a `FakeCoordinator` share (test_member_errors.py, test_member_session.py):
members built with short timings and closed at the end, callbacks that record, and waits with a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from groupcoord.client.errors import FatalError
from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment
from tests.unit.fake_coordinator import FakeCoordinator

SESSION_MS = 1000
ALL = tuple(("t", p) for p in range(4))


class Recorder:
    """on_assigned / on_revoked callbacks that remember what they were given."""

    def __init__(self) -> None:
        self.assigned: list[tuple[Any, ...]] = []
        self.revoked: list[tuple[Any, ...]] = []

    def on_assigned(self, assignment: Assignment) -> None:
        self.assigned.append(assignment.partitions)

    def on_revoked(self, assignment: Assignment) -> None:
        self.revoked.append(assignment.partitions)


@contextlib.asynccontextmanager
async def member_factory() -> AsyncIterator[Callable[..., tuple[GroupMember, Recorder]]]:
    """Builds members on a fake (short timings) and closes them all, bounded, at the end."""
    members: list[GroupMember] = []

    def build(server: FakeCoordinator, **kwargs: Any) -> tuple[GroupMember, Recorder]:
        recorder = Recorder()
        options: dict[str, Any] = {
            "client_id": "c",
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 2000,
            "heartbeat_interval_ms": 50,
            "on_assigned": recorder.on_assigned,
            "on_revoked": recorder.on_revoked,
        }
        options.update(kwargs)
        member = GroupMember([server.address], "g", {"t": 4}, **options)
        members.append(member)
        return member, recorder

    yield build
    for member in members:
        await asyncio.wait_for(member.close(), 10)


async def started(member: GroupMember) -> GroupMember:
    """The member, started: for a one-line `await started(member)` before waiting on it."""
    await member.start()
    return member


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Polls `predicate` until true or fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def failed_with(member: GroupMember, code: int, timeout_s: float = 5.0) -> None:
    """The member stopped with `code`'s `FatalError` within `timeout_s`."""
    with pytest.raises(FatalError) as caught:
        await asyncio.wait_for(member.wait_failed(), timeout_s)
    assert caught.value.code == code


async def quiet_after_failure(server: FakeCoordinator) -> None:
    """Nothing more is sent once the member failed."""
    before = server.count()
    await asyncio.sleep(0.3)
    assert server.count() == before, server.requests[before:]
