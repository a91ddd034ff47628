"""The chaos checker against synthetic histories: a clean run passes with exact figures, and each planted bug is
reported as exactly its kind (a checker that reports everything, or nothing, fails these tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupcoord.chaos.checker import check
from groupcoord.chaos.history import History
from groupcoord.chaos.report import check_dir, render_text, to_json, write_report
from groupcoord.chaos.verdict import (
    DOUBLE_OWNERSHIP,
    GENERATION_BACKWARDS,
    HISTORY_CORRUPT,
    INCOMPLETE_RUN,
    LOST_COMMIT,
    MEMBER_ID_REUSED,
    NODE_CRASHED,
    NOT_CONVERGED,
    OFFSET_BACKWARDS,
    OWNED_PAST_SESSION,
    PENDING_GROWTH,
    REPLICA_DIVERGENCE,
    SLOW_CONVERGENCE,
    TWO_COORDINATORS,
    VACUOUS,
    WORKER_CRASHED,
    Result,
    Violation,
)
from tests.chaos.histories import (
    CLEAN_ALLOWED_OVERLAP_S,
    CLEAN_COMMITS,
    CLEAN_CONVERGENCE_BY_GROUP,
    CLEAN_CONVERGENCE_S,
    CLEAN_FETCHES,
    CLEAN_INTERVALS,
    T0,
    HistoryBuilder,
    clean_run,
)


def kinds(result: Result) -> set[str]:
    return {v.kind for v in result.violations}


def only(result: Result, kind: str) -> list[Violation]:
    assert kinds(result) == {kind}, [v.message for v in result.violations]
    return result.violations


def test_clean_run_passes_with_exact_figures() -> None:
    result = check(clean_run().history)

    assert result.violations == []
    assert result.ok
    stats = result.stats
    assert stats["groups"] == 2
    assert stats["worker_files"] == 6
    assert stats["workers_killed"] == 1
    assert stats["ownership_intervals"] == CLEAN_INTERVALS
    assert stats["commits_acked"] == CLEAN_COMMITS
    assert stats["fetches"] == CLEAN_FETCHES
    assert stats["observations"] == 7
    assert stats["coordinator_answers"] == 7
    assert stats["session_lost_releases"] == 1
    assert stats["allowed_overlaps"] == {"count": 1, "max_s": pytest.approx(CLEAN_ALLOWED_OVERLAP_S)}
    assert stats["convergence_s"] == pytest.approx(CLEAN_CONVERGENCE_S)
    assert stats["convergence_by_group"] == pytest.approx(CLEAN_CONVERGENCE_BY_GROUP)
    assert stats["faults_by_kind"]["kill_worker"] == 1
    assert stats["node_faults"] == 3
    assert stats["max_pending"] == 2
    assert stats["max_generation_by_group"] == {"g1": 3, "g2": 3}
    assert stats["duration_s"] == pytest.approx(13.5)
    assert result.run["seed"] == 42


def test_two_owners_of_one_partition_are_double_ownership() -> None:
    b = clean_run()
    x = b.worker("x", 1, "g1", 3.9, "x1")
    x.assigned(4.0, 2, "orders-2")
    x.closed(4.5, "orders-2")

    [violation] = only(check(b.history), DOUBLE_OWNERSHIP)

    assert violation.group == "g1"
    assert violation.t == pytest.approx(T0 + 4.0)
    for figure in ("orders-2", "member b1", "member x1", "worker-x-1", "from 4.000s to 4.500s", "0.500s of overlap"):
        assert figure in violation.message


def test_session_lost_release_after_the_window_is_owned_past_session_and_double_ownership() -> None:
    b = clean_run()
    b.workers["worker-e-1"].find("revoked", reason="session_lost")["t"] = T0 + 9.8

    result = check(b.history)

    assert kinds(result) == {OWNED_PAST_SESSION, DOUBLE_OWNERSHIP}
    past, double = sorted(result.violations, key=lambda v: v.kind != OWNED_PAST_SESSION)
    assert "e1" in past.message and "0.300s past" in past.message
    assert (
        "events-1" in double.message and "0.700s of overlap" in double.message and "past its deadline" in double.message
    )


def test_a_silently_dead_worker_owns_until_the_end_of_the_run() -> None:
    b = clean_run()
    b.history.harness = [e for e in b.history.harness if e["ev"] != "worker_killed"]

    result = check(b.history)

    assert kinds(result) == {DOUBLE_OWNERSHIP, NOT_CONVERGED}
    assert {v.group for v in result.violations} == {"g1"}


def test_a_worker_exit_nobody_caused_ends_its_ownership_and_is_a_crash() -> None:
    b = clean_run()
    for e in b.history.harness:
        if e["ev"] == "worker_killed":
            e.update(ev="worker_exit", returncode=-9, expected=False)

    result = check(b.history)

    [violation] = only(result, WORKER_CRASHED)
    assert "exited with code -9" in violation.message
    assert result.stats["worker_exits_unexpected"] == 1


def test_a_group_that_does_not_settle_after_an_earlier_fault_is_reported() -> None:
    b = clean_run()
    quiesce = next(e for e in b.history.harness if e["ev"] == "quiesce")
    b.history.harness.append({"ev": "not_converged", "t": quiesce["t"] - 1, "fault": "pause", "groups": {"g1": None}})
    b.history.harness.sort(key=lambda e: e["t"])

    [violation] = only(check(b.history), NOT_CONVERGED)

    assert violation.group == "g1" and "after the pause fault" in violation.message


def test_a_fetch_below_an_acknowledged_commit_is_a_lost_commit() -> None:
    b = clean_run()
    b.workers["worker-c-2"].fetch(8.5, {"orders-0": 30, "orders-1": 4, "orders-2": 7, "orders-3": 15})

    [violation] = only(check(b.history), LOST_COMMIT)

    assert "orders-3" in violation.message and "read 15" in violation.message
    assert "committed 20" in violation.message and "member c1" in violation.message


def test_final_offsets_below_an_acknowledged_commit_are_a_lost_commit() -> None:
    b = clean_run()
    next(e for e in b.history.harness if e["ev"] == "final")["offsets"]["g2"]["events-1"] = 8

    [violation] = only(check(b.history), LOST_COMMIT)

    assert violation.group == "g2"
    assert "events-1" in violation.message and "final offset is 8" in violation.message and "9" in violation.message


def test_an_idle_groups_simple_commit_missing_at_the_end_is_a_lost_commit() -> None:
    b = clean_run()
    b.event("idle_commit", 3.0, group="idle-0", sent=2.9, offsets={"idle-0": 2})
    b.event("idle_commit", 3.0, group="idle-1", sent=2.9, offsets={"idle-0": 2})
    final = next(e for e in b.history.harness if e["ev"] == "final")
    final["offsets"]["idle-0"] = {"idle-0": 2}
    final["offsets"]["idle-1"] = {}  # expired: read back as nothing

    [violation] = only(check(b.history), LOST_COMMIT)

    assert violation.group == "idle-1" and "final offset is -1" in violation.message and "harness" in violation.message


def test_final_offsets_the_harness_could_not_read_are_an_incomplete_run() -> None:
    b = clean_run()
    next(e for e in b.history.harness if e["ev"] == "final")["offsets"]["g2"] = None

    [violation] = only(check(b.history), INCOMPLETE_RUN)

    assert violation.group == "g2"


def test_no_final_event_is_an_incomplete_run() -> None:
    b = clean_run()
    b.remove("final")

    only(check(b.history), INCOMPLETE_RUN)


def test_a_commit_sent_after_a_higher_one_was_acknowledged_is_offset_backwards() -> None:
    b = clean_run()
    b.workers["worker-a-1"].commit(7.0, {"orders-0": 25}, sent=6.5)

    [violation] = only(check(b.history), OFFSET_BACKWARDS)

    assert "orders-0" in violation.message and "committed 25" in violation.message and "below 30" in violation.message


def test_concurrent_commits_are_not_ordered() -> None:
    b = clean_run()
    b.workers["worker-a-1"].commit(7.0, {"orders-0": 25}, sent=5.5)

    assert check(b.history).violations == []


def test_a_group_stuck_after_quiesce_is_not_converged_once() -> None:
    b = clean_run()
    b.history.harness = [e for e in b.history.harness if not (e["ev"] == "observe" and e["t"] == T0 + 12.0)]
    b.remove("converged")
    last = {"state": "PreparingRebalance", "generation": 2, "members": ["d1", "e1b"]}
    b.event("not_converged", 12.1, groups={"g2": last})

    result = check(b.history)

    [violation] = only(result, NOT_CONVERGED)
    assert violation.group == "g2"
    assert "PreparingRebalance generation 2" in violation.message and "Stable with [d1, e1b]" in violation.message
    assert result.stats["convergence_s"] is None
    assert result.stats["convergence_by_group"] == pytest.approx({"g1": 0.2})


def test_the_harness_verdict_is_reported_for_a_group_the_checker_found_settled() -> None:
    b = clean_run()
    b.remove("converged")
    b.event("not_converged", 12.1, groups={"g1": None})

    [violation] = only(check(b.history), NOT_CONVERGED)

    assert violation.group == "g1"


def test_groups_that_never_settle_at_the_same_time_are_not_converged() -> None:
    b = clean_run()
    b.observe(11.9, "g1", "PreparingRebalance", 3, ["a1", "b1", "c2"])

    result = check(b.history)

    [violation] = only(result, NOT_CONVERGED)
    assert violation.group == ""
    assert "never all at once" in violation.message
    assert result.stats["convergence_s"] is None


def test_converging_later_than_the_bound_is_slow_convergence() -> None:
    b = clean_run()
    b.history.harness[0]["convergence_bound_s"] = 0.5

    [violation] = only(check(b.history), SLOW_CONVERGENCE)

    assert "1.000s after quiesce" in violation.message and "group g2" in violation.message


def test_a_group_without_live_workers_converges_as_empty() -> None:
    b = clean_run()
    for name in ("d", "e"):
        b.kill(b.workers[f"worker-{name}-1"], 10.5)
    b.history.harness = [e for e in b.history.harness if not (e["ev"] == "observe" and e["group"] == "g2")]
    b.observe(11.4, "g2", "Empty", 3, [])

    result = check(b.history)

    assert result.violations == []
    assert result.stats["convergence_s"] == pytest.approx(0.4)


def test_a_worker_assigned_an_older_generation_is_generation_backwards() -> None:
    b = clean_run()
    b.workers["worker-a-1"].assigned(12.6, 2)

    [violation] = only(check(b.history), GENERATION_BACKWARDS)

    assert (
        "worker-a-1" in violation.message
        and "generation 2" in violation.message
        and "generation 3" in violation.message
    )


def test_a_worker_assigned_the_same_generation_again_is_fine() -> None:
    """A known member that rejoins a Stable group without a rebalance gets the current generation back."""
    b = clean_run()
    last = max(e["generation"] for e in b.workers["worker-a-1"].events if e["ev"] == "assigned")
    b.workers["worker-a-1"].assigned(12.6, last)

    assert check(b.history).violations == []


def test_an_observed_older_generation_is_generation_backwards() -> None:
    b = clean_run()
    b.observe(12.5, "g1", "Stable", 2, ["a1", "b1", "c2"])

    [violation] = only(check(b.history), GENERATION_BACKWARDS)

    assert violation.group == "g1"


def test_an_older_generation_in_an_answer_that_overlapped_a_newer_one_is_fine() -> None:
    """Asked at 9.1, before the generation-2 answer of 9.15 came back: either order is linearizable."""
    b = clean_run()
    b.observe(9.3, "g2", "Stable", 1, ["d1", "e1"], sent=9.1)

    assert check(b.history).violations == []


def test_an_older_generation_asked_after_a_newer_one_came_back_is_backwards() -> None:
    b = clean_run()
    b.observe(9.3, "g2", "Stable", 1, ["d1"], sent=9.16)

    [violation] = only(check(b.history), GENERATION_BACKWARDS)

    assert "generation 1" in violation.message and "asked at 9.160s" in violation.message


def test_a_member_id_in_two_worker_files_is_reused() -> None:
    b = clean_run()
    z = b.worker("z", 1, "g1", 12.4, "a1")
    z.assigned(12.5, 3)
    z.closed(12.6)

    [violation] = only(check(b.history), MEMBER_ID_REUSED)

    assert "a1" in violation.message and "worker-a-1" in violation.message and "worker-z-1" in violation.message


def test_a_worker_going_back_to_an_old_member_id_is_reused() -> None:
    b = clean_run()
    e = b.workers["worker-e-1"]
    e.member = "e1"
    e.fetch(13.2, {"events-0": 3, "events-1": 9})

    [violation] = only(check(b.history), MEMBER_ID_REUSED)

    assert "went back to member id e1" in violation.message


def test_a_member_observed_again_after_leaving_is_reused() -> None:
    b = clean_run()
    b.observe(12.5, "g2", "Stable", 3, ["d1", "e1", "e1b"])

    [violation] = only(check(b.history), MEMBER_ID_REUSED)

    assert "member e1 was observed again" in violation.message and "absent at 9.150s" in violation.message


def test_a_member_in_an_answer_that_overlapped_the_one_without_it_is_not_reused() -> None:
    """The chaos run of seed 23 on 5 nodes: two threads observe, and an answer asked before e1 was seen gone can
    come back after (its thread slower to record it, or the reply held for the lease) still holding e1."""
    b = clean_run()
    b.observe(9.3, "g2", "Stable", 2, ["d1", "e1"], sent=9.14)

    assert check(b.history).violations == []


def test_a_member_asked_after_it_was_seen_gone_is_reused_even_after_an_overlapping_answer() -> None:
    b = clean_run()
    b.observe(9.3, "g2", "Stable", 2, ["d1", "e1"], sent=9.14)
    b.observe(9.6, "g2", "Stable", 2, ["d1", "e1"], sent=9.5)

    [violation] = only(check(b.history), MEMBER_ID_REUSED)

    assert "observed again at 9.600s" in violation.message and "absent at 9.150s" in violation.message


def test_a_member_missing_from_an_answer_asked_before_it_was_first_seen_has_not_left() -> None:
    """An answer asked before the group first showed e1 says nothing about e1 leaving."""
    b = clean_run()
    b.observe(3.2, "g2", "Stable", 1, ["d1"], sent=2.9)

    assert check(b.history).violations == []


def test_a_node_exit_nobody_caused_is_a_crash() -> None:
    b = clean_run()
    b.event("node_exit", 7.0, node=2, pid=78, returncode=1, expected=False)

    [violation] = only(check(b.history), NODE_CRASHED)

    assert "node 2" in violation.message and "code 1" in violation.message


def test_a_crash_names_the_free_space_and_biggest_file_the_harness_found() -> None:
    b = clean_run()
    files = {"partition-0.wal": 2_097_152, "events/partition-1/00000000000000000003.jsonl": 9_437_184}
    disk = {"free_bytes": 0, "size_bytes": 33_554_432, "files": files}
    b.event("node_exit", 7.0, node=1, pid=79, returncode=1, expected=False, disk=disk)

    [violation] = only(check(b.history), NODE_CRASHED)

    assert violation.message.endswith(
        "had 0 of 33554432 bytes free, the biggest file events/partition-1/00000000000000000003.jsonl (9437184 bytes)"
    )


def test_a_digest_mismatch_a_node_logged_is_replica_divergence() -> None:
    b = clean_run()
    b.event("node_alarm", 30.0, node=3, event="partition.digest_mismatch", partition=2, index=1234)

    [violation] = only(check(b.history), REPLICA_DIVERGENCE)

    assert "node 3" in violation.message and "partition 2" in violation.message and "1234" in violation.message


def test_pending_members_over_the_bound_are_pending_growth() -> None:
    b = clean_run()
    b.observe(12.5, "g1", "Stable", 3, ["a1", "b1", "c2"], pending=9)

    result = check(b.history)

    only(result, PENDING_GROWTH)
    assert result.stats["max_pending"] == 9


def test_an_unreadable_line_is_history_corrupt() -> None:
    b = clean_run()
    b.history.bad_lines.append("worker-a-1.jsonl:7: Expecting value")

    [violation] = only(check(b.history), HISTORY_CORRUPT)

    assert "worker-a-1.jsonl:7" in violation.message


def test_an_empty_history_is_vacuous_and_incomplete() -> None:
    assert kinds(check(History())) == {VACUOUS, INCOMPLETE_RUN}


def test_a_run_that_did_nothing_is_vacuous() -> None:
    b = HistoryBuilder()
    b.start_run({"g1": {"workers": 1}})
    b.event("quiesce", 1.0)
    b.observe(1.5, "g1", "Empty", 0, [])
    b.event("converged", 1.6, groups={"g1": 0})
    b.event("final", 2.0, offsets={"g1": {}})

    [violation] = only(check(b.history), VACUOUS)

    assert "no ownership intervals, no acknowledged commits" in violation.message


def test_reports_of_a_run_directory(tmp_path: Path) -> None:
    run_dir = clean_run().write(tmp_path)

    result = check_dir(run_dir)
    text_path, json_path = write_report(result, run_dir)

    assert result.ok
    report = json.loads(json_path.read_text())
    assert report["ok"] is True
    assert report["seed"] == 42
    assert report["replay"] == "groupcoord chaos --seed 42 --faults 6"
    assert report["violations"] == []
    assert report["stats"]["convergence_s"] == pytest.approx(CLEAN_CONVERGENCE_S)
    assert report["stats"]["commits_acked"] == CLEAN_COMMITS
    text = text_path.read_text()
    assert text.startswith(f"chaos run {run_dir}: PASS")
    assert "replay: groupcoord chaos --seed 42 --faults 6" in text
    assert "kill_worker" in text and "1.000 s after quiesce" in text

    with (run_dir / "worker-a-1.jsonl").open("a") as f:
        f.write('{"ev": "commit", "t": 50\n')
    result = check_dir(run_dir)
    write_report(result, run_dir)

    assert kinds(result) == {HISTORY_CORRUPT}
    report = json.loads(json_path.read_text())
    assert report["ok"] is False
    assert [v["kind"] for v in report["violations"]] == [HISTORY_CORRUPT]
    assert "worker-a-1.jsonl:" in report["violations"][0]["message"]
    text = text_path.read_text()
    assert text.startswith(f"chaos run {run_dir}: FAIL (1 violations)")
    assert "history_corrupt (1):" in text


def test_the_text_report_shows_the_first_violations_of_a_kind_and_counts_the_rest() -> None:
    b = clean_run()
    for n in range(25):
        b.observe(12.5 + n / 100, "g1", "Stable", 3, ["a1", "b1", "c2"], pending=10 + n)
    result = check(b.history)

    text = render_text(result, Path("/runs/x"))

    assert text.count("pending members at") == 20
    assert "... and 5 more (all in report.json)" in text
    assert len(to_json(result)["violations"]) == 25
    json.dumps(to_json(result))


def test_a_deposed_coordinator_answering_after_a_newer_one_is_two_coordinators() -> None:
    b = clean_run()
    b.coordinator_answer(9.7, "g1", 1, 3, 9.6)  # asked after node 2 answered in epoch 4 (first at 9.05)

    [violation] = only(check(b.history), TWO_COORDINATORS)

    assert violation.group == "g1"
    assert violation.message == (
        "node 1 answered as its coordinator in epoch 3 (asked at 9.600s) after node 2 had answered in epoch 4 "
        "(at 9.050s)"
    )


def test_two_nodes_answering_in_one_epoch_are_two_coordinators() -> None:
    b = clean_run()
    b.coordinator_answer(9.6, "g1", 3, 4, 9.55)
    b.coordinator_answer(9.8, "g1", 3, 4, 9.75)  # the same conflict again: reported once

    [violation] = only(check(b.history), TWO_COORDINATORS)

    assert violation.message == "nodes 2 and 3 both answered as its coordinator in epoch 4"
