"""The group coordinator of one coordinator partition (Kafka's GroupCoordinatorShard): the public calls, each of
which returns its `CoordinatorResult`, over collaborators that share one `Runtime`.

    GroupCoordinator ── Membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, AddMembersToGroup)
          │          ── Offsets    (OffsetCommit, OffsetFetch, OffsetDelete, retention)
          │          ── Admin      (DescribeGroups, ListGroups, DeleteGroups)
          │          ── Topics     (CreateTopics, DeleteTopics)
          └─ Rebalance (join/sync phases, sessions, member records' soft state) ── Runtime (store, soft, timers)

Each call gets a fresh result that the handler writes into explicitly and that is returned to the caller; no
call's output lives on the shard. A call made while another runs (from a callback the node passes, such as
`node_groups`) is refused with `ReentrantCall`: its records would be applied under the outer call.
"""

from __future__ import annotations

from collections.abc import Callable

from groupcoord.coordinator.admin import Admin
from groupcoord.coordinator.config import GroupConfig
from groupcoord.coordinator.membership import Membership
from groupcoord.coordinator.offsets import Offsets
from groupcoord.coordinator.rebalance import Rebalance
from groupcoord.coordinator.result import CoordinatorResult, CoreCallFailed, ReentrantCall, Token
from groupcoord.coordinator.runtime import Clock, Runtime
from groupcoord.coordinator.state import GroupStore
from groupcoord.coordinator.topics import Topics
from groupcoord.coordinator.validation import NodeGroups, no_groups
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

Handler = Callable[[CoordinatorResult, Token], None]


class GroupCoordinator:
    """Pure: no I/O, no threads, no asyncio. Time comes from the injected clock, ids from `new_uuid`.

    Every public call takes the request and the opaque token its reply is addressed by (a fresh one when None), and
    returns a `CoordinatorResult`; one that raises half-way raises `CoreCallFailed` with what it already did."""

    def __init__(
        self, config: GroupConfig, clock: Clock, new_uuid: Callable[[], str], store: GroupStore | None = None
    ) -> None:
        self.runtime = rt = Runtime(config, clock, new_uuid, store if store is not None else GroupStore())
        self.rebalance = Rebalance(rt)
        self.membership = Membership(rt, self.rebalance)
        self.offsets = Offsets(rt, self.rebalance)
        self.admin = Admin(rt)
        self.topics = Topics(rt)
        self._in_call = False
        self.load()

    @property
    def store(self) -> GroupStore:
        return self.runtime.store

    def _call(self, token: Token | None, handler: Handler) -> CoordinatorResult:
        if self._in_call:
            raise ReentrantCall("a coordinator call was made from inside another")
        out = CoordinatorResult(token=object() if token is None else token)
        self._in_call = True
        try:
            handler(out, out.token)
        except Exception as exc:
            raise CoreCallFailed(out) from exc
        finally:
            self._in_call = False
        return out

    # -- the member APIs -------------------------------------------------------------------------------

    def join_group(
        self,
        req: pb.JoinGroupRequest,
        token: Token | None = None,
        client_host: str = "",
        node_groups: NodeGroups = no_groups,
    ) -> CoordinatorResult:
        """`node_groups`: the groups of every partition the node leads, for `max_groups_per_node`."""
        return self._call(token, lambda out, t: self.membership.join_group(out, req, t, client_host, node_groups))

    def sync_group(self, req: pb.SyncGroupRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.membership.sync_group(out, req, t))

    def heartbeat(self, req: pb.HeartbeatRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.membership.heartbeat(out, req, t))

    def leave_group(self, req: pb.LeaveGroupRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.membership.leave_group(out, req, t))

    def add_members(
        self, req: pb.AddMembersToGroupRequest, token: Token | None = None, node_groups: NodeGroups = no_groups
    ) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.membership.add_members(out, req, t, node_groups))

    # -- offsets ---------------------------------------------------------------------------------------

    def offset_commit(
        self, req: pb.OffsetCommitRequest, token: Token | None = None, node_groups: NodeGroups = no_groups
    ) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.offsets.offset_commit(out, req, t, node_groups))

    def offset_fetch(self, req: pb.OffsetFetchRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.offsets.offset_fetch(out, req, t))

    def offset_delete(self, req: pb.OffsetDeleteRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.offsets.offset_delete(out, req, t))

    # -- admin and topics ------------------------------------------------------------------------------

    def describe_groups(self, req: pb.DescribeGroupsRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.admin.describe_groups(out, req, t))

    def list_groups(self, req: pb.ListGroupsRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.admin.list_groups(out, req, t))

    def delete_groups(self, req: pb.DeleteGroupsRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.admin.delete_groups(out, req, t))

    def create_topics(self, req: pb.CreateTopicsRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.topics.create_topics(out, req, t))

    def delete_topics(self, req: pb.DeleteTopicsRequest, token: Token | None = None) -> CoordinatorResult:
        return self._call(token, lambda out, t: self.topics.delete_topics(out, req, t))

    # -- lifecycle and timers --------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuilds soft state from the hard state: every deadline starts afresh (a new leader's view)."""
        if self._in_call:
            raise ReentrantCall("load() was called from inside a coordinator call")
        rt = self.runtime
        rt.timers.clear()
        rt.soft.clear()
        rt.loaded_sessions.clear()
        rt.unloaded = False
        now = rt.mono()
        for gid, group in rt.store.groups.items():
            self.rebalance.load(gid, group, now)
        self.offsets.arm_retention(now + rt.config.offsets_retention_check_interval_ms)

    def unload(self) -> CoordinatorResult:
        """The partition moved away: every parked request fails with COORDINATOR_NOT_AVAILABLE."""
        return self._call(None, self._unload)

    def _unload(self, out: CoordinatorResult, _token: Token) -> None:
        rt = self.runtime
        self.rebalance.unload(out)
        rt.soft.clear()
        rt.timers.clear()
        rt.loaded_sessions.clear()
        rt.unloaded = True

    def tick(self) -> CoordinatorResult:
        """Runs the operation of every timer that is due, earliest first."""
        return self._call(None, self._tick)

    def _tick(self, out: CoordinatorResult, _token: Token) -> None:
        rt = self.runtime
        if rt.unloaded:
            return
        now = rt.mono()
        while (operation := rt.timers.pop_due(now)) is not None:
            operation(out)

    def next_deadline(self) -> int | None:
        """Monotonic time at which `tick()` has work to do."""
        return None if self.runtime.unloaded else self.runtime.timers.next_deadline()

    def parked_count(self) -> int:
        return self.runtime.parked_count()
