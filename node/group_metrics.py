"""Group metrics read from the cores at scrape time, and the per-group counters kept from committed records.

`CoreCollector` reads the cores this node leads on their event loop (the only thread that may touch a core), so
these gauges cost nothing on the request path: the totals (groups by state, members, pending members, parked
requests) and, for at most `max_groups` groups, one set of series per group (state, members, generation, committed
offset per partition, rebalances by cause, failed rebalances). A node coordinating more groups exports those of the
`max_groups` smallest group ids, so the set stays put from one scrape to the next, and says how many it left out;
committed offsets are capped in all (`max_offsets`), a group's offsets exported whole or not at all.

`GroupCounters` counts, per group, the rebalances and failed rebalances of the records this node's coordinators
committed. A rebalance runs from its `RebalanceStarted` to the group's next Stable (`AssignmentsSynced`) or Empty
(`GenerationCompleted` without a leader); a restart after a sync timeout continues it. It *failed* when a member was
dropped for not keeping up with it (`MemberRemoved` for `join_timeout` or `sync_timeout`, or for `session_expired`
while the group was rebalancing) or it had to start over because the leader's assignment never came
(`RebalanceStarted` for `sync_timeout`); each rebalance counts once, under the first of those reasons. A group whose
members all leave (LeaveGroup) ends its rebalance Empty without a failure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from groupcoord.coordinator import GroupCoordinator
from groupcoord.coordinator.state import Group, GroupState
from groupcoord.node.config_types import DEFAULT_MAX_GROUPS, DEFAULT_MAX_OFFSETS
from groupcoord.node.logs import fields
from groupcoord.protocol import records as r

log = logging.getLogger(__name__)

# How long a scrape waits for the event loop to read the cores before leaving the core gauges out.
CORE_READ_TIMEOUT_S = 5.0
STORED_STATES = tuple(s for s in GroupState if s is not GroupState.DEAD)
# Why a rebalance failed (the module docstring): the `reason` label of groupcoord_rebalances_failed_total.
FAILURE_REASONS = (r.RemovalCause.JOIN_TIMEOUT, r.RemovalCause.SYNC_TIMEOUT, r.RemovalCause.SESSION_EXPIRED)


@dataclass(slots=True)
class _Counts:
    """One group's counters, and where its current rebalance stands."""

    causes: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    rebalancing: bool = False
    # Whether the latest rebalance already counted as failed (kept after it ends: a member dropped for a sync timeout
    # once the group is Stable is that rebalance's failure too).
    failed_latest: bool = False


class GroupCounters:
    """Per-group rebalance counts from committed records; on the event loop only, like the records' callback.

    Holds only groups that rebalanced (or failed to) while this node led them: `forget_all_but()` drops the others
    when the node stops leading a partition, and a deleted group is dropped at once."""

    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        self._groups: dict[str, _Counts] = {}
        failed = Counter(
            "rebalances_failed",
            "Rebalances that failed, by the first reason: a member dropped for not keeping up (join_timeout, "
            "sync_timeout, or session_expired while rebalancing) or a restart for want of the leader's assignment "
            "(sync_timeout)",
            ("reason",),
            namespace=namespace,
            registry=registry,
        )
        # Every reason has its series (at 0) from the start, so rate() works before the first failure.
        self._failed = {reason.value: failed.labels(reason.value) for reason in FAILURE_REASONS}
        self._handlers: dict[type, Callable[[Any], None]] = {
            r.RebalanceStarted: self._started,
            r.MemberRemoved: self._removed,
            r.GenerationCompleted: self._generation,
            r.AssignmentsSynced: self._synced,
            r.GroupDeleted: self._deleted,
        }

    def on_record(self, rec: r.Record) -> None:
        handler = self._handlers.get(type(rec))
        if handler is not None:
            handler(rec)

    def get(self, group_id: str) -> _Counts | None:
        return self._groups.get(group_id)

    def forget_all_but(self, keep: Callable[[str], bool]) -> None:
        for group_id in [g for g in self._groups if not keep(g)]:
            del self._groups[group_id]

    def _started(self, rec: r.RebalanceStarted) -> None:
        counts = self._groups.get(rec.group_id)
        if counts is None:
            counts = self._groups[rec.group_id] = _Counts()
        counts.causes[rec.cause] = counts.causes.get(rec.cause, 0) + 1
        if not counts.rebalancing:
            counts.rebalancing, counts.failed_latest = True, False
        elif rec.cause == r.RebalanceCause.SYNC_TIMEOUT:
            self._fail(counts, r.RemovalCause.SYNC_TIMEOUT)

    def _removed(self, rec: r.MemberRemoved) -> None:
        if rec.cause not in FAILURE_REASONS:
            return
        counts = self._groups.get(rec.group_id)
        if rec.cause == r.RemovalCause.SESSION_EXPIRED and (counts is None or not counts.rebalancing):
            return  # an expiry outside a rebalance starts one: its cause, not its failure
        if counts is None:  # its rebalance began under another leader
            counts = self._groups[rec.group_id] = _Counts()
        self._fail(counts, rec.cause)

    def _fail(self, counts: _Counts, reason: str) -> None:
        if not counts.failed_latest:
            counts.failed_latest = True
            counts.failed += 1
            self._failed[reason].inc()

    def _generation(self, rec: r.GenerationCompleted) -> None:
        counts = self._groups.get(rec.group_id)
        if counts is not None and not rec.leader_id:  # nobody joined: the group is Empty, its rebalance over
            counts.rebalancing = False

    def _synced(self, rec: r.AssignmentsSynced) -> None:
        counts = self._groups.get(rec.group_id)
        if counts is not None:
            counts.rebalancing = False

    def _deleted(self, rec: r.GroupDeleted) -> None:
        self._groups.pop(rec.group_id, None)


@dataclass(slots=True)
class _GroupRow:
    """What one scrape exports of one group, copied off the core on the event loop."""

    group_id: str
    state: str
    members: int
    generation: int
    offsets: list[tuple[str, int, int]] | None  # None: left out by the offsets cap
    causes: dict[str, int]
    failed: int


@dataclass(slots=True)
class _Reading:
    by_state: dict[str, int]
    members: int
    pending: int
    parked: int
    rows: list[_GroupRow]
    groups_left_out: int
    offsets_left_out: int


class CoreCollector(Collector):
    """The group gauges of the cores this node leads, computed at scrape time on the cores' event loop."""

    def __init__(
        self,
        namespace: str,
        loop: asyncio.AbstractEventLoop,
        cores: Callable[[], Iterable[GroupCoordinator]],
        counters: GroupCounters,
        max_groups: int = DEFAULT_MAX_GROUPS,
        max_offsets: int = DEFAULT_MAX_OFFSETS,
    ) -> None:
        self._ns = namespace
        self._loop = loop
        self._cores = cores
        self._counters = counters
        self._max_groups = max_groups
        self._max_offsets = max_offsets

    def describe(self) -> list[Metric]:
        return list(self._families(None))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._read_on_loop())

    def _families(self, reading: _Reading | None) -> Iterator[Metric]:
        ns = self._ns
        groups = GaugeMetricFamily(f"{ns}_groups", "Groups by state", labels=("state",))
        members = GaugeMetricFamily(f"{ns}_members", "Members of all groups")
        pending = GaugeMetricFamily(
            f"{ns}_pending_members", "Member ids handed out with MEMBER_ID_REQUIRED, not joined yet"
        )
        parked = GaugeMetricFamily(f"{ns}_parked_requests", "JoinGroup/SyncGroup requests waiting for a reply")
        state = GaugeMetricFamily(
            f"{ns}_group_state",
            "1, labelled with the group's current state (one series per group)",
            labels=("group", "state"),
        )
        group_members = GaugeMetricFamily(f"{ns}_group_members", "Members of the group", labels=("group",))
        generation = GaugeMetricFamily(f"{ns}_group_generation", "The group's generation id", labels=("group",))
        offset = GaugeMetricFamily(
            f"{ns}_group_committed_offset",
            "The group's committed offset of a topic partition",
            labels=("group", "topic", "partition"),
        )
        rebalances = CounterMetricFamily(
            f"{ns}_group_rebalances",
            "The group's rebalances started while this node coordinated it, by cause (causes seen only)",
            labels=("group", "cause"),
        )
        failed = CounterMetricFamily(
            f"{ns}_group_rebalances_failed",
            "The group's rebalances that failed while this node coordinated it (docs/OPERATIONS.md)",
            labels=("group",),
        )
        groups_left_out = GaugeMetricFamily(
            f"{ns}_groups_not_exported",
            "Groups this node coordinates that have no per-group series (over metrics_max_groups)",
        )
        offsets_left_out = GaugeMetricFamily(
            f"{ns}_group_offsets_not_exported",
            "Committed offsets of exported groups that have no series (over metrics_max_offsets)",
        )
        if reading is not None:
            for name, count in reading.by_state.items():
                groups.add_metric((name,), count)
            members.add_metric((), reading.members)
            pending.add_metric((), reading.pending)
            parked.add_metric((), reading.parked)
            for row in reading.rows:
                gid = row.group_id
                state.add_metric((gid, row.state), 1)
                group_members.add_metric((gid,), row.members)
                generation.add_metric((gid,), row.generation)
                for topic, partition, value in row.offsets or ():
                    offset.add_metric((gid, topic, str(partition)), value)
                for cause, count in row.causes.items():
                    rebalances.add_metric((gid, cause), count)
                failed.add_metric((gid,), row.failed)
            groups_left_out.add_metric((), reading.groups_left_out)
            offsets_left_out.add_metric((), reading.offsets_left_out)
        yield from (groups, members, pending, parked, state, group_members, generation, offset, rebalances, failed)
        yield from (groups_left_out, offsets_left_out)

    def _read(self) -> _Reading:
        by_state: dict[GroupState, int] = dict.fromkeys(STORED_STATES, 0)
        members = pending = parked = 0
        everyone: list[Group] = []
        for core in self._cores():
            for group in core.store.groups.values():
                by_state[group.state] += 1
                members += len(group.members)
                pending += len(group.pending_members)
            everyone.extend(core.store.groups.values())
            parked += core.parked_count()
        chosen = (
            everyone
            if len(everyone) <= self._max_groups
            else heapq.nsmallest(self._max_groups, everyone, key=lambda g: g.group_id)
        )
        rows, offsets_left_out = self._rows(chosen)
        return _Reading(
            {str(s): n for s, n in by_state.items()},
            members,
            pending,
            parked,
            rows,
            len(everyone) - len(chosen),
            offsets_left_out,
        )

    def _rows(self, groups: list[Group]) -> tuple[list[_GroupRow], int]:
        """One row per group, in group id order; offsets while the cap allows, a group's all or none."""
        rows: list[_GroupRow] = []
        room, left_out = self._max_offsets, 0
        for group in sorted(groups, key=lambda g: g.group_id):
            offsets: list[tuple[str, int, int]] | None = None
            if len(group.offsets) <= room:
                room -= len(group.offsets)
                offsets = [(topic, partition, o.offset) for (topic, partition), o in group.offsets.items()]
            else:
                left_out += len(group.offsets)
            counts = self._counters.get(group.group_id)
            rows.append(
                _GroupRow(
                    group.group_id,
                    str(group.state),
                    len(group.members),
                    group.generation_id,
                    offsets,
                    dict(counts.causes) if counts is not None else {},
                    counts.failed if counts is not None else 0,
                )
            )
        return rows, left_out

    def _read_on_loop(self) -> _Reading | None:
        """The values, or None (logged) when the loop is gone or too busy to answer in time."""
        if _running_loop() is self._loop:  # scraped from the loop itself (in-process use): read directly
            return self._read()
        future: concurrent.futures.Future[_Reading] = concurrent.futures.Future()

        def read() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self._read())
                except Exception as exc:
                    future.set_exception(exc)

        try:
            self._loop.call_soon_threadsafe(read)
            return future.result(CORE_READ_TIMEOUT_S)
        except (RuntimeError, TimeoutError) as exc:  # loop closed, or busy for too long
            future.cancel()
            log.warning("metrics.cores_unread", extra=fields(error=repr(exc)))
            return None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
