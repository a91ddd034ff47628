"""The benchmark's synthetic events (bench/events_synth.py) through the real tables: every figure the generator
counted while writing is what the tables find. This keeps the generator honest, and checks the tables on many
interleaved groups over several partitions with failovers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from groupcoord.bench import events_synth as synth
from groupcoord.coordinator.events import barrier_event
from groupcoord.pipeline import io, tables


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """4,000 events of 40 groups on 4 partitions, with an election every ~150 entries of a partition."""
    out = tmp_path_factory.mktemp("synth")
    return synth.generate(4000, out, seed=7, groups=40, partitions=4, failover_every=150), out


def test_events_follow_schema_v1_in_log_order(generated: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    truth, out = generated
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert len(events) == truth["events"] == 4000
    fields = list(barrier_event(None, 0, 1, 1, 1))
    assert all(list(event) == fields and event["v"] == 1 for event in events)
    keys = [(e["partition"], e["index"], e["position"]) for e in events]
    assert keys == sorted(set(keys)), "log order, each event once"
    again = synth.generate(4000, tmp_path, seed=7, groups=40, partitions=4, failover_every=150)
    assert again == truth and (tmp_path / "events.jsonl").read_bytes() == (out / "events.jsonl").read_bytes()


def test_tables_find_the_truth(spark: SparkSession, generated: tuple[dict[str, Any], Path]) -> None:
    truth, out = generated
    # Every kind of figure occurs, or the comparison would prove little.
    assert truth["restarts"] and truth["failovers"] > 1 and set(truth["avoided"]) == {
        "static_replacement", "restart", "known_member"}  # fmt: skip
    loaded = io.load(spark, out)
    try:
        assert (loaded.analysed, loaded.corrupt, loaded.duplicates) == (truth["events"], 0, 0)
        found = tables.all_tables(loaded.events)
        rebalances = found["rebalances"].agg(
            F.count(F.lit(1)), F.count(F.when(F.col("completed"), 1)), F.sum("restarts"), F.sum("duration_ms")
        )
        assert tuple(rebalances.first()) == (
            truth["rebalances"], truth["completed"], truth["restarts"], truth["duration_ms"])  # fmt: skip
        by_reason = {row["reason"]: row["count"] for row in found["rebalances_by_reason"].collect()}
        assert by_reason == truth["by_reason"]
        avoided = {row["kind"]: row["count"] for row in found["avoided"].groupBy("kind").count().collect()}
        assert avoided == truth["avoided"]
        windows = found["unavailability"].agg(F.count(F.lit(1)), F.sum("window_ms")).first()
        assert tuple(windows) == (truth["failovers"], truth["window_ms"])
        commits = found["commit_rates"].agg(F.sum("commits"), F.sum("offsets")).first()
        assert tuple(commits) == (truth["commits"], truth["offsets"])
        churn = found["churn"].agg(*[F.sum(c).alias(c) for c in tables.CHURN]).first().asDict()
        assert churn == truth["churn"]
    finally:
        loaded.events.unpersist()
