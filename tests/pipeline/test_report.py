"""The HTML report renders in a real browser: headless Chromium loads it, takes a screenshot, and the charts'
colours are on it. The PNG is decoded here (zlib + PNG row filters), no imaging library needed."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from groupcoord.pipeline.report import render

BAR_BLUE = (0x42, 0x69, 0xD0)  # timeline/histogram bars
BAR_YELLOW = (0xEF, 0xB1, 0x18)  # reason and failover bars
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
)  # fmt: skip


def _tables() -> dict[str, list[dict]]:
    t0 = 1_763_700_000_000
    rebalances = [
        {"group": f"g{i % 3}", "reason": reason, "start_ms": t0 + i * 4000, "end_ms": t0 + i * 4000 + 50 * (i + 1),
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
        "unavailability": [
            {"partition": 3, "old_term": 2, "new_term": 3, "old_node": 1, "new_node": 2, "window_ms": 640},
        ],
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


def test_the_report_renders_its_charts_in_headless_chromium(tmp_path: Path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Chromium is not installed: apt-get install chromium (.ci/run does)", pytrace=False)
    page = tmp_path / "report.html"
    page.write_text(render(_tables(), {"events": 1234, "rebalances": 12}))
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,1600",
         f"--screenshot={shot}", page.as_uri()],
        capture_output=True, timeout=90, check=True,
    )  # fmt: skip
    width, bpp, rows = _pixels(shot.read_bytes())
    assert width == 1000
    assert len({row[i : i + 3] for row in rows[::8] for i in range(0, len(row), bpp * 8)}) > 8, "a blank page"
    assert _count(rows, bpp, BAR_BLUE) > 2000, "timeline and duration bars drawn"
    assert _count(rows, bpp, BAR_YELLOW) > 500, "reason and failover bars drawn"
