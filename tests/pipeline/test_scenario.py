"""Issue 7's acceptance scenario: a scripted group life on a real 3-node cluster, exported from the running cluster
and analysed; the tables must tell exactly what the script did.

The script: three members join one by one (A and B static, C a dynamic worker process); B's process restarts
(static replacement, no rebalance); the leader A rejoins with JoinReason RESTART (no rebalance); B stops and an
operator removes it; C is killed and its session expires; the group's coordinator is killed with SIGKILL while
A commits every 50 ms. The group's rebalances, their reasons, the two avoided rebalances and the failover window
are then read back from the analysis.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from groupcoord.client import GroupMember
from groupcoord.client.admin import Admin
from groupcoord.client.protocol import PROTOCOL_TYPE
from groupcoord.node.topology import partition_for
from groupcoord.pipeline import analyze
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.cluster.test_three_nodes import PARTITIONS, Cluster, _coordinator, _node_index, _rpc

GROUP = "scenario"
TOPICS = {"t": 6}
STATIC_SESSION_MS = 6_000  # outlives the failover: the coordinator kill must not cost a rebalance
C_SESSION_MS = 1_500
RESTART = pb.JoinGroupRequest.JoinReason.RESTART


# How far the cluster's time for records may be from this process's wall clock (see the failover checks).
CLUSTER_CLOCK_SLACK_MS = 20


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def until(check: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    """Until `check()` (or what it returns, when awaitable) is true."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class Scenario:
    """The script's actors and what it did, with wall times to check the events against."""

    def __init__(self, cluster: Cluster, tmp: Path) -> None:
        self.cluster, self.tmp = cluster, tmp
        self.bootstrap = [cluster.address(i) for i in range(cluster.size)]
        self.admin = Admin(self.bootstrap, deadline_s=20)
        self.commits: list[tuple[int, int, int]] = []  # (sent ms, answered ms, offset) of acknowledged commits
        self.worker: subprocess.Popen[bytes] | None = None

    def member(self, instance: str) -> GroupMember:
        return GroupMember(self.bootstrap, GROUP, TOPICS, client_id=f"client-{instance}", group_instance_id=instance,
                           session_timeout_ms=STATIC_SESSION_MS, rebalance_timeout_ms=5_000,
                           heartbeat_interval_ms=300)  # fmt: skip

    async def coordinator(self) -> str:
        live = next(i for i, node in enumerate(self.cluster.nodes) if node is not None)
        return await _coordinator(self.cluster, GROUP, live)

    async def describe(self) -> pb.DescribeGroupsResponse.Group:
        coordinator = await self.coordinator()
        reply = await _rpc(coordinator, "DescribeGroups", pb.DescribeGroupsRequest(group_ids=[GROUP]))
        return reply.groups[0]

    async def stable(self, generation: int, members: int) -> pb.DescribeGroupsResponse.Group:
        found: list[pb.DescribeGroupsResponse.Group] = []

        async def check() -> bool:
            with contextlib.suppress(Exception):  # a coordinator moving answers nothing for a moment
                found[:] = [await self.describe()]
                group = found[0]
                return (group.group_state, group.generation_id, len(group.members)) == ("Stable", generation, members)
            return False

        await until(check, f"generation {generation} Stable with {members} members")
        return found[0]

    def start_worker(self) -> None:
        """C: a dynamic member in a process of its own, so that it can die without leaving."""
        cmd = [sys.executable, "-m", "groupcoord.chaos.worker", "--history", str(self.tmp / "c.history"),
               "--worker", "c", "--bootstrap", ",".join(self.bootstrap), "--group", GROUP, "--topic", "t:6",
               f"--session-timeout-ms={C_SESSION_MS}", "--heartbeat-interval-ms=300",
               "--rebalance-timeout-ms=5000"]  # fmt: skip
        with (self.tmp / "c.log").open("ab") as log:
            self.worker = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill_worker(self) -> None:
        assert self.worker is not None
        os.kill(self.worker.pid, signal.SIGKILL)
        self.worker.wait()

    async def commit_loop(self, a: GroupMember, stop: asyncio.Event) -> None:
        offset = 0
        while not stop.is_set():
            partitions = a.assignment.partitions
            if partitions:
                offset += 1
                sent = now_ms()
                with contextlib.suppress(Exception):
                    codes = await a.commit({tp: offset for tp in partitions})
                    if codes and all(code == Errors.NONE for code in codes.values()):
                        self.commits.append((sent, now_ms(), offset))
            await asyncio.sleep(0.05)


async def restart_join(scenario: Scenario, a: GroupMember) -> pb.JoinGroupResponse:
    """What a restarted leader that kept its member id sends: the same protocols, JoinReason RESTART."""
    described = await scenario.describe()
    (mine,) = [m for m in described.members if m.member_id == a.member_id]
    request = pb.JoinGroupRequest(
        group_id=GROUP, session_timeout_ms=a.session_timeout_ms, rebalance_timeout_ms=a.rebalance_timeout_ms,
        member_id=a.member_id, group_instance_id="a", protocol_type=PROTOCOL_TYPE, client_id=a.client_id,
        protocols=[pb.JoinGroupRequest.Protocol(name=described.protocol_data, metadata=mine.member_metadata)],
        join_reason=RESTART, reason="process restarted",
    )  # fmt: skip
    return await _rpc(await scenario.coordinator(), "JoinGroup", request)


async def run_scenario(cluster: Cluster, tmp: Path, out: Path) -> dict[str, object]:
    """Plays the script; exports the events from the running cluster into `out`; returns what happened."""
    s = Scenario(cluster, tmp)
    a, b = s.member("a"), s.member("b")
    done: dict[str, object] = {}
    stop = asyncio.Event()
    committing: asyncio.Task[None] | None = None
    try:
        await a.start()
        await s.stable(1, 1)
        done["a"] = a.member_id
        await b.start()
        await s.stable(2, 2)
        done["b"] = b.member_id
        s.start_worker()
        group = await s.stable(3, 3)
        (done["c"],) = {m.member_id for m in group.members} - {a.member_id, b.member_id}
        assert group.leader_id == a.member_id, "A joined first and stays the leader"
        committing = asyncio.create_task(s.commit_loop(a, stop))

        await b.close()  # a static member's process goes away without leaving ...
        b2 = s.member("b")
        await b2.start()  # ... and its next incarnation takes its place: no rebalance
        await b2.wait_stable()
        assert (await s.stable(3, 3)) and b2.member_id != done["b"]
        done["b2"] = b2.member_id

        restarted = await restart_join(s, a)
        assert (restarted.error_code, restarted.generation_id, restarted.skip_assignment) == (Errors.NONE, 3, True)
        await s.stable(3, 3)

        await b2.close()
        removed = await s.admin.remove_members(GROUP, ["b"], reason="decommissioned")
        assert removed == {"b": Errors.NONE}
        await s.stable(4, 2)

        s.kill_worker()
        done["c_killed_ms"] = now_ms()
        await s.stable(5, 1)

        dead = _node_index(cluster, await s.coordinator())
        await until(lambda: len(s.commits) >= 5, "A's commits")
        done["kill_ms"] = now_ms()
        cluster.kill(dead)
        done["killed_node"] = dead + 1
        await until(lambda: s.commits[-1][0] > done["kill_ms"], "a commit at the new coordinator")
        stop.set()
        await committing
        await s.stable(5, 1)
        done["commits"] = list(s.commits)

        survivors = ",".join(cluster.address(i) for i in range(cluster.size) if i != dead)
        exported = subprocess.run(
            [sys.executable, "-m", "groupcoord", "events", "export", "--out", str(out), "--bootstrap", survivors],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stdout + exported.stderr
    finally:
        stop.set()
        if committing is not None:
            await asyncio.gather(committing, return_exceptions=True)
        for member in (a, b):
            await member.close()
        if s.worker is not None and s.worker.poll() is None:
            s.kill_worker()
        await s.admin.close()
    return done


def rows(spark: SparkSession, out: Path, table: str, order: str) -> list[dict]:
    return [row.asDict() for row in spark.read.parquet(str(out / table)).orderBy(order).collect()]


@pytest.mark.timeout(240)
async def test_the_analysis_tells_what_the_scenario_did(spark: SparkSession, tmp_path: Path):
    cluster = Cluster(tmp_path)
    try:
        done = await run_scenario(cluster, tmp_path, tmp_path / "export")
    finally:
        cluster.stop_all()

    # The export of the running cluster, a node down: every event once, no hole in any partition's chain.
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert (len(manifest["sources"]), len(manifest["unreachable"])) == (2, 1)
    assert manifest["holes"] == [] and manifest["conflicts"] == [] and manifest["bad_lines"] == []
    events = [json.loads(line) for line in (tmp_path / "export" / "events.jsonl").read_text().splitlines()]
    keys = [(e["partition"], e["index"], e["position"]) for e in events]
    assert keys == sorted(set(keys))

    out = tmp_path / "analysis"
    args = argparse.Namespace(events=tmp_path / "export", out=out, master=None, since=None, until=None)
    assert analyze.run(args) == 0
    partition = partition_for(GROUP, PARTITIONS)
    a, b, b2, c = done["a"], done["b"], done["b2"], done["c"]

    # Five rebalances, each with its cause and trigger; none for the restarts, none for the failover.
    found = rows(spark, out, "rebalances", "start_ms")
    assert [(r["reason"], r["trigger_member"], r["generation_before"], r["generation_after"], r["members_before"],
             r["members_after"]) for r in found] == [
        ("member_joined", a, 0, 1, 0, 1),
        ("member_joined", b, 1, 2, 1, 2),
        ("member_joined", c, 2, 3, 2, 3),
        ("admin_removal", b2, 3, 4, 3, 2),
        ("session_expired", c, 4, 5, 2, 1),
    ]  # fmt: skip
    assert all(r["completed"] and r["partition"] == partition and r["restarts"] == 0 for r in found)
    assert all(0 <= r["duration_ms"] < 5_000 for r in found)
    expired = found[-1]
    # C's session ran out one session timeout after its last heartbeat (at most one interval before the kill).
    assert done["c_killed_ms"] + C_SESSION_MS - 400 <= expired["start_ms"] <= done["c_killed_ms"] + C_SESSION_MS + 2_000
    assert found[-1]["end_ms"] < done["kill_ms"], "the coordinator kill cost no rebalance"
    by_reason = {r["reason"]: r["count"] for r in rows(spark, out, "rebalances_by_reason", "reason")}
    assert by_reason == {"member_joined": 3, "admin_removal": 1, "session_expired": 1}

    # The two rebalances avoided: B's new incarnation took its place, and the leader's RESTART rejoin.
    avoided = rows(spark, out, "avoided", "time_ms")
    assert [(r["kind"], r["member"], r["group_instance_id"], r["generation"]) for r in avoided] == [
        ("static_replacement", b2, "b", 3),
        ("restart", a, "a", 3),
    ]

    churn = rows(spark, out, "churn", "minute_ms")
    totals = {k: sum(r[k] for r in churn) for k in ("joins", "leaves", "expirations", "replacements")}
    assert totals == {"joins": 3, "leaves": 1, "expirations": 1, "replacements": 1}

    # The failover: from the killed coordinator's last write to the new leader's barrier.
    after_kill = [w for w in rows(spark, out, "unavailability", "barrier_ms") if w["barrier_ms"] > done["kill_ms"]]
    (window,) = [w for w in after_kill if w["partition"] == partition]
    assert window["old_node"] == done["killed_node"] != window["new_node"]
    assert window["new_term"] > window["old_term"]
    acked = [commit for commit in done["commits"] if commit[1] < done["kill_ms"]]
    # The old leader's last write is A's last acknowledged commit, or one it sent just before the kill. The records'
    # times are the voters' majority time (node/clock.py ClusterClock), built from peers' readings in whole ms and
    # carried forward, so they may differ from this process's wall clock by a few ms (CI saw 1 ms).
    slack = CLUSTER_CLOCK_SLACK_MS
    assert acked[-1][0] - slack <= window["last_old_ms"] <= done["kill_ms"] + slack
    first_after = next(commit for commit in done["commits"] if commit[0] > done["kill_ms"])
    assert done["kill_ms"] - slack < window["barrier_ms"] <= first_after[1] + slack
    assert window["window_ms"] == window["barrier_ms"] - window["last_old_ms"]
    assert all(w["old_node"] == done["killed_node"] for w in after_kill), "only the killed node's partitions moved"

    # Every commit A saw acknowledged is in the commit rates.
    commits = sum(r["commits"] for r in rows(spark, out, "commit_rates", "minute_ms") if r["group"] == GROUP)
    assert commits >= len(done["commits"])
