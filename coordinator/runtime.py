"""What the collaborators of one shard share: settings, the injected clock and id source, the hard state (the
`GroupStore`) and the leader-local soft state (parked requests, timers, the initial-delay window, join buckets).

Soft state is never replicated: `GroupCoordinator.load()` rebuilds it from the hard state with fresh deadlines, as
a new leader must.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from groupcoord.coordinator.config import GroupConfig
from groupcoord.coordinator.limits import TokenBucket
from groupcoord.coordinator.result import CoordinatorResult, Token
from groupcoord.coordinator.state import GroupStore
from groupcoord.coordinator.timers import JoinDeadline, LoadedSessions, SyncDeadline, Timers
from groupcoord.protocol import records as r


class Clock(Protocol):
    """Wall time goes into records (retention, events); monotonic time drives timers."""

    def wall_ms(self) -> int: ...

    def mono_ms(self) -> int: ...


@dataclass(slots=True)
class GroupSoft:
    """Leader-local state of one group."""

    join_waiters: dict[str, Token] = field(default_factory=dict)
    sync_waiters: dict[str, Token] = field(default_factory=dict)
    # Members answered at the end of the join phase that have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    # Not None while the first rebalance of an Empty group waits out group.initial.rebalance.delay.ms.
    initial_remaining_ms: int | None = None
    new_member_added: bool = False
    # JoinGroup admission (`GroupConfig.join_rate_per_s`); created at the group's first counted JoinGroup.
    join_bucket: TokenBucket | None = None


class Runtime:
    """Time and ids come only from what the node injects (its clock and uuid4; tests a fake clock and sequential
    ids): the core has no default for either, so a record never carries a value a replay could not repeat."""

    def __init__(self, config: GroupConfig, clock: Clock, new_uuid: Callable[[], str], store: GroupStore) -> None:
        self.config = config
        self.clock = clock
        self.new_uuid = new_uuid
        self.store = store
        self.timers = Timers()
        self.soft: dict[str, GroupSoft] = {}
        # Per group, the members whose session is still the one `load()` started, and its deadline (monotonic ms).
        self.loaded_sessions: dict[str, dict[str, int]] = {}
        self.unloaded = False

    def emit(self, out: CoordinatorResult, rec: r.Record) -> bool:
        """Applies a record to the store and adds it to `out` for replication; False if it changed nothing.

        A deleted group's soft state and phase timers go with it here, whoever deletes it; the soft consequences of
        member records are the rebalance's (`Rebalance.emit`), the only writer of those."""
        if not self.store.apply(rec):
            return False
        out.records.append(rec)
        if isinstance(rec, r.GroupDeleted):
            self.timers.cancel(JoinDeadline(rec.group_id))
            self.timers.cancel(SyncDeadline(rec.group_id))
            self.timers.cancel(LoadedSessions(rec.group_id))
            self.soft.pop(rec.group_id, None)
            self.loaded_sessions.pop(rec.group_id, None)
        return True

    def soft_for(self, group_id: str) -> GroupSoft:
        soft = self.soft.get(group_id)
        if soft is None:
            soft = self.soft[group_id] = GroupSoft()
        return soft

    def mono(self) -> int:
        return self.clock.mono_ms()

    def wall(self) -> int:
        return self.clock.wall_ms()

    def parked_count(self) -> int:
        return sum(len(s.join_waiters) + len(s.sync_waiters) for s in self.soft.values())
