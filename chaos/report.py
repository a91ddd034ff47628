"""The reports of a checked chaos run: report.txt for people, report.json for tools, both in the run directory."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from groupcoord.chaos.checker import check
from groupcoord.chaos.history import read_history
from groupcoord.chaos.verdict import KINDS, Result, Violation

TEXT_FILE, JSON_FILE = "report.txt", "report.json"
MAX_PER_KIND = 20


def check_dir(run_dir: Path) -> Result:
    """The verdict of a run directory, for the harness and the command line."""
    return check(read_history(Path(run_dir)))


def replay_command(result: Result) -> str:
    """The command that reruns the same schedule: the seed is in the argv the harness recorded."""
    return shlex.join(str(arg) for arg in result.run.get("argv", []))


def _seconds(value: float | None) -> str:
    """A figure that was not measured prints as "-", never as a misleading 0."""
    return "-" if value is None else f"{value:.3f} s"


def _stat_rows(result: Result) -> list[tuple[str, str]]:
    """The figures that say whether the run exercised anything: faults, churn, commits, convergence."""
    stats, run = result.stats, result.run
    overlaps = stats.get("allowed_overlaps", {})
    faults = stats.get("faults_by_kind", {})
    bound = run.get("convergence_bound_s")
    measured = stats.get("convergence_s")
    convergence = "not reached" if measured is None else f"{_seconds(measured)} after quiesce"
    rows = [
        ("duration", _seconds(stats.get("duration_s"))),
        ("nodes", str(run.get("nodes", "?"))),
        ("groups", str(stats.get("groups", 0))),
        ("worker files", f"{stats.get('worker_files', 0)} ({stats.get('workers_killed', 0)} killed)"),
        ("unexpected worker exits", str(stats.get("worker_exits_unexpected", 0))),
        ("ownership intervals", str(stats.get("ownership_intervals", 0))),
        ("session-lost releases", str(stats.get("session_lost_releases", 0))),
        ("allowed overlaps", f"{overlaps.get('count', 0)} (max {_seconds(overlaps.get('max_s'))})"),
        ("commits acknowledged", f"{stats.get('commits_acked', 0)} ({stats.get('commits_rejected', 0)} rejected)"),
        ("offset fetches", str(stats.get("fetches", 0))),
        ("observations", f"{stats.get('observations', 0)} (max pending {stats.get('max_pending', 0)})"),
        ("coordinator answers", str(stats.get("coordinator_answers", 0))),
        ("convergence", f"{convergence} (bound {_seconds(bound)})"),
    ]
    after = stats.get("convergence_after_faults", {})
    if after.get("count"):
        rows.append(
            (
                "after each fault",
                f"{after['count']} waits, median {_seconds(after['median_s'])}, max {_seconds(after['max_s'])}",
            )
        )
        rows.append(
            (
                "  since the fault struck",
                f"median {_seconds(after.get('since_injection_median_s'))}, "
                f"max {_seconds(after.get('since_injection_max_s'))}",
            )
        )
    rows += [(f"  group {g}", _seconds(s)) for g, s in stats.get("convergence_by_group", {}).items()]
    rows += [(f"max generation {g}", str(n)) for g, n in stats.get("max_generation_by_group", {}).items()]
    rows.append(("faults", f"{sum(faults.values())} ({stats.get('node_faults', 0)} on nodes)"))
    rows += [(f"  {kind}", str(n)) for kind, n in faults.items()]
    return rows


def _by_kind(violations: list[Violation]) -> dict[str, list[Violation]]:
    """Report order: the checker's kinds first, in their order, then anything unknown."""
    grouped: dict[str, list[Violation]] = defaultdict(list)
    for v in violations:
        grouped[v.kind].append(v)
    order = [k for k in KINDS if k in grouped] + sorted(k for k in grouped if k not in KINDS)
    return {k: grouped[k] for k in order}


def render_text(result: Result, run_dir: Path) -> str:
    """A report to read top-down: verdict and replay first, what was exercised, then every broken invariant."""
    t0 = result.stats.get("start_t", result.run.get("t", 0.0))
    lines = [
        f"chaos run {run_dir}: {'PASS' if result.ok else 'FAIL'} ({len(result.violations)} violations)",
        f"seed: {result.run.get('seed', '?')}",
        f"replay: {replay_command(result) or '?'}",
        "times are seconds since the run started",
        "",
        "stats:",
    ]
    rows = _stat_rows(result)
    width = max(len(label) for label, _ in rows)
    lines += [f"  {label.ljust(width)}  {value}" for label, value in rows]
    for kind, violations in _by_kind(result.violations).items():
        lines += ["", f"{kind} ({len(violations)}):"]
        lines += [f"  [{v.t - t0:.3f}s] {v.message}" for v in violations[:MAX_PER_KIND]]
        if len(violations) > MAX_PER_KIND:
            lines.append(f"  ... and {len(violations) - MAX_PER_KIND} more (all in {JSON_FILE})")
    return "\n".join(lines) + "\n"


def to_json(result: Result) -> dict[str, Any]:
    """Everything, untruncated, for tools that compare runs or bisect a failure."""
    t0 = result.stats.get("start_t", result.run.get("t", 0.0))
    return {
        "ok": result.ok,
        "seed": result.run.get("seed"),
        "replay": replay_command(result),
        "violations": [{**asdict(v), "at_s": round(v.t - t0, 3)} for v in result.violations],
        "stats": result.stats,
    }


def write_report(result: Result, run_dir: Path) -> tuple[Path, Path]:
    """Writes report.txt and report.json next to the history they judge."""
    text, data = Path(run_dir) / TEXT_FILE, Path(run_dir) / JSON_FILE
    text.write_text(render_text(result, run_dir))
    data.write_text(json.dumps(to_json(result), indent=2, sort_keys=True) + "\n")
    return text, data
