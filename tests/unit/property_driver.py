"""The driver of tests/unit/test_property.py's state machine: the simulated clients' requests, every effect
replayed into a replica and tracked, the timer driver, and the invariants checked after every step. The rules
(what the clients and admins do) are tests/unit/property_machine.py's.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant

from groupcoord.coordinator import GroupConfig, GroupCoordinator, GroupState, GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import WALL_EPOCH_MS, FakeClock, SeqIds
from tests.unit.property_model import (
    CONFIGS,
    IN_REBALANCE,
    PROTOCOL_SETS,
    REJOIN_ON,
    REPLY_TYPES,
    RT_MAX,
    S_MAX,
    STATIC,
    ClientView,
    Episode,
    Sent,
    check_derived,
    first_commit_error,
    pack,
    unpack,
)


class CoordinatorDriver(RuleBasedStateMachine):
    """One coordinator, its replica and snapshots, and the bookkeeping the invariants compare them with."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.ids = SeqIds()
        self.tokens = itertools.count(1)
        self.config = GroupConfig()
        self.core = GroupCoordinator(self.config, self.clock, new_uuid=self.ids)
        self.log: list[bytes] = []  # one encoded batch per call
        self.replica = GroupStore()
        self.snapshots: list[tuple[bytes, int]] = []  # (packed snapshot, log position)
        self.restored: GroupStore | None = None
        self.views: dict[tuple[int, str], ClientView] = {}
        self.seen_ids: list[str] = []
        self.outstanding: dict[int, Sent] = {}
        self.answered: set[int] = set()
        self.generations: dict[str, int] = {}
        self.episodes: dict[str, Episode] = {}
        self.pending_since: dict[tuple[str, str], tuple[int, int]] = {}  # -> (created, session timeout)
        self.last_refresh: dict[str, int] = {}  # heartbeat / commit requests per group
        # (group, member id) -> last request naming it, reply to it, or its creation; and its longest session.
        self.contact: dict[tuple[str, str], int] = {}
        self.session_max: dict[tuple[str, str], int] = {}
        self.reset_at = 0  # last clock jump or failover: every deadline restarts from here

    # -- plumbing ------------------------------------------------------------------------------------

    @initialize(config=CONFIGS)
    def setup(self, config: GroupConfig) -> None:
        self.config = config
        self.core = GroupCoordinator(config, self.clock, new_uuid=self.ids)

    def view(self, client: int, group: str) -> ClientView:
        return self.views.setdefault((client, group), ClientView())

    def call(self, kind: str, client: int, group: str, method: Any, req: Any) -> Any:
        token = next(self.tokens)
        member_id = getattr(req, "member_id", "")
        self.outstanding[token] = Sent(kind, client, group, member_id, self.clock.now)
        leaving = [m.member_id for m in req.members] if kind == "leave" else []
        for mid in [member_id, *leaving]:
            if mid:
                self.contact[(group, mid)] = self.clock.now
        eff = method(req, token)
        assert eff.token == token
        self.absorb(eff)
        if token in self.outstanding:
            assert kind in ("join", "sync"), f"{kind} request parked"
            assert eff.response is None
        return eff.response

    def absorb(self, eff: Any) -> None:
        """Records -> log + replica + bookkeeping; replies -> exactly-once check + client state."""
        now = self.clock.now
        records = list(eff.records)
        batch = r.encode_batch(records)
        decoded = r.decode_batch(batch)
        assert decoded == records
        self.log.append(batch)
        for rec in decoded:
            assert self.replica.apply(rec), f"replay of {rec!r} changed nothing"
            if self.restored is not None:
                assert self.restored.apply(rec), f"replay after restore of {rec!r} changed nothing"
            self.track(rec, now)
        for token, message in eff.replies:
            assert token not in self.answered, f"token {token} answered twice"
            assert token in self.outstanding, f"reply for unknown token {token}"
            sent = self.outstanding.pop(token)
            self.answered.add(token)
            assert isinstance(message, REPLY_TYPES[sent.kind]), (sent.kind, type(message))
            if sent.kind == "sync" and message.error_code == Errors.NONE:
                member = self.core.store.groups[sent.group].members[sent.member_id]
                assert message.assignment == member.assignment
            for mid in (sent.member_id, getattr(message, "member_id", "") if sent.kind == "join" else ""):
                if mid:
                    self.contact[(sent.group, mid)] = now
            self.on_reply(sent, message)

    def track(self, rec: r.Record, now: int) -> None:
        assert isinstance(rec, r.GroupRecord), rec  # the machine creates no topic
        gid = rec.group_id
        replayed = self.replica.get(gid)  # the group right after this record
        rt = replayed.rebalance_timeout_ms if replayed is not None else 0
        if isinstance(rec, r.RebalanceStarted):
            self.episodes[gid] = Episode(GroupState.PREPARING_REBALANCE, now, rt, rt, now + rt)
        elif isinstance(rec, r.GenerationCompleted):
            if rec.leader_id:  # the group had members: CompletingRebalance, else Empty
                self.episodes[gid] = Episode(GroupState.COMPLETING_REBALANCE, now, rt, rt)
            else:
                self.episodes.pop(gid, None)
        elif isinstance(rec, (r.AssignmentsSynced, r.GroupDeleted)):
            self.episodes.pop(gid, None)
        if gid in self.episodes:
            self.episodes[gid].max_rebalance_ms = max(self.episodes[gid].max_rebalance_ms, rt)
        if isinstance(rec, r.GroupDeleted):
            self.generations.pop(gid, None)
            self.pending_since = {k: v for k, v in self.pending_since.items() if k[0] != gid}
        elif isinstance(rec, r.PendingMemberAdded):
            assert rec.time_ms == WALL_EPOCH_MS + now
            self.pending_since[(gid, rec.member_id)] = (now, rec.session_timeout_ms)
        elif isinstance(rec, (r.PendingMemberRemoved, r.MemberAdded)):
            self.pending_since.pop((gid, rec.member_id), None)
        if isinstance(rec, (r.MemberAdded, r.MemberUpdated, r.StaticMemberReplaced)):
            key = (gid, rec.new_member_id if isinstance(rec, r.StaticMemberReplaced) else rec.member_id)
            if not isinstance(rec, r.MemberUpdated):
                self.contact[key] = now
            self.session_max[key] = max(self.session_max.get(key, 0), rec.session_timeout_ms)

    def on_reply(self, sent: Sent, message: Any) -> None:
        if sent.kind not in ("join", "sync", "heartbeat", "commit"):
            return
        v = self.view(sent.client, sent.group)
        if sent.kind == "join":
            code = message.error_code
            if message.member_id and message.member_id not in self.seen_ids:
                self.seen_ids.append(message.member_id)
            if code == Errors.NONE:
                v.member_id, v.generation = message.member_id, message.generation_id
                v.leader = message.leader == message.member_id
                v.members = [m.member_id for m in message.members]
                if message.members:
                    assert message.member_id in v.members
                v.needs_join, v.needs_sync = False, True  # a skip_assignment leader syncs too (empty)
            elif code == Errors.MEMBER_ID_REQUIRED:
                assert message.member_id
                v.member_id, v.needs_join = message.member_id, True
            elif code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                v.member_id, v.generation, v.needs_join = "", -1, True
            else:
                v.needs_join = True
            return
        code = message.error_code if sent.kind != "commit" else first_commit_error(message)
        if code == Errors.NONE and sent.kind == "sync":
            v.needs_sync = False
        elif code in REJOIN_ON:
            v.needs_join, v.needs_sync = True, False
            if code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                v.member_id, v.generation = "", -1

    # -- requests ------------------------------------------------------------------------------------

    def join_request(self, client: int, group: str, member_id: str, reason: int, v: ClientView) -> Any:
        return pb.JoinGroupRequest(
            group_id=group,
            session_timeout_ms=v.session_ms,
            rebalance_timeout_ms=v.rebalance_ms,
            member_id=member_id,
            group_instance_id=STATIC.get(client, ""),
            protocol_type="consumer",
            protocols=[pb.JoinGroupRequest.Protocol(name=n, metadata=m) for n, m in PROTOCOL_SETS[v.protocols]],
            reason=f"client {client} joins",
            join_reason=reason,  # type: ignore[arg-type]  # an int of JoinReason's, as the rules draw it
            client_id=f"c{client}",
        )

    def join(self, client: int, group: str, member_id: str | None = None, reason: int = 0) -> None:
        v = self.view(client, group)
        req = self.join_request(client, group, v.member_id if member_id is None else member_id, reason, v)
        self.call("join", client, group, self.core.join_group, req)

    def sync(self, client: int, group: str, mode: str = "ok") -> None:
        v = self.view(client, group)
        assignments = []
        if v.leader:
            assignments = [
                pb.SyncGroupRequest.Assignment(member_id=m, assignment=f"{m}@{v.generation}".encode())
                for m in v.members
            ]
        req = pb.SyncGroupRequest(
            group_id=group,
            generation_id=v.generation - (mode == "stale_gen"),
            member_id=self.stale_id(v) if mode == "stale_id" else v.member_id,
            group_instance_id="" if mode == "no_instance" else STATIC.get(client, ""),
            assignments=assignments,
        )
        self.call("sync", client, group, self.core.sync_group, req)

    def heartbeat(self, client: int, group: str, mode: str = "ok") -> None:
        v = self.view(client, group)
        self.last_refresh[group] = self.clock.now
        req = pb.HeartbeatRequest(
            group_id=group,
            generation_id=v.generation - (mode == "stale_gen"),
            member_id=self.stale_id(v) if mode == "stale_id" else v.member_id,
            group_instance_id="" if mode == "no_instance" else STATIC.get(client, ""),
        )
        resp = self.call("heartbeat", client, group, self.core.heartbeat, req)
        stored = self.core.store.get(group)
        if resp.error_code == Errors.NONE:
            assert stored is not None and stored.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            assert req.member_id in stored.members and req.generation_id == stored.generation_id
        elif resp.error_code == Errors.REBALANCE_IN_PROGRESS:
            assert stored is not None and stored.state == GroupState.PREPARING_REBALANCE

    def stale_id(self, v: ClientView) -> str:
        others = [m for m in self.seen_ids if m != v.member_id]
        return others[len(self.answered) % len(others)] if others else "nobody"

    # -- rules: clients following the protocol -------------------------------------------------------

    # -- time ----------------------------------------------------------------------------------------

    def advance_to(self, target: int) -> None:
        """A timer driver that ticks at every deadline on the way (no late timers)."""
        same_time = 0
        while (deadline := self.core.next_deadline()) is not None and deadline <= target:
            same_time = same_time + 1 if deadline <= self.clock.now else 0
            assert same_time < 100, f"timers keep re-arming at {deadline}"
            self.clock.now = max(self.clock.now, deadline)
            self.absorb(self.core.tick())
            self.check_all()
        self.clock.now = target
        self.absorb(self.core.tick())

    # -- invariants ----------------------------------------------------------------------------------

    @invariant()
    def checks(self) -> None:
        self.check_all()

    def check_all(self) -> None:
        live = self.core.store.snapshot()
        # (a) replay of every record so far equals the live state.
        assert self.replica.snapshot() == live
        # The cached encoding (digests, compaction snapshots) is the snapshot's, byte for byte, after every record.
        assert self.replica.packed_snapshot() == pack(self.replica.snapshot())
        # (b) restore(snapshot) + replay of the rest equals the live state.
        if self.restored is not None:
            assert unpack(pack(self.restored.snapshot())) == unpack(pack(live))
        for store in (self.core.store, self.replica, self.restored):
            if store is not None:
                check_derived(store)
        self.check_generations()
        self.check_liveness()
        self.check_pending()
        self.check_sessions()
        self.check_parked()

    def check_generations(self) -> None:
        """(c) generations never decrease while a group exists."""
        for gid, group in self.core.store.groups.items():
            assert group.generation_id >= self.generations.get(gid, 0), (gid, group.generation_id)
            self.generations[gid] = group.generation_id
        for gid in list(self.generations):
            if gid not in self.core.store.groups:
                del self.generations[gid]

    def check_liveness(self) -> None:
        """(d) The bound, from the coordinator's timers (every tick runs at or before each deadline):

        CompletingRebalance: the sync deadline is armed once, when the join phase completes (or on load),
        at + the group's rebalance timeout; it either sees Stable or starts a new rebalance. Bound: the
        episode's largest rebalance timeout.

        PreparingRebalance: the join deadline fires one rebalance timeout (the group's, when the rebalance
        started) after the start; the initial delay and its extensions stay within it. If any member has
        rejoined, the phase completes then (checked per parked JoinGroup in `check_parked`). If only absent
        static members are left, it re-arms every rebalance timeout until their sessions expire; a session
        runs at most S_MAX from the last heartbeat / commit (those refresh it even during the rebalance), so
        the phase ends by max(start, last heartbeat or commit to the group) + S_MAX + RT_MAX. A failover or a
        late tick restarts deadlines from then: they reset the start.
        """
        now = self.clock.now
        for gid, group in self.core.store.groups.items():
            episode = self.episodes.get(gid)
            if group.state not in IN_REBALANCE:
                assert episode is None, (gid, group.state, episode)
                continue
            assert episode is not None and episode.state == group.state, (gid, group.state, episode)
            if group.state == GroupState.COMPLETING_REBALANCE:
                start, bound = max(episode.since, self.reset_at), episode.max_rebalance_ms
            else:
                start = max(episode.since, self.reset_at, self.last_refresh.get(gid, 0))
                bound = S_MAX + RT_MAX
            assert now - start <= bound, f"{gid} in {group.state} since {episode.since} (start {start}), now {now}"

    def check_pending(self) -> None:
        """(e) bounded pending set; each pending id goes within its session timeout unless it joined."""
        now = self.clock.now
        for gid, group in self.core.store.groups.items():
            assert len(group.pending_members) <= self.config.max_pending_members
            for member_id, session in group.pending_members.items():
                created, timeout = self.pending_since[(gid, member_id)]
                assert timeout == session
                assert now < created + timeout, f"pending {member_id} of {gid} outlived its session timeout"

    def check_sessions(self) -> None:
        """(e) A member the coordinator has not heard from (no request naming it, no reply to a parked
        request of it) for a session timeout is gone, unless a request of its client is parked right now."""
        now = self.clock.now
        busy = {(f"c{s.client}", s.group) for s in self.outstanding.values()}
        for gid, group in self.core.store.groups.items():
            for mid, member in group.members.items():
                if (member.client_id, gid) in busy:
                    continue
                last = max(self.contact[(gid, mid)], self.reset_at)
                timeout = self.session_max[(gid, mid)]
                assert now - last < timeout, f"{mid} of {gid}: no contact since {last}, now {now}, session {timeout}"

    def check_parked(self) -> None:
        """(f) parked requests: only joins in PreparingRebalance and syncs in CompletingRebalance (whose
        bound `check_liveness` checks). A JoinGroup parked before the join phase's first deadline is
        answered by it (initial delay included); one parked later, by the next deadline, at most the
        group's largest rebalance timeout after it parked."""
        now = self.clock.now
        assert self.core.parked_count() == len(self.outstanding)
        for sent in self.outstanding.values():
            group = self.core.store.get(sent.group)
            assert group is not None, sent
            wanted = GroupState.PREPARING_REBALANCE if sent.kind == "join" else GroupState.COMPLETING_REBALANCE
            assert group.state == wanted, (sent, group.state)
            if sent.kind == "join":
                episode = self.episodes[sent.group]
                first = episode.first_deadline
                due = first if sent.at < first else sent.at + episode.max_rebalance_ms
                assert now < due, f"join of {sent} parked past {due} (episode {episode}), now {now}"

    def teardown(self) -> None:
        # Full replay from scratch of the encoded log, and restore + rest for every snapshot taken.
        live = unpack(pack(self.core.store.snapshot()))
        fresh = GroupStore()
        for batch in self.log:
            for rec in r.decode_batch(batch):
                assert fresh.apply(rec)
        assert unpack(pack(fresh.snapshot())) == live
        for packed, position in self.snapshots:
            store = GroupStore.restore(unpack(packed))
            for batch in self.log[position:]:
                for rec in r.decode_batch(batch):
                    assert store.apply(rec)
            assert unpack(pack(store.snapshot())) == live
