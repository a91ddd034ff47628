"""Every benchmark scenario at tiny scale through the CLI, against the cluster it starts: the JSON must be
complete and consistent. Timings are never asserted (docs/PERFORMANCE.md records them)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections import Counter

import pytest

from groupcoord.bench import members
from groupcoord.bench.members import Member
from groupcoord.bench.offsets import spread_names
from groupcoord.bench.stats import median_of, percentile, summary
from groupcoord.bench.worker import FORM_INTERVAL_S, Cadence
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from tests.e2e.support import start_node, stop_node


def bench(*argv: str, timeout: float = 60) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord", "bench", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    # The tail must reach past the bench's own traceback to what a crashed child (bench/flood_wire.py's faulthandler)
    # printed before it.
    assert out.returncode == 0, out.stderr[-12000:]
    result = json.loads(out.stdout)
    assert result["scenario"] == argv[0]
    assert "--group-initial-rebalance-delay-ms=0" in result["cluster"]["node_flags"]
    assert result["machine"]["cpus"] >= 1
    return result


def ordered(latency: dict, count: int) -> None:
    assert latency["count"] == count
    assert latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]


def test_stats() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([float(x) for x in range(1, 101)], 99) == 99.0
    assert math.isnan(percentile([], 50))
    assert summary([3.0, 1.0, 2.0]) == {"count": 3, "p50_ms": 2.0, "p99_ms": 3.0, "max_ms": 3.0}
    runs = [{"a": 1, "b": {"c": 10.0}, "s": "x"}, {"a": 3, "b": {"c": 30.0}, "s": "y"}, {"a": 2, "b": {"c": 20.0}}]
    assert median_of(runs) == {"a": 2, "b": {"c": 20.0}, "s": "x"}


@pytest.mark.timeout(60)
def test_commit_latency_two_runs() -> None:
    result = bench("commit-latency", "--ops", "40", "--runs", "2")
    assert len(result["runs"]) == 2
    for run in result["runs"]:
        ordered(run["latency"], 40)
        assert set(run["nodes_cpu_percent"]) == {"1", "2", "3"}
    assert result["median"]["ops"] == 40


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rpc", ["batched", "unary"])
def test_commit_throughput(rpc: str) -> None:
    run = bench("commit-throughput", "--in-flight", "8", "--duration", "1", "--groups", "2", "--rpc", rpc)["runs"][0]
    assert (run["in_flight"], run["groups"]) == (8, 2)
    assert run["ops"] > 0
    assert sum(run["groups_per_leader"]) == sum(run["groups_per_partition"]) == 2
    ordered(run["latency"], run["ops"])


@pytest.mark.timeout(120)
def test_durability_both_modes_side_by_side() -> None:
    result = bench(
        "durability", "--ops", "20", "--in-flight", "4", "--duration", "0.5", "--groups", "2", "--runs", "2",
        timeout=110,
    )  # fmt: skip
    by_mode = result["cluster"]["node_flags_by_mode"]
    assert set(by_mode) == {"fsync", "memory"}
    for mode, flags in by_mode.items():
        assert [f for f in flags if f.startswith("--durability")] == [f"--durability={mode}"]
        assert "--group-initial-rebalance-delay-ms=0" in flags
    assert [run["order"] for run in result["runs"]] == ["fsync,memory", "memory,fsync"]
    for run in [*result["runs"], result["median"]]:
        for mode in ("fsync", "memory"):
            ordered(run[mode]["commit_latency"]["latency"], 20)
            throughput = run[mode]["commit_throughput"]
            assert throughput["ops"] > 0 and throughput["ops_per_s"] > 0
        ratios = run["ratio_fsync_to_memory"]
        assert set(ratios) == {"latency_p50", "latency_p99", "throughput"}
        assert all(r > 0 for r in ratios.values())
    run = result["runs"][0]
    assert math.isclose(
        run["ratio_fsync_to_memory"]["latency_p50"],
        run["fsync"]["commit_latency"]["latency"]["p50_ms"] / run["memory"]["commit_latency"]["latency"]["p50_ms"],
        abs_tol=0.001,
    )


@pytest.mark.timeout(120)
def test_kafka_next_to_grpc() -> None:
    """Over the Kafka listener and over gRPC in the same run: every figure there, counts as asked, the ratios the
    run's own, and the order of Kafka and gRPC turned round in the second run."""
    result = bench(
        "kafka", "--ops", "20", "--in-flight", "4", "--duration", "1", "--groups", "2", "--members", "10",
        "--runs", "2", timeout=110,
    )  # fmt: skip
    port = next(
        int(f.split("=")[1]) for f in reversed(result["cluster"]["node_flags"]) if f.startswith("--kafka-port=")
    )
    assert port > 0
    assert [run["commit_order"] for run in result["runs"]] == [
        "kafka,grpc_unary,grpc_stream",
        "grpc_unary,grpc_stream,kafka",
    ]
    assert [run["join_order"] for run in result["runs"]] == ["kafka,grpc", "grpc,kafka"]
    for run in [*result["runs"], result["median"]]:
        for transport in ("kafka", "grpc_unary", "grpc_stream"):
            latency = run["commit_latency"][transport]
            assert latency["ops"] == 20 and latency["ops_per_s"] > 0
            ordered(latency["latency"], 20)
            throughput = run["commit_throughput"][transport]
            assert (throughput["in_flight"], throughput["groups"]) == (4, 2)
            assert throughput["ops"] > 0 and throughput["ops_per_s"] > 0
            assert sum(throughput["groups_per_partition"]) == sum(throughput["groups_per_leader"]) == 2
            ordered(throughput["latency"], throughput["ops"])
        for transport in ("kafka", "grpc"):
            joined = run["join"][transport]
            assert joined["state"] == "Stable" and joined["generation_id"] >= 1 and joined["seconds"] > 0
            assert joined["members"] == joined["members_described"] == joined["members_with_assignment"] == 10
        ratios = run["ratios"]
        for grpc in ("kafka_to_grpc_unary", "kafka_to_grpc_stream"):
            assert set(ratios[grpc]) == {
                "commit_latency_p50", "commit_latency_p99", "commit_latency_ops_per_s",
                "commit_throughput_ops_per_s", "commit_throughput_p50", "commit_throughput_p99",
            }  # fmt: skip
            assert all(r > 0 for r in ratios[grpc].values())
        assert ratios["join_seconds_kafka_to_grpc"] > 0
    run = result["runs"][0]
    assert math.isclose(
        run["ratios"]["kafka_to_grpc_unary"]["commit_latency_p50"],
        run["commit_latency"]["kafka"]["latency"]["p50_ms"] / run["commit_latency"]["grpc_unary"]["latency"]["p50_ms"],
        abs_tol=0.001,
    )
    assert math.isclose(
        run["ratios"]["join_seconds_kafka_to_grpc"],
        run["join"]["kafka"]["seconds"] / run["join"]["grpc"]["seconds"],
        abs_tol=0.001,
    )
    targets = result["targets"]
    assert set(targets) == {"commit_p50_kafka_to_grpc_unary", "join_seconds_kafka_to_grpc"}
    for target in targets.values():
        assert target["median_ratio"] > 0 and target["met"] == (target["median_ratio"] <= target["at_most"])


def test_kafka_refuses_a_bootstrap_cluster() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord", "bench", "kafka", "--bootstrap", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "Kafka listener" in out.stderr


@pytest.mark.timeout(60)
def test_join() -> None:
    sizes = bench("join", "--members", "5,30")["runs"][0]["sizes"]
    assert set(sizes) == {"5", "30"}
    for size, got in sizes.items():
        n = int(size)
        assert got["state"] == "Stable"
        assert got["members"] == got["members_described"] == got["members_with_assignment"] == n
        assert got["generation_id"] >= 1 and got["seconds"] > 0


@pytest.mark.timeout(60)
def test_rebalance() -> None:
    got = bench("rebalance", "--members", "6")["runs"][0]["sizes"]["6"]
    assert got["state"] == "Stable"
    assert got["members_described"] == got["members_with_assignment"] == 5
    assert got["generation_id"] > got["generation_before"]


@pytest.mark.timeout(90)
def test_scale_out_eager_and_cooperative() -> None:
    """The counts follow from the protocols, whatever the timings: eager gives up every partition, cooperative only
    the ones that move to the newcomer (8 partitions over 4 + 1 members: the newcomer takes 8 // 5 of them)."""
    got = bench("scale-out", "--members", "4", "--partitions-per-member", "2", "--heartbeat-interval-ms", "300")
    run = got["runs"][0]["sizes"]["4->5"]
    eager, coop = run["eager"], run["cooperative"]
    assert eager["assignor"] == "sticky" and coop["assignor"] == "cooperative-sticky"
    assert eager["partitions"] == coop["partitions"] == 8
    assert eager["partitions_unowned"] == eager["unowned_at_once_max"] == 8
    assert eager["partitions_moved"] == coop["partitions_moved"] == 8 // 5
    assert coop["partitions_unowned"] == coop["partitions_moved"] and coop["unowned_at_once_max"] <= 8 // 5
    assert eager["doubly_owned"] == coop["doubly_owned"] == 0
    assert run["ratio_unowned_cooperative_eager"] == round(coop["partitions_unowned"] / 8, 3)
    assert coop["stable_after_s"] > 0 and eager["stable_after_s"] > 0


@pytest.mark.timeout(60)
def test_failover() -> None:
    run = bench("failover", "--groups", "4", "--members-per-group", "3")["runs"][0]
    assert run["groups"] == 4 and run["killed_node"] in (1, 2, 3)
    assert 1 <= run["groups_moved"] <= 4
    ordered(run["all_heartbeating_s"], run["groups_moved"])
    assert run["generation_bumps"] == run["generation_bumps_moved"] == 0
    assert run["stable_at_end"] == 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rpc", ["batched", "unary"])
def test_heartbeats(rpc: str) -> None:
    run = bench(
        "heartbeats", "--members", "20,40", "--members-per-group", "10", "--interval-ms", "300", "--window", "1.5",
        "--p99-limit-ms", "100000", "--rpc", rpc,
    )["runs"][0]  # fmt: skip
    steps = list(run["steps"].items())
    assert [size for size, _ in steps] == ["20", "40"][: len(steps)]
    for position, (size, step) in enumerate(steps):
        assert step["members"] == int(size) and step["groups"] == int(size) // 10
        ordered(step["latency"], step["heartbeats"])
        # The window starts after at least one interval of unmeasured heartbeats, once leaders are steady.
        assert 0.3 <= step["settle_s"] <= 60 and 0 <= step["leader_changes"] <= 16
        # Held means p99 under the (here unreachable) limit and no errors; the first step not held is the last.
        assert step["held"] == (step["heartbeats"] > 0 and not step["errors"])
        assert step["held"] or position == len(steps) - 1
    assert run["largest_members_held"] == max((s["members"] for _, s in steps if s["held"]), default=0)


@pytest.mark.timeout(60)
def test_scale() -> None:
    run = bench("scale", "--groups", "30", "--samples", "10", "--clients", "2")["runs"][0]
    assert (run["groups"], run["members"]) == (30, 150)
    assert run["stable_before_kill"] == run["stable_after_kill"] == 30
    ordered(run["describe_groups"], 10)
    assert run["list_groups"]["groups_listed"] == 30
    assert run["admin_list_groups"]["groups_listed"] == 30
    ordered(run["admin_list_groups"], 5)
    assert set(run["rss_mb"]) == {"1", "2", "3"}
    assert run["partitions_moved"] >= 1 and run["new_leaders_serving_s"] > 0


@pytest.mark.timeout(90)
def test_flood() -> None:
    run = bench(
        "flood", "--connections", "50", "--streams", "200", "--baseline-s", "1", "--hold-s", "1", "--after-s", "1",
    )["runs"][0]  # fmt: skip
    baseline = run["baseline"]
    assert run["node"] == 1 and baseline["rss_mb"] > 0 and baseline["fds"] > 0
    assert baseline["good_client"]["count"] > 0 and baseline["good_client"]["failures"] == {}
    for kind, count in (("connections", 50), ("streams", 200), ("requests", 200)):
        got = run[kind]
        assert (got["count"], got["opened"], got["failed"]) == (count, count, {}), got
        for phase in ("good_client_during", "good_client_after"):
            ordered(got[phase], got[phase]["count"])
        assert got["rss_peak_mb"] >= got["rss_before_mb"] > 0
        assert set(got["rss_after_mb"]) == {"1s"}
        assert got["closed_by_server"] == 0 and got["goaway"] == {}
    assert run["connections"]["fds_held"] >= baseline["fds"] + 50
    assert run["streams"]["server_max_concurrent_streams"] == run["requests"]["server_max_concurrent_streams"] > 0
    # Held streams are never answered (the node waits for their message) and are reset at the end; requests are.
    assert (run["streams"]["grpc_status"], run["streams"]["reset_by_us"]) == ({}, 200)
    assert (run["requests"]["grpc_status"], run["requests"]["reset_by_us"]) == ({"OK": 200}, 0)


def test_bootstrap_refused_for_a_scenario_that_kills() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord", "bench", "failover", "--bootstrap", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "needs a cluster of its own" in out.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bootstrap", "127.0.0.1:1"], "needs clusters of its own"),
        (["--node-flag=--durability=memory"], "no --node-flag=--durability"),
    ],
)
def test_durability_refuses_what_would_change_its_modes(argv: list[str], message: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord", "bench", "durability", *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and message in out.stderr


def test_cadence_spreads_groups_and_keeps_a_group_in_step() -> None:
    """The bench's heartbeat timing: fast while a group forms, then one random phase per group, then the interval."""
    groups = [Cadence() for _ in range(50)]
    members = [[Member(f"g{g}", f"g{g}-i{i}") for i in range(3)] for g in range(50)]
    assert all(c.next_sleep(m) == FORM_INTERVAL_S for c, ms in zip(groups, members, strict=True) for m in ms)
    for cadence in groups:
        cadence.settle(3.0)
    phases = []
    for cadence, ms in zip(groups, members, strict=True):
        firsts = {cadence.next_sleep(m) for m in ms}
        assert len(firsts) == 1, "the members of one group share the group's phase"
        phases.append(firsts.pop())
        assert all(cadence.next_sleep(m) == 3.0 for m in ms), "then the steady interval"
    assert all(0.0 <= p < 3.0 for p in phases)
    assert len(set(phases)) == 50 and max(phases) - min(phases) > 1.5, "groups are not in step with each other"


def test_a_member_keeps_its_schedule_after_a_late_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stalled client sends late, then back on the member's own schedule: a stall does not put the members due
    during it in step for good. Late by more than an interval, the schedule starts again from then."""
    clock = [0.0]
    sends: list[float] = []
    late = {2: 0.3, 5: 2.5}  # the wake-up before the 3rd and the 6th heartbeat, as a stalled event loop gives it
    stop = asyncio.Event()

    async def sleep(seconds: float) -> None:
        clock[0] += seconds + late.pop(len(sends), 0.0)

    async def heartbeat(router: object, m: Member) -> int:
        sends.append(round(clock[0], 6))
        if len(sends) == 8:
            stop.set()
        return Errors.NONE

    async def join(router: object, m: Member, metadata: bytes) -> None:
        return None

    monkeypatch.setattr(members.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(members.asyncio, "sleep", sleep)
    monkeypatch.setattr(members, "heartbeat", heartbeat)
    monkeypatch.setattr(members, "join", join)
    asyncio.run(members.run_member(None, Member("g", "g-i0"), b"", lambda: 1.0, stop))  # type: ignore[arg-type]
    assert sends == [1.0, 2.0, 3.3, 4.0, 5.0, 8.5, 9.5, 10.5]


@pytest.mark.parametrize(
    ("groups", "per_partition", "per_leader"), [(8, [1] * 8, [3, 3, 2]), (20, [2] * 4 + [1] * 12, [7, 7, 6])]
)
def test_commit_groups_are_spread_over_partitions_and_leaders(
    groups: int, per_partition: list[int], per_leader: list[int]
) -> None:
    leaders = {p: 1 + p % 3 for p in range(16)}
    names = spread_names(groups, leaders, "commit-x")
    partitions = [partition_for(name, 16) for name in names]
    assert sorted(Counter(partitions).values(), reverse=True) == per_partition
    assert sorted(Counter(leaders[p] for p in partitions).values(), reverse=True) == per_leader
    assert spread_names(groups, leaders, "commit-x") == names


def test_commit_groups_without_the_partitions_keep_plain_names() -> None:
    assert spread_names(3, None, "commit-x") == ["commit-x-0", "commit-x-1", "commit-x-2"]


@pytest.mark.timeout(60)
def test_idle_reports_the_nodes_cpu_and_rss() -> None:
    result = bench("idle", "--settle", "0.5", "--window", "1")
    (run,) = result["runs"]
    assert set(run["nodes_cpu_percent"]) == set(run["rss_mb"]) == {"1", "2", "3"}
    assert run["nodes_cpu_percent_total"] == pytest.approx(sum(run["nodes_cpu_percent"].values()), abs=0.2)
    assert run["rss_mb_max"] == max(run["rss_mb"].values()) > 10
    assert "--max-concurrent-streams=20000" not in result["cluster"]["node_flags"]  # the nodes' defaults


@pytest.mark.timeout(90)
def test_a_refusal_the_bench_cannot_carry_on_from_is_one_line_not_a_traceback(tmp_path) -> None:
    """A BenchError (here POLICY_VIOLATION from a node that leads at most 2 groups, for the third group's JoinGroup)
    reaches the CLI as its error."""
    node = start_node(tmp_path / "node.log", "--max-groups-per-node=2", "--group-initial-rebalance-delay-ms=0")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "groupcoord", "bench", "commit-throughput", "--groups", "4", "--duration", "1",
             "--bootstrap", node.address],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
    finally:
        stop_node(node)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "bench commit-throughput, run 1: JoinGroup" in out.stderr
    assert f"error {Errors.POLICY_VIOLATION.value}" in out.stderr and "max_groups_per_node" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.timeout(90)
def test_a_member_refused_while_its_group_forms_ends_the_join_at_once(tmp_path) -> None:
    """`bench join` over gRPC: the third member's JoinGroup is refused (GROUP_MAX_SIZE_REACHED from a node whose
    groups hold 2), and the run ends with that error instead of waiting out the formation timeout (minutes)."""
    node = start_node(tmp_path / "node.log", "--group-max-size=2", "--group-initial-rebalance-delay-ms=0")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "groupcoord", "bench", "join", "--members", "3", "--bootstrap", node.address],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        stop_node(node)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "bench join, run 1: JoinGroup" in out.stderr
    assert f"error {Errors.GROUP_MAX_SIZE_REACHED.value}" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_partition_load_prints_every_figure() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord.bench.partition_load", "--groups", "20", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    header, *rows = out.stdout.splitlines()
    assert header == "20 groups x 5 members, best of 1"
    figures = {row.rsplit(None, 2)[0].strip(): float(row.rsplit(None, 2)[1]) for row in rows}
    assert len(figures) == 12 and all(ms >= 0 for ms in figures.values()), figures
    assert "new leader's copy: copy()" in figures and "compaction's snapshot written, cached encoding" in figures
    assert "ListGroups: its rows copied (what holds the lock)" in figures
    assert "16 compactions one at a time (gate): longest wait" in figures


def collector_bench(*argv: str, timeout: float) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "groupcoord.bench.collector", *argv], capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_collector_pauses_are_timed_by_generation() -> None:
    header, spent, counted = collector_bench(
        "pauses", "--groups", "2000", "--thresholds", "700,10,10", timeout=60
    ).splitlines()
    assert header.startswith("2000 groups x 5 members into 16 stores, thresholds (700, 10, 10): ")
    assert spent.startswith("  in the collector ") and "gen 2" in spent
    collections = json.loads(counted.split("generation ")[1].split(";")[0])
    assert collections[0] > collections[1] > 0, counted


@pytest.mark.timeout(120)
@pytest.mark.parametrize("load", ["unary", "stream", "kafka"])
def test_freezing_what_survives_a_full_collection_keeps_no_garbage(load: str) -> None:
    """The node freezes what is alive at each full collection (node/server.py `_freeze_survivors`): the requests in
    flight then must not leave cycles behind that no collection will look at again. A planted one shows the check
    sees them."""
    ran, planted, kept = collector_bench("leak", "--load", load, "--seconds", "4", timeout=100).splitlines()
    assert int(ran.rsplit(": ", 1)[1].split()[0]) >= 10, ran
    assert planted == "  the planted cycle found: yes"
    assert kept.startswith("  frozen alive, garbage after: 0 objects"), kept
