"""A small driver for the group state machine: a fake clock, predictable ids, and client-like members.

Every call goes through `Harness`, which keeps all records written during the scenario (so a test can
replay them into a fresh store) and every reply by its token (so a parked request's answer can be looked
up whenever it arrives). It also checks one invariant of the core on every call: a token is answered at
most once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from groupcoord.coordinator import CoordinatorResult, GroupConfig, GroupCoordinator, GroupState
from groupcoord.coordinator.state import Group, GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import FakeClock, SeqIds

JR = pb.JoinGroupRequest
UNKNOWN, RESTART, TOPIC_METADATA_CHANGE, UPGRADE = JR.UNKNOWN, JR.RESTART, JR.TOPIC_METADATA_CHANGE, JR.UPGRADE

PROTOCOL_TYPE = "consumer"
DEFAULT_PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", b"range-meta"), ("roundrobin", b"rr-meta"))
SESSION_MS = 10_000

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE


def code(message: Any) -> Errors:
    """The error code of a response as an `Errors` member (readable in assertion messages)."""
    assert message is not None, "expected a reply, got none (the request is parked)"
    return Errors(message.error_code)


def records_of(eff: CoordinatorResult, kind: type[r.Record]) -> list[Any]:
    return [rec for rec in eff.records if isinstance(rec, kind)]


def protocols_pb(protocols: Iterable[tuple[str, bytes]]) -> list[pb.JoinGroupRequest.Protocol]:
    return [pb.JoinGroupRequest.Protocol(name=name, metadata=metadata) for name, metadata in protocols]


class Harness:
    def __init__(self, **config: Any) -> None:
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.config = GroupConfig(**config)
        self.clock = FakeClock()
        self.core = GroupCoordinator(self.config, self.clock, new_uuid=SeqIds())
        self.records: list[r.Record] = []
        self.replies: dict[Any, Any] = {}
        self._callbacks: dict[Any, Any] = {}
        self._tokens = itertools.count(1)

    # -- plumbing -----------------------------------------------------------------------------------

    def new_token(self) -> str:
        return f"t{next(self._tokens)}"

    def absorb(self, eff: CoordinatorResult) -> CoordinatorResult:
        self.records.extend(eff.records)
        for token, message in eff.replies:
            assert token not in self.replies, f"token {token!r} answered twice: {self.replies[token]} then {message}"
            self.replies[token] = message
            callback = self._callbacks.pop(token, None)
            if callback is not None:
                callback(message)
        return eff

    def call(self, method: str, req: Any, token: Any = None, on_reply: Any = None) -> CoordinatorResult:
        token = token if token is not None else self.new_token()
        if on_reply is not None:
            self._callbacks[token] = on_reply
        return self.absorb(getattr(self.core, method)(req, token=token))

    def reply(self, token: Any) -> Any:
        """The reply to `token` if it has been answered (by any call so far), else None."""
        return self.replies.get(token)

    def advance(self, ms: int) -> CoordinatorResult:
        """Moves the clock by `ms`, stopping at every timer deadline on the way to fire it (as a node's
        event loop would), and returns everything those ticks wrote and answered."""
        target = self.clock.now + ms
        merged = CoordinatorResult()
        while True:
            deadline = self.core.next_deadline()
            step_to = target if deadline is None or deadline > target else max(deadline, self.clock.now)
            self.clock.advance(step_to - self.clock.now)
            eff = self.absorb(self.core.tick())
            merged.records.extend(eff.records)
            merged.replies.extend(eff.replies)
            if step_to == target:
                return merged

    def run(self, ms: int, *alive: Client, step: int = 4_000) -> None:
        """Lets `ms` pass in steps of `step`, each member of `alive` heartbeating after every step."""
        end = self.clock.now + ms
        while self.clock.now < end:
            self.advance(min(step, end - self.clock.now))
            for m in alive:
                assert code(m.heartbeat().response) == Errors.NONE, m

    def advance_to_next_deadline(self) -> CoordinatorResult:
        deadline = self.core.next_deadline()
        assert deadline is not None
        return self.advance(max(deadline - self.clock.now, 0))

    def unload(self) -> CoordinatorResult:
        return self.absorb(self.core.unload())

    def group(self, group_id: str = "g") -> Group:
        return self.core.store.groups[group_id]

    def has_group(self, group_id: str = "g") -> bool:
        return group_id in self.core.store.groups

    def parked_joins(self, group_id: str = "g") -> set[str]:
        soft = self.core.runtime.soft.get(group_id)
        return set(soft.join_waiters) if soft else set()

    def parked_syncs(self, group_id: str = "g") -> set[str]:
        soft = self.core.runtime.soft.get(group_id)
        return set(soft.sync_waiters) if soft else set()

    def rebalances(self, group_id: str = "g") -> list[r.RebalanceStarted]:
        return [rec for rec in self.records if isinstance(rec, r.RebalanceStarted) and rec.group_id == group_id]

    def generations(self, group_id: str = "g") -> list[r.GenerationCompleted]:
        return [rec for rec in self.records if isinstance(rec, r.GenerationCompleted) and rec.group_id == group_id]

    def assert_replay(self) -> None:
        """Records make the state: replaying every record (through the codec) rebuilds the live store."""
        fresh = GroupStore()
        for rec in r.decode_batch(r.encode_batch(self.records)):
            assert fresh.apply(rec), f"record did not apply on replay: {rec}"
        assert fresh.snapshot() == self.core.store.snapshot()
        restored = GroupStore.restore(self.core.store.snapshot())
        assert restored.snapshot() == self.core.store.snapshot()

    # -- raw requests -------------------------------------------------------------------------------

    def join_req(
        self,
        group_id: str = "g",
        member_id: str = "",
        instance_id: str = "",
        client_id: str = "client",
        session_timeout_ms: int = SESSION_MS,
        rebalance_timeout_ms: int = 0,
        protocol_type: str = PROTOCOL_TYPE,
        protocols: Iterable[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
        join_reason: int = UNKNOWN,
        reason: str = "",
    ) -> pb.JoinGroupRequest:
        return pb.JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols_pb(protocols),
            join_reason=join_reason,  # type: ignore[arg-type]
            reason=reason,
            client_id=client_id,
        )

    def join(self, token: Any = None, **fields: Any) -> CoordinatorResult:
        return self.call("join_group", self.join_req(**fields), token)

    def sync(
        self,
        group_id: str = "g",
        generation_id: int = 1,
        member_id: str = "",
        instance_id: str = "",
        assignments: dict[str, bytes] | None = None,
        protocol_type: str = "",
        protocol_name: str = "",
        token: Any = None,
        on_reply: Any = None,
    ) -> CoordinatorResult:
        req = pb.SyncGroupRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                pb.SyncGroupRequest.Assignment(member_id=mid, assignment=data)
                for mid, data in (assignments or {}).items()
            ],
        )
        return self.call("sync_group", req, token, on_reply)

    def heartbeat(
        self, group_id: str = "g", generation_id: int = 1, member_id: str = "", instance_id: str = ""
    ) -> CoordinatorResult:
        req = pb.HeartbeatRequest(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=instance_id
        )
        return self.call("heartbeat", req)

    def leave(self, group_id: str = "g", *members: tuple[str, str] | tuple[str, str, str]) -> CoordinatorResult:
        """members: (member_id, group_instance_id[, reason]) pairs."""
        req = pb.LeaveGroupRequest(
            group_id=group_id,
            members=[
                pb.LeaveGroupRequest.MemberIdentity(
                    member_id=m[0], group_instance_id=m[1], reason=m[2] if len(m) > 2 else ""
                )
                for m in members
            ],
        )
        return self.call("leave_group", req)

    def add_members(self, group_id: str = "g", *instance_ids: str) -> CoordinatorResult:
        req = pb.AddMembersToGroupRequest(group_id=group_id, group_instance_ids=list(instance_ids))
        return self.call("add_members", req)

    def commit(
        self,
        group_id: str = "g",
        generation_id: int = -1,
        member_id: str = "",
        instance_id: str = "",
        offsets: dict[tuple[str, int], int | tuple[int, str]] | None = None,
    ) -> CoordinatorResult:
        """offsets: {(topic, partition): offset or (offset, metadata)}; leader epoch is offset // 10."""
        topics: dict[str, list[pb.OffsetCommitRequest.Partition]] = {}
        for (topic, partition), value in (offsets or {("t", 0): 1}).items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            topics.setdefault(topic, []).append(
                pb.OffsetCommitRequest.Partition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=offset // 10,
                    committed_metadata=metadata,
                )
            )
        req = pb.OffsetCommitRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=[pb.OffsetCommitRequest.Topic(name=name, partitions=parts) for name, parts in topics.items()],
        )
        return self.call("offset_commit", req)

    def fetch(self, group_id: str = "g", topics: dict[str, list[int]] | None = None) -> CoordinatorResult:
        req = pb.OffsetFetchRequest(
            group_id=group_id,
            topics=[
                pb.OffsetFetchRequest.Topic(name=name, partition_indexes=parts)
                for name, parts in (topics or {}).items()
            ],
        )
        return self.call("offset_fetch", req)

    def delete_offsets(self, group_id: str = "g", topics: dict[str, list[int]] | None = None) -> CoordinatorResult:
        req = pb.OffsetDeleteRequest(
            group_id=group_id,
            topics=[
                pb.OffsetDeleteRequest.Topic(
                    name=name, partitions=[pb.OffsetDeleteRequest.Partition(partition_index=i) for i in parts]
                )
                for name, parts in (topics or {}).items()
            ],
        )
        return self.call("offset_delete", req)

    def describe(self, *group_ids: str) -> CoordinatorResult:
        return self.call("describe_groups", pb.DescribeGroupsRequest(group_ids=list(group_ids or ("g",))))

    def describe_one(self, group_id: str = "g") -> pb.DescribeGroupsResponse.Group:
        return self.describe(group_id).response.groups[0]

    def list_groups(self, *states: str) -> CoordinatorResult:
        return self.call("list_groups", pb.ListGroupsRequest(states_filter=list(states)))

    def delete(self, *group_ids: str) -> CoordinatorResult:
        return self.call("delete_groups", pb.DeleteGroupsRequest(group_ids=list(group_ids)))

    # -- client-like members ------------------------------------------------------------------------

    def member(self, name: str, group_id: str = "g", static: bool = False, **kwargs: Any) -> Client:
        return Client(self, name, group_id, instance_id=name if static else "", **kwargs)

    def form(
        self, *dynamic: str, static: Iterable[str] = (), group_id: str = "g", sync: bool = True, **kwargs: Any
    ) -> list[Client]:
        """Builds a group whose first generation holds every named member, dynamic ones first; the first
        one is the leader. With `sync` the group is then made Stable with the assignment `b"assign-<name>"`
        for each member. Returns the members in that order.

        A helper's pending member id (KIP-394) holds the join phase open while the members join; it is
        removed with LeaveGroup at the end, which completes the join phase."""
        members = [self.member(name, group_id, **kwargs) for name in dynamic]
        members += [self.member(name, group_id, static=True, **kwargs) for name in static]
        blocker = self.join(group_id=group_id, client_id="blocker").response
        assert code(blocker) == Errors.MEMBER_ID_REQUIRED
        for m in members:
            if not m.instance_id:
                assert code(m.join().response) == Errors.MEMBER_ID_REQUIRED
            assert m.join().response is None
        self.leave(group_id, (blocker.member_id, ""))
        group = self.group(group_id)
        assert group.state == COMPLETING, group.state
        assert list(group.members) == [m.member_id for m in members]
        assert group.leader_id == members[0].member_id
        for m in members:
            assert m.generation == group.generation_id, (m.name, m.generation, group.generation_id)
        if sync:
            self.sync_all(members)
        return members

    def sync_all(self, members: list[Client]) -> None:
        """The leader syncs `b"assign-<name>"` for each member, then every follower syncs."""
        group = self.group(members[0].group_id)
        leader = next(m for m in members if m.member_id == group.leader_id)
        leader.sync({m.member_id: f"assign-{m.name}".encode() for m in members})
        for m in members:
            if m is not leader:
                m.sync()
        assert self.group(members[0].group_id).state == STABLE
        for m in members:
            assert m.assignment == f"assign-{m.name}".encode(), (m.name, m.assignment)


class Client:
    """A group member as a client sees it: it adopts the member id and generation it is given."""

    def __init__(
        self,
        h: Harness,
        name: str,
        group_id: str = "g",
        instance_id: str = "",
        protocols: Iterable[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
        session_timeout_ms: int = SESSION_MS,
        rebalance_timeout_ms: int = 0,
        protocol_type: str = PROTOCOL_TYPE,
    ) -> None:
        self.h = h
        self.name = name
        self.group_id = group_id
        self.instance_id = instance_id
        self.protocols = tuple(protocols)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.member_id = ""
        self.generation = -1
        self.assignment: bytes | None = None
        self.join_token: Any = None
        self.sync_token: Any = None
        self.last_join: pb.JoinGroupResponse | None = None

    def __repr__(self) -> str:
        return f"Client({self.name!r}, {self.member_id!r})"

    def _on_join(self, resp: pb.JoinGroupResponse) -> None:
        self.last_join = resp
        if resp.error_code in (Errors.NONE, Errors.MEMBER_ID_REQUIRED) and resp.member_id:
            self.member_id = resp.member_id
        if resp.error_code == Errors.NONE:
            self.generation = resp.generation_id

    def _on_sync(self, resp: pb.SyncGroupResponse) -> None:
        if resp.error_code == Errors.NONE:
            self.assignment = resp.assignment

    def join(self, **over: Any) -> CoordinatorResult:
        fields: dict[str, Any] = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "client_id": self.name,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocol_type": self.protocol_type,
            "protocols": self.protocols,
        }
        fields.update(over)
        self.join_token = self.h.new_token()
        return self.h.call("join_group", self.h.join_req(**fields), self.join_token, self._on_join)

    def restart(self, **over: Any) -> CoordinatorResult:
        """A static member restarting: same instance id, no member id."""
        return self.join(member_id="", **over)

    def sync(self, assignments: dict[str, bytes] | None = None, **over: Any) -> CoordinatorResult:
        fields: dict[str, Any] = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "assignments": assignments,
        }
        fields.update(over)
        self.sync_token = self.h.new_token()
        return self.h.sync(token=self.sync_token, on_reply=self._on_sync, **fields)

    def heartbeat(self, **over: Any) -> CoordinatorResult:
        fields: dict[str, Any] = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "instance_id": self.instance_id,
        }
        fields.update(over)
        return self.h.heartbeat(**fields)

    def commit(
        self, offsets: dict[tuple[str, int], int | tuple[int, str]] | None = None, **over: Any
    ) -> CoordinatorResult:
        fields: dict[str, Any] = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "offsets": offsets,
        }
        fields.update(over)
        return self.h.commit(**fields)

    def leave(self, reason: str = "") -> CoordinatorResult:
        return self.h.leave(self.group_id, (self.member_id, self.instance_id, reason))

    def join_reply(self) -> pb.JoinGroupResponse | None:
        return self.h.reply(self.join_token)

    def sync_reply(self) -> pb.SyncGroupResponse | None:
        return self.h.reply(self.sync_token)
