"""Property-based test of the group coordinator (issue 2 acceptance).

A hypothesis state machine drives one `GroupCoordinator` with random request / time sequences over three
groups and six simulated clients (three static, three dynamic). The clients mostly follow the classic
protocol (join, adopt MEMBER_ID_REQUIRED ids, sync with the leader's assignment, heartbeat, commit) and
sometimes misbehave (stale generation, stale or foreign member ids, missing instance id, changed or
inconsistent protocols, lazy clients that never sync, static restarts), while admins add members, remove
them by instance id and delete groups, time passes (ticking at each deadline, or one late tick), a
snapshot is taken, or the partition fails over (unload + a new coordinator over the restored store).

Checked after every step (and at every tick inside a step):
  (a) replay: every call's records go through `encode_batch` / `decode_batch` into a replica `GroupStore`;
      each record changes the replica as it changed the live store, and the snapshots are equal. At
      teardown the whole log is replayed again into a fresh store.
  (b) snapshots: at random points a snapshot (round-tripped through msgpack) is kept; restore(snapshot) +
      the records after it equals the live store, every step and at teardown (for every snapshot).
  (c) a group's generation never decreases while the group exists.
  (d) liveness: no group stays in PreparingRebalance / CompletingRebalance past a bound derived from the
      configuration (`check_liveness`), no JoinGroup stays parked past its join deadline (`check_parked`),
      and after a long quiet period every group is Empty with nothing parked (`quiet`).
  (e) pending members: at most `max_pending_members` per group, and each one is gone within its session
      timeout unless it joined; every member the coordinator has not heard from for a session timeout is
      gone (`check_sessions`).
  (f) parked requests: every token is answered exactly once, with the right message type; only JoinGroup
      and SyncGroup ever park; parked joins exist only in PreparingRebalance and parked syncs only in
      CompletingRebalance; the coordinator's parked count equals ours; an unload answers all of them.
  (g) state shape (`check_derived`, live and replayed): Empty has no members; CompletingRebalance and Stable
      have members and the protocol the vote picks; leader, static mapping and protocol counts agree.
  (h) responses agree with the state: heartbeat NONE / REBALANCE_IN_PROGRESS, committed, fetched and
      deleted offsets, simple commits on Empty groups, batch leave results, SyncGroup assignments, DescribeGroups
      and ListGroups; a static restart of a Stable group with unchanged protocols replaces the member id
      without a rebalance.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgpack
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from groupcoord.coordinator import GroupConfig, GroupCoordinator, GroupState, GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import WALL_EPOCH_MS, FakeClock, SeqIds
from tests.unit.profiles import examples

GROUPS = ("g0", "g1", "g2")
# Clients 0-2 are static (instance ids i0..i2), 3-5 dynamic.
CLIENTS = 6
STATIC = {0: "i0", 1: "i1", 2: "i2"}
PROTOCOL_SETS = (
    (("range", b"r1"), ("roundrobin", b"")),
    (("roundrobin", b"rr2"), ("range", b"r2")),  # compatible with every set but the last
    (("range", b"r3"),),
    (("sticky", b"s"),),
)
VALID_SESSIONS = (6_000, 10_000, 15_000)
REBALANCE_TIMEOUTS = (0, 5_000, 12_000, 20_000)  # 0 means "same as the session timeout"
S_MAX = max(VALID_SESSIONS)
RT_MAX = max(*REBALANCE_TIMEOUTS, S_MAX)
METADATA_LIMIT = 16
RETENTION_MS = 30_000
RETENTION_CHECK_MS = 10_000
# Long enough for every group to finish any rebalance chain, every session to expire and retention to run.
QUIET_MS = 6 * (S_MAX + RT_MAX) + RETENTION_MS + 2 * RETENTION_CHECK_MS

JoinReason = pb.JoinGroupRequest.JoinReason
IN_REBALANCE = (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
REJOIN_ON = {
    Errors.REBALANCE_IN_PROGRESS,
    Errors.ILLEGAL_GENERATION,
    Errors.UNKNOWN_MEMBER_ID,
    Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.FENCED_INSTANCE_ID,
}
REPLY_TYPES = {
    "join": pb.JoinGroupResponse,
    "sync": pb.SyncGroupResponse,
    "heartbeat": pb.HeartbeatResponse,
    "leave": pb.LeaveGroupResponse,
    "add": pb.AddMembersToGroupResponse,
    "commit": pb.OffsetCommitResponse,
    "fetch": pb.OffsetFetchResponse,
    "delete_offsets": pb.OffsetDeleteResponse,
    "describe": pb.DescribeGroupsResponse,
    "list": pb.ListGroupsResponse,
    "delete": pb.DeleteGroupsResponse,
}


@dataclass
class ClientView:
    """What one simulated client believes about its membership of one group."""

    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    protocols: int = 0
    session_ms: int = 10_000
    rebalance_ms: int = 0
    needs_join: bool = True
    needs_sync: bool = False


@dataclass
class Sent:
    kind: str
    client: int
    group: str
    member_id: str = ""
    at: int = 0


@dataclass
class Episode:
    """One continuous stay of a group in PreparingRebalance or CompletingRebalance."""

    state: GroupState
    since: int
    # The group's rebalance timeout when the episode began, and the largest it has had since.
    rebalance_ms: int
    max_rebalance_ms: int
    # PreparingRebalance: when the join phase's first deadline falls (start + rebalance timeout).
    first_deadline: int = 0


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


CONFIGS = st.builds(
    GroupConfig,
    max_size=st.sampled_from([None, None, 2, 3]),
    initial_rebalance_delay_ms=st.sampled_from([0, 3_000]),
    offset_metadata_max_bytes=st.just(METADATA_LIMIT),
    offsets_retention_ms=st.just(RETENTION_MS),
    offsets_retention_check_interval_ms=st.just(RETENTION_CHECK_MS),
    max_pending_members=st.sampled_from([1, 2, 5, 10_000]),
)

clients = st.integers(0, CLIENTS - 1)
# Disruptive rules (failover, delete, quiet, admin) run on about a quarter of the steps that pick them.
RARELY = st.sampled_from([True, True, True, False])
groups = st.sampled_from(GROUPS)
modes = st.sampled_from(["ok"] * 6 + ["stale_gen", "stale_id", "no_instance"])


class CoordinatorMachine(RuleBasedStateMachine):
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
        code = message.error_code if sent.kind != "commit" else _first_commit_error(message)
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
            join_reason=reason,
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

    @rule(client=clients, group=groups, reason=st.sampled_from([0, 0, 0, 1, 2, 3]))
    def act(self, client: int, group: str, reason: int, lazy: bool = False) -> None:
        """The client does what a real consumer would do next (a lazy one heartbeats instead of syncing)."""
        if any(s.client == client and s.group == group for s in self.outstanding.values()):
            return  # a real client waits for its JoinGroup / SyncGroup
        v = self.view(client, group)
        if v.needs_join:
            self.join(client, group, reason=reason if v.member_id else 0)
        elif v.needs_sync and not lazy:
            self.sync(client, group)
        else:
            self.heartbeat(client, group)

    @rule(
        members=st.lists(st.tuples(clients, groups), min_size=2, max_size=6, unique=True),
        rounds=st.integers(1, 3),
        gap=st.sampled_from([0, 0, 500, 2_000]),
    )
    def act_many(self, members: list[tuple[int, str]], rounds: int, gap: int) -> None:
        """Several clients act in turn, a few times over (a join phase needs all of them)."""
        for _ in range(rounds):
            for client, group in members:
                self.act(client, group, 0)
            self.advance_to(self.clock.now + gap)

    @rule(
        members=st.lists(st.tuples(clients, groups, st.sampled_from([False] * 5 + [True])), min_size=1, max_size=6),
        ms=st.integers(1_000, 30_000),
        interval=st.sampled_from([1_000, 3_000, 5_000]),
        stagger=st.booleans(),
    )
    def live(self, members: list[tuple[int, str, bool]], ms: int, interval: int, stagger: bool) -> None:
        """Time passes while these clients run their poll loop (join, sync, heartbeat every interval).
        Staggered, the k-th client starts k intervals late (arrivals during a join phase); a lazy client
        joins and heartbeats but never syncs."""
        start, end = self.clock.now, self.clock.now + ms
        while self.clock.now < end:
            for k, (client, group, lazy) in enumerate(members):
                if not stagger or self.clock.now >= start + k * interval:
                    self.act(client, group, 0, lazy)
            self.advance_to(min(end, self.clock.now + interval))

    # -- rules: raw requests, including misbehaviour -------------------------------------------------

    @rule(
        client=clients,
        group=groups,
        how=st.sampled_from(["current", "current", "fresh", "stale"]),
        reason=st.sampled_from([0, 1, 2, 3]),
        protocols=st.sampled_from([None] * 6 + [0, 1, 2, 3]),
        session=st.sampled_from([*VALID_SESSIONS, 5_000]),
        rebalance=st.sampled_from(REBALANCE_TIMEOUTS),
        protocol_type=st.sampled_from(["consumer"] * 5 + ["connect"]),
    )
    def join_raw(
        self,
        client: int,
        group: str,
        how: str,
        reason: int,
        protocols: int | None,
        session: int,
        rebalance: int,
        protocol_type: str,
    ) -> None:
        v = self.view(client, group)
        if protocols is not None:
            v.protocols = protocols
        v.session_ms, v.rebalance_ms = (session, rebalance) if session in VALID_SESSIONS else (v.session_ms, rebalance)
        member_id = {"current": v.member_id, "fresh": "", "stale": self.stale_id(v)}[how]
        req = self.join_request(client, group, member_id, reason, v)
        req.session_timeout_ms = session
        req.protocol_type = protocol_type
        before = self.core.store.get(group)
        old_id = before.static_members.get(STATIC.get(client, "")) if before is not None and how == "fresh" else None
        quiet_restart = (
            old_id is not None
            and before is not None
            and before.state == GroupState.STABLE
            and before.members[old_id].protocols == tuple((p.name, p.metadata) for p in req.protocols)
            and protocol_type == before.protocol_type
            and session in VALID_SESSIONS
            and reason in (JoinReason.UNKNOWN, JoinReason.RESTART)
        )
        generation = before.generation_id if before is not None else None
        n_log = len(self.log)
        resp = self.call("join", client, group, self.core.join_group, req)
        if session not in VALID_SESSIONS:
            assert resp is not None and resp.error_code == Errors.INVALID_SESSION_TIMEOUT
        if quiet_restart:
            # KIP-345: a known static instance with unchanged protocols replaces its old id, no rebalance.
            assert resp is not None and resp.error_code == Errors.NONE, resp
            assert resp.generation_id == generation and resp.member_id != old_id
            assert [type(x) for x in r.decode_batch(self.log[n_log])] == [r.StaticMemberReplaced]

    @rule(client=clients, group=groups, mode=modes)
    def sync_raw(self, client: int, group: str, mode: str) -> None:
        self.sync(client, group, mode)

    @rule(client=clients, group=groups, mode=modes)
    def heartbeat_raw(self, client: int, group: str, mode: str) -> None:
        self.heartbeat(client, group, mode)

    @rule(
        client=clients,
        group=groups,
        simple=st.booleans(),
        mode=modes,
        rows=st.lists(
            st.tuples(
                st.sampled_from(["t1", "t2"]), st.integers(0, 2), st.integers(0, 10**12), st.sampled_from([0, 5, 17])
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda row: row[:2],
        ),
    )
    def commit(self, client: int, group: str, simple: bool, mode: str, rows: list[tuple[str, int, int, int]]) -> None:
        v = self.view(client, group)
        self.last_refresh[group] = self.clock.now
        by_topic: dict[str, list[Any]] = {}
        for topic, part, offset, meta_len in rows:
            by_topic.setdefault(topic, []).append(
                pb.OffsetCommitRequest.Partition(
                    partition_index=part,
                    committed_offset=offset,
                    committed_leader_epoch=1,
                    committed_metadata="m" * meta_len,
                )
            )
        req = pb.OffsetCommitRequest(
            group_id=group,
            generation_id=-1 if simple else v.generation - (mode == "stale_gen"),
            member_id="" if simple else (self.stale_id(v) if mode == "stale_id" else v.member_id),
            group_instance_id="" if simple or mode == "no_instance" else STATIC.get(client, ""),
            topics=[pb.OffsetCommitRequest.Topic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        before = self.core.store.get(group)
        simple_allowed = simple and (before is None or before.state == GroupState.EMPTY)
        resp = self.call("commit", client, group, self.core.offset_commit, req)
        stored = self.core.store.get(group)
        for topic in resp.topics:
            for part in topic.partitions:
                sent = next(p for p in by_topic[topic.name] if p.partition_index == part.partition_index)
                too_large = len(sent.committed_metadata) > METADATA_LIMIT
                if simple_allowed:  # Kafka: simple commits are accepted while the group is Empty (or absent)
                    assert part.error_code == (Errors.OFFSET_METADATA_TOO_LARGE if too_large else Errors.NONE)
                if part.error_code == Errors.NONE:
                    assert not too_large
                    assert stored is not None
                    assert stored.offsets[(topic.name, part.partition_index)].offset == sent.committed_offset
                elif part.error_code == Errors.OFFSET_METADATA_TOO_LARGE:
                    assert too_large

    @rule(group=groups, all_topics=st.booleans())
    def fetch(self, group: str, all_topics: bool) -> None:
        topics = [] if all_topics else [pb.OffsetFetchRequest.Topic(name="t1", partition_indexes=[0, 1, 2])]
        resp = self.call(
            "fetch", -1, group, self.core.offset_fetch, pb.OffsetFetchRequest(group_id=group, topics=topics)
        )
        assert resp.error_code == Errors.NONE
        stored = self.core.store.get(group)
        offsets = stored.offsets if stored else {}
        for topic in resp.topics:
            for part in topic.partitions:
                entry = offsets.get((topic.name, part.partition_index))
                assert part.committed_offset == (entry.offset if entry else -1)

    @rule(
        group=groups,
        partitions=st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.integers(0, 2)), min_size=1, max_size=3),
        skip=RARELY,
    )
    def delete_offsets(self, group: str, partitions: list[tuple[str, int]], skip: bool) -> None:
        if skip:
            return
        by_topic: dict[str, list[Any]] = {}
        for topic, part in partitions:
            by_topic.setdefault(topic, []).append(pb.OffsetDeleteRequest.Partition(partition_index=part))
        topics = [pb.OffsetDeleteRequest.Topic(name=t, partitions=ps) for t, ps in by_topic.items()]
        before = self.core.store.get(group)
        live = before is not None and before.state != GroupState.EMPTY
        req = pb.OffsetDeleteRequest(group_id=group, topics=topics)
        resp = self.call("delete_offsets", -1, group, self.core.offset_delete, req)
        if before is None:
            assert resp.error_code == Errors.GROUP_ID_NOT_FOUND
        elif live and before.protocol_type != "consumer":
            assert resp.error_code == Errors.NON_EMPTY_GROUP
        else:
            # The clients' metadata is no subscription: a live consumer group is subscribed to nothing (Kafka).
            assert resp.error_code == Errors.NONE
            assert not self.core.store.groups[group].offsets.keys() & set(partitions)

    @rule(
        group=groups,
        leaving=st.lists(
            st.tuples(clients, st.sampled_from(["member", "member", "admin", "stale"])), min_size=1, max_size=3
        ),
    )
    def leave(self, group: str, leaving: list[tuple[int, str]]) -> None:
        members = []
        for client, how in leaving:
            v = self.view(client, group)
            if how == "admin":
                members.append(pb.LeaveGroupRequest.MemberIdentity(group_instance_id=STATIC.get(client, "x")))
            else:
                member_id = v.member_id if how == "member" else self.stale_id(v)
                members.append(
                    pb.LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=STATIC.get(client, ""))
                )
        resp = self.call(
            "leave", -1, group, self.core.leave_group, pb.LeaveGroupRequest(group_id=group, members=members)
        )
        assert len(resp.members) == len(members)
        stored = self.core.store.get(group)
        for result in resp.members:
            if result.error_code == Errors.NONE:
                assert stored is not None
                if result.member_id:
                    assert result.member_id not in stored.members and result.member_id not in stored.pending_members
                else:
                    assert result.group_instance_id not in stored.static_members
        for client, _ in leaving:
            self.view(client, group).needs_join = True

    @rule(
        group=groups,
        instances=st.lists(st.sampled_from(["i0", "i1", "i2", "i7"]), min_size=1, max_size=3),
        skip=RARELY,
    )
    def add_members(self, group: str, instances: list[str], skip: bool) -> None:
        if skip:
            return
        req = pb.AddMembersToGroupRequest(group_id=group, group_instance_ids=instances)
        resp = self.call("add", -1, group, self.core.add_members, req)
        assert len(resp.results) == len(instances)

    @rule(group_ids=st.lists(groups, min_size=1, max_size=3, unique=True), skip=RARELY)
    def delete(self, group_ids: list[str], skip: bool) -> None:
        if skip:
            return
        resp = self.call("delete", -1, "", self.core.delete_groups, pb.DeleteGroupsRequest(group_ids=group_ids))
        for result in resp.results:
            if result.error_code == Errors.NONE:
                assert self.core.store.get(result.group_id) is None

    @rule(group_ids=st.lists(groups, min_size=1, max_size=3))
    def describe_and_list(self, group_ids: list[str]) -> None:
        resp = self.call("describe", -1, "", self.core.describe_groups, pb.DescribeGroupsRequest(group_ids=group_ids))
        for described in resp.groups:
            group = self.core.store.get(described.group_id)
            if group is None:
                assert described.error_code == Errors.GROUP_ID_NOT_FOUND
            else:
                assert described.group_state == group.state.value
                assert described.generation_id == group.generation_id
                assert [m.member_id for m in described.members] == list(group.members)
                assert described.pending_member_count == len(group.pending_members)
        listed = self.call("list", -1, "", self.core.list_groups, pb.ListGroupsRequest())
        assert {g.group_id for g in listed.groups} == set(self.core.store.groups)

    # -- rules: time, snapshots, failover ------------------------------------------------------------

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

    @rule(ms=st.integers(0, 3_000) | st.integers(0, 3 * S_MAX), stepwise=st.booleans())
    def advance(self, ms: int, stepwise: bool) -> None:
        if stepwise:
            self.advance_to(self.clock.now + ms)
        else:
            # A stalled driver: one late tick fires everything that came due meanwhile.
            self.clock.advance(ms)
            deadline = self.core.next_deadline()
            if deadline is not None and deadline < self.clock.now:
                # Timers that fire late re-arm from the late tick (initial-delay windows included, as in
                # Kafka's purgatory): bounds restart from here.
                self.reset_at = self.clock.now
                for episode in self.episodes.values():
                    late = self.clock.now + episode.max_rebalance_ms
                    episode.first_deadline = max(episode.first_deadline, late)
            self.absorb(self.core.tick())

    @rule()
    def take_snapshot(self) -> None:
        packed = pack(self.core.store.snapshot())
        self.snapshots.append((packed, len(self.log)))
        self.restored = GroupStore.restore(unpack(packed))

    @rule(skip=RARELY)
    def failover(self, skip: bool) -> None:
        """The partition moves: parked requests fail, and a new leader loads the replicated state."""
        if skip:
            return
        outstanding = set(self.outstanding)
        eff = self.core.unload()
        assert not eff.records
        assert {token for token, _ in eff.replies} == outstanding
        for _, message in eff.replies:
            assert message.error_code == Errors.COORDINATOR_NOT_AVAILABLE
        self.absorb(eff)
        assert not self.outstanding
        store = GroupStore.restore(unpack(pack(self.core.store.snapshot())))
        self.core = GroupCoordinator(self.config, self.clock, new_uuid=self.ids, store=store)
        self.reset_at = self.clock.now
        self.pending_since = {k: (self.clock.now, t) for k, (_, t) in self.pending_since.items()}
        # The new leader starts every join / sync deadline afresh from the hard state.
        for gid, episode in self.episodes.items():
            rt = store.groups[gid].rebalance_timeout_ms
            episode.max_rebalance_ms = max(episode.max_rebalance_ms, rt)
            episode.first_deadline = self.clock.now + rt

    @rule(skip=RARELY)
    def quiet(self, skip: bool) -> None:
        """No requests for a long time: every rebalance ends, every session and pending id expires."""
        if skip:
            return
        self.advance_to(self.clock.now + QUIET_MS)
        assert not self.outstanding
        assert self.core.parked_count() == 0
        for group in self.core.store.groups.values():
            assert group.state == GroupState.EMPTY, (group.group_id, group.state)
            assert not group.members and not group.pending_members and not group.offsets
            # Retention removes every empty group; only pre-registered instances (which never expire) keep one.
            assert group.registered_instances, f"{group.group_id} survived retention with nothing in it"
        for v in self.views.values():
            v.needs_join, v.needs_sync = True, False

    # -- invariants ----------------------------------------------------------------------------------

    @invariant()
    def checks(self) -> None:
        self.check_all()

    def check_all(self) -> None:
        live = self.core.store.snapshot()
        # (a) replay of every record so far equals the live state.
        assert self.replica.snapshot() == live
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


def check_derived(store: GroupStore) -> None:
    """State a store derives from its members (not in snapshots) agrees with them, live or replayed;
    and the shape of each state: Empty has no members, CompletingRebalance / Stable have members and the
    protocol the vote picks (Kafka's: each member votes for its first protocol all support, most votes win)."""
    for group in store.groups.values():
        if group.state == GroupState.EMPTY:
            assert not group.members, group.group_id
        elif group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert group.members, group.group_id
            names = [m.protocol_names() for m in group.members.values()]
            common = set(names[0]).intersection(*names[1:])
            assert group.protocol_name in common, (group.group_id, group.protocol_name, names)
            votes = Counter(next(n for n in own if n in common) for own in names)
            assert votes[group.protocol_name] == max(votes.values()), (group.group_id, group.protocol_name, votes)
        static = {m.group_instance_id: mid for mid, m in group.members.items() if m.group_instance_id}
        assert group.static_members == static, group.group_id
        support = Counter(name for m in group.members.values() for name in m.protocol_names())
        assert group.protocol_support == support, group.group_id
        assert (group.leader_id in group.members) if group.members else not group.leader_id, group.group_id
        assert not set(group.pending_members) & set(group.members), group.group_id


def _first_commit_error(resp: pb.OffsetCommitResponse) -> int:
    for topic in resp.topics:
        for part in topic.partitions:
            if part.error_code not in (Errors.NONE, Errors.OFFSET_METADATA_TOO_LARGE):
                return part.error_code
    return Errors.NONE


CoordinatorMachine.TestCase.settings = settings(
    max_examples=examples(500),
    stateful_step_count=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoordinatorProperties = CoordinatorMachine.TestCase


# -- regressions ---------------------------------------------------------------------------------------


def _static_join(core: GroupCoordinator, instance: str, token: str, member_id: str = "") -> Any:
    return core.join_group(
        pb.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            member_id=member_id,
            group_instance_id=instance,
            client_id="c",
            protocol_type="consumer",
            protocols=[pb.JoinGroupRequest.Protocol(name="range")],
        ),
        token,
    )


def _run_timers(core: GroupCoordinator, clock: FakeClock, until: int) -> list[Any]:
    replies: list[Any] = []
    while (deadline := core.next_deadline()) is not None and deadline <= until:
        clock.now = max(clock.now, deadline)
        replies.extend(core.tick().replies)
    clock.now = until
    replies.extend(core.tick().replies)
    return replies


def test_regression_member_whose_parked_sync_is_failed_keeps_a_session():
    """Found by the machine (fixed in 6067a56): a member whose parked SyncGroup was failed by a new
    rebalance lost its session deadline, so it never expired.

    Static a and b form generation 1 (leader a); b's SyncGroup parks; a never syncs, its session expires,
    the rebalance answers b's SyncGroup REBALANCE_IN_PROGRESS. If b then goes silent it must expire one
    session timeout later and the group must become Empty, not wait for b forever."""
    clock = FakeClock()
    core = GroupCoordinator(GroupConfig(), clock, new_uuid=SeqIds())  # initial delay 3 s, sessions 10 s
    _static_join(core, "a", "ja")
    _static_join(core, "b", "jb")
    replies = dict(_run_timers(core, clock, 6_000))  # one delay window plus one extension for b
    a, b = replies["ja"], replies["jb"]
    assert (a.error_code, b.error_code, a.generation_id, a.leader) == (0, 0, 1, a.member_id)
    sync = pb.SyncGroupRequest(group_id="g", generation_id=1, member_id=b.member_id, group_instance_id="b")
    assert core.sync_group(sync, "sb").response is None
    replies = dict(_run_timers(core, clock, 16_000))  # a's session (and the sync deadline) expire
    assert replies["sb"].error_code == Errors.REBALANCE_IN_PROGRESS
    assert core.store.get("g").state == GroupState.PREPARING_REBALANCE
    _run_timers(core, clock, 16_000 + 10_000)  # b's session, counted from that reply
    group = core.store.get("g")
    assert b.member_id not in group.members
    assert group.state == GroupState.EMPTY


def test_regression_machine_sequence():
    """The machine's shrunk counterexample for that bug, replayed with every check."""
    m = CoordinatorMachine()
    m.setup(GroupConfig(initial_rebalance_delay_ms=0, offset_metadata_max_bytes=METADATA_LIMIT))
    m.checks()
    m.live(members=[(0, "g0", False), (2, "g0", False)], ms=6_001, interval=3_000, stagger=False)
    m.checks()
    m.live(members=[(1, "g0", False)], ms=10_000, interval=1_000, stagger=False)
    m.checks()
    m.teardown()
