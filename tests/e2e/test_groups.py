"""Whole rebalances through real gRPC calls: a dynamic group, a static group, and a static restart."""

from __future__ import annotations

import asyncio

from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.e2e.support import assign, describe, heartbeat, join_dynamic, join_request, sync_all

PARTITIONS = 16

JoinReason = pb.JoinGroupRequest.JoinReason


async def test_three_dynamic_members_reach_stable_with_their_assignments(stub):
    group = "dynamic-3"
    joins = list(await asyncio.gather(*(join_dynamic(stub, group) for _ in range(3))))

    assert {j.error_code for j in joins} == {Errors.NONE}
    assert len({j.generation_id for j in joins}) == 1
    assert joins[0].generation_id == 1
    leaders = [j for j in joins if j.member_id == j.leader]
    assert len(leaders) == 1
    assert len(leaders[0].members) == 3
    assert all(not j.members for j in joins if j is not leaders[0])

    syncs = await sync_all(stub, group, joins, ["", "", ""])
    expected = {a.member_id: a.assignment for a in assign(leaders[0])}
    for joined, synced in zip(joins, syncs, strict=True):
        assert synced.error_code == Errors.NONE
        assert synced.protocol_name == "range"
        assert synced.assignment == expected[joined.member_id]
    assert sorted(s.assignment for s in syncs) == sorted(expected.values())

    for joined in joins:
        assert await heartbeat(stub, group, joined.member_id, joined.generation_id) == Errors.NONE

    described = await describe(stub, group)
    assert described.error_code == Errors.NONE
    assert described.group_state == "Stable"
    assert described.generation_id == 1
    assert described.protocol_data == "range"
    assert described.coordinator_partition == partition_for(group, PARTITIONS)
    assert described.coordinator_node_id == 1
    assert {m.member_id: m.member_assignment for m in described.members} == expected
    assert {m.client_host for m in described.members} == {"127.0.0.1"}


async def _stable_static_group(stub, group: str) -> list[pb.JoinGroupResponse]:
    """Two static members join at once (no MEMBER_ID_REQUIRED round) and sync."""
    joins = list(await asyncio.gather(*(stub.JoinGroup(join_request(group, instance_id=i)) for i in ("a", "b"))))
    syncs = await sync_all(stub, group, joins, ["a", "b"])
    assert {s.error_code for s in syncs} == {Errors.NONE}
    assert (await describe(stub, group)).group_state == "Stable"
    return joins


async def test_two_static_members_reach_stable(stub):
    joins = await _stable_static_group(stub, "static-2")
    described = await describe(stub, "static-2")
    assert {m.group_instance_id for m in described.members} == {"a", "b"}
    assert all(m.member_assignment for m in described.members)
    assert {j.member_id.split("-")[0] for j in joins} == {"a", "b"}


async def test_static_restart_replaces_the_member_without_a_rebalance(stub):
    group = "static-restart"
    a, b = await _stable_static_group(stub, group)
    generation = a.generation_id
    before = {m.group_instance_id: m.member_assignment for m in (await describe(stub, group)).members}

    restarted = await stub.JoinGroup(join_request(group, instance_id="b", join_reason=JoinReason.RESTART))

    assert restarted.error_code == Errors.NONE
    assert restarted.member_id not in ("", b.member_id)
    assert restarted.generation_id == generation
    # A returning leader is told not to reassign (KIP-345); a follower just gets the generation.
    assert restarted.skip_assignment == (b.member_id == b.leader)
    synced = await stub.SyncGroup(
        pb.SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=restarted.member_id, group_instance_id="b"
        )
    )
    assert synced.error_code == Errors.NONE
    assert synced.assignment == before["b"]
    assert await heartbeat(stub, group, a.member_id, generation, "a") == Errors.NONE
    assert await heartbeat(stub, group, restarted.member_id, generation, "b") == Errors.NONE
    assert await heartbeat(stub, group, b.member_id, generation, "b") == Errors.FENCED_INSTANCE_ID

    described = await describe(stub, group)
    assert described.group_state == "Stable"
    assert described.generation_id == generation
    assert {m.member_id for m in described.members} == {a.member_id, restarted.member_id}


async def test_a_silent_member_is_expired_by_the_session_timer(stub):
    """Nothing but the node's timer driver can remove this member: it never heartbeats."""
    group = "session-expiry"
    first = await stub.JoinGroup(join_request(group, session_timeout_ms=500))
    joined = await stub.JoinGroup(join_request(group, member_id=first.member_id, session_timeout_ms=500))
    await sync_all(stub, group, [joined], [""])
    assert (await describe(stub, group)).group_state == "Stable"

    for _ in range(50):
        await asyncio.sleep(0.1)
        if (await describe(stub, group)).group_state == "Empty":
            break
    described = await describe(stub, group)
    assert described.group_state == "Empty"
    assert described.last_rebalance_reason.cause == "session_expired"
    assert await heartbeat(stub, group, joined.member_id, joined.generation_id) == Errors.UNKNOWN_MEMBER_ID
