"""The group coordinator of one coordinator partition: handlers + soft state over a `GroupStore`."""

from __future__ import annotations

from groupcoord.coordinator.admin import Admin
from groupcoord.coordinator.runtime import JOIN, PENDING, RETENTION, SESSION, SYNC
from groupcoord.coordinator.state import GroupState


class GroupCoordinator(Admin):
    """Pure: no I/O, no threads, no asyncio. Time comes from the injected clock, ids from `new_uuid`.

    Public calls (join_group, sync_group, heartbeat, leave_group, add_members, offset_commit, offset_fetch,
    offset_delete, describe_groups, list_groups, delete_groups, create_topics, delete_topics, tick, unload)
    return `Effects`.
    """

    def _fire(self, key: tuple[str, ...]) -> None:
        kind = key[0]
        if kind == RETENTION:
            self._on_retention_check()
            self.timers.arm((RETENTION,), self._mono() + self.config.offsets_retention_check_interval_ms)
            return
        group = self.store.get(key[1])
        if group is None:
            return
        if kind == SESSION:
            self._on_session_expired(group, key[2])
        elif kind == PENDING:
            self._on_pending_expired(group, key[2])
        elif kind == JOIN:
            if group.state == GroupState.PREPARING_REBALANCE:
                self._on_join_deadline(group)
        elif kind == SYNC:
            self._on_sync_deadline(group)
