"""The analytics job: `groupcoord analyze ...`, or `spark-submit pipeline/analyze.py ...` with the same flags.

Reads the events, builds every table of `tables`, writes them, OUT/summary.json and OUT/report.html. Under
spark-submit the driver needs groupcoord installed (`pip install 'groupcoord[spark]'`); the executors need
nothing, there are no UDFs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import DataFrame, SparkSession, functions

from groupcoord.base.errors import UserError
from groupcoord.pipeline import io, report, session, tables
from groupcoord.pipeline.cli import add_arguments

REPORT_FILE = "report.html"
REPORT_TABLES = ("rebalances_by_reason", "avoided_by_group", "unavailability")
REPORT_REBALANCES = 20_000


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _for_report(found: dict[str, DataFrame]) -> dict[str, list[dict[str, object]]]:
    """The small tables the HTML report draws, as rows on the driver (the latest rebalances only)."""
    latest = found["rebalances"].orderBy(functions.col("start_ms").desc()).limit(REPORT_REBALANCES)
    charted = {name: [row.asDict() for row in found[name].collect()] for name in REPORT_TABLES}
    charted["rebalances"] = [row.asDict() for row in reversed(latest.collect())]
    return charted


def analyze(spark: SparkSession, args: argparse.Namespace) -> None:
    """Writes every table and OUT/summary.json; prints what it analysed."""
    loaded = io.load(spark, args.events, args.since, args.until)
    found = tables.all_tables(loaded.events)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        rows = {name: io.write_table(df, args.out, name) for name, df in found.items()}
        charted = _for_report(found)
    finally:
        for df in [loaded.events, *found.values()]:  # a shared session (tests, a notebook) lives on
            df.unpersist()
    summary: dict[str, object] = {
        "schema_version": io.SCHEMA_VERSION,
        "events": str(args.events),
        "input": {
            "lines": loaded.lines,
            "events": loaded.lines - loaded.corrupt - loaded.duplicates,
            "duplicates_dropped": loaded.duplicates,
            "analysed": loaded.analysed,
        },
        "corrupt_lines": loaded.corrupt,
        "corrupt_examples": loaded.corrupt_examples,
        "time_range": {
            "since_ms": args.since,
            "until_ms": args.until,
            "first_ms": loaded.first_ms,
            "last_ms": loaded.last_ms,
            "first": _iso(loaded.first_ms),
            "last": _iso(loaded.last_ms),
        },
        "tables": rows,
    }
    path = io.write_summary(args.out, summary)
    figures = {"events analysed": loaded.analysed, "from": _iso(loaded.first_ms), "to": _iso(loaded.last_ms),
               "corrupt lines": loaded.corrupt, **{f"{name} rows": n for name, n in rows.items()}}  # fmt: skip
    (args.out / REPORT_FILE).write_text(report.render(charted, figures))
    span = f", {_iso(loaded.first_ms)} to {_iso(loaded.last_ms)}" if loaded.analysed else ""
    print(f"{loaded.analysed} events analysed{span}: {rows['rebalances']} rebalances -> {args.out}")
    if loaded.corrupt:
        required = ", ".join(io.REQUIRED)
        print(f"{loaded.corrupt} corrupt line(s) skipped (not JSON, or an event without {required}): see {path}")


def run(args: argparse.Namespace) -> int:
    """The `analyze` command; a UserError for input it cannot read. Uses the active session if there is one."""
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise UserError(f"--since ({_iso(args.since)}) is not before --until ({_iso(args.until)})")
    io.event_files(args.events)  # fail before Spark's start-up seconds
    spark = SparkSession.getActiveSession()
    owned = spark is None
    if spark is None:
        try:
            spark = session.build(args.master)
        except PySparkRuntimeError as exc:
            if exc.getCondition() != "JAVA_GATEWAY_EXITED":
                raise
            raise UserError("Spark's JVM did not start (see above): it needs Java 17, in JAVA_HOME or on PATH") from exc
    try:
        analyze(spark, args)
    finally:
        if owned:
            spark.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="analyze", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UserError as exc:
        print(f"analyze: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
