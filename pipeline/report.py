"""The analysis as one self-contained HTML page: plotly charts and plain tables, with plotly.js inlined once in the
head and nothing fetched, so it opens anywhere a browser runs scripts (a CI artifact, an air-gapped laptop).

Input is the small tables the job already computed, as plain rows. Every chart has titled axes with units and
hover text; times are UTC, given to plotly as naive ISO strings so that the browser's zone never shifts them. The
timeline of very many rebalances shows the `MAX_BARS` most recent and says so in its title.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

Row = dict[str, Any]
MAX_BARS = 400
PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e")
BAR_BLUE, BAR_YELLOW = PALETTE[0], PALETTE[1]
AXIS_COLOR = "#555555"  # the axis lines; the screenshot test looks for this exact colour
ROW_H, MAX_ROWS = 26, 40
# No "Produced with Plotly" link (the page links nowhere) and no cloud-editing button; the rest of the mode bar
# (zoom, pan, PNG download) works offline.
CONFIG = {"displaylogo": False, "responsive": True}


def _esc(value: object) -> str:
    """Text for element content, and for plotly's labels, which take a little HTML (<b>, <br>, <a href>) and decode
    &lt; &gt; &amp; but show &quot; as it is: quotes stay."""
    return html.escape("" if value is None else str(value), quote=False)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 60_000:
        return f"{value / 60_000:.1f} min"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _when(ms: float | None) -> str | None:
    """UTC, to the millisecond: plotly reads this as a date, and a person can read it too."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _colors(reasons: Sequence[str]) -> dict[str, str]:
    return {reason: PALETTE[i % len(PALETTE)] for i, reason in enumerate(sorted(set(reasons)))}


def _axis(title: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "showline": True, "linecolor": AXIS_COLOR, "ticks": "outside",
            "automargin": True, **more}  # fmt: skip


def _figure(fig: go.Figure, chart_id: str, title: str, x: dict[str, Any], y: dict[str, Any], height: int) -> str:
    """One chart as a <div> and the call that draws it; plotly.js itself is in the page's head."""
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left"},
        xaxis=x,
        yaxis=y,
        height=height,
        template="plotly_white",
        margin={"l": 10, "r": 20, "t": 40, "b": 10},
        hoverlabel={"align": "left"},
        legend={"title": {"text": ""}},
        barmode="overlay",  # a group's bars share its row, they do not stand side by side per reason
    )
    html: str = fig.to_html(full_html=False, include_plotlyjs=False, div_id=chart_id, config=CONFIG,
                            default_height=f"{height}px")  # fmt: skip
    return html


def timeline(rebalances: list[Row]) -> str:
    """One row per group, a bar per rebalance from its start to its end (to the last one's end if still running),
    coloured by reason, with a mark at each start so that a rebalance of milliseconds is seen in a span of hours."""
    started = [r for r in rebalances if r.get("start_ms") is not None]
    done = started[-MAX_BARS:]
    if not done:
        return "<p>No rebalances in the data.</p>"
    t1 = max((r.get("end_ms") or r["start_ms"]) for r in done)
    colors = _colors([r.get("reason") or "?" for r in done])
    fig = go.Figure()
    for reason, color in colors.items():
        rows = [r for r in done if (r.get("reason") or "?") == reason]
        tips = [
            f"group {_esc(r['group'])}<br>{_esc(reason)}<br>started {_when(r['start_ms'])} UTC<br>"
            + (f"took {_ms(r.get('duration_ms'))}" if r.get("end_ms") is not None else "not finished in the data")
            + f"<br>generation {_esc(r.get('generation_before'))} → {_esc(r.get('generation_after')) or '-'}"
            for r in rows
        ]
        starts = [_when(r["start_ms"]) for r in rows]
        groups = [_esc(r["group"]) for r in rows]
        fig.add_bar(
            name=_esc(reason), legendgroup=reason, orientation="h", y=groups, base=starts, marker_color=color,
            x=[(r.get("end_ms") or t1) - r["start_ms"] for r in rows], hovertext=tips, hoverinfo="text",
        )  # fmt: skip
        fig.add_scatter(
            name=_esc(reason), legendgroup=reason, showlegend=False, mode="markers", x=starts, y=groups, hovertext=tips,
            hoverinfo="text", marker={"symbol": "line-ns-open", "size": 14, "color": color, "line": {"width": 2}},
        )  # fmt: skip
    shown = f"the latest {len(done)} of {len(started)}" if len(started) > len(done) else f"{len(done)}"
    n_groups = len({r["group"] for r in done})
    return _figure(
        fig,
        "timeline",
        f"{shown} rebalances, a bar from start to end",
        _axis("time (UTC)", type="date", tickformat="%H:%M:%S<br>%Y-%m-%d"),
        _axis("group", type="category", categoryorder="category descending"),
        n_groups * ROW_H + 170,
    )


def _bucket(i: int, last: int) -> str:
    """The range of histogram bucket `i` of `last + 1`; the first and last are open-ended."""
    if i == 0:
        return "under 20 ms"
    low, high = _ms(10 * 2**i), _ms(10 * 2 ** (i + 1))
    return f"{low} or more" if i == last else f"{low} to {high}"


def histogram(rebalances: list[Row]) -> str:
    """Durations in buckets doubling from 10 ms: rebalances span milliseconds to minutes."""
    durations = [r["duration_ms"] for r in rebalances if r.get("duration_ms") is not None]
    if not durations:
        return "<p>No completed rebalances.</p>"
    buckets = [0] * 18
    for d in durations:
        buckets[min(max(int(math.log2(max(d, 10) / 10)), 0), len(buckets) - 1)] += 1
    last = max(i for i, n in enumerate(buckets) if n)
    labels = [_bucket(i, len(buckets) - 1) for i in range(last + 1)]
    tip = "%{y} rebalances took %{x}<extra></extra>"
    fig = go.Figure(go.Bar(x=labels, y=buckets[: last + 1], marker_color=BAR_BLUE, hovertemplate=tip))
    return _figure(
        fig,
        "durations",
        f"{len(durations)} completed rebalances by duration",
        _axis("duration (ranges doubling from 10 ms)", type="category", tickangle=-30),
        _axis("rebalances", rangemode="tozero"),
        360,
    )


def bars(rows: list[Row], label: str, value: str, chart_id: str, title: str, axes: tuple[str, str]) -> str:
    """Horizontal bars, largest first at the top (rebalances by reason, failover windows); `axes` titles x, y."""
    rows = sorted((r for r in rows if r.get(value) is not None), key=lambda r: -r[value])[:MAX_ROWS]
    if not rows:
        return "<p>Nothing to show.</p>"
    values = [r[value] for r in rows]
    fig = go.Figure()
    fig.add_bar(
        orientation="h", x=values, y=[_esc(r[label]) for r in rows], marker_color=BAR_YELLOW, text=values,
        textposition="outside", cliponaxis=False, hovertemplate=f"%{{y}}<br>{axes[0]}: %{{x}}<extra></extra>",
    )  # fmt: skip
    return _figure(
        fig,
        chart_id,
        title,
        _axis(axes[0], rangemode="tozero"),
        _axis(axes[1], type="category", autorange="reversed"),
        max(len(rows) * ROW_H + 140, 240),
    )


def failovers(windows: list[Row]) -> list[Row]:
    """The unavailability rows with a readable name and their times: `p3 t3` was partition 3's new term 3."""
    named = []
    for w in windows:
        since = _when(w.get("last_old_ms"))
        name = f"partition {w['partition']}, term {w['new_term']}" + (f", {since[:19]}" if since else "")
        named.append({**w, "failover": name, "unavailable_from": since, "new_leader_at": _when(w.get("barrier_ms"))})
    return named


def table(rows: list[Row], columns: Sequence[str], limit: int = 50) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{_esc(c.replace('_', ' '))}</th>" for c in columns)  # narrow columns: headings wrap
    body = "".join("<tr>" + "".join(f"<td>{_esc(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit])
    more = f"<p>{len(rows) - limit} more rows in the CSV.</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def render(tables: dict[str, list[Row]], summary: dict[str, Any]) -> str:
    """The whole page; `tables` holds rebalances, rebalances_by_reason, avoided_by_group, unavailability."""
    rebalances = tables.get("rebalances", [])
    reasons = tables.get("rebalances_by_reason", [])
    windows = failovers(tables.get("unavailability", []))
    figures = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in summary.items())
    longest = sorted(rebalances, key=lambda r: -(r.get("duration_ms") or 0))[:20]
    longest = [{**r, "started (UTC)": _when(r.get("start_ms"))} for r in longest]
    by_reason = bars(reasons, "reason", "count", "reasons", "rebalances per reason", ("rebalances", "reason"))
    title = "time without a coordinator, longest first (partition, new term, start in UTC)"
    unavailable = bars(windows, "failover", "window_ms", "failovers", title, ("unavailable (ms)", "failover"))
    window_columns = ("partition", "old_term", "new_term", "old_node", "new_node", "unavailable_from", "new_leader_at",
                      "window_ms")  # fmt: skip
    longest_columns = ("group", "reason", "started (UTC)", "trigger_member", "generation_before", "generation_after",
                       "members_before", "members_after", "duration_ms")  # fmt: skip
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>groupcoord rebalance report</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; font-size: 12px; }}
</style>
<script>{get_plotlyjs()}</script></head><body>
<h1>Why did my groups rebalance?</h1>
<table>{figures}</table>
<h2>Rebalance timeline (by group, coloured by reason)</h2>{timeline(rebalances)}
<h2>Rebalance durations</h2>{histogram(rebalances)}
<h2>Rebalances by reason</h2>{by_reason}
{table(reasons, ("reason", "count", "p50_ms", "p95_ms", "max_ms"))}
<h2>Rebalances avoided (static membership, RESTART rejoins)</h2>
{table(tables.get("avoided_by_group", []), ("group", "kind", "count"))}
<h2>Coordinator unavailability during failovers</h2>{unavailable}
{table(windows, window_columns)}
<h2>Longest rebalances</h2>
{table(longest, longest_columns, limit=20)}
</body></html>
"""
