"""The node's wall clock (node/clock.py) follows NTP's small corrections and not a jump; a partition leader's
time is the one most voters agree on, so a minority of wrong clocks moves neither records nor retention."""

from __future__ import annotations

import logging

import pytest

from groupcoord.base.logfields import FIELDS
from groupcoord.node.clock import ClusterClock, SystemClock, majority_time_ms

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


NOW_MS = 1_800_000_000_000
DAY_MS = 86_400_000


@pytest.mark.parametrize(
    ("own", "peers", "voters", "expected"),
    [
        (NOW_MS + 8 * DAY_MS, [NOW_MS, NOW_MS + 5], 3, NOW_MS + 5),  # this leader 8 days ahead: outvoted
        (NOW_MS - 8 * DAY_MS, [NOW_MS, NOW_MS + 5], 3, NOW_MS),  # 8 days behind: outvoted too
        (NOW_MS, [NOW_MS + 8 * DAY_MS, NOW_MS - 3], 3, NOW_MS),  # a follower ahead changes nothing
        (NOW_MS, [NOW_MS + 8 * DAY_MS, NOW_MS + 9 * DAY_MS, NOW_MS, NOW_MS], 5, NOW_MS),  # two of five ahead
        (NOW_MS, [NOW_MS - 8 * DAY_MS, NOW_MS - 9 * DAY_MS, NOW_MS, NOW_MS], 5, NOW_MS),  # two of five behind
        (NOW_MS + 8 * DAY_MS, [NOW_MS], 4, NOW_MS),  # 3 -> 4 voters: one wrong clock still outvoted
        (NOW_MS + 8 * DAY_MS, [], 3, NOW_MS + 8 * DAY_MS),  # nothing heard yet: its own, the only reading
        (NOW_MS + 8 * DAY_MS, [NOW_MS], 5, NOW_MS),  # fewer readings than a majority: the earliest
        (NOW_MS + 8 * DAY_MS, [], 1, NOW_MS + 8 * DAY_MS),  # a one-node cluster has only its own clock
    ],
)
def test_majority_time_is_not_moved_by_a_minority(own: int, peers: list[int], voters: int, expected: int):
    assert majority_time_ms(own, peers, voters) == expected


def test_a_leader_started_with_a_wrong_clock_uses_the_voters_time_and_says_so(caplog: pytest.LogCaptureFixture):
    t = FakeTime()
    t.wall += 8 * DAY  # the clock was wrong before the node started: SystemClock alone would follow it
    node = SystemClock(lambda: t.wall, lambda: t.mono)
    right_ms = (t.wall - 8 * DAY) // 1_000_000
    readings: list[int] = []
    clock = ClusterClock(node, lambda: (readings, 3))
    with caplog.at_level(logging.WARNING, logger="groupcoord.node.clock"):
        assert clock.wall_ms() == right_ms + 8 * DAY_MS  # no follower heard from yet
        readings[:] = [right_ms, right_ms + 2]
        assert clock.wall_ms() == right_ms + 2
        t.advance(S)
        readings[:] = [right_ms + 1_000, right_ms + 1_002]
        assert clock.wall_ms() == right_ms + 1_002
        assert clock.mono_ms() == t.mono // 1_000_000
    skews = [getattr(r, FIELDS)["seconds"] for r in caplog.records if r.getMessage() == "clock.skew"]
    assert skews == [8 * 86_400.0 - 0.002]  # once, however often it is measured
