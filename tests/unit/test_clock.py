"""The node's wall clock (node/clock.py) follows NTP's small corrections and not a jump."""

from __future__ import annotations

import logging

import pytest

from groupcoord.logfields import FIELDS
from groupcoord.node.clock import SystemClock

S = 1_000_000_000
DAY = 86_400 * S


class FakeTime:
    def __init__(self) -> None:
        self.wall, self.mono = 1_800_000_000 * S, 5 * S

    def advance(self, ns: int) -> None:
        self.wall += ns
        self.mono += ns


def test_time_goes_on_and_small_corrections_are_followed():
    t = FakeTime()
    clock = SystemClock(lambda: t.wall, lambda: t.mono)
    start = clock.wall_ms()
    t.advance(10 * S)
    assert clock.wall_ms() == start + 10_000
    t.wall += 300_000_000  # NTP steps the clock 0.3 s forward
    assert clock.wall_ms() == start + 10_300


def test_a_jump_is_logged_once_and_not_followed(caplog: pytest.LogCaptureFixture):
    t = FakeTime()
    clock = SystemClock(lambda: t.wall, lambda: t.mono)
    start = clock.wall_ms()
    with caplog.at_level(logging.WARNING, logger="groupcoord.node.clock"):
        t.wall += 8 * DAY  # set by hand, 8 days ahead
        t.advance(S)
        assert clock.wall_ms() == start + 1_000  # one second later, not eight days
        t.advance(S)
        assert clock.wall_ms() == start + 2_000
        t.wall -= 8 * DAY + 3_600 * S  # and back, an hour too far
        assert clock.wall_ms() == start + 2_000
    jumps = [getattr(r, FIELDS)["seconds"] for r in caplog.records if r.getMessage() == "clock.jump"]
    assert jumps == [8 * 86_400.0, -3_600.0]
    assert clock.mono_ms() == t.mono // 1_000_000
