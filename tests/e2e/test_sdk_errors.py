"""The SDK's errors (client/errors.py), each raised from a real cause against a real node: a wrong address, a bad
group id, a fenced static member, a commit before the first assignment, a cluster that stops answering. (An ACL
refusal is in tests/e2e/test_auth.py: `test_the_sdk_fails_clearly_on_a_refusal`.)"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from groupcoord.client.admin import Admin
from groupcoord.client.errors import (
    BootstrapUnreachable,
    CommitFailed,
    CoordinatorUnavailable,
    FatalError,
    FencedInstanceId,
    GroupcoordError,
    InvalidGroupId,
    RetriableError,
    WaitTimedOut,
)
from groupcoord.client.member import REVOKE_FATAL, GroupMember
from groupcoord.protocol.errors import Errors
from tests.e2e.support import NodeProcess, start_node, stop_node

pytestmark = pytest.mark.timeout(60)


def closed_port() -> str:
    """An address on loopback where nothing listens: the port is bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def unavailable_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "member.coordinator_unavailable"]


async def test_a_wrong_address_stops_the_member_with_bootstrap_unreachable(caplog):
    wrong = closed_port()
    caplog.set_level(logging.WARNING, logger="groupcoord.client.member")
    member = GroupMember([wrong], "sdk-errors.wrong", {"t": 2}, bootstrap_timeout_ms=1500)
    started = time.monotonic()
    async with member:
        with pytest.raises(BootstrapUnreachable) as caught:
            await member.wait_stable(20)
    took = time.monotonic() - started
    assert 1.5 <= took < 6, took
    error = caught.value
    assert error.retriable and isinstance(error, CoordinatorUnavailable)
    assert error.tried == (wrong,) and "UNAVAILABLE" in error.last_cause
    assert wrong in str(error) and error.code == Errors.COORDINATOR_NOT_AVAILABLE
    # The failing streak is logged once, not once per retry.
    (line,) = unavailable_lines(caplog)
    assert line.fields["group"] == "sdk-errors.wrong" and line.fields["retrying_for_s"] == 1.5


async def test_a_wrong_address_fails_the_admin_fast():
    wrong = closed_port()
    async with Admin([wrong], connect_timeout_s=1.0, deadline_s=30) as admin:
        started = time.monotonic()
        with pytest.raises(BootstrapUnreachable) as caught:
            await admin.describe_groups(["g"])
    assert time.monotonic() - started < 5 and caught.value.tried == (wrong,)


@pytest.mark.parametrize("group_id", ["", "g" * 256])
async def test_a_bad_group_id_raises_invalid_group_id_from_wait_stable(node: NodeProcess, group_id: str):
    started = time.monotonic()
    async with GroupMember([node.address], group_id, {"t": 2}) as member:
        with pytest.raises(InvalidGroupId) as caught:
            await member.wait_stable(20)
    assert time.monotonic() - started < 5, "a refused group id fails at once, not at a timeout"
    assert isinstance(caught.value, FatalError) and not caught.value.retriable
    assert caught.value.code == Errors.INVALID_GROUP_ID


async def test_commit_before_the_first_assignment_raises_commit_failed(node: NodeProcess):
    member = GroupMember([node.address], "sdk-errors.early", {"t": 2})
    with pytest.raises(CommitFailed, match="not joined"):
        await member.commit({("t", 0): 1})
    async with member:
        await member.wait_stable(20)
        assert set((await member.commit({("t", 0): 1})).values()) == {Errors.NONE}
    async with Admin([node.address]) as admin:
        assert await admin.list_offsets("sdk-errors.early") == {("t", 0): (1, "")}


async def test_a_static_member_replaced_by_another_process_is_fenced(node: NodeProcess):
    revoked: list[object] = []
    options = {"group_instance_id": "w", "session_timeout_ms": 6000, "heartbeat_interval_ms": 100}
    first = GroupMember([node.address], "sdk-errors.fenced", {"t": 2}, on_revoked=revoked.append, **options)
    async with first:
        assert len((await first.wait_stable(20)).partitions) == 2
        async with GroupMember([node.address], "sdk-errors.fenced", {"t": 2}, **options) as second:
            await second.wait_stable(20)
            with pytest.raises(FencedInstanceId) as caught:
                await asyncio.wait_for(first.wait_failed(), 10)
            assert caught.value.code == Errors.FENCED_INSTANCE_ID and not caught.value.retriable
            assert first.revoke_reason == REVOKE_FATAL and revoked, "the fenced member gave up its partitions"
            with pytest.raises(FencedInstanceId):
                await first.wait_stable(1)
            assert len(second.assignment.partitions) == 2


async def test_a_short_wait_is_a_timeout_and_the_member_goes_on(node: NodeProcess):
    async with GroupMember([node.address], "sdk-errors.slow", {"t": 2}, rebalance_timeout_ms=3000) as member:
        with pytest.raises(WaitTimedOut) as caught:
            await member.wait_stable(0.001)
        assert isinstance(caught.value, TimeoutError) and caught.value.retriable
        assert len((await member.wait_stable(20)).partitions) == 2


async def test_a_cluster_that_stops_answering_ends_the_member_after_coordinator_timeout(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.client.member")
    own = start_node(tmp_path / "node.log", "--partitions=1")
    member = GroupMember(
        [own.address], "sdk-errors.gone", {"t": 2}, session_timeout_ms=6000, heartbeat_interval_ms=100,
        coordinator_timeout_ms=2000, default_api_timeout_ms=1000,
    )  # fmt: skip
    try:
        async with member:
            await member.wait_stable(20)
            stop_node(own)
            stopped = time.monotonic()
            with pytest.raises(RetriableError) as commit_error:
                await member.commit({("t", 0): 1})
            assert isinstance(commit_error.value, CoordinatorUnavailable), commit_error.value
            assert time.monotonic() - stopped < 4
            with pytest.raises(CoordinatorUnavailable) as caught:
                await asyncio.wait_for(member.wait_failed(), 20)
            assert isinstance(caught.value, GroupcoordError) and caught.value.retriable
            assert member.revoke_reason and not member.assignment.partitions
    finally:
        stop_node(own)
    assert len(unavailable_lines(caplog)) == 1, [r.getMessage() for r in caplog.records]
