"""`groupcoord analyze`: its flags, without PySpark, so that `groupcoord --help` does not load Spark."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

from groupcoord.base.errors import UserError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(text: str) -> int:
    """Epoch milliseconds, or ISO-8601 (UTC when it names no zone): the unit of `time_ms`."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not epoch ms or ISO-8601: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events",
        type=Path,
        required=True,
        metavar="DIR",
        help="the output of `groupcoord events export` (DIR/events.jsonl), a directory of *.jsonl files, or a file",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the tables go (created)")
    parser.add_argument(
        "--master",
        metavar="URL",
        help="Spark master, e.g. spark://host:7077 (default: spark-submit's --master, else local[*]: embedded)",
    )
    parser.add_argument(
        "--since", type=parse_time, metavar="T", help="only events at or after T (epoch ms or ISO-8601, UTC default)"
    )
    parser.add_argument("--until", type=parse_time, metavar="T", help="only events before T (epoch ms or ISO-8601)")


def _analyze(args: argparse.Namespace) -> int:
    try:
        from groupcoord.pipeline import analyze
    except ImportError as exc:
        if not (exc.name or "").startswith(("pyspark", "plotly")):
            raise
        raise UserError("analyze needs PySpark, plotly and Java 17: pip install 'groupcoord[spark]'") from exc
    return analyze.run(args)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    analyze = commands.add_parser(
        "analyze",
        help="PySpark tables from exported events: rebalances and their causes, rebalances avoided, churn, "
        "failover unavailability, commit rates",
        description="Reads the events of `groupcoord events export` (schema v1, docs/EVENTS.md) and writes, per "
        "table, OUT/<table>/ (Parquet) and OUT/<table>.csv, plus OUT/summary.json. Corrupt lines are counted and "
        "skipped. Runs an embedded Spark (local[*]) unless --master names a cluster. Needs the [spark] extra and "
        "Java 17.",
    )
    add_arguments(analyze)
    analyze.set_defaults(handler=_analyze)
