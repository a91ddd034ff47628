"""The Prometheus endpoint of a real node: request outcomes, group gauges and rebalance metrics after real calls."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.coordinator import GroupCoordinator
from groupcoord.coordinator.config import GroupConfig
from groupcoord.node.metrics import NodeMetrics, error_label
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.e2e.support import NodeProcess, heartbeat, join_dynamic, join_request, start_node, stop_node, sync_all
from tests.e2e.test_cli import groupcoord
from tests.fuzz import http2
from tests.support import FakeClock, SeqIds

REQUESTS = "groupcoord_requests_total"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """This module's node serves metrics on a port it picks (the conftest fixture's node has them disabled)."""
    proc = start_node(tmp_path_factory.mktemp("node") / "node.log", "--metrics-port=0")
    try:
        yield proc
    finally:
        stop_node(proc)


def metrics_address(node: NodeProcess) -> str:
    [started] = [e for e in node.events() if e.get("event") == "node.started"]
    return started["metrics_address"]


class Scrape:
    """One scrape of /metrics; `value()` of a sample that is not there is 0."""

    def __init__(self, address: str) -> None:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        self.samples = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)


async def scrape_until(address: str, done: Callable[[Scrape], bool], timeout_s: float = 5.0) -> Scrape:
    deadline = time.monotonic() + timeout_s
    while True:
        scraped = await asyncio.to_thread(Scrape, address)
        if done(scraped) or time.monotonic() > deadline:
            return scraped
        await asyncio.sleep(0.02)


async def test_requests_groups_and_rebalances_are_counted(node, stub, channel):
    address = metrics_address(node)
    group = "metrics-dynamic"
    before = Scrape(address)

    def grew(after: Scrape, name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert (await stub.JoinGroup(join_request(""))).error_code == Errors.INVALID_GROUP_ID
    with pytest.raises(grpc.aio.AioRpcError) as malformed:
        await channel.unary_unary("/groupcoord.v1.GroupCoordinator/Heartbeat")(b"\xff\xff\xff\xff")
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[group, "g" * 256]))
    assert [c.error_code for c in found.coordinators] == [Errors.NONE, Errors.INVALID_GROUP_ID]

    first = await join_dynamic(stub, group)
    [synced] = await sync_all(stub, group, [first], [""])
    assert synced.error_code == Errors.NONE
    assert await heartbeat(stub, group, first.member_id, first.generation_id) == Errors.NONE
    assert await heartbeat(stub, group, "nobody", first.generation_id) == Errors.UNKNOWN_MEMBER_ID
    partitions = [pb.OffsetCommitRequest.Partition(partition_index=i, committed_offset=10) for i in (0, 1)]
    committed = await stub.OffsetCommit(
        pb.OffsetCommitRequest(
            group_id=group,
            generation_id=first.generation_id,
            member_id=first.member_id,
            topics=[pb.OffsetCommitRequest.Topic(name="t", partitions=partitions)],
        )
    )
    assert [p.error_code for p in committed.topics[0].partitions] == [Errors.NONE, Errors.NONE]

    after = Scrape(address)
    # Requests: top-level codes, per-item codes of the batch APIs, and gRPC-level failures.
    assert grew(after, REQUESTS, api="JoinGroup", error_code="INVALID_GROUP_ID") == 1
    assert grew(after, REQUESTS, api="JoinGroup", error_code="MEMBER_ID_REQUIRED") == 1
    assert grew(after, REQUESTS, api="JoinGroup", error_code="NONE") == 1
    assert grew(after, REQUESTS, api="SyncGroup", error_code="NONE") == 1
    assert grew(after, REQUESTS, api="Heartbeat", error_code="NONE") == 1
    assert grew(after, REQUESTS, api="Heartbeat", error_code="UNKNOWN_MEMBER_ID") == 1
    assert grew(after, REQUESTS, api="Heartbeat", error_code="grpc_INVALID_ARGUMENT") == 1
    assert grew(after, REQUESTS, api="FindCoordinator", error_code="NONE") == 1
    assert grew(after, REQUESTS, api="FindCoordinator", error_code="INVALID_GROUP_ID") == 1
    assert grew(after, REQUESTS, api="OffsetCommit", error_code="NONE") == 2
    assert grew(after, "groupcoord_request_latency_seconds_count", api="Heartbeat") == 3
    assert grew(after, "groupcoord_request_latency_seconds_count", api="JoinGroup") == 3
    # The join parked for the initial rebalance delay (100 ms).
    assert after.value("groupcoord_request_latency_seconds_bucket", api="JoinGroup", le="0.05") < after.value(
        "groupcoord_request_latency_seconds_bucket", api="JoinGroup", le="60.0"
    )
    # Gauges read from the core at scrape time.
    assert after.value("groupcoord_groups", state="Stable") == 1
    assert after.value("groupcoord_groups", state="PreparingRebalance") == 0
    assert after.value("groupcoord_members") == 1
    assert after.value("groupcoord_pending_members") == 0
    assert after.value("groupcoord_parked_requests") == 0
    # Committed records.
    assert grew(after, "groupcoord_rebalances_total", cause="member_joined") == 1
    assert grew(after, "groupcoord_generations_completed_total") == 1
    assert grew(after, "groupcoord_rebalance_duration_seconds_count") == 1
    assert grew(after, "groupcoord_rebalance_duration_seconds_sum") >= 0.1
    for kind in ("PendingMemberAdded", "MemberAdded", "RebalanceStarted", "GenerationCompleted", "AssignmentsSynced"):
        assert grew(after, "groupcoord_records_total", type=kind) == 1, kind
    assert grew(after, "groupcoord_records_total", type="OffsetsCommitted") == 1
    assert 4 <= grew(after, "groupcoord_commit_batches_total") <= 6

    # A second member: its id is pending, then its join parks until the first member rejoins.
    second_id = (await stub.JoinGroup(join_request(group))).member_id
    assert Scrape(address).value("groupcoord_pending_members") == 1
    second = asyncio.ensure_future(stub.JoinGroup(join_request(group, member_id=second_id)))
    parked = await scrape_until(address, lambda s: s.value("groupcoord_parked_requests") == 1)
    assert parked.value("groupcoord_parked_requests") == 1
    assert parked.value("groupcoord_groups", state="PreparingRebalance") == 1
    assert parked.value("groupcoord_groups", state="Stable") == 0
    assert parked.value("groupcoord_members") == 2
    assert parked.value("groupcoord_pending_members") == 0
    rejoined = await stub.JoinGroup(join_request(group, member_id=first.member_id))
    syncs = await sync_all(stub, group, [rejoined, await second], ["", ""])
    assert {s.error_code for s in syncs} == {Errors.NONE}

    final = Scrape(address)
    assert final.value("groupcoord_groups", state="Stable") == 1
    assert final.value("groupcoord_members") == 2
    assert final.value("groupcoord_parked_requests") == 0
    assert grew(final, "groupcoord_rebalances_total", cause="member_joined") == 2
    assert grew(final, "groupcoord_generations_completed_total") == 2
    assert grew(final, "groupcoord_rebalance_duration_seconds_count") == 2


def test_build_info_is_exported_and_created_twins_are_not(node):
    from importlib.metadata import version

    scraped = Scrape(metrics_address(node))
    (info,) = [labels for name, labels in scraped.samples if name == "groupcoord_build_info"]
    assert dict(info)["version"] == version("groupcoord") and dict(info)["python"]
    assert not [name for name, _ in scraped.samples if name.endswith("_created")]


async def test_a_call_the_client_abandons_counts_as_grpc_cancelled(node, stub):
    """Runs after the test above (file order): its group is left Empty, so the gauges there are unaffected."""
    address = metrics_address(node)
    group = "metrics-abandoned"
    before = Scrape(address).value(REQUESTS, api="JoinGroup", error_code="grpc_CANCELLED")
    member_id = (await stub.JoinGroup(join_request(group))).member_id
    with pytest.raises(grpc.aio.AioRpcError) as expired:  # parks for the 100 ms initial delay
        await stub.JoinGroup(join_request(group, member_id=member_id), timeout=0.02)
    assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    after = await scrape_until(
        address, lambda s: s.value(REQUESTS, api="JoinGroup", error_code="grpc_CANCELLED") > before
    )
    assert after.value(REQUESTS, api="JoinGroup", error_code="grpc_CANCELLED") == before + 1
    left = await stub.LeaveGroup(
        pb.LeaveGroupRequest(group_id=group, members=[pb.LeaveGroupRequest.MemberIdentity(member_id=member_id)])
    )
    assert left.error_code == Errors.NONE


async def test_hostile_input_is_counted_by_kind(node):
    """A call to a path that is not UTF-8 (it once stopped the server) and a header that is not UTF-8."""
    address = metrics_address(node)
    before = Scrape(address)
    target = ("127.0.0.1", node.port)
    bad_header = http2.headers("Heartbeat") + http2.literal(b"x-bad", b"\xff")
    for request in (
        http2.grpc_request(b"He\xb4rtbeat", b""),
        http2.PREFACE
        + http2.frame(http2.SETTINGS, 0, 0, b"")
        + http2.frame(http2.HEADERS, http2.END_HEADERS, 1, bad_header)
        + http2.frame(http2.DATA, http2.END_STREAM, 1, bytes(5)),
    ):
        await asyncio.to_thread(http2.answer, target, request)
    name = "groupcoord_malformed_requests_total"
    after = await scrape_until(
        address, lambda s: s.value(name, kind="header_encoding") > before.value(name, kind="header_encoding")
    )
    for kind in ("unregistered_path", "header_encoding"):
        assert after.value(name, kind=kind) == before.value(name, kind=kind) + 1, kind
    assert after.value(name, kind="client_gone") == before.value(name, kind="client_gone")


def test_a_metrics_port_in_use_exits_1_without_a_traceback(node):
    host, port = metrics_address(node).rsplit(":", 1)
    result = groupcoord("node", "--port=0", "--kafka-port=-1", f"--metrics-port={port}")
    assert result.returncode == 1
    assert f"cannot serve metrics on {host}:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_rebalance_duration_runs_from_the_first_start_to_the_sync_and_forgets_the_rest():
    """In process: two nodes' metrics side by side (own registries), fed committed records directly."""
    metrics, other = NodeMetrics(), NodeMetrics()

    def started(gid: str, cause: str, ms: int) -> r.RebalanceStarted:
        return r.RebalanceStarted(gid, cause, "m1", "", 0, "", ms)

    # A sync timeout restarts the rebalance; the duration still counts from the first start.
    metrics.on_commit([started("g", "member_joined", 1_000), r.GenerationCompleted("g", 1, "range", "m1", 1_100)])
    metrics.on_commit([started("g", "sync_timeout", 3_000), r.GenerationCompleted("g", 2, "range", "m1", 3_100)])
    metrics.on_commit([r.AssignmentsSynced("g", 2, {"m1": b""}, 4_500)])
    # A rebalance that ends Empty, and one of a group that is deleted, are not observed, and not kept.
    metrics.on_commit([started("h", "member_left", 5_000), r.GenerationCompleted("h", 1, "", "", 5_000)])
    metrics.on_commit([started("k", "session_expired", 6_000)])
    metrics.on_commit([r.GroupDeleted("k", "expired", 7_000)])

    def value(m: NodeMetrics, name: str, **labels: str) -> float:
        return m.registry.get_sample_value(name, labels) or 0.0

    assert value(metrics, "groupcoord_rebalance_duration_seconds_count") == 1
    assert value(metrics, "groupcoord_rebalance_duration_seconds_sum") == pytest.approx(3.5)
    assert metrics.rebalances_in_progress() == 0
    assert value(metrics, "groupcoord_rebalances_total", cause="member_joined") == 1
    assert value(metrics, "groupcoord_rebalances_total", cause="sync_timeout") == 1
    assert value(metrics, "groupcoord_generations_completed_total") == 3
    assert value(metrics, "groupcoord_records_total", type="RebalanceStarted") == 4
    assert value(metrics, "groupcoord_commit_batches_total") == 6
    assert value(other, "groupcoord_commit_batches_total") == 0
    assert (error_label(Errors.MEMBER_ID_REQUIRED), error_label(0), error_label(999)) == (
        "MEMBER_ID_REQUIRED",
        "NONE",
        "999",
    )


async def test_a_scrape_from_the_loop_itself_reads_the_cores_directly():
    """In process: the collector must not wait on its own loop (it would block for the 5 s timeout)."""
    core = GroupCoordinator(GroupConfig(), FakeClock(), new_uuid=SeqIds())
    core.join_group(join_request("g1"), "t1")  # MEMBER_ID_REQUIRED: one pending member, group Empty
    metrics = NodeMetrics()
    metrics.watch_cores(asyncio.get_running_loop(), lambda: (core,))

    start = time.monotonic()
    assert metrics.registry.get_sample_value("groupcoord_pending_members") == 1
    assert metrics.registry.get_sample_value("groupcoord_groups", {"state": "Empty"}) == 1
    assert metrics.registry.get_sample_value("groupcoord_groups", {"state": "Stable"}) == 0
    assert metrics.registry.get_sample_value("groupcoord_members") == 0
    assert time.monotonic() - start < 1
