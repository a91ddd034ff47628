"""The analysis as one self-contained HTML page: inline SVG charts and tables, no script, nothing fetched, so it
opens anywhere (a browser, a CI artifact, an air-gapped laptop).

Input is the small tables the job already computed, as plain rows; charts of very many rebalances show the
`MAX_BARS` most recent and say so.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

Row = dict[str, Any]
MAX_BARS = 400
PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e")
WIDTH, ROW_H, LEFT = 900, 22, 170


def _esc(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _when(ms: float | None) -> str:
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _colors(reasons: Sequence[str]) -> dict[str, str]:
    return {reason: PALETTE[i % len(PALETTE)] for i, reason in enumerate(sorted(set(reasons)))}


def _legend(colors: dict[str, str], y: int) -> str:
    parts, x = [], LEFT
    for reason, color in colors.items():
        parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{x + 16}" y="{y + 11}">{_esc(reason)}</text>')
        x += 24 + 7 * len(reason)
    return "".join(parts)


def timeline(rebalances: list[Row]) -> str:
    """One row per group, a bar per rebalance from its start to its end, coloured by reason."""
    done = [r for r in rebalances if r.get("start_ms") is not None][-MAX_BARS:]
    if not done:
        return "<p>No rebalances in the data.</p>"
    groups = sorted({r["group"] for r in done})
    t0 = min(r["start_ms"] for r in done)
    t1 = max((r.get("end_ms") or r["start_ms"]) for r in done)
    span = max(t1 - t0, 1)
    colors = _colors([r.get("reason") or "?" for r in done])
    height = len(groups) * ROW_H + 60
    parts = [f'<svg class="chart" id="timeline" width="{WIDTH}" height="{height}" role="img">']
    for i, group in enumerate(groups):
        y = 10 + i * ROW_H
        parts.append(f'<text x="4" y="{y + 14}">{_esc(group[:22])}</text>')
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - 10}" y1="{y + 10}" y2="{y + 10}" stroke="#ddd"/>')
    scale = (WIDTH - LEFT - 10) / span
    for r in done:
        y = 10 + groups.index(r["group"]) * ROW_H
        x = LEFT + (r["start_ms"] - t0) * scale
        w = max(((r.get("end_ms") or t1) - r["start_ms"]) * scale, 2)
        tip = f"{r['group']}: {r.get('reason')} {_ms(r.get('duration_ms'))}"
        fill = colors[r.get("reason") or "?"]
        parts.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="14" fill="{fill}"><title>{_esc(tip)}</title></rect>'
        )
    parts.append(f'<text x="{LEFT}" y="{height - 30}">{_when(t0)} UTC</text>')
    parts.append(f'<text x="{WIDTH - 180}" y="{height - 30}">{_when(t1)}</text>')
    parts.append(_legend(colors, height - 20))
    parts.append("</svg>")
    return "".join(parts)


def histogram(rebalances: list[Row]) -> str:
    """Durations in buckets doubling from 10 ms: rebalances span milliseconds to minutes."""
    durations = [r["duration_ms"] for r in rebalances if r.get("duration_ms") is not None]
    if not durations:
        return "<p>No completed rebalances.</p>"
    buckets = [0] * 18
    for d in durations:
        buckets[min(max(int(math.log2(max(d, 10) / 10)), 0), len(buckets) - 1)] += 1
    last = max(i for i, n in enumerate(buckets) if n) + 1
    top, bar_w, height = max(buckets), (WIDTH - LEFT) / last, 220
    parts = [f'<svg class="chart" id="durations" width="{WIDTH}" height="{height}" role="img">']
    for i, n in enumerate(buckets[:last]):
        h = 160 * n / top
        x = LEFT + i * bar_w
        tip = f"{n} rebalances of {_ms(10 * 2**i)} to {_ms(10 * 2 ** (i + 1))}"
        parts.append(
            f'<rect x="{x:.1f}" y="{180 - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" fill="#4269d0">'
            f"<title>{tip}</title></rect>"
        )
        parts.append(f'<text x="{x:.1f}" y="198" font-size="10">{_ms(10 * 2**i)}</text>')
    parts.append(f'<text x="4" y="20">{top} max</text></svg>')
    return "".join(parts)


def bars(rows: list[Row], label: str, value: str, chart_id: str) -> str:
    """Horizontal bars, largest first (rebalances by reason, failover windows)."""
    rows = sorted((r for r in rows if r.get(value) is not None), key=lambda r: -r[value])[:40]
    if not rows:
        return "<p>Nothing to show.</p>"
    top = max(r[value] for r in rows) or 1
    height = len(rows) * ROW_H + 10
    parts = [f'<svg class="chart" id="{chart_id}" width="{WIDTH}" height="{height}" role="img">']
    for i, r in enumerate(rows):
        y = 5 + i * ROW_H
        w = max((WIDTH - LEFT - 120) * r[value] / top, 2)
        parts.append(f'<text x="4" y="{y + 14}">{_esc(str(r[label])[:24])}</text>')
        parts.append(f'<rect x="{LEFT}" y="{y + 3}" width="{w:.1f}" height="14" fill="#efb118"/>')
        parts.append(f'<text x="{LEFT + w + 6:.1f}" y="{y + 14}">{_esc(r[value])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def table(rows: list[Row], columns: Sequence[str], limit: int = 50) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit])
    more = f"<p>{len(rows) - limit} more rows in the CSV.</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def render(tables: dict[str, list[Row]], summary: dict[str, Any]) -> str:
    """The whole page; `tables` holds rebalances, rebalances_by_reason, avoided_by_group, unavailability."""
    rebalances = tables.get("rebalances", [])
    windows = [{**w, "failover": f"p{w['partition']} t{w['new_term']}"} for w in tables.get("unavailability", [])]
    figures = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in summary.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>groupcoord rebalance report</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
svg text {{ font-size: 11px; fill: #333; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; font-size: 12px; }}
</style></head><body>
<h1>Why did my groups rebalance?</h1>
<table>{figures}</table>
<h2>Rebalance timeline (by group, coloured by reason)</h2>{timeline(rebalances)}
<h2>Rebalance durations</h2>{histogram(rebalances)}
<h2>Rebalances by reason</h2>{bars(tables.get("rebalances_by_reason", []), "reason", "count", "reasons")}
{table(tables.get("rebalances_by_reason", []), ("reason", "count", "p50_ms", "p95_ms", "max_ms"))}
<h2>Rebalances avoided (static membership, RESTART rejoins)</h2>
{table(tables.get("avoided_by_group", []), ("group", "kind", "count"))}
<h2>Coordinator unavailability during failovers</h2>{bars(windows, "failover", "window_ms", "failovers")}
{table(windows, ("partition", "old_term", "new_term", "old_node", "new_node", "window_ms"))}
<h2>Longest rebalances</h2>
{
        table(
            sorted(rebalances, key=lambda r: -(r.get("duration_ms") or 0)),
            (
                "group",
                "reason",
                "trigger_member",
                "generation_before",
                "generation_after",
                "members_before",
                "members_after",
                "duration_ms",
            ),
            limit=20,
        )
    }
</body></html>
"""
