"""Cooperative rebalancing (KIP-429) with SDK members on a real 3-node cluster.

A scale-out is judged by the chaos checker's ownership intervals (chaos/ownership.py): each member's callbacks are
recorded as a worker history file would record them, and no partition may have two holders at once. With
cooperative-sticky, the partitions that stay put keep one interval through the whole scale-out; with an eager
assignor every partition is revoked and assigned again, which the same intervals show. Mixed groups behave as
Kafka's do: the protocol every member offers wins, and a member offering none of the group's is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from groupcoord.chaos.ownership import Interval, WorkerFile, build_intervals, overlapping_pairs
from groupcoord.client.admin import Admin
from groupcoord.client.assignors import COOPERATIVE, EAGER
from groupcoord.client.errors import InconsistentGroupProtocol
from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment
from tests.cluster.test_three_nodes import Cluster

pytestmark = pytest.mark.timeout(120)
TOPICS = {"orders": 12, "payments": 4}
ALL = {(t, p) for t, n in TOPICS.items() for p in range(n)}
SESSION_TIMEOUT_MS = 6_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cooperative"))
    yield c
    c.stop_all()


class Recorded:
    """A member whose callbacks write what a chaos worker writes (chaos/history.py), with the same clock."""

    def __init__(self, cluster: Cluster, group: str, name: str, assignor: Any) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = [{"ev": "start", "t": time.monotonic()}]
        self.member = GroupMember(
            [cluster.address(i) for i in range(3)], group, TOPICS, client_id=name, assignor=assignor,
            session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=5_000, heartbeat_interval_ms=300,
            on_assigned=self._assigned, on_revoked=self._revoked,
        )  # fmt: skip

    def _event(self, ev: str, assignment: Assignment, **extra: Any) -> None:
        partitions = [f"{t}-{p}" for t, p in assignment.partitions]
        m = self.member
        self.events.append({"ev": ev, "t": time.monotonic(), "member": m.member_id, "generation": m.generation_id,
                            "partitions": partitions, **extra})  # fmt: skip

    def _assigned(self, assignment: Assignment) -> None:
        self._event("assigned", assignment)

    def _revoked(self, assignment: Assignment) -> None:
        self._event("revoked", assignment, reason=self.member.revoke_reason,
                    last_heartbeat_ok=self.member.last_heartbeat_ok)  # fmt: skip

    def history(self) -> WorkerFile:
        return WorkerFile(self.name, self.name, "0", "g", SESSION_TIMEOUT_MS / 1000, self.events, None, None, None)


@pytest.fixture
async def started() -> AsyncIterator[list[Recorded]]:
    members: list[Recorded] = []
    yield members
    await asyncio.gather(*(r.member.close() for r in members), return_exceptions=True)


async def _settled(members: list[Recorded], timeout_s: float = 40.0) -> dict[str, set[tuple[str, int]]]:
    """Until every member is stable in one generation and together they own every partition exactly once."""
    deadline = time.monotonic() + timeout_s
    while True:
        ms = [r.member for r in members]
        owned = [tp for m in ms for tp in m.assignment.partitions]
        if all(m._stable.is_set() for m in ms) and len({m.generation_id for m in ms}) == 1 and len(owned) == len(ALL):
            assert set(owned) == ALL
            return {r.name: set(r.member.assignment.partitions) for r in members}
        assert time.monotonic() < deadline, [(m.generation_id, m.assignment.partitions) for m in ms]
        await asyncio.sleep(0.05)


async def _scale_out(cluster: Cluster, group: str, assignor: Any, started: list[Recorded]) -> tuple[dict, dict, float]:
    """Four members settle, a fifth joins; returns the assignments before and after and when the fifth started."""
    for i in range(4):
        started.append(Recorded(cluster, group, f"m{i}", assignor))
        await started[-1].member.start()
    before = await _settled(started)
    scale_out_at = time.monotonic()
    started.append(Recorded(cluster, group, "m4", assignor))
    await started[-1].member.start()
    after = await _settled(started)
    await asyncio.sleep(1.0)  # no further round comes
    assert {r.name: set(r.member.assignment.partitions) for r in started} == after
    return before, after, scale_out_at


async def _formed_with(cluster: Cluster, group: str, started: list[Recorded]) -> str:
    """Starts the members, waits until they have settled, and returns the protocol the group picked."""
    for r in started:
        await r.member.start()
    await _settled(started)
    async with Admin([cluster.address(0)]) as admin:
        (described,) = await admin.describe_groups([group])
    return described.protocol


def _intervals(started: list[Recorded]) -> list[Interval]:
    intervals = build_intervals([r.history() for r in started], harness_end=time.monotonic())
    pairs = list(overlapping_pairs(intervals))
    assert not pairs, pairs
    return intervals


async def test_cooperative_scale_out_revokes_only_what_moves(cluster: Cluster, started: list[Recorded]):
    before, after, _ = await _scale_out(cluster, "coop-scale-out", "cooperative-sticky", started)
    assert all(r.member.rebalance_protocol == COOPERATIVE for r in started)
    moved = {tp for name, held in before.items() for tp in held - after[name]}
    assert after["m4"] == moved and len(moved) == len(ALL) // 5
    intervals = _intervals(started)
    for name, held in before.items():
        kept = {f"{t}-{p}" for t, p in held & after[name]}
        mine = [i for i in intervals if i.stem == name and i.partition in kept]
        # One interval per partition that stayed, still open: it was never revoked.
        assert sorted(i.partition for i in mine) == sorted(kept)
        assert all(i.end_reason == "running" for i in mine), mine
    revoked = [e for r in started for e in r.events if e["ev"] == "revoked"]
    assert sorted(p for e in revoked for p in e["partitions"]) == sorted(f"{t}-{p}" for t, p in moved)
    assert all(e["reason"] == "rejoin" for e in revoked)
    async with Admin([cluster.address(0)]) as admin:
        (described,) = await admin.describe_groups(["coop-scale-out"])
    assert described.protocol == "cooperative-sticky" and described.state == "Stable"


async def test_eager_scale_out_revokes_everything(cluster: Cluster, started: list[Recorded]):
    """The contrast that shows the intervals above mean something: eager members give up every partition.

    Only the intervals the scale-out ended count: on a slow machine the first four may have formed in more than one
    round, and eager members gave up everything at each of those too.
    """
    before, _, scale_out_at = await _scale_out(cluster, "eager-scale-out", "sticky", started)
    assert all(r.member.rebalance_protocol == EAGER for r in started)
    intervals = _intervals(started)
    for name, held in before.items():
        ended = [i for i in intervals if i.stem == name and i.end_reason == "rejoin" and i.end >= scale_out_at]
        revoked = {i.partition for i in ended}
        assert revoked == {f"{t}-{p}" for t, p in held}


async def test_a_member_offering_cooperative_and_range_follows_a_range_only_member(
    cluster: Cluster, started: list[Recorded]
):
    """Kafka's rolling upgrade: [cooperative-sticky, range] beside [range] agrees on range, and is eager."""
    both = Recorded(cluster, "mixed-range", "both", ["cooperative-sticky", "range"])
    started += [both, Recorded(cluster, "mixed-range", "range", "range")]
    assert both.member.rebalance_protocol == EAGER
    assert await _formed_with(cluster, "mixed-range", started) == "range"
    # Range's split, not sticky's: the first member by id gets the first half of each topic.
    first = min(started, key=lambda r: r.member.member_id)
    halves = {("orders", p) for p in range(6)} | {("payments", p) for p in range(2)}
    assert set(first.member.assignment.partitions) == halves


async def test_once_no_member_offers_range_alone_the_group_turns_cooperative(cluster: Cluster, started: list[Recorded]):
    started += [
        Recorded(cluster, "mixed-upgrade", "coop", "cooperative-sticky"),
        Recorded(cluster, "mixed-upgrade", "both", ["cooperative-sticky", "range"]),
    ]
    assert await _formed_with(cluster, "mixed-upgrade", started) == "cooperative-sticky"
    _intervals(started)


async def test_cooperative_only_beside_range_only_is_refused(cluster: Cluster, started: list[Recorded]):
    started += [Recorded(cluster, "mixed-refused", "range", "range")]
    await started[0].member.start()
    await _settled(started)
    coop = Recorded(cluster, "mixed-refused", "coop", "cooperative-sticky")
    started.append(coop)
    await coop.member.start()
    with pytest.raises(InconsistentGroupProtocol):
        await coop.member.wait_stable(20)
