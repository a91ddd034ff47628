"""GROUP_AUTHORIZATION_FAILED reaching a `GroupMember` (from a fake coordinator): fatal at once, from FindCoordinator
or from any group call, never retried; `commit()` and `committed()` raise it to their caller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from groupcoord.client.errors import GroupAuthorizationFailed
from groupcoord.client.member import GroupMember
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.fake_coordinator import FakeCoordinator

pytestmark = pytest.mark.timeout(20)
DENIED = Errors.GROUP_AUTHORIZATION_FAILED


@pytest.fixture
async def member(fake: FakeCoordinator) -> AsyncIterator[GroupMember]:
    m = GroupMember([fake.address], "g", {"t": 4}, session_timeout_ms=1000, heartbeat_interval_ms=50)
    yield m
    await asyncio.wait_for(m.close(), 10)


async def fails_with_denied(member: GroupMember, fake: FakeCoordinator) -> GroupAuthorizationFailed:
    with pytest.raises(GroupAuthorizationFailed) as caught:
        await asyncio.wait_for(member.wait_failed(), 5)
    assert caught.value.code == DENIED
    before = fake.count()
    await asyncio.sleep(0.3)
    assert fake.count() == before, "the member went on calling after a refusal"
    return caught.value


async def test_a_refused_find_coordinator_is_fatal_not_retried(fake, member):
    fake.script(
        "FindCoordinator",
        pb.FindCoordinatorResponse(
            coordinators=[pb.FindCoordinatorResponse.Coordinator(group_id="g", error_code=DENIED, error_message="no")]
        ),
    )
    await member.start()
    failed = await fails_with_denied(member, fake)
    assert fake.count("FindCoordinator") == 1 and fake.count("JoinGroup") == 0
    assert "GROUP_AUTHORIZATION_FAILED" in str(failed)


@pytest.mark.parametrize("method", ["JoinGroup", "SyncGroup"])
async def test_a_refused_join_or_sync_is_fatal(fake, member, method):
    fake.script(method, DENIED)
    await member.start()
    await fails_with_denied(member, fake)
    assert fake.count(method) == 1


async def test_a_refused_heartbeat_revokes_and_is_fatal(fake, member):
    revoked: list[object] = []
    member.on_revoked = revoked.append
    await member.start()
    await member.wait_stable(5)
    fake.always["Heartbeat"] = DENIED
    await fails_with_denied(member, fake)
    assert revoked and member.revoke_reason == "fatal"


async def test_commit_and_committed_raise_a_refusal(fake, member):
    await member.start()
    await member.wait_stable(5)
    fake.script("OffsetFetch", DENIED)
    with pytest.raises(GroupAuthorizationFailed) as caught:
        await asyncio.wait_for(member.committed(), 5)
    assert caught.value.code == DENIED
    fake.script("OffsetCommit", pb.OffsetCommitResponse(error_code=DENIED, error_message="not yours"))
    with pytest.raises(GroupAuthorizationFailed, match="not yours") as caught:
        await asyncio.wait_for(member.commit({("t", 0): 1}), 5)
    assert caught.value.code == DENIED
