"""Every table's exact contents for the scripted scenario of tests/pipeline/events.py (times are T0 + ms)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from groupcoord.pipeline import io, tables
from tests.pipeline.events import T0, scenario, write

MINUTE0, MINUTE1 = "2023-11-14T22:14:00Z", "2023-11-14T22:15:00Z"


@pytest.fixture(scope="module")
def events(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataFrame]:
    path = write(tmp_path_factory.mktemp("events") / "events.jsonl", scenario())
    loaded = io.load(spark, path)
    yield loaded.events
    loaded.events.unpersist()


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """The rows as dicts, timestamps as UTC text (a collected timestamp would be in this machine's zone)."""
    utc = "yyyy-MM-dd'T'HH:mm:ssX"
    columns = [
        F.date_format(f.name, utc).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f.name)
        for f in df.schema.fields
    ]
    return [row.asDict() for row in df.select(*columns).collect()]


def rebalance(group: str, partition: int, start: int, end: int | None, reason: str, trigger: str, before: int,
              after: int | None, members_before: int, members_after: int | None,
              restarts: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "group": group,
        "partition": partition,
        "start_ms": T0 + start,
        "end_ms": None if end is None else T0 + end,
        "duration_ms": None if end is None else end - start,
        "reason": reason,
        "trigger_member": trigger,
        "join_reason": 0,
        "generation_before": before,
        "generation_after": after,
        "members_before": members_before,
        "members_after": members_after,
        "restarts": restarts,
        "completed": end is not None,
    }


REBALANCES = [
    rebalance("g1", 0, 1000, 4000, "member_joined", "m1", 0, 1, 0, 2),
    # restarted once by m1's leave: the cause stays the first start's
    rebalance("g1", 0, 20_000, 25_000, "protocol_changed", "m4", 1, 2, 2, 1, restarts=1),
    rebalance("g2", 1, 2000, 4500, "member_joined", "a1", 0, 1, 0, 1),
    rebalance("g2", 1, 5050, 8000, "member_joined", "a2", 1, 2, 1, 2),
    rebalance("g2", 1, 65_000, 68_000, "session_expired", "a2", 2, 3, 2, 1),
    rebalance("g2", 1, 95_000, None, "member_joined", "a3", 3, None, 1, None),  # open at the end of the data
    rebalance("g3", 0, 40_000, None, "member_joined", "b1", 0, None, 0, None),  # ended by the group's deletion
    rebalance("g3", 0, 50_000, None, "member_joined", "b1", 0, None, 0, None),  # the new g3's own
]


def test_rebalances(events: DataFrame) -> None:
    assert rows(tables.rebalances(events)) == REBALANCES


def test_members_before_a_generation_outside_the_data_are_unknown(events: DataFrame) -> None:
    later = tables.rebalances(tables.in_range(events, T0 + 60_000, None)).filter("group = 'g2'")
    assert [(r["generation_before"], r["members_before"]) for r in rows(later)] == [(2, None), (3, 1)]


def test_rebalances_by_reason(events: DataFrame) -> None:
    # member_joined: completed durations 2500, 2950, 3000; p95 interpolates 2950 + 0.9 * 50
    assert rows(tables.rebalances_by_reason(tables.rebalances(events))) == [
        {"reason": "member_joined", "count": 6, "completed": 3, "p50_ms": 2950.0, "p95_ms": 2995.0, "max_ms": 3000},
        {"reason": "protocol_changed", "count": 1, "completed": 1, "p50_ms": 5000.0, "p95_ms": 5000.0, "max_ms": 5000},
        {"reason": "session_expired", "count": 1, "completed": 1, "p50_ms": 3000.0, "p95_ms": 3000.0, "max_ms": 3000},
    ]


def test_avoided(events: DataFrame) -> None:
    avoided = tables.avoided(events)
    # m4's replacement at 20000 is not there: a rebalance started in the same entry
    assert rows(avoided) == [
        {"group": "g1", "time_ms": T0 + 10_000, "kind": "static_replacement", "member": "m3",
         "group_instance_id": "i2", "generation": 1},
        {"group": "g1", "time_ms": T0 + 12_000, "kind": "restart", "member": "m3", "group_instance_id": "i2",
         "generation": 1},
        {"group": "g2", "time_ms": T0 + 70_000, "kind": "known_member", "member": "a1", "group_instance_id": "",
         "generation": 3},
    ]  # fmt: skip
    assert rows(tables.avoided_by_group(avoided)) == [
        {"group": "g1", "kind": "restart", "count": 1},
        {"group": "g1", "kind": "static_replacement", "count": 1},
        {"group": "g2", "kind": "known_member", "count": 1},
    ]


def churn(group: str, minute: str, joins: int = 0, leaves: int = 0, expirations: int = 0, replacements: int = 0,
          pending_expired: int = 0) -> dict[str, Any]:  # fmt: skip
    minute_ms = T0 if minute == MINUTE0 else T0 + 60_000
    return {"group": group, "minute": minute, "minute_ms": minute_ms, "joins": joins, "leaves": leaves,
            "expirations": expirations, "replacements": replacements, "pending_expired": pending_expired}  # fmt: skip


def test_churn(events: DataFrame) -> None:
    assert rows(tables.churn(events)) == [
        churn("g1", MINUTE0, joins=2, leaves=1, replacements=2),
        churn("g2", MINUTE0, joins=2),
        churn("g2", MINUTE1, joins=1, expirations=1, pending_expired=1),
        churn("g3", MINUTE0, joins=2),
    ]


def test_unavailability(events: DataFrame) -> None:
    # Partition 0's first barrier and partition 1's timeless one give no row of their own.
    assert rows(tables.unavailability(events)) == [
        {"partition": 0, "old_term": 2, "new_term": 3, "old_node": 1, "new_node": 2, "last_old_ms": T0 + 59_000,
         "barrier_ms": T0 + 61_500, "window_ms": 2500},
        {"partition": 1, "old_term": 1, "new_term": 2, "old_node": 3, "new_node": 1, "last_old_ms": T0 + 8000,
         "barrier_ms": T0 + 9000, "window_ms": 1000},
    ]  # fmt: skip


def test_commit_rates(events: DataFrame) -> None:
    assert rows(tables.commit_rates(events)) == [
        {"group": "g1", "minute": MINUTE0, "minute_ms": T0, "commits": 2, "offsets": 5, "commits_per_s": 2 / 60},
        {"group": "g1", "minute": MINUTE1, "minute_ms": T0 + 60_000, "commits": 1, "offsets": 4,
         "commits_per_s": 1 / 60},
    ]  # fmt: skip


def test_in_range_drops_events_outside_and_without_time(events: DataFrame) -> None:
    kept = tables.in_range(events, T0 + 60_000, T0 + 90_000)
    assert rows(kept.select("time_ms").orderBy("time_ms")) == [
        {"time_ms": T0 + t} for t in (61_500, 62_000, 65_000, 65_000, 68_000, 70_000)
    ]
