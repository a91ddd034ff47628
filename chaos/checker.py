"""The invariants of a chaos run, checked against its recorded history (see chaos/history.py).

`check` is pure (no I/O), so the report, the command line and the tests share one verdict. Times in messages are
seconds since the run started (the `run` event), with 3 decimals.
"""

from __future__ import annotations

from groupcoord.chaos.history import History
from groupcoord.chaos.liveness_rules import LivenessRules
from groupcoord.chaos.safety_rules import SafetyRules
from groupcoord.chaos.verdict import INCOMPLETE_RUN, Result


def check(history: History) -> Result:
    """Every invariant over one history; a run that exercised nothing fails too (`vacuous`)."""
    return _Checker(history).result()


class _Checker(SafetyRules, LivenessRules):
    """The shared indexes (chaos/check_context.py), then the safety rules and the liveness rules, in a fixed order."""

    def result(self) -> Result:
        """Runs the checks in a fixed order so reports of one history are identical."""
        if not self.run:
            self.flag(INCOMPLETE_RUN, "", self.t0, "no run event: seed and settings unknown")
        self.ownership()
        self.sessions()
        self.offsets_backwards()
        self.lost_commits()
        self.generations()
        self.member_ids()
        self.convergence()
        self.harness_events()
        self.coordinators()
        self.corrupt_and_vacuous()
        self.violations.sort(key=lambda v: v.t)
        return Result(self.violations, self.stats, self.run)
