"""The member's stats (client/stats.py) against a real node: what `stats()` and the periodic `stats_cb` report about
rebalances, calls and their latency, retries, errors and the assignment; and that the member's log lines say which
group, member and generation they are about."""

from __future__ import annotations

import asyncio
import logging

import pytest

from groupcoord.client.errors import CoordinatorUnavailable
from groupcoord.client.member import GroupMember
from groupcoord.client.stats import MemberStats
from groupcoord.protocol.errors import Errors
from tests.e2e.support import NodeProcess, start_node, stop_node

pytestmark = pytest.mark.timeout(60)


async def until(check: object, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.02)


async def test_stats_report_rebalances_calls_and_the_assignment(node: NodeProcess, caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.client.member")
    seen: list[MemberStats] = []

    async def collect(stats: MemberStats) -> None:  # a coroutine callback is awaited
        seen.append(stats)

    member = GroupMember(
        [node.address], "stats.one", {"t": 3}, heartbeat_interval_ms=50, stats_cb=collect, stats_interval_ms=50
    )
    before = member.stats()
    assert (before.state, before.rebalances, before.calls, before.assignment) == ("joining", 0, {}, ())
    async with member:
        await member.wait_stable(20)
        assert set((await member.commit({("t", 0): 5, ("t", 1): 6})).values()) == {Errors.NONE}
        # A commit that names a topic name Kafka refuses: answered, with a per-partition error code counted.
        refused = await member.commit({("bad topic!", 0): 1})
        assert set(refused.values()) != {Errors.NONE}
        await until(lambda: member.stats().calls.get("Heartbeat", None) is not None)
        await until(lambda: len(seen) >= 3)
        stats = member.stats()
    assert stats.state == "stable" and stats.group_id == "stats.one" and stats.member_id == member.member_id
    assert stats.generation_id == member.generation_id >= 1 and stats.rebalances == 1
    assert stats.assignment == (("t", 0), ("t", 1), ("t", 2)) and stats.coordinator == node.address
    assert 0 < stats.last_rebalance_s < 20
    for method in ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit"):
        call = stats.calls[method]
        assert call.count >= 1 and call.failures == 0, (method, call)
        assert call.latency_sum_s > 0 and 0 < call.latency_max_s <= call.latency_sum_s, (method, call)
    assert stats.calls["OffsetCommit"].count == 2
    # MEMBER_ID_REQUIRED is the first JoinGroup's answer (KIP-394): handled, and counted.
    assert stats.errors.get("MEMBER_ID_REQUIRED") == 1 and stats.calls["JoinGroup"].count == 2
    (refused_code,) = set(refused.values())
    assert stats.errors.get(Errors(refused_code).name) == 1
    assert stats.unavailable_s == 0 and stats.retries == 0
    assert seen[0].time_ms <= seen[-1].time_ms and seen[-1].state in ("stable", "closed")
    assert member.stats().state == "closed"
    # Log lines carry the group, the member and the generation.
    (assigned,) = [r for r in caplog.records if r.getMessage() == "member.assigned"]
    assert assigned.fields["group"] == "stats.one" and assigned.fields["member"] == member.member_id
    assert assigned.fields["generation"] == stats.generation_id and assigned.fields["took_s"] >= 0


async def test_stats_count_retries_and_unavailability_and_a_raising_callback_is_logged_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.client.member")
    calls: list[int] = []

    def broken(stats: MemberStats) -> None:
        calls.append(stats.retries)
        raise RuntimeError("exporter down")

    own = start_node(tmp_path / "node.log", "--partitions=1")
    member = GroupMember(
        [own.address], "stats.gone", {"t": 1}, session_timeout_ms=6000, heartbeat_interval_ms=100,
        default_api_timeout_ms=1500, stats_cb=broken, stats_interval_ms=50,
    )  # fmt: skip
    try:
        async with member:
            await member.wait_stable(20)
            stop_node(own)
            with pytest.raises(CoordinatorUnavailable):
                await member.commit({("t", 0): 1})
            stats = member.stats()
            assert stats.retries >= 1 and stats.unavailable_s > 0
            assert stats.calls["FindCoordinator"].failures >= 1 or stats.calls["OffsetCommit"].failures >= 1
            assert stats.errors.get("UNAVAILABLE", 0) + stats.errors.get("COORDINATOR_NOT_AVAILABLE", 0) >= 1
            await until(lambda: len(calls) >= 3)
    finally:
        stop_node(own)
    failures = [r for r in caplog.records if r.getMessage() == "member.stats_cb_failed"]
    assert len(failures) == 1 and failures[0].exc_info is not None
