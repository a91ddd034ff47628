"""The chaos run of CI: a 3-node and a 5-node cluster, 50 faults each on a fixed seed (every kind of the rotation,
more than twice), 12 SDK workers in 3 groups; the checker must report zero violations. `groupcoord chaos --duration
30m` is the long run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupcoord.chaos.harness import ChaosOptions, Harness
from groupcoord.chaos.network import Namespaces
from groupcoord.chaos.report import render_text

FAULTS_PER_RUN = 50
NODE_FAULT_KINDS = {"kill_node", "pause_node", "restart_node", "partition_node", "restart_cluster"}


@pytest.fixture(scope="module")
def runs() -> dict[int, dict]:
    return {}


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("nodes", "seed"), [(3, 11), (5, 23)])
def test_chaos_run_has_no_violation(tmp_path: Path, nodes: int, seed: int, runs: dict[int, dict]) -> None:
    assert Namespaces.available(), "the chaos run partitions nodes with network namespaces: run the tests as root"
    out = tmp_path / f"chaos-{nodes}"
    opts = ChaosOptions(
        out=out, nodes=nodes, seed=seed, faults=FAULTS_PER_RUN, network="netns",
        argv=["groupcoord", "chaos", f"--nodes={nodes}", f"--seed={seed}", f"--faults={FAULTS_PER_RUN}"],
    )  # fmt: skip
    result = Harness(opts).run()
    report = render_text(result, out)
    print(report)
    assert result.ok, report
    faults = result.stats["faults_by_kind"]
    phases = [e.get("phase") for e in _harness_events(out) if e["ev"] == "fault" and e["kind"] == "kill_node"]
    assert "PreparingRebalance" in phases and "CompletingRebalance" in phases, phases
    assert faults["pause_node"] >= 1 and faults["partition_node"] >= 1 and faults["restart_cluster"] >= 1, faults
    assert faults["kill_worker"] >= 1 and faults["restart_node"] >= 1, faults
    assert faults["wipe_node"] >= 1 and faults["damage_journal"] >= 1, faults
    assert faults["one_way_partition"] >= 1 and faults["fill_disk"] >= 1, faults
    assert faults["replace_node"] >= 1 and faults["voter_added"] >= 1, faults
    assert faults["clock_jump"] >= 1 and faults["clock_fixed"] >= 1, faults
    added = [e for e in _harness_events(out) if e["ev"] == "fault" and e["kind"] == "voter_added"]
    assert all(e["added"] == "NONE" for e in added), added
    idle = [e for e in _harness_events(out) if e["ev"] == "idle_commit"]
    assert len(idle) >= 8, "the idle groups' simple commits, which a wrong clock could expire, were not made"
    assert result.stats["commits_acked"] > 100 and result.stats["ownership_intervals"] > 20, result.stats
    # `two_coordinators` had something to judge: every node's answers, five groups a second.
    assert result.stats["coordinator_answers"] > 500, result.stats
    injected = sum(1 for e in _harness_events(out) if e["ev"] == "recovered")
    runs[nodes] = {
        **result.stats, "workers": sum(g["workers"] for g in result.run["groups"].values()), "injected": injected,
    }  # fmt: skip


def test_ci_covers_the_acceptance(runs: dict[int, dict]) -> None:
    """Both runs together: ≥ 100 faults of which ≥ 80 on nodes, ≥ 10 workers in ≥ 3 groups each."""
    assert set(runs) == {3, 5}, "both chaos runs must have passed first"
    assert sum(s["injected"] for s in runs.values()) >= 100, runs
    node_faults = sum(s["node_faults"] for s in runs.values())
    assert node_faults >= 80, node_faults
    for stats in runs.values():
        assert stats["groups"] >= 3 and stats["workers"] >= 10, stats


def _harness_events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "harness.jsonl").read_text().splitlines()]
