"""`analyze` end to end through main(): input validation, corrupt lines, the time range, the files it writes."""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from groupcoord.pipeline import analyze, cli
from tests.pipeline.events import T0, scenario, write

TABLES = ["rebalances", "rebalances_by_reason", "avoided", "avoided_by_group", "churn", "unavailability",
          "commit_rates"]  # fmt: skip
NOT_JSON = "{not json"
NO_KIND = '{"v":1,"time_ms":1,"partition":0,"index":99,"position":0,"term":2,"node":1,"group":"g"}'


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """main's exit code is 2 and stderr one line, without a traceback; that line."""
    assert analyze.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


def test_no_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "empty" / "events.jsonl", [])
    for events in (tmp_path / "missing", tmp_path / "empty"):
        assert fails(["--events", str(events), "--out", str(tmp_path / "out")], capsys) == (
            f"analyze: error: no events in {events} (expected events.jsonl from `groupcoord events export`)"
        )
    assert not (tmp_path / "out").exists()


def test_newer_schema_is_refused(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    newer = json.loads(scenario()[0]) | {"v": 2, "partition": "p0"}  # a changed type: corrupt for v1, still v 2
    events = write(tmp_path / "events.jsonl", [*scenario()[:3], json.dumps(newer)])
    assert fails(["--events", str(events), "--out", str(tmp_path / "out")], capsys) == (
        "analyze: error: events of schema version 2: this analyzer reads version 1; upgrade groupcoord"
    )


def test_only_corrupt_lines(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "events.jsonl", [NOT_JSON, NO_KIND])
    assert fails(["--events", str(tmp_path), "--out", str(tmp_path / "out")], capsys) == (
        f"analyze: error: no readable events in {tmp_path}: 2 corrupt lines"
    )


def test_outputs(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = scenario()
    write(tmp_path / "in" / "events.jsonl", [lines[0], NOT_JSON, *lines[1:], "", NO_KIND])
    write(tmp_path / "in" / "again.jsonl", lines[:3])  # an overlapping second export: each event counts once
    out = tmp_path / "out"
    assert analyze.main(["--events", str(tmp_path / "in"), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0] == (
        f"{len(lines)} events analysed, 2023-11-14T22:14:00.000+00:00 to 2023-11-14T22:15:35.000+00:00: "
        f"8 rebalances -> {out}"
    )
    assert stdout[1].startswith("2 corrupt line(s) skipped (not JSON, or an event without v, partition, index")
    summary = json.loads((out / "summary.json").read_text())
    # the line itself, or when it is JSON, the fields it has
    assert sorted(summary.pop("corrupt_examples")) == sorted([NOT_JSON, NO_KIND])
    assert summary == {
        "schema_version": 1,
        "events": str(tmp_path / "in"),
        "input": {"lines": len(lines) + 5, "events": len(lines), "duplicates_dropped": 3, "analysed": len(lines)},
        "corrupt_lines": 2,
        "time_range": {"since_ms": None, "until_ms": None, "first_ms": T0, "last_ms": T0 + 95_000,
                       "first": "2023-11-14T22:14:00.000+00:00", "last": "2023-11-14T22:15:35.000+00:00"},
        "tables": {"rebalances": 8, "rebalances_by_reason": 3, "avoided": 3, "avoided_by_group": 3, "churn": 4,
                   "unavailability": 2, "commit_rates": 2},
    }  # fmt: skip
    expected = [*TABLES, *(f"{t}.csv" for t in TABLES), "summary.json", "report.html"]
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    page = (out / "report.html").read_text()
    drawn = re.findall(r'Plotly\.newPlot\(\s*"(\w+)"', page)
    assert drawn == ["timeline", "durations", "reasons", "failovers"], "the report charts the scenario"
    assert "member_joined" in page
    unavailability = spark.read.parquet(str(out / "unavailability")).orderBy("partition").collect()
    assert [row.asDict() for row in unavailability] == [
        {"partition": 0, "old_term": 2, "new_term": 3, "old_node": 1, "new_node": 2, "last_old_ms": T0 + 59_000,
         "barrier_ms": T0 + 61_500, "window_ms": 2500},
        {"partition": 1, "old_term": 1, "new_term": 2, "old_node": 3, "new_node": 1, "last_old_ms": T0 + 8000,
         "barrier_ms": T0 + 9000, "window_ms": 1000},
    ]  # fmt: skip
    with (out / "rebalances.csv").open() as f:
        rebalances = list(csv.reader(f))
    assert rebalances[0] == ["group", "partition", "start_ms", "end_ms", "duration_ms", "reason", "trigger_member",
                             "join_reason", "generation_before", "generation_after", "members_before", "members_after",
                             "restarts", "completed"]  # fmt: skip
    assert rebalances[2] == ["g1", "0", str(T0 + 20_000), str(T0 + 25_000), "5000", "protocol_changed", "m4", "0",
                             "1", "2", "2", "1", "1", "true"]  # fmt: skip
    assert rebalances[6] == ["g2", "1", str(T0 + 95_000), "", "", "member_joined", "a3", "0", "3", "", "1", "", "0",
                             "false"]  # fmt: skip
    assert len(rebalances) == 1 + 8
    with (out / "commit_rates.csv").open() as f:
        assert list(csv.reader(f))[1][:5] == ["g1", "2023-11-14T22:14:00.000Z", str(T0), "2", "5"]


def test_since_until(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events, out = write(tmp_path / "events.jsonl", scenario()), tmp_path / "out"
    # The second minute: partition 0's barrier there is its first in range (no failover row), one rebalance
    # completes and one is open.
    argv = ["--events", str(events), "--out", str(out), "--since", "2023-11-14T22:15:00Z", "--until", str(T0 + 120_000)]
    assert analyze.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input"]["analysed"] == 9
    assert summary["time_range"] == {"since_ms": T0 + 60_000, "until_ms": T0 + 120_000, "first_ms": T0 + 61_500,
                                     "last_ms": T0 + 95_000, "first": "2023-11-14T22:15:01.500+00:00",
                                     "last": "2023-11-14T22:15:35.000+00:00"}  # fmt: skip
    assert summary["tables"] == {"rebalances": 2, "rebalances_by_reason": 2, "avoided": 1, "avoided_by_group": 1,
                                 "churn": 1, "unavailability": 0, "commit_rates": 1}  # fmt: skip
    header_only = "partition,old_term,new_term,old_node,new_node,last_old_ms,barrier_ms,window_ms\n"
    assert (out / "unavailability.csv").read_text() == header_only
    assert fails([*argv[:4], "--since", str(T0), "--until", str(T0)], capsys) == (
        "analyze: error: --since (2023-11-14T22:14:00.000+00:00) is not before --until (2023-11-14T22:14:00.000+00:00)"
    )


def test_without_java(tmp_path: Path) -> None:
    events = write(tmp_path / "events.jsonl", scenario())
    argv = [sys.executable, "-m", "groupcoord.pipeline.analyze", "--events", str(events), "--out", str(tmp_path)]
    done = subprocess.run(argv, env=os.environ | {"JAVA_HOME": "/nonexistent"}, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "analyze: error: Spark's JVM did not start (see above): it needs Java 17, in JAVA_HOME or on PATH"
    )


def test_parse_time() -> None:
    assert cli.parse_time(str(T0)) == T0
    assert cli.parse_time("2023-11-14T22:14:00Z") == T0
    assert cli.parse_time("2023-11-14T23:14:00.250+01:00") == T0 + 250
    assert cli.parse_time("2023-11-14 22:14") == T0  # no zone: UTC
    with pytest.raises(argparse.ArgumentTypeError, match="not epoch ms or ISO-8601: 'yesterday'"):
        cli.parse_time("yesterday")


def test_register_adds_the_command() -> None:
    parser = argparse.ArgumentParser(prog="groupcoord")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["analyze", "--events", "in", "--out", "out", "--since", str(T0)])
    assert (args.events, args.out, args.master, args.since, args.until) == (Path("in"), Path("out"), None, T0, None)
    assert args.handler is cli._analyze
