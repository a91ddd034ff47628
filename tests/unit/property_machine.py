"""The rules of tests/unit/test_property.py's state machine: clients that follow the protocol and misbehave,
admins, time, snapshots and failovers. The driver they act through, and the invariants, are
tests/unit/property_driver.py's.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from groupcoord.coordinator import GroupCoordinator, GroupState, GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.property_driver import CoordinatorDriver
from tests.unit.property_model import (
    METADATA_LIMIT,
    QUIET_MS,
    RARELY,
    REBALANCE_TIMEOUTS,
    S_MAX,
    STATIC,
    VALID_SESSIONS,
    JoinReason,
    clients,
    groups,
    modes,
    pack,
    unpack,
)


class CoordinatorMachine(CoordinatorDriver):
    """The hypothesis state machine: each rule one thing a client, an admin or the cluster does."""

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
        for name, index, offset, meta_len in rows:
            by_topic.setdefault(name, []).append(
                pb.OffsetCommitRequest.Partition(
                    partition_index=index,
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
        # A new leader works on a copy of the committed state (the replica's, equal to the live one here).
        store = self.replica.copy()
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
