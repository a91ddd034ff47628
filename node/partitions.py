"""One coordinator partition as this node serves it: follower, loading leader, or serving leader.

The replica (raft/partition.py) holds the *committed* store, applied on pysyncobj's tick thread. While
this node leads the partition and its barrier is committed, a *working* `GroupCoordinator` — restored
from the committed state, with fresh session deadlines (`load()`) — answers requests on the event loop.
Its records are proposed in batches stamped with the leader's term; replies are held until every batch
proposed before them has committed (pysyncobj reports commits in log order), so a client never hears of a
change that could still be lost.

Group commit: the records of calls that arrive while `MAX_INFLIGHT_ENTRIES` entries are already being
replicated are queued and proposed together as one entry when one commits, so the per-entry cost (encoding,
encryption, the sends, three applies, the callback hop to the loop) is paid per batch rather than per call
under load, while a lone call is proposed on the next loop turn. A call's records always stay in one entry.

Every reply waits for this leader's lease (`PartitionReplica.has_lease`, docs/ARCHITECTURE.md): a leader cut off
from the others stops answering before another can have been elected.

Leadership is polled from the event loop (`poll()`, every few ms by the node): on gaining it the node
proposes its barrier (COORDINATOR_LOAD_IN_PROGRESS until it commits); on losing it, or on any failed
proposal, it drops the working core and answers every parked or uncommitted request with
COORDINATOR_NOT_AVAILABLE at once, so clients rediscover the new coordinator.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any

import msgpack
from google.protobuf.message import Message
from pysyncobj import FAIL_REASON

from groupcoord.base.logfields import fields
from groupcoord.coordinator import Clock, CoordinatorResult, CoreCallFailed, GroupConfig, GroupCoordinator
from groupcoord.node.responses import error_response
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.raft.digest import proposal
from groupcoord.raft.entries import BARRIER, CLUSTER_ID, DIGEST, RECORDS, encode_entry
from groupcoord.raft.partition import PartitionReplica

if TYPE_CHECKING:
    from groupcoord.node.metrics import PartitionObserver

log = logging.getLogger(__name__)

Token = int

# Entries a leader has proposed and not yet seen committed, per partition; later calls wait and are merged.
# One, not more: the nodes are CPU-bound under load, and every entry costs the same however few records it holds.
MAX_INFLIGHT_ENTRIES = 1
# A merged entry takes no more calls once it holds this many records (one call's records are never split).
MAX_BATCH_RECORDS = 2048
# How often replies held for want of a leader lease check whether it has been renewed (a heartbeat period is 50 ms).
LEASE_RETRY_S = 0.005
# pysyncobj's FAIL_REASON codes by the name a failed proposal is counted under (`queue_full`, `not_leader`, ...).
FAIL_REASONS: dict[int, str] = {
    code: name.lower() for name, code in vars(FAIL_REASON).items() if name.isupper() and code
}
# A barrier or batch that committed but did not take effect (a batch below the partition's fence).
NOT_APPLIED = "not_applied"
# Batches proposed and not yet committed when this node stopped leading: their outcome is unknown here.
ABANDONED = "abandoned"
PROPOSAL_FAILURES = (*FAIL_REASONS.values(), NOT_APPLIED, ABANDONED)


def failure_reason(error: Any) -> str:
    """The label of a proposal that failed with pysyncobj `error` (0: it committed but did not take effect)."""
    if not error:
        return NOT_APPLIED
    return FAIL_REASONS.get(error, str(error))


def _uuid4() -> str:
    """New member and topic ids: the core takes its id source from its host, random here, sequential in tests."""
    return str(uuid.uuid4())


class Role(enum.Enum):
    FOLLOWER = "follower"
    LOADING = "loading"
    LEADER = "leader"


@dataclass(slots=True)
class _Batch:
    """A proposed batch and the replies that wait for it."""

    seq: int
    records: list[r.Record]
    replies: list[tuple[Hashable, Message]] = field(default_factory=list)
    proposed: float = 0.0  # perf_counter() at proposal, with an observer only


class PartitionHost:
    def __init__(
        self,
        replica: PartitionReplica,
        group_config: GroupConfig,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
        new_uuid: Callable[[], str] = _uuid4,
        on_commit: Callable[[list[r.Record]], None] | None = None,
        observer: PartitionObserver | None = None,
    ) -> None:
        self.replica = replica
        self._on_commit = on_commit
        self._observer = observer
        self.partition_id = replica.partition_id
        self.role = Role.FOLLOWER
        self.term = 0
        self.core: GroupCoordinator | None = None
        self._group_config = group_config
        self._clock = clock
        self._loop = loop
        self._new_uuid = new_uuid
        self._tokens = itertools.count(1)
        self._seq = itertools.count(1)
        self._waiting: dict[Hashable, tuple[Message, asyncio.Future[Message]]] = {}
        self._inflight: deque[_Batch] = deque()
        # Batches not proposed yet, oldest first; only the last one still takes more records.
        self._queued: deque[_Batch] = deque()
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        # Replies held until this leader's lease is renewed (`_deliver`), and the retry that releases them.
        self._unleased: list[tuple[Hashable, Message]] = []
        self._lease_retry: asyncio.TimerHandle | None = None
        self._digest_timer: asyncio.TimerHandle | None = None
        self._report_role()

    # -- leadership -----------------------------------------------------------------------------------

    def poll(self) -> None:
        """Follows the replica's Raft role; called periodically on the event loop."""
        leading, term = self.replica.is_leader(), self.replica.term()
        if self.role is not Role.FOLLOWER and (not leading or term != self.term):
            self.step_down("leadership lost")
        if leading and self.role is Role.FOLLOWER:
            self.role, self.term = Role.LOADING, term
            log.info("partition.loading", extra=fields(partition=self.partition_id, term=term))
            self._report_role()
            entry = encode_entry(BARRIER, term, self.replica.node_id, msgpack.packb(self._clock.wall_ms()))
            self.replica.apply_entry(entry, callback=self._threadsafe(self._on_barrier, term))

    def _on_barrier(self, term: int, result: Any, error: Any) -> None:
        if self.role is not Role.LOADING or term != self.term:
            return
        if error != 0 or result is not True:
            self._proposal_failed(failure_reason(error))
            self.step_down(f"barrier failed: {error}")
            return
        store = self.replica.copy_store()
        self.core = GroupCoordinator(self._group_config, self._clock, new_uuid=self._new_uuid, store=store)
        self.role = Role.LEADER
        self._report_role()
        self._rearm()
        self._schedule_digest()
        log.info("partition.serving", extra=fields(partition=self.partition_id, term=term))
        if self.partition_id == 0 and self.replica.cluster_id is None:
            # The cluster's identity, minted once: the first such entry applied wins (raft/partition.py).
            cluster_id = uuid.uuid4().hex
            self.replica.apply_entry(encode_entry(CLUSTER_ID, term, self.replica.node_id, cluster_id.encode()))

    def _schedule_digest(self) -> None:
        interval = self.replica.digest_interval_s
        if interval > 0:
            self._digest_timer = self._loop.call_later(interval, self._propose_digest)

    def _propose_digest(self) -> None:
        """A cross-replica state check (raft/digest.py), carrying this replica's digest at the previous one."""
        self._digest_timer = None
        if self.role is not Role.LEADER:
            return
        payload = proposal(self.replica.digests.latest())
        self.replica.apply_entry(encode_entry(DIGEST, self.term, self.replica.node_id, payload))
        self._schedule_digest()

    def step_down(self, why: str) -> None:
        log.info("partition.unloaded", extra=fields(partition=self.partition_id, term=self.term, why=why))
        if self.core is not None:
            # Its timers close over it: unloaded, the core and its copy of the state are freed as soon as dropped,
            # even frozen by the collector (node/server.py, `_freeze_survivors`). Its parked calls are answered below.
            self.core.unload()
        self.role, self.core = Role.FOLLOWER, None
        self._report_role()
        if self._inflight:
            self._proposal_failed(ABANDONED, len(self._inflight))
        self._inflight.clear()
        self._queued.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_deadline = None, None
        if self._lease_retry is not None:
            self._lease_retry.cancel()
        self._unleased, self._lease_retry = [], None
        if self._digest_timer is not None:
            self._digest_timer.cancel()
            self._digest_timer = None
        waiting, self._waiting = self._waiting, {}
        for request, future in waiting.values():
            if not future.done():
                future.set_result(error_response(request, Errors.COORDINATOR_NOT_AVAILABLE))

    def _report_role(self) -> None:
        if self._observer is not None:
            self._observer.on_role(self.partition_id, self.role)

    def _proposal_failed(self, reason: str, amount: int = 1) -> None:
        if self._observer is not None:
            self._observer.on_proposal_failed(reason, amount)

    def _threadsafe(self, fn: Callable[..., None], *bound: Any) -> Callable[[Any, Any], None]:
        """A pysyncobj callback (tick thread) that runs `fn` on the event loop."""

        def callback(result: Any, error: Any) -> None:
            try:
                # One tuple: mypy 1.13 cannot match `*bound` then more arguments to call_soon_threadsafe's *Ts.
                self._loop.call_soon_threadsafe(fn, *(*bound, result, error))
            except RuntimeError:
                log.debug("partition.callback_after_loop_closed", extra=fields(partition=self.partition_id))

        return callback

    # -- calls ----------------------------------------------------------------------------------------

    async def call(self, request: Message, invoke: Callable[[GroupCoordinator, Token], CoordinatorResult]) -> Message:
        """Runs one request on the working core; not leading → COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS."""
        if self.role is not Role.LEADER or self.core is None:
            code = (
                Errors.COORDINATOR_LOAD_IN_PROGRESS if self.role is Role.LOADING else Errors.COORDINATOR_NOT_AVAILABLE
            )
            return error_response(request, code)
        token = next(self._tokens)
        future: asyncio.Future[Message] = self._loop.create_future()
        self._waiting[token] = (request, future)
        try:
            self._run(lambda core: invoke(core, token))
            return await future
        finally:
            self._waiting.pop(token, None)

    def _run(self, invoke: Callable[[GroupCoordinator], CoordinatorResult]) -> None:
        core = self.core
        assert core is not None
        failure: CoreCallFailed | None = None
        try:
            result = invoke(core)
        except CoreCallFailed as exc:
            failure, result = exc, exc.result
        self._rearm()
        self._propose(result.records, result.replies)
        if failure is not None:
            raise failure.__cause__ or failure

    def _propose(self, records: list[r.Record], replies: list[tuple[Hashable, Message]]) -> None:
        if records:
            last = self._queued[-1] if self._queued else None
            if last is None or len(last.records) + len(records) > MAX_BATCH_RECORDS:
                last = _Batch(next(self._seq), [], [])
                self._queued.append(last)
            last.records.extend(records)
            last.replies.extend(replies)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        elif self._queued:
            # Replies read state that unproposed or uncommitted batches wrote: they wait for those batches.
            self._queued[-1].replies.extend(replies)
        elif self._inflight:
            self._inflight[-1].replies.extend(replies)
        else:
            self._deliver(replies)

    def _flush(self) -> None:
        """Proposes queued batches while fewer than MAX_INFLIGHT_ENTRIES are being replicated."""
        self._flush_scheduled = False
        if self.role is not Role.LEADER:
            return
        while self._queued and len(self._inflight) < MAX_INFLIGHT_ENTRIES:
            batch = self._queued.popleft()
            if self._observer is not None:
                self._observer.on_batch(len(batch.records))
                batch.proposed = perf_counter()
            self._inflight.append(batch)
            entry = encode_entry(RECORDS, self.term, self.replica.node_id, r.encode_batch(batch.records))
            self.replica.apply_entry(entry, callback=self._threadsafe(self._on_committed, self.term, batch.seq))

    def _on_committed(self, term: int, seq: int, result: Any, error: Any) -> None:
        if term != self.term or self.role is not Role.LEADER:
            return
        if error != 0 or result is not True:
            # Counted here under its own reason; step_down counts the batches still in flight after it as abandoned.
            self._inflight = deque(b for b in self._inflight if b.seq != seq)
            self._proposal_failed(failure_reason(error))
            self.step_down(f"batch {seq} not applied: error {error}, result {result}")
            return
        while self._inflight and self._inflight[0].seq <= seq:
            batch = self._inflight.popleft()
            if self._on_commit is not None:
                self._on_commit(batch.records)
            if self._observer is not None:
                self._observer.on_commit_latency(perf_counter() - batch.proposed)
            self._deliver(batch.replies)
        if self._queued and not self._flush_scheduled:
            self._flush()

    def _deliver(self, replies: list[tuple[Hashable, Message]]) -> None:
        """Answers, but only within this leader's lease: a leader cut off from the others may already have been
        replaced, and its answers (a stale offset, a heartbeat accepted) would then contradict the new one's.
        Without a lease the replies wait for the next acknowledged heartbeat, or for the step-down that answers
        them COORDINATOR_NOT_AVAILABLE."""
        if not replies:
            return
        if self._unleased or not self.replica.has_lease():
            self._unleased.extend(replies)
            if self._lease_retry is None:
                self._lease_retry = self._loop.call_later(LEASE_RETRY_S, self._release_unleased)
            return
        self._answer(replies)

    def _release_unleased(self) -> None:
        self._lease_retry = None
        if self.role is not Role.LEADER:
            return
        if not self.replica.has_lease():
            self._lease_retry = self._loop.call_later(LEASE_RETRY_S, self._release_unleased)
            return
        replies, self._unleased = self._unleased, []
        self._answer(replies)

    def _answer(self, replies: list[tuple[Hashable, Message]]) -> None:
        for token, message in replies:
            waiting = self._waiting.pop(token, None)
            if waiting is not None and not waiting[1].done():
                waiting[1].set_result(message)

    # -- timers ---------------------------------------------------------------------------------------

    def _rearm(self) -> None:
        """One loop timer per partition at the working core's earliest deadline."""
        deadline = self.core.next_deadline() if self.core is not None else None
        if deadline == self._timer_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is not None:
            delay_s = max(deadline - self._clock.mono_ms(), 0) / 1000
            self._timer = self._loop.call_at(self._loop.time() + delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_deadline = None, None
        if self.core is None:
            return
        try:
            self._run(lambda core: core.tick())
        except Exception:
            log.exception("partition.timer_failed", extra=fields(partition=self.partition_id))
