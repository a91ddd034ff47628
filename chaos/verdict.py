"""The verdict of a chaos run's checks (chaos/checker.py): the kinds of broken invariant, each `Violation`, and the
`Result` the report, the command line and the tests share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DOUBLE_OWNERSHIP = "double_ownership"
OWNED_PAST_SESSION = "owned_past_session"
OFFSET_BACKWARDS = "offset_backwards"
LOST_COMMIT = "lost_commit"
INCOMPLETE_RUN = "incomplete_run"
GENERATION_BACKWARDS = "generation_backwards"
MEMBER_ID_REUSED = "member_id_reused"
NOT_CONVERGED = "not_converged"
SLOW_CONVERGENCE = "slow_convergence"
NODE_CRASHED = "node_crashed"
WORKER_CRASHED = "worker_crashed"
PENDING_GROWTH = "pending_growth"
HISTORY_CORRUPT = "history_corrupt"
VACUOUS = "vacuous"
REPLICA_DIVERGENCE = "replica_divergence"
TWO_COORDINATORS = "two_coordinators"
KINDS = (
    REPLICA_DIVERGENCE,
    TWO_COORDINATORS,
    DOUBLE_OWNERSHIP,
    OWNED_PAST_SESSION,
    OFFSET_BACKWARDS,
    LOST_COMMIT,
    GENERATION_BACKWARDS,
    MEMBER_ID_REUSED,
    NOT_CONVERGED,
    SLOW_CONVERGENCE,
    NODE_CRASHED,
    WORKER_CRASHED,
    PENDING_GROWTH,
    HISTORY_CORRUPT,
    INCOMPLETE_RUN,
    VACUOUS,
)


@dataclass
class Violation:
    """One broken invariant, with the figures a person needs to find it in the history."""

    kind: str
    group: str
    message: str
    t: float  # monotonic, like the history


@dataclass
class Result:
    """The verdict of one run: what broke, what was measured, and the run event to replay it."""

    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """A run passes only if nothing broke, including "nothing was exercised" (`vacuous`)."""
        return not self.violations
