"""Node-level behaviour: health, reflection, the node RPCs, logs, graceful shutdown, and handler failures."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from groupcoord.client.member import GroupMember
from groupcoord.coordinator import GroupCoordinator
from groupcoord.node import launcher
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import SERVICE, join_dynamic, join_request, start_node, stop_node, wait_serving

PARTITIONS = 16


async def test_health_is_serving_for_the_server_and_the_service(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_and_describes_the_service(node):
    with grpc.insecure_channel(node.address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        assert SERVICE in db.get_services()
        assert "grpc.health.v1.Health" in db.get_services()
        assert db.FindFileContainingSymbol(SERVICE).package == "groupcoord.v1"


async def test_find_coordinator_and_describe_cluster_name_this_node(node, stub):
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["a", "b"]))
    assert [(c.group_id, c.node_id, c.host, c.port, c.error_code) for c in found.coordinators] == [
        ("a", 1, "127.0.0.1", node.port, Errors.NONE),
        ("b", 1, "127.0.0.1", node.port, Errors.NONE),
    ]
    before = await stub.DescribeCluster(pb.DescribeClusterRequest())
    assert before.node_id == 1
    assert [(n.node_id, n.port, n.alive) for n in before.nodes] == [(1, node.port, True)]
    assert before.partition_count == PARTITIONS
    assert [p.partition_id for p in before.partitions] == list(range(PARTITIONS))
    for partition in before.partitions:
        assert (partition.leader_node_id, list(partition.replica_node_ids)) == (1, [1])
        assert partition.term >= 1

    group = "cluster-commit-index"
    k = partition_for(group, PARTITIONS)
    await stub.JoinGroup(join_request(group))  # MEMBER_ID_REQUIRED writes one record batch
    after = await stub.DescribeCluster(pb.DescribeClusterRequest())
    assert after.partitions[k].commit_index == before.partitions[k].commit_index + 1


def test_the_node_runs_on_uvloop_and_logs_json_lines(node):
    (started,) = [e for e in node.events() if e["event"] == "node.started"]
    assert started["loop"] == "uvloop"
    assert started["level"] == "info"
    assert started["node_id"] == 1


def test_a_single_node_picks_its_raft_ports_below_the_ephemeral_range(node):
    """`raft_port = 0`: the ports come from below the kernel's ephemeral range, from which outgoing connections
    take theirs. A port from it was taken once by a client's health check of this very node (a CI run): that
    partition's replica could not bind while the check waited for the node, which waited for the replica."""
    (started,) = [e for e in node.events() if e["event"] == "node.started"]
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert started["raft_port"] + started["partitions"] <= first_ephemeral


async def test_sigusr1_prints_every_thread_s_stack_into_the_log_and_the_node_serves_on(node, stub):
    """What a stuck partition's Raft thread is doing, without stopping the node (docs/OPERATIONS.md)."""
    before = len(node.log_lines())
    node.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("_autoTickThread" in line for line in node.log_lines()[before:]):
        await asyncio.sleep(0.1)
    dump = node.log_lines()[before:]
    assert any(line.startswith("Thread 0x") for line in dump), dump[:20]
    assert sum("_autoTickThread" in line for line in dump) >= PARTITIONS  # each partition's Raft thread
    assert any("Current thread" in line or "node/server.py" in line for line in dump)
    assert node.alive()
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["after-the-dump"]))
    assert found.coordinators[0].error_code == Errors.NONE


async def test_membership_changes_and_rebalances_are_logged_once_each(node):
    """Kafka's coordinator log: a member joins (a rebalance starts, its generation completes, it is Stable again,
    with how long it took), a second one joins, then both leave."""
    group = "logged-group"
    first = GroupMember([node.address], group, {"t": 4}, client_id="first-client", heartbeat_interval_ms=200)
    second = GroupMember([node.address], group, {"t": 4}, client_id="second-client", heartbeat_interval_ms=200)
    async with first:
        await first.wait_stable(20)
        async with second:
            await second.wait_stable(20)
        await asyncio.sleep(0.5)  # the first member's next heartbeat learns of the leave; it rejoins alone
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [e for e in node.events() if e["event"].startswith("group.") and e.get("group") == group]
        if [e["event"] for e in lines].count("group.member_left") == 2:
            break
        await asyncio.sleep(0.1)
    kinds = [e["event"] for e in lines]
    assert kinds.count("group.member_joined") == 2 and kinds.count("group.member_left") == 2, kinds
    assert kinds.count("group.rebalance_started") >= 2 and kinds.count("group.generation_completed") >= 2, kinds
    joined = [e for e in lines if e["event"] == "group.member_joined"]
    assert [e["client_id"] for e in joined] == ["first-client", "second-client"]
    assert all(e["member"] and e["level"] == "info" for e in joined)
    started = next(e for e in lines if e["event"] == "group.rebalance_started")
    assert started["reason"] and started["member"] == joined[0]["member"]
    completed = [e for e in lines if e["event"] == "group.rebalance_completed"]
    assert completed and all(e["took_ms"] >= 0 and e["generation"] >= 1 for e in completed), completed
    assert {e["members"] for e in completed} >= {1, 2}


async def test_a_restarted_node_does_not_log_its_journal_again(tmp_path):
    data = f"--data-dir={tmp_path / 'data'}"
    first = start_node(tmp_path / "first.log", data)
    try:
        async with GroupMember([first.address], "replayed", {"t": 2}, heartbeat_interval_ms=200) as member:
            await member.wait_stable(20)
    finally:
        stop_node(first)
    assert any(e["event"] == "group.member_joined" for e in first.events())
    again = start_node(tmp_path / "again.log", data)
    try:
        async with grpc.aio.insecure_channel(again.address) as channel:
            reply = await pb_grpc.GroupCoordinatorStub(channel).DescribeGroups(
                pb.DescribeGroupsRequest(group_ids=["replayed"])
            )
    finally:
        stop_node(again)
    assert reply.groups[0].group_state == "Empty"  # the journal was replayed: the group is known
    assert not [e for e in again.events() if e["event"].startswith("group.")]


async def test_sigterm_answers_parked_joins_and_exits_zero(tmp_path):
    # A long initial delay keeps the first JoinGroup parked until the node shuts down.
    node = start_node(tmp_path / "node.log", "--group-initial-rebalance-delay-ms=60000")
    try:
        async with grpc.aio.insecure_channel(node.address) as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            parked = asyncio.ensure_future(join_dynamic(stub, "parked"))
            await asyncio.sleep(0.5)
            assert not parked.done()
            code = await asyncio.to_thread(stop_node, node)
            reply = await asyncio.wait_for(parked, timeout=5)
    finally:
        stop_node(node)
    assert code == 0
    assert reply.error_code == Errors.COORDINATOR_NOT_AVAILABLE
    events = [e["event"] for e in node.events() if not e["event"].startswith("partition.")]
    assert events[-4:] == ["node.signal", "node.stopping", "node.handed_over", "node.stopped"]
    (handed,) = [e for e in node.events() if e["event"] == "node.handed_over"]
    assert handed["still_led"] == list(range(16)), "a one-node cluster has nobody to hand its partitions to"


async def test_a_failing_handler_answers_internal_and_the_node_keeps_serving(monkeypatch, caplog):
    """In-process, so the core can be made to fail: one RPC breaks, the others and other groups still work."""
    from groupcoord.cli import build_parser
    from groupcoord.node.config import load
    from groupcoord.node.server import Node

    original = GroupCoordinator.heartbeat

    def heartbeat(self, req, token=None):
        if req.group_id == "boom":
            raise RuntimeError("injected failure")
        return original(self, req, token)

    monkeypatch.setattr(GroupCoordinator, "heartbeat", heartbeat)
    flags = ["node", "--port=0", "--kafka-port=-1", "--group-initial-rebalance-delay-ms=0"]
    settings = load(build_parser().parse_args(flags), {})
    server = Node(settings)
    port = await server.start()
    try:
        await wait_serving(f"127.0.0.1:{port}")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            with caplog.at_level(logging.ERROR), pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Heartbeat(pb.HeartbeatRequest(group_id="boom", member_id="m"))
            assert err.value.code() == grpc.StatusCode.INTERNAL
            assert any(r.getMessage() == "rpc.failed" and r.exc_info for r in caplog.records)

            joined = await join_dynamic(stub, "fine")
            assert joined.error_code == Errors.NONE
            reply = await stub.Heartbeat(
                pb.HeartbeatRequest(group_id="fine", member_id=joined.member_id, generation_id=joined.generation_id)
            )
            assert reply.error_code == Errors.NONE
    finally:
        await server.stop()


def test_the_node_answers_only_once_every_raft_port_is_bound(tmp_path):
    """A start hook (`cluster join`) asks the voters to add the node as soon as its server answers, and they add it
    only once all its Raft ports do: with one of them held by another socket, the server answers nothing until the
    node has bound it (pysyncobj retries every second)."""
    taken: set[int] = set()
    port, raft = launcher.free_base("127.0.0.1", 1, taken), launcher.free_base("127.0.0.1", 2, taken)
    holder = socket.socket()
    holder.bind(("127.0.0.1", raft + 1))  # bound, not listening: a connection to it is refused
    options = launcher.NodeOptions(
        "127.0.0.1", port, partitions=2, data_dir=tmp_path / "data", kafka_port=-1,
        flags=(f"--raft-port={raft}",),
    )  # fmt: skip
    proc = launcher.start(options, tmp_path / "node.log", truncate=True, own_session=False)
    address = f"127.0.0.1:{port}"
    try:
        shut_until = time.monotonic() + 2.0
        while time.monotonic() < shut_until:
            assert proc.poll() is None, (tmp_path / "node.log").read_text()
            assert launcher.health(address) == "UNREACHABLE", "the node answered while a Raft port was not bound"
            time.sleep(0.05)
        holder.close()
        deadline = time.monotonic() + 15
        while launcher.health(address) == "UNREACHABLE":
            assert time.monotonic() < deadline, (tmp_path / "node.log").read_text()
            time.sleep(0.05)
        for raft_port in (raft, raft + 1):
            socket.create_connection(("127.0.0.1", raft_port), timeout=1).close()
    finally:
        holder.close()
        launcher.stop_procs([proc])
