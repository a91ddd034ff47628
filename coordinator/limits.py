"""Resource limits that are not group-protocol rules: JoinGroup admission per group and request sizes.

Every limit is checked while a request is handled, never in `GroupStore.apply`: replaying records that were
committed under other limits (a setting changed since, another leader's counts) can never fail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """`burst` tokens refilled at `rate_per_s`, on the core's injected monotonic clock (soft state: a new
    leader starts every group with a full bucket)."""

    rate_per_s: int
    burst: int
    tokens: float
    updated_ms: int

    def take(self, now_ms: int) -> int:
        """Takes a token and returns 0, or returns the ms until one is due (a refusal takes nothing)."""
        elapsed = max(now_ms - self.updated_ms, 0)
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.rate_per_s / 1000)
        self.updated_ms = now_ms
        if self.tokens >= 1:
            self.tokens -= 1
            return 0
        return max(math.ceil((1 - self.tokens) * 1000 / self.rate_per_s), 1)


def exceeds(counts: Iterable[int], limit: int) -> bool:
    """True when the items (each count at least one) add up to more than `limit`; stops as soon as they do,
    so a request far over the limit costs no more than one just over it."""
    total = 0
    for count in counts:
        total += max(count, 1)
        if total > limit:
            return True
    return False
