"""The HTML report renders in a real browser: headless Chromium loads it with every network request sent to a
recording proxy, takes a screenshot (the charts' bar and axis colours are on it) and dumps the DOM plotly drew (each
chart's axis titles, with units, and tick labels are in it). The page asks for nothing over the network. The PNG is
decoded here (zlib + PNG row filters), no imaging library needed."""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from groupcoord.pipeline.report import AXIS_COLOR, BAR_BLUE, BAR_YELLOW, render

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
    "--window-size=1000,1600", "--virtual-time-budget=5000",  # plotly's drawing done before the shot or dump
)  # fmt: skip
# What Chromium itself asks for whatever the page (network time, component updates, sign-in), flags or not.
CHROMIUM_OWN = {"clients2.google.com", "update.googleapis.com", "accounts.google.com"}
T0 = 1_763_700_000_000  # 2025-11-21T04:40:00Z


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _tables() -> dict[str, list[dict]]:
    failover = {"partition": 3, "old_term": 2, "new_term": 3, "old_node": 1, "new_node": 2, "last_old_ms": T0 + 10_000,
                "barrier_ms": T0 + 10_640, "window_ms": 640}  # fmt: skip
    rebalances = [
        {"group": f"g{i % 3}", "reason": reason, "start_ms": T0 + i * 4000, "end_ms": T0 + i * 4000 + 50 * (i + 1),
         "duration_ms": 50 * (i + 1), "trigger_member": f"m{i}", "generation_before": i, "generation_after": i + 1,
         "members_before": 2, "members_after": 3}
        for i, reason in enumerate(["member_joined", "session_expired", "member_left", "member_joined"] * 3)
    ]  # fmt: skip
    return {
        "rebalances": rebalances,
        "rebalances_by_reason": [
            {"reason": "member_joined", "count": 6, "p50_ms": 300, "p95_ms": 550, "max_ms": 600},
            {"reason": "session_expired", "count": 3, "p50_ms": 250, "p95_ms": 500, "max_ms": 500},
        ],
        "avoided_by_group": [{"group": "g0", "kind": "restart", "count": 2}],
        "unavailability": [failover],
    }


def _pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit RGB or RGBA PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos : pos + 4]), png[pos + 4 : pos + 8]
        data = png[pos + 8 : pos + 8 + length]
        header = data if kind == b"IHDR" else header
        idat += data if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6), (depth, color)
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def _count(rows: list[bytes], bpp: int, rgb: tuple[int, int, int]) -> int:
    target = bytes(rgb)
    return sum(1 for row in rows for i in range(0, len(row), bpp) if row[i : i + 3] == target)


def _lines(rows: list[bytes], bpp: int, rgb: tuple[int, int, int], across: int, down: int) -> tuple[int, int]:
    """Straight runs of one colour: how many horizontal ones of `across` pixels or more, vertical of `down`."""
    target = bytes(rgb)
    mask = [[row[i : i + 3] == target for i in range(0, len(row), bpp)] for row in rows]

    def runs(lines: list[list[bool]] | list[tuple[bool, ...]], least: int) -> int:
        found = 0
        for line in lines:
            run = 0
            for on in [*line, False]:
                found, run = (found, run + 1) if on else (found + (run >= least), 0)
        return found

    return runs(mask, across), runs(list(zip(*mask, strict=True)), down)


class _Proxy:
    """A proxy that only counts: Chromium sends every http(s) request of the page here, so none leaves the host."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.hosts: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(2)
                try:
                    line = conn.recv(300).split(b"\r\n")[0].decode(errors="replace")
                except OSError:
                    line = "(nothing read)"
            # "GET http://host/path HTTP/1.1" or "CONNECT host:443 HTTP/1.1"
            found = re.match(r"\S+ (?:https?://)?([^/:\s]+)", line)
            self.hosts.append(found.group(1) if found else line)

    def page_hosts(self) -> set[str]:
        """The hosts asked for, less Chromium's own."""
        return set(self.hosts) - CHROMIUM_OWN


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[tuple[str, _Proxy]]:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is not installed: apt-get install chromium (.ci/run does)", pytrace=False)
    proxy = _Proxy()
    yield found, proxy
    proxy.server.close()


def _browse(chromium: tuple[str, _Proxy], tmp_path: Path, page: Path, *action: str) -> bytes:
    """Chromium's stdout after `action` (--screenshot=..., --dump-dom) on `page`, all traffic through the proxy."""
    binary, proxy = chromium
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--proxy-server=127.0.0.1:{proxy.port}",
         "--proxy-bypass-list=<-loopback>", *action, page.as_uri()],
        capture_output=True, timeout=90, check=True,
    )  # fmt: skip
    return done.stdout


class _Axes(HTMLParser):
    """Per chart (a plotly div with an id), the text plotly drew: chart and axis titles, and tick labels."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, list[str]]] = {}
        self._chart: dict[str, list[str]] | None = None
        self._tick: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if tag == "div" and "plotly-graph-div" in classes and found.get("id"):
            self._chart = self.charts.setdefault(found["id"] or "", {})
        elif tag == "g" and classes and classes[0] in ("xtick", "ytick"):
            self._tick = classes[0]
        elif tag == "text" and self._chart is not None:
            kind = next((c for c in classes if c in ("gtitle", "xtitle", "ytitle")), self._tick)
            if kind is not None:
                self._chart.setdefault(kind, []).append(found.get("data-unformatted") or "")
            self._tick = None


def test_the_report_draws_its_charts_with_axes_in_headless_chromium(chromium: tuple[str, _Proxy], tmp_path: Path):
    page = tmp_path / "report.html"
    page.write_text(render(_tables(), {"events": 1234, "rebalances": 12}))
    shot = tmp_path / "report.png"
    _browse(chromium, tmp_path, page, f"--screenshot={shot}")
    width, bpp, rows = _pixels(shot.read_bytes())
    assert width == 1000
    assert len({row[i : i + 3] for row in rows[::8] for i in range(0, len(row), bpp * 8)}) > 8, "a blank page"
    assert _count(rows, bpp, _rgb(BAR_BLUE)) > 2000, "timeline and duration bars drawn"
    assert _count(rows, bpp, _rgb(BAR_YELLOW)) > 2000, "reason and failover bars drawn"
    assert _lines(rows, bpp, _rgb(AXIS_COLOR), 300, 60) == (4, 4), "an x and a y axis line on each of four charts"

    axes = _Axes()
    axes.feed(_browse(chromium, tmp_path, page, "--dump-dom").decode())
    titles = {chart: (drawn.get("xtitle"), drawn.get("ytitle")) for chart, drawn in axes.charts.items()}
    assert titles == {
        "timeline": (["time (UTC)"], ["group"]),
        "durations": (["duration (ranges doubling from 10 ms)"], ["rebalances"]),
        "reasons": (["rebalances"], ["reason"]),
        "failovers": (["unavailable (ms)"], ["failover"]),
    }
    timeline, durations, failovers = axes.charts["timeline"], axes.charts["durations"], axes.charts["failovers"]
    assert timeline["gtitle"] == ["12 rebalances, a bar from start to end"]
    assert sorted(timeline["ytick"]) == ["g0", "g1", "g2"]
    assert "04:40:00<br>2025-11-21" in timeline["xtick"], "start times on a UTC time axis"
    assert durations["xtick"][:3] == ["under 20 ms", "20 ms to 40 ms", "40 ms to 80 ms"]
    assert durations["xtick"][-1] == "320 ms to 640 ms"
    assert failovers["ytick"] == ["partition 3, term 3, 2025-11-21 04:40:10"], "a readable name, not p3 t3"
    assert all(re.fullmatch(r"\d+", tick) for tick in failovers["xtick"]), failovers["xtick"]
    assert chromium[1].page_hosts() == set(), "the page fetched nothing"

    control = tmp_path / "control.html"
    control.write_text('<img src="http://cdn.example/logo.png">')
    _browse(chromium, tmp_path, control, "--dump-dom")
    assert chromium[1].page_hosts() == {"cdn.example"}, "the proxy sees what a page fetches"


def test_the_report_is_one_file_that_links_to_nothing():
    """No src or href leads out of the page, and plotly.js is inlined exactly once."""

    found: list[str] = []

    class Links(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.extend(f"{tag} {name}={value}" for name, value in attrs if name in ("src", "href", "action"))

    page = render(_tables(), {"events": 1234})
    Links().feed(page)
    assert found == []
    assert page.count("* plotly.js v") == 1
    assert page.count("Plotly.newPlot(") == 4


def test_a_report_of_no_data_says_so():
    page = render({}, {"events": 0})
    assert "No rebalances in the data." in page and "No completed rebalances." in page
    assert "Plotly.newPlot(" not in page
