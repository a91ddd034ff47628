"""The fuzz budget: a bounded `ci` profile by default, `GROUPCOORD_FUZZ=long` for runs of hours by hand.

Every target states its CI example count. The long profile runs each target `GROUPCOORD_FUZZ_ROUNDS` times
(default 100) with 4 times as many examples, and lifts the pytest-timeout marks. Rounds rather than one
huge run: hypothesis keeps up to 10,000 past test cases per run for shrinking (a few MB each for a
stateful test), so memory stays that of one round however long the campaign.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("GROUPCOORD_FUZZ", "ci")
if PROFILE not in ("ci", "long"):
    raise ValueError(f"GROUPCOORD_FUZZ must be 'ci' or 'long', not {PROFILE!r}")
LONG = PROFILE == "long"
ROUNDS = int(os.environ.get("GROUPCOORD_FUZZ_ROUNDS", "100")) if LONG else 1
PER_ROUND = 4 if LONG else 1

# The example database stays in the git-ignored .hypothesis/ (a failure replays first on the next run); a
# failure worth keeping becomes an @example in the test itself (docs/FUZZING.md).
settings.register_profile(
    "ci",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
settings.register_profile("long", settings.get_profile("ci"))


def fuzz_settings(examples: int, **overrides: object) -> settings:
    """This target's settings for one round: `examples` in CI, PER_ROUND times as many in a long run."""
    return settings(settings.get_profile(PROFILE), max_examples=examples * PER_ROUND, **overrides)  # type: ignore[arg-type]


def campaign(run: Callable[[], None]) -> None:
    """Runs a @given function once in CI, ROUNDS times (each a fresh hypothesis run) in a long run."""
    for _ in range(ROUNDS):
        run()


def time_limit(seconds: float) -> pytest.MarkDecorator:
    """A pytest-timeout mark for the CI budget; none in a long run (it may take hours by design)."""
    return pytest.mark.timeout(0 if LONG else seconds)
