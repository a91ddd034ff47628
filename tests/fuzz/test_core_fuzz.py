"""Fuzz target 1: hostile requests for every RPC against the pure coordinator, in sequences.

tests/unit/test_property.py drives the coordinator with clients that follow the protocol and misbehave in
known ways, and checks liveness bounds. This machine instead sends requests whose every field is hostile
(tests/fuzz/strategies.py), interleaved with well-formed groups being formed, time passing, snapshots and
failovers, and checks after every step that bad input never got into the hard state:

* no exception escapes a call; every reply has the request's response type and only known error codes;
  a failed JoinGroup says generation -1; only JoinGroup and SyncGroup ever park, and an unload answers them;
* apply is deterministic and the same code live and on replay: every record survives the msgpack codec,
  changes a replica as it changed the live store, and becomes a JSON-able event; restore(snapshot) + the
  records after it equals the live store (at teardown the whole log is replayed into a fresh store);
* generations never go backwards; every member of a Stable group was in the generation its leader
  assigned; pending members stay within `max_pending_members`; `check_derived` (property_model.py) holds;
* the store respects every limit the handlers validate (ids, timeouts, protocols, metadata, offsets);
* acknowledged offsets are never lost: each offset a commit answered NONE for is in the store until a
  later commit, retention or a deletion replaces it.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from groupcoord.coordinator import GroupConfig, GroupCoordinator, GroupState, GroupStore
from groupcoord.coordinator.events import record_event
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.fuzz import strategies as hs
from tests.fuzz.profiles import campaign, fuzz_settings, time_limit
from tests.support import FakeClock, SeqIds
from tests.unit.property_machine import CoordinatorMachine
from tests.unit.property_model import REPLY_TYPES, check_derived, pack, unpack

GROUPS = ("g0", "g1")
INSTANCES = ("i0", "i1")
POOL = 24  # member ids offered to the strategies: the most recent ones
# One call holds the node's event loop: none may take this much CPU (a bulk request is linear, ~0.1 s; a
# quadratic one, seconds to minutes). CPU, not wall time: the check must not depend on the machine's load,
# or hypothesis sees the same example pass and fail (FlakyStrategyDefinition in a long run).
CALL_BUDGET_S = 5.0

# The RPCs the coordinator answers itself (FindCoordinator, DescribeCluster and ReadEvents are the node's).
CORE_CALLS = {
    "JoinGroup": ("join", "join_group"),
    "SyncGroup": ("sync", "sync_group"),
    "Heartbeat": ("heartbeat", "heartbeat"),
    "LeaveGroup": ("leave", "leave_group"),
    "AddMembersToGroup": ("add", "add_members"),
    "OffsetCommit": ("commit", "offset_commit"),
    "OffsetFetch": ("fetch", "offset_fetch"),
    "OffsetDelete": ("delete_offsets", "offset_delete"),
    "DescribeGroups": ("describe", "describe_groups"),
    "ListGroups": ("list", "list_groups"),
    "DeleteGroups": ("delete", "delete_groups"),
}

CONFIGS = st.builds(
    GroupConfig,
    max_size=st.sampled_from([None, 2]),
    initial_rebalance_delay_ms=st.sampled_from([0, 3_000]),
    offset_metadata_max_bytes=st.just(16),
    offsets_retention_ms=st.just(60_000),
    offsets_retention_check_interval_ms=st.just(10_000),
    max_pending_members=st.sampled_from([1, 3, 10_000]),
    max_member_metadata_bytes=st.just(4_096),
    max_protocols=st.just(8),
)


class HostileMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.ids = SeqIds()
        self.config = GroupConfig()
        self.core = GroupCoordinator(self.config, self.clock, new_uuid=self.ids)
        self.tokens = itertools.count(1)
        self.outstanding: dict[int, str] = {}
        self.answers: dict[int, Any] = {}
        self.log: list[bytes] = []
        self.replica = GroupStore()
        self.restored: GroupStore | None = None
        self.snapshots: list[tuple[bytes, int]] = []
        self.members: list[str] = []
        self.generations: dict[str, int] = {}
        # Group -> the member ids its last AssignmentsSynced covered (static replacements renamed).
        self.synced: dict[str, set[str]] = {}
        # (group, topic, partition) -> the offset the last acknowledged commit wrote.
        self.acked: dict[tuple[str, str, int], int] = {}

    @initialize(config=CONFIGS)
    def setup(self, config: GroupConfig) -> None:
        self.config = config
        self.core = GroupCoordinator(config, self.clock, new_uuid=self.ids)

    # -- plumbing ------------------------------------------------------------------------------------

    def call(self, kind: str, request: Any) -> int:
        """Sends one request; returns its token (its reply, once there is one, is in `answers`)."""
        token = next(self.tokens)
        self.outstanding[token] = kind
        method = getattr(self.core, dict(CORE_CALLS.values())[kind])
        started = time.process_time()
        effects = method(request, token)
        elapsed = time.process_time() - started
        assert elapsed < CALL_BUDGET_S, f"{kind} took {elapsed:.1f} s of CPU: the node's event loop would hang"
        assert effects.token == token
        self.absorb(effects)
        if token in self.outstanding:
            assert kind in ("join", "sync"), f"{kind} parked"
        else:
            reply = self.answers[token]
            self.check_reply(kind, request, reply)
            event(f"{kind}: {Errors(getattr(reply, 'error_code', 0)).name}")
        return token

    def absorb(self, effects: Any) -> None:
        records = list(effects.records)
        batch = r.encode_batch(records)
        assert r.decode_batch(batch) == records
        self.log.append(batch)
        for position, rec in enumerate(records):
            assert self.replica.apply(rec), f"replay of {rec!r:.200} changed nothing"
            if self.restored is not None:
                assert self.restored.apply(rec), f"replay after restore of {rec!r:.200} changed nothing"
            event = record_event(rec, self.replica.get(rec.group_id), 0, len(self.log), position, 1, 1)
            json.dumps(event)
            self.track(rec)
        for token, message in effects.replies:
            kind = self.outstanding.pop(token)
            assert isinstance(message, REPLY_TYPES[kind]), (kind, type(message))
            assert not hs.unknown_codes(message), message
            self.answers[token] = message
            if kind == "join" and message.member_id:
                self.remember(message.member_id)

    def remember(self, member_id: str) -> None:
        if member_id not in self.members:
            self.members = [*self.members, member_id][-POOL:]

    def track(self, rec: r.Record) -> None:
        gid = rec.group_id
        if isinstance(rec, (r.MemberAdded, r.PendingMemberAdded)):
            self.remember(rec.member_id)
        elif isinstance(rec, r.StaticMemberReplaced):
            self.remember(rec.new_member_id)
            synced = self.synced.get(gid)
            if synced is not None and rec.old_member_id in synced:
                synced.discard(rec.old_member_id)
                synced.add(rec.new_member_id)
        elif isinstance(rec, r.AssignmentsSynced):
            self.synced[gid] = set(rec.assignments)
        elif isinstance(rec, r.OffsetsExpired):
            for topic, partition, _ in rec.partitions:
                self.acked.pop((gid, topic, partition), None)
        elif isinstance(rec, r.GroupDeleted):
            self.acked = {k: v for k, v in self.acked.items() if k[0] != gid}
            self.generations.pop(gid, None)

    def check_reply(self, kind: str, request: Any, reply: Any) -> None:
        """What a reply promises about the state right after it."""
        group = self.core.store.get(getattr(request, "group_id", ""))
        if kind == "join" and reply.error_code != Errors.NONE:
            assert reply.generation_id == -1, reply
        elif kind == "join" and reply.error_code == Errors.NONE:
            assert group is not None and reply.member_id in group.members
        elif kind == "heartbeat" and reply.error_code == Errors.NONE:
            assert group is not None and request.member_id in group.members
            assert request.generation_id == group.generation_id
        elif kind == "commit" and reply.error_code != Errors.NONE:
            # Refused as a whole by a limit: over offset_commit_max_partitions it lists no partition at all.
            assert all(p.error_code == reply.error_code for t in reply.topics for p in t.partitions), reply
        elif kind == "commit":
            for topic, answered in zip(request.topics, reply.topics, strict=True):
                for sent, result in zip(topic.partitions, answered.partitions, strict=True):
                    if result.error_code == Errors.NONE:
                        self.acked[(request.group_id, topic.name, sent.partition_index)] = sent.committed_offset

    # test_property's timer driver (tests/unit/property_driver.py): ticks at every deadline on the way, `check_all`
    # after each tick, and fails on a timer that keeps re-arming at the same time (a hang). It needs core, clock,
    # absorb, check_all.
    advance_to = CoordinatorMachine.advance_to

    # -- rules ---------------------------------------------------------------------------------------

    @rule(data=st.data(), method=st.sampled_from(sorted(CORE_CALLS)))
    def hostile(self, data: st.DataObject, method: str) -> None:
        """One request of `method` with hostile field values (and ids from the pools)."""
        request = data.draw(hs.BY_METHOD[method](GROUPS, self.members, INSTANCES), label=method)
        self.call(CORE_CALLS[method][0], request)

    @rule(data=st.data(), method=st.sampled_from(sorted(CORE_CALLS)))
    def mutated(self, data: st.DataObject, method: str) -> None:
        """A request a real member of a stored group could send, with up to two fields made hostile: gets
        hostile values past the identity and generation checks (and, unmutated, moves groups along)."""
        request = self.valid_request(method, data)
        hostile = data.draw(hs.BY_METHOD[method](GROUPS, self.members, INSTANCES), label=method)
        names = [f.name for f in request.DESCRIPTOR.fields]
        for name in data.draw(st.sets(st.sampled_from(names), max_size=2), label="hostile fields"):
            request.ClearField(name)
            value = getattr(hostile, name)
            if isinstance(value, (str, bytes, int, bool)):
                setattr(request, name, value)
            else:
                getattr(request, name).extend(value)
        self.call(CORE_CALLS[method][0], request)

    def valid_request(self, method: str, data: st.DataObject) -> Any:
        """A well-formed request of `method` from a random member of a stored group (or for g0)."""
        members = [(g, m) for g in self.core.store.groups.values() for m in g.members.values()]
        if members:
            group, member = data.draw(st.sampled_from(members), label="member")
            gid, mid, instance, generation = (
                group.group_id,
                member.member_id,
                member.group_instance_id,
                group.generation_id,
            )
            protocols = [pb.JoinGroupRequest.Protocol(name=n, metadata=m) for n, m in member.protocols]
            session, everyone = member.session_timeout_ms, list(group.members)
        else:
            gid, mid, instance, generation, protocols, session, everyone = "g0", "", "", 0, [], 10_000, []
        ids = {"group_id": gid, "member_id": mid, "group_instance_id": instance}
        member_ids = {"member_id": mid, "group_instance_id": instance}
        if method == "JoinGroup":
            return pb.JoinGroupRequest(**ids, session_timeout_ms=session, protocol_type="consumer", protocols=protocols)
        if method in ("SyncGroup", "Heartbeat"):
            request = getattr(pb, f"{method}Request")(**ids, generation_id=generation)
            if method == "SyncGroup":
                request.assignments.extend(
                    pb.SyncGroupRequest.Assignment(member_id=m, assignment=b"a") for m in everyone
                )
            return request
        if method == "LeaveGroup":
            return pb.LeaveGroupRequest(group_id=gid, members=[pb.LeaveGroupRequest.MemberIdentity(**member_ids)])
        if method == "OffsetCommit":
            partition = pb.OffsetCommitRequest.Partition(partition_index=0, committed_offset=5)
            topic = pb.OffsetCommitRequest.Topic(name="t1", partitions=[partition])
            return pb.OffsetCommitRequest(**ids, generation_id=generation, topics=[topic])
        if method == "OffsetFetch":
            return pb.OffsetFetchRequest(
                group_id=gid, topics=[pb.OffsetFetchRequest.Topic(name="t1", partition_indexes=[0])]
            )
        if method == "OffsetDelete":
            partition = pb.OffsetDeleteRequest.Partition(partition_index=0)
            return pb.OffsetDeleteRequest(
                group_id=gid, topics=[pb.OffsetDeleteRequest.Topic(name="t1", partitions=[partition])]
            )
        if method == "AddMembersToGroup":
            return pb.AddMembersToGroupRequest(group_id=gid, group_instance_ids=["i9"])
        if method == "ListGroups":
            return pb.ListGroupsRequest(states_filter=["Stable"])
        return getattr(pb, f"{method}Request")(group_ids=[gid])

    @rule(
        group=st.sampled_from(GROUPS),
        instances=st.lists(st.sampled_from(["", "", "i0", "i1"]), min_size=1, max_size=3),
        client_id=hs.text(("c",)),
        metadata=st.binary(max_size=256),
        assignment=st.binary(max_size=32),
        skip=st.booleans(),
    )
    def form_group(
        self, group: str, instances: list[str], client_id: str, metadata: bytes, assignment: bytes, skip: bool
    ) -> None:
        """Well-formed clients (with odd client ids and payloads) join, the leader assigns, everyone syncs:
        gets groups to Stable so the hostile requests meet every state. Skipped half the time, so that
        most steps are hostile."""
        if skip:
            return
        tokens = []
        for instance in instances:
            request = pb.JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10_000,
                group_instance_id=instance,
                protocol_type="consumer",
                protocols=[pb.JoinGroupRequest.Protocol(name="range", metadata=metadata)],
                client_id=client_id,
            )
            token = self.call("join", request)
            first = self.answers.get(token)
            if first is not None and first.error_code == Errors.MEMBER_ID_REQUIRED:
                request.member_id = first.member_id
                token = self.call("join", request)
            tokens.append((token, instance))
        self.advance_to(self.clock.now + self.config.initial_rebalance_delay_ms + 1)
        for token, instance in tokens:
            joined = self.answers.get(token)
            if joined is None or joined.error_code != Errors.NONE:
                continue
            assignments = [
                pb.SyncGroupRequest.Assignment(member_id=m.member_id, assignment=assignment) for m in joined.members
            ]
            sync = pb.SyncGroupRequest(
                group_id=group,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id=instance,
                assignments=assignments,
            )
            self.call("sync", sync)

    @rule(ms=st.one_of(st.integers(0, 5_000), st.integers(0, 2_000_000)), late=st.booleans())
    def advance(self, ms: int, late: bool) -> None:
        if late:  # a stalled timer driver: one late tick fires everything due meanwhile
            self.clock.advance(ms)
            self.absorb(self.core.tick())
        else:
            self.advance_to(self.clock.now + ms)

    @rule()
    def take_snapshot(self) -> None:
        packed = pack(self.core.store.snapshot())
        self.snapshots.append((packed, len(self.log)))
        self.restored = GroupStore.restore(unpack(packed))

    @rule()
    def failover(self) -> None:
        """The partition moves: every parked request fails, and a new leader loads the replicated state."""
        parked = set(self.outstanding)
        effects = self.core.unload()
        assert not effects.records
        assert {token for token, _ in effects.replies} == parked
        assert all(m.error_code == Errors.COORDINATOR_NOT_AVAILABLE for _, m in effects.replies)
        self.absorb(effects)
        store = GroupStore.restore(unpack(pack(self.core.store.snapshot())))
        self.core = GroupCoordinator(self.config, self.clock, new_uuid=self.ids, store=store)

    # -- invariants ----------------------------------------------------------------------------------

    @invariant()
    def state_is_sound(self) -> None:
        self.check_all()

    def check_all(self) -> None:
        """Every invariant of the module docstring; also run after each tick inside a step."""
        live = unpack(pack(self.core.store.snapshot()))
        for copy in (self.core.store, self.replica, self.restored):
            if copy is not None:
                assert unpack(pack(copy.snapshot())) == live
                check_derived(copy)
        assert self.core.parked_count() == len(self.outstanding)
        for gid, group in self.core.store.groups.items():
            assert group.generation_id >= self.generations.get(gid, 0), (gid, group.generation_id)
            self.generations[gid] = group.generation_id
            assert len(group.pending_members) <= self.config.max_pending_members
            event(f"state: {group.state.value}")
            if group.state == GroupState.STABLE:
                assert set(group.members) <= self.synced.get(gid, set()), (gid, group.members)
            self.check_limits(group)
        for (gid, topic, partition), offset in self.acked.items():
            stored = self.core.store.groups[gid].offsets[(topic, partition)]
            assert stored.offset == offset, (gid, topic, partition, stored, offset)

    def check_limits(self, group: Any) -> None:
        """Nothing a handler refuses is in the hard state."""
        cfg = self.config
        assert len(group.group_id) <= cfg.max_id_length
        if not group.group_id:  # only OffsetCommit accepts an empty group id (Kafka's simple consumer)
            assert not group.members and not group.pending_members and not group.registered_instances
        for member in group.members.values():
            assert cfg.min_session_timeout_ms <= member.session_timeout_ms <= cfg.max_session_timeout_ms
            assert member.rebalance_timeout_ms > 0
            assert len(member.group_instance_id) <= cfg.max_id_length and len(member.client_id) <= cfg.max_id_length
            assert 0 < len(member.protocols) <= cfg.max_protocols
            assert all(name and len(name) <= cfg.max_id_length for name, _ in member.protocols)
            assert sum(len(metadata) for _, metadata in member.protocols) <= cfg.max_member_metadata_bytes
        if group.members:
            assert group.protocol_type
        for instance_id in group.registered_instances:
            assert 0 < len(instance_id) <= cfg.max_id_length
        for (topic, partition), offset in group.offsets.items():
            assert topic and partition >= 0 and offset.offset >= 0
            assert len(offset.metadata.encode()) <= cfg.offset_metadata_max_bytes

    def teardown(self) -> None:
        live = unpack(pack(self.core.store.snapshot()))
        assert replayed(GroupStore(), self.log) == live
        for packed, position in self.snapshots:
            assert replayed(GroupStore.restore(unpack(packed)), self.log[position:]) == live


def replayed(store: GroupStore, batches: list[bytes]) -> Any:
    """`store` after applying every record of `batches` (each must take effect), as plain data."""
    for batch in batches:
        for rec in r.decode_batch(batch):
            assert store.apply(rec), rec
    return unpack(pack(store.snapshot()))


@time_limit(300)
def test_hostile_requests():
    campaign(lambda: run_state_machine_as_test(HostileMachine, settings=fuzz_settings(100, stateful_step_count=50)))


@time_limit(60)
def test_regression_add_members_is_linear_in_its_instance_ids():
    """Found with the bulk lists (fixed in coordinator/membership.py): AddMembersToGroup checked each id
    against a list of the ids accepted so far, O(n^2) on the event loop; 100,000 ids (689 KB, far under
    max_request_bytes) held a node for 270 s. Now a dict: well under a second. (Without group.max.size, whose
    default would refuse the ids past 10,000 and skip the work this checks.)"""
    core = GroupCoordinator(GroupConfig(max_size=None), FakeClock(), new_uuid=SeqIds())
    ids = [f"id-{n}" for n in range(60_000)]
    started = time.process_time()
    reply = core.add_members(pb.AddMembersToGroupRequest(group_id="g", group_instance_ids=[*ids, ids[0]])).response
    assert time.process_time() - started < CALL_BUDGET_S
    assert [x.error_code for x in reply.results] == [Errors.NONE] * len(ids) + [Errors.DUPLICATE_RESOURCE]
    assert list(core.store.groups["g"].registered_instances) == ids
