"""Reading events (explicit schema, corrupt lines counted) and writing the tables (Parquet, one CSV, summary)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from groupcoord.base.errors import UserError
from groupcoord.pipeline import tables

SCHEMA_VERSION = 1
CORRUPT = "_corrupt_record"
KEY = ["partition", "index", "position"]
# Without these an event cannot be placed or classified: such a line counts as corrupt.
REQUIRED = ("v", *KEY, "term", "node", "group", "kind")
EXAMPLES = 5

_strings = T.ArrayType(T.StringType())
# Every kind's details (docs/EVENTS.md) in one struct; a kind's absent fields are null. `offsets` is left out: no
# table reads it, and it is most of the bytes of a commit event.
DETAILS = T.StructType(
    [
        T.StructField("session_timeout_ms", T.LongType()),
        T.StructField("group_instance_id", T.StringType()),
        T.StructField("client_id", T.StringType()),
        T.StructField("client_host", T.StringType()),
        T.StructField("protocols", _strings),
        T.StructField("client_reason", T.StringType()),
        T.StructField("old_member_id", T.StringType()),
        T.StructField("join_reason", T.IntegerType()),
        T.StructField("members", _strings),
        T.StructField("protocol", T.StringType()),
        T.StructField("leader", T.StringType()),
        T.StructField("count", T.LongType()),
        T.StructField("group_instance_ids", _strings),
    ]
)
EVENT_SCHEMA = T.StructType(
    [
        T.StructField("v", T.IntegerType()),
        T.StructField("time_ms", T.LongType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("index", T.LongType()),
        T.StructField("position", T.IntegerType()),
        T.StructField("term", T.LongType()),
        T.StructField("node", T.IntegerType()),
        T.StructField("group", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("member", T.StringType()),
        T.StructField("generation", T.IntegerType()),
        T.StructField("reason", T.StringType()),
        T.StructField("state", T.StringType()),
        T.StructField("details", DETAILS),
    ]
)
_READ_SCHEMA = T.StructType([*EVENT_SCHEMA.fields, T.StructField(CORRUPT, T.StringType())])


def no_events(path: Path) -> UserError:
    return UserError(f"no events in {path} (expected events.jsonl from `groupcoord events export`)")


def event_files(path: Path) -> list[Path]:
    """The non-empty *.jsonl files of a directory (an export's events.jsonl, or several), or the file given."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.glob("*.jsonl") if p.is_file() and p.stat().st_size > 0) if path.is_dir() else []
    if not files:
        raise no_events(path)
    return files


@dataclass(frozen=True)
class Loaded:
    """The events to analyse (cached, as every table reads them: the caller unpersists) and what reading found."""

    events: DataFrame
    lines: int
    corrupt: int
    corrupt_examples: list[str]
    duplicates: int
    analysed: int
    first_ms: int | None
    last_ms: int | None


def load(spark: SparkSession, path: Path, since_ms: int | None = None, until_ms: int | None = None) -> Loaded:
    """Reads schema-v1 events, refusing newer versions; drops lines that are not events (counted, with examples)
    and duplicates of (partition, index, position) (several overlapping exports), then applies the time range.
    """
    files = event_files(path)
    raw = (
        spark.read.schema(_READ_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json([str(f) for f in files])
    )
    missing: Column = reduce(lambda a, b: a | b, [F.col(c).isNull() for c in REQUIRED])
    raw = raw.withColumn("_bad", F.col(CORRUPT).isNotNull() | missing | (F.col("v") < SCHEMA_VERSION)).cache()
    try:
        # Over every line, corrupt ones too: a newer writer's line may not fit this schema but still says its `v`.
        counts = raw.agg(F.count(F.lit(1)), F.count(F.when(F.col("_bad"), 1)), F.max("v")).first()
        lines, corrupt, newest = counts  # type: ignore[misc]  # an aggregate over all rows has one row, never None
        if newest is not None and newest > SCHEMA_VERSION:
            raise UserError(
                f"events of schema version {newest}: this analyzer reads version {SCHEMA_VERSION}; upgrade groupcoord"
            )
        if lines == corrupt:
            raise no_events(path) if not lines else UserError(f"no readable events in {path}: {corrupt} corrupt lines")
        examples: list[str] = []
        if corrupt:
            text = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*EVENT_SCHEMA.fieldNames())))
            examples = [row[0][:200] for row in raw.filter(F.col("_bad")).select(text).limit(EXAMPLES).collect()]
        valid = raw.filter(~F.col("_bad")).select(*EVENT_SCHEMA.fieldNames())
        # Duplicates are rare (overlapping exports). Counting distinct keys shuffles three numbers per event; dropping
        # duplicates shuffles and sorts whole events (members lists and all), so it is done only when there are some.
        distinct = valid.select(*KEY).distinct().count()
        unique = valid if distinct == lines - corrupt else valid.dropDuplicates(KEY)
        events = tables.in_range(unique, since_ms, until_ms).cache()
        span = events.agg(F.count(F.lit(1)), F.min("time_ms"), F.max("time_ms")).first()
        analysed, first_ms, last_ms = span  # type: ignore[misc]  # an aggregate over all rows has one row, never None
    finally:
        raw.unpersist()
    return Loaded(events, lines, corrupt, examples, lines - corrupt - distinct, analysed, first_ms, last_ms)


def write_table(df: DataFrame, out: Path, name: str) -> int:
    """OUT/<name>/ (Parquet) and OUT/<name>.csv (one file with a header); the number of rows.

    The table is cached first so that it is computed once for its count and both writes (and once for a table
    derived from it). `out` is a path of the driver's file system, shared with the executors on a cluster.
    """
    df = df.cache()
    rows = df.count()
    df.write.mode("overwrite").parquet(str(out / name))
    staging = out / f".{name}.csv.parts"
    df.coalesce(1).write.mode("overwrite").option("header", True).csv(str(staging))
    (part,) = staging.glob("part-*.csv")
    part.replace(out / f"{name}.csv")
    shutil.rmtree(staging)
    return rows


def write_summary(out: Path, summary: dict[str, object]) -> Path:
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
