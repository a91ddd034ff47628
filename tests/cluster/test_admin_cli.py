"""`groupcoord groups|members|offsets|cluster describe` against a real 3-node cluster, as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest

from groupcoord.client.admin import Admin, ClusterDescription
from groupcoord.client.member import GroupMember
from groupcoord.node.topology import partition_for
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.cluster.test_cli_cluster import HOSTS, PARTITIONS, _free_on_every_host

TOPICS = {"orders": 4}


def _groupcoord(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "groupcoord", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


class Loop:
    """An event loop in a thread, so members heartbeat while the test blocks on the CLI."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 30) -> Any:
        future: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster_dir: Path = tmp_path_factory.mktemp("admin") / "cluster"
    base = _free_on_every_host(1)
    raft_base = _free_on_every_host(PARTITIONS, avoid=range(base, base + 1))
    up = _groupcoord(
        "cluster", "up", "--dir", str(cluster_dir), "--nodes", "3", "--partitions", str(PARTITIONS),
        "--base-port", str(base), "--raft-base-port", str(raft_base), "--timeout", "30",
        "--", "--group-initial-rebalance-delay-ms=0",
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        yield ",".join(f"{h}:{base}" for h in HOSTS)
    finally:
        _groupcoord("cluster", "down", "--dir", str(cluster_dir))


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    running.stop()


def _admin(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return _groupcoord(*args, "--bootstrap", bootstrap)


def _describe(bootstrap: str, group: str) -> dict:
    result = _admin(bootstrap, "groups", "describe", group, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]


def _wait_described(bootstrap: str, group: str, ok: Any, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        described = _describe(bootstrap, group)
        if ok(described):
            return described
        assert time.monotonic() < deadline, described
        time.sleep(0.2)


@pytest.fixture(scope="module")
def static_group(bootstrap: str, loop: Loop) -> Iterator[str]:
    """Group "static" with static members a and b, Stable."""
    members = [
        GroupMember(bootstrap.split(","), "static", TOPICS, client_id=f"worker-{i}", group_instance_id=i,
                    session_timeout_ms=6_000, heartbeat_interval_ms=500)
        for i in ("a", "b")
    ]  # fmt: skip
    for member in members:
        loop.run(member.start())
    _wait_described(bootstrap, "static", lambda d: d["state"] == "Stable" and len(d["members"]) == 2)
    yield "static"
    for member in members:
        loop.run(member.close())


def test_list_and_describe(bootstrap: str, static_group: str):
    listed = _admin(bootstrap, "groups", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {"group_id": "static", "protocol_type": "consumer", "state": "Stable"} in json.loads(listed.stdout)

    table = _admin(bootstrap, "groups", "list", "--state", "Stable")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["GROUP", "STATE", "PROTOCOL-TYPE"]
    assert ["static", "Stable", "consumer"] in [r.split() for r in rows]
    assert header.index("STATE") == rows[0].index("Stable")  # aligned columns

    described = _describe(bootstrap, static_group)
    assert described["state"] == "Stable" and described["error"] == "NONE"
    assert sorted(m["group_instance_id"] for m in described["members"]) == ["a", "b"]
    owned = [p for m in described["members"] for p in m["partitions"]]
    assert sorted(owned) == [f"orders:{p}" for p in range(4)]

    human = _admin(bootstrap, "groups", "describe", static_group)
    assert human.returncode == 0, human.stderr
    assert "Stable" in human.stdout and "INSTANCE-ID" in human.stdout and "worker-a" in human.stdout


def test_offsets_set_then_get_on_an_empty_group(bootstrap: str):
    done = _admin(bootstrap, "offsets", "set", "fresh", "orders:0=42", "orders:3=7", "--json")
    assert done.returncode == 0, done.stderr
    assert {r["error"] for r in json.loads(done.stdout)} == {"NONE"}
    got = _admin(bootstrap, "offsets", "get", "fresh", "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == [
        {"topic": "orders", "partition": 0, "offset": 42, "metadata": ""},
        {"topic": "orders", "partition": 3, "offset": 7, "metadata": ""},
    ]
    assert _describe(bootstrap, "fresh")["state"] == "Empty"
    deleted = _admin(bootstrap, "groups", "delete", "fresh")
    assert deleted.returncode == 0 and "deleted" in deleted.stdout, deleted.stderr


def test_offsets_get_of_an_unknown_group_is_an_error(bootstrap: str):
    got = _admin(bootstrap, "offsets", "get", "no-such-group")
    assert got.returncode == 1 and got.stdout == ""
    assert "group 'no-such-group': GROUP_ID_NOT_FOUND (no such group)" in got.stderr


def test_offsets_set_on_a_live_group_names_each_failed_partition(bootstrap: str, static_group: str):
    refused = _admin(bootstrap, "offsets", "set", static_group, "orders:1=5")
    assert refused.returncode == 1
    assert "orders:1" in refused.stderr and "NONE" not in refused.stderr


def test_members_remove_then_add(bootstrap: str, static_group: str):
    before = _describe(bootstrap, static_group)["generation_id"]
    removed = _admin(bootstrap, "members", "remove", static_group, "a", "--reason", "test")
    assert removed.returncode == 0, removed.stderr
    assert "removed" in removed.stdout
    # Immediate rebalance: nothing waits for a's session timeout (6 s); the generation moves at once.
    _wait_described(bootstrap, static_group, lambda d: d["generation_id"] > before, timeout=4)
    missing = _admin(bootstrap, "members", "remove", static_group, "nobody")
    assert missing.returncode == 1 and f"{static_group}/nobody: UNKNOWN_MEMBER_ID" in missing.stderr

    added = _admin(bootstrap, "members", "add", static_group, "x", "y", "z")
    assert added.returncode == 0, added.stderr
    assert sorted(_describe(bootstrap, static_group)["pending_instance_ids"]) == ["x", "y", "z"]
    assert "pending instance ids: x, y, z" in _admin(bootstrap, "groups", "describe", static_group).stdout
    again = _admin(bootstrap, "members", "add", static_group, "x", "--json")
    assert again.returncode == 1 and "DUPLICATE_RESOURCE" in again.stderr
    assert json.loads(again.stdout)[0]["error"] == "DUPLICATE_RESOURCE"
    # A pre-registered instance that never joined can be cancelled like a member.
    cancelled = _admin(bootstrap, "members", "remove", static_group, "y")
    assert cancelled.returncode == 0 and "removed" in cancelled.stdout, cancelled.stderr
    assert sorted(_describe(bootstrap, static_group)["pending_instance_ids"]) == ["x", "z"]


def test_delete_reports_each_failed_group(bootstrap: str, static_group: str):
    busy = _admin(bootstrap, "groups", "delete", static_group)
    assert busy.returncode == 1
    assert "NON_EMPTY_GROUP" in busy.stdout and f"{static_group}: NON_EMPTY_GROUP" in busy.stderr

    missing = _admin(bootstrap, "groups", "delete", "no-such-group", "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout) == [
        {"group_id": "no-such-group", "error_code": 69, "error": "GROUP_ID_NOT_FOUND"}
    ]
    assert "GROUP_ID_NOT_FOUND" in missing.stderr

    described = _admin(bootstrap, "groups", "describe", "no-such-group")
    assert described.returncode == 1 and "GROUP_ID_NOT_FOUND" in described.stderr


def test_cluster_describe(bootstrap: str):
    shown = _admin(bootstrap, "cluster", "describe", "--json")
    assert shown.returncode == 0, shown.stderr
    described = json.loads(shown.stdout)
    assert described["partition_count"] == PARTITIONS
    assert [n["node_id"] for n in described["nodes"]] == [1, 2, 3]
    assert {p["leader_node_id"] for p in described["partitions"]} <= {1, 2, 3}
    human = _admin(bootstrap, "cluster", "describe")
    assert human.returncode == 0 and "LEADER" in human.stdout and "INCARNATION" in human.stdout
    answered_by = described["answered_by"]
    own = next(n for n in described["nodes"] if n["node_id"] == answered_by)
    assert len(own["incarnation"]) == 32, own  # its own data directory's, always known


def test_wrong_address_is_one_line_and_exit_3():
    started = time.monotonic()
    result = _groupcoord("groups", "list", "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 3
    assert len(result.stderr.splitlines()) == 1 and "cannot reach the cluster" in result.stderr
    assert "Traceback" not in result.stderr and time.monotonic() - started < 15


@pytest.mark.parametrize(
    "args",
    [
        ("offsets", "set", "g", "orders-0=1"),
        ("offsets", "set", "g", "orders:0=x"),
        ("groups", "list", "--bootstrap", "nohostport"),
        ("cluster", "join", "--node-id", "0", "--peers", "1=127.0.0.1:1:2"),  # no node id
        ("cluster", "join", "--node-id", "4", "--peers", "1=127.0.0.1:1:2"),  # not in its own peers
        ("cluster", "leave", "--node-id", "1", "--peers", "1=127.0.0.1:1:2"),  # no other node to ask
    ],
)
def test_bad_argument_is_one_line_and_exit_2(args: tuple[str, ...]):
    result = _groupcoord(*args)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_unknown_flag_is_a_usage_error():
    result = _groupcoord("groups", "describe", "--bogus", "g")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_each_node_lists_the_groups_it_coordinates_and_the_admin_merges_them(bootstrap: str, loop: Loop):
    groups = [f"listed-{i}" for i in range(3 * PARTITIONS)]

    async def create_and_list() -> tuple[set[str], dict[int, pb.ListGroupsResponse], ClusterDescription]:
        async with Admin(bootstrap.split(",")) as admin:
            await asyncio.gather(*(admin.alter_offsets(g, {("orders", 0): 1}) for g in groups))
            listed = {g.group_id for g in await admin.list_groups()}  # right after the commits: nothing lags
            cluster = await admin.describe_cluster()
        per_node = {}
        for node in cluster.nodes:
            async with grpc.aio.insecure_channel(f"{node.host}:{node.port}") as channel:
                request = pb.ListGroupsRequest(coordinated_only=True)
                per_node[node.node_id] = await pb_grpc.GroupCoordinatorStub(channel).ListGroups(request)
        return listed, per_node, cluster

    listed, per_node, cluster = loop.run(create_and_list())
    assert set(groups) <= listed
    leaders = {p.partition_id: p.leader_node_id for p in cluster.partitions}
    for node_id, reply in per_node.items():
        # A node answers for exactly the partitions it leads, with exactly their groups.
        assert set(reply.partitions) == {p for p, leader in leaders.items() if leader == node_id}
        mine = {g.group_id for g in reply.groups} & set(groups)
        assert mine == {g for g in groups if leaders[partition_for(g, PARTITIONS)] == node_id}
    assert sorted(p for reply in per_node.values() for p in reply.partitions) == list(range(PARTITIONS))


def test_topics_made_through_the_cli_and_the_sdk_are_listed_alike_by_every_node(bootstrap: str, loop: Loop):
    created = _admin(bootstrap, "topics", "create", "clicks", "views", "--partitions", "6", "--json")
    assert created.returncode == 0, created.stderr
    assert [(t["name"], t["num_partitions"], t["error"]) for t in json.loads(created.stdout)] == [
        ("clicks", 6, "NONE"), ("views", 6, "NONE"),
    ]  # fmt: skip
    again = _admin(bootstrap, "topics", "create", "clicks", "bad/name")
    assert again.returncode == 1
    assert "clicks: TOPIC_ALREADY_EXISTS" in again.stderr and "bad/name: INVALID_TOPIC_EXCEPTION" in again.stderr
    # Names in every partition: each partition's leader creates its own share.
    names = [f"registry-{i}" for i in range(3 * PARTITIONS)]
    assert {partition_for(n, PARTITIONS) for n in names} == set(range(PARTITIONS))

    async def every_node(want: set[str], gone: set[str]) -> dict[int, list[tuple[str, int, str]]]:
        """Each node's ListTopics once it holds `want` and none of `gone` (a follower applies a moment later)."""
        async with Admin(bootstrap.split(",")) as admin:
            cluster = await admin.describe_cluster()
        listed: dict[int, list[tuple[str, int, str]]] = {}
        for node in cluster.nodes:
            async with grpc.aio.insecure_channel(f"{node.host}:{node.port}") as channel:
                stub = pb_grpc.GroupCoordinatorStub(channel)
                deadline = time.monotonic() + 15
                while True:
                    reply = await stub.ListTopics(pb.ListTopicsRequest())
                    held = {t.name for t in reply.topics}
                    if (want <= held and not held & gone) or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.1)
            assert reply.error_code == 0
            listed[node.node_id] = [(t.name, t.num_partitions, t.topic_id) for t in reply.topics]
        return listed

    async def create() -> list[Any]:
        async with Admin(bootstrap.split(",")) as admin:
            return await admin.create_topics([(n, -1) for n in names])

    results = loop.run(create())
    assert [(t.name, t.error_code, t.num_partitions) for t in results] == [(n, 0, 1) for n in names]
    listed = loop.run(every_node({*names, "clicks", "views"}, set()), timeout=60)
    assert len(listed) == 3 and all(view == listed[1] for view in listed.values()), listed
    ids = {name: topic_id for name, _, topic_id in listed[1]}
    assert {t.name: t.topic_id for t in results}.items() <= ids.items()
    assert len(set(ids.values())) == len(ids) and all(uuid.UUID(topic_id) for topic_id in ids.values())
    shown = _admin(bootstrap, "topics", "list", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [(t["name"], t["num_partitions"], t["topic_id"]) for t in json.loads(shown.stdout)] == listed[1]

    deleted = _admin(bootstrap, "topics", "delete", "views", "no-such-topic")
    assert deleted.returncode == 1 and "no-such-topic: UNKNOWN_TOPIC_OR_PARTITION" in deleted.stderr
    after = loop.run(every_node({"clicks"}, {"views"}), timeout=60)
    assert all(view == [t for t in listed[1] if t[0] != "views"] for view in after.values()), after


def test_settings_shows_each_nodes_settings_and_their_sources(bootstrap: str):
    shown = _admin(bootstrap, "settings", "--node", "2", "--json")
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert answer["node_id"] == 2
    by_name = {s["name"]: s for s in answer["settings"]}
    assert by_name["node_id"] == {"name": "node_id", "value": "2", "source": "flag --node-id", "default": "1",
                                  "sensitive": False}  # fmt: skip
    assert by_name["group_initial_rebalance_delay_ms"]["value"] == "0"  # `cluster up -- --group-initial-...=0`
    assert by_name["group_initial_rebalance_delay_ms"]["source"] == "flag --group-initial-rebalance-delay-ms"
    secret = by_name["cluster_secret"]
    assert (secret["value"], secret["source"], secret["sensitive"]) == (
        "(set)", "environment GROUPCOORD_CLUSTER_SECRET", True,
    )  # fmt: skip
    assert by_name["log_level"]["source"] == "default"

    changed = _admin(bootstrap, "settings", "--changed")
    assert changed.returncode == 0, changed.stderr
    header, columns, *rows = changed.stdout.splitlines()
    assert header.startswith("node ") and "(not default)" in header
    assert columns.split() == ["SETTING", "VALUE", "SOURCE", "DEFAULT"]
    names = [r.split()[0] for r in rows]
    assert "cluster_secret" in names and "log_level" not in names

    missing = _admin(bootstrap, "settings", "--node", "9")
    assert missing.returncode == 2 and "the cluster has no node 9 (its nodes: 1, 2, 3)" in missing.stderr
