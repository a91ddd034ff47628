"""The unit tests' hypothesis budget: each property test's full example count in `pytest` and `make test`, a
tenth of it in `make check` (HYPOTHESIS_PROFILE=check), the quick loop before a commit.

A test states its full count through `examples()`: an explicit `max_examples` in `@settings` would override
any profile, so the profile alone could not shorten it. The properties checked are the same in both runs;
`make check` tries fewer random cases of them, and CI's full run tries them all.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILES = ("default", "check")
SHARE = 10  # `make check` runs 1/SHARE of each test's examples

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
if PROFILE not in PROFILES:
    raise ValueError(f"HYPOTHESIS_PROFILE must be one of {PROFILES}, not {PROFILE!r}")

# For the tests that take hypothesis' own default (100 examples) rather than a count of their own.
settings.register_profile("check", max_examples=settings.get_profile("default").max_examples // SHARE)


def load() -> None:
    """Loads the selected profile; tests/unit/conftest.py calls it before any test module is imported."""
    settings.load_profile(PROFILE)


def examples(full: int) -> int:
    """A test's example count: `full` in the full run, 1/SHARE of it (at least 10) in `make check`."""
    return full if PROFILE == "default" else max(full // SHARE, 10)
