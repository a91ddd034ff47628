"""Percentiles, the medians over runs, and the output: a table for people, JSON for scripts."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
from collections.abc import Iterable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of `values` (0 < q ≤ 100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


def summary(values_ms: Iterable[float]) -> dict[str, float]:
    """count, p50, p99 and max of latencies in ms, rounded to µs."""
    values = sorted(values_ms)
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 50), 3),
        "p99_ms": round(percentile(values, 99), 3),
        "max_ms": round(values[-1], 3) if values else math.nan,
    }


def machine() -> dict[str, Any]:
    """What the figures were measured on, with the load at the time (other work shares the cores)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def median_of(runs: list[Any]) -> Any:
    """Per-field median of the runs' numbers (recursively through dicts); other values from the first run."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: median_of([r[k] for r in runs if isinstance(r, dict) and k in r]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        numbers = [r for r in runs if isinstance(r, (int, float)) and not math.isnan(r)]
        return round(statistics.median(numbers), 3) if numbers else math.nan
    return first


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [row for i, v in enumerate(value) for row in _flatten(v, f"{prefix}[{i}]")]
    return [(prefix, value)]


def table(result: dict[str, Any]) -> str:
    rows = _flatten(result)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def emit(result: dict[str, Any], as_json: bool) -> None:
    """With --json: JSON on stdout and the table on stderr; otherwise the table on stdout."""
    if as_json:
        print(table(result), file=sys.stderr)
        print(json.dumps(result, indent=2, allow_nan=True))
    else:
        print(table(result))
