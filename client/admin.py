"""`Admin`: the operator's view of a cluster — list, describe and delete groups, pre-register and remove
static members, read, set and delete offsets, create, list and delete topics, describe the cluster.

Every group call goes to that group's coordinator (a node answers only for the partitions it leads) and is
retried with the member's policy: COORDINATOR_LOAD_IN_PROGRESS → same node again; COORDINATOR_NOT_AVAILABLE /
NOT_COORDINATOR / unreachable → find the coordinator again; all with bounded backoff up to `deadline_s`.
Per-item error codes are returned, never swallowed; an error of client/errors.py is raised only when a whole
request fails for a reason retrying cannot fix (or the deadline passed: the last retriable error), and
`BootstrapUnreachable` when no bootstrap node answered at all within `connect_timeout_s` — a wrong address
should fail fast, a failover should not. What it returns is in client/admin_types.py (and importable from here).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import grpc

from groupcoord.client.admin_types import (
    ClusterDescription,
    CreatedTopic,
    GroupDescription,
    ListedGroup,
    MemberDescription,
    NodeInfo,
    NodeSetting,
    PartitionInfo,
    TopicInfo,
    TopicPartition,
    group_description,
)
from groupcoord.client.discovery import Backoff, Connections
from groupcoord.client.errors import (
    BootstrapUnreachable,
    CoordinatorUnavailable,
    GroupcoordError,
    error_for,
    error_name,
)
from groupcoord.client.security import PLAINTEXT, ClientSecurity
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

RETRY_SAME_NODE = (Errors.COORDINATOR_LOAD_IN_PROGRESS,)
REDISCOVER = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)
__all__ = [
    "Admin",
    "ClusterDescription",
    "CreatedTopic",
    "GroupDescription",
    "ListedGroup",
    "MemberDescription",
    "NodeInfo",
    "NodeSetting",
    "PartitionInfo",
    "TopicInfo",
    "TopicPartition",
]


def _first_code(reply: Any) -> int:
    """The code that says whether the coordinator handled a one-group (or one-topic) request: the whole request's,
    else its first item's (a topic's partition that moved away is COORDINATOR_NOT_AVAILABLE in its item)."""
    code: int = getattr(reply, "error_code", Errors.NONE)
    if code != Errors.NONE:
        return code
    for item in (*getattr(reply, "groups", ()), *getattr(reply, "results", ())):
        return int(item.error_code)
    for topic in getattr(reply, "topics", ()):
        for partition in topic.partitions:
            return int(partition.error_code)
    return Errors.NONE


def _node_id(node: str) -> int:
    """The id of a node spec `id=host:port:raft_port[@...]` (the node checks the rest)."""
    head, sep, _ = node.partition("=")
    if not sep or not head.strip().isdigit():
        raise error_for(Errors.INVALID_REQUEST, f"expected id=host:port:raft_port, got {node!r}")
    return int(head)


class Admin:
    def __init__(
        self,
        bootstrap: list[str],
        deadline_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        security: ClientSecurity = PLAINTEXT,
        fail_fast_refused: bool = False,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.deadline_s = deadline_s
        self.connect_timeout_s = connect_timeout_s
        # An operator's command: every bootstrap address refusing the connection means nothing listens there, so
        # say so at once; a program (the default) may be starting beside the cluster and waits connect_timeout_s.
        self.fail_fast_refused = fail_fast_refused
        self._connections = Connections(self.bootstrap, request_timeout_s=min(deadline_s, 10.0), security=security)
        self._reached = False

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._connections.close()

    # -- any node -------------------------------------------------------------------------------------

    async def _any_node(self, method: str, request: Any) -> Any:
        """Asks the known nodes in turn; until one has answered, only `connect_timeout_s` is allowed."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        backoff = Backoff()
        last = "no answer"
        while True:
            refused = 0
            for address in list(self._connections.bootstrap):
                timeout = min(self.connect_timeout_s if not self._reached else 10.0, self.deadline_s)
                try:
                    reply = await getattr(self._connections.stub(address), method)(request, timeout=timeout)
                except grpc.aio.AioRpcError as exc:
                    last = f"{address}: {exc.code().name} {exc.details() or ''}".strip()
                    refused += "Connection refused" in (exc.details() or "")
                    continue
                self._reached = True
                return reply
            elapsed = loop.time() - start
            all_refused = self.fail_fast_refused and refused == len(self._connections.bootstrap)
            if not self._reached and (all_refused or elapsed > self.connect_timeout_s):
                raise BootstrapUnreachable(tuple(self.bootstrap), last, round(elapsed, 3))
            if elapsed > self.deadline_s:
                raise error_for(Errors.COORDINATOR_NOT_AVAILABLE, f"no node answered {method}: {last}")
            await backoff.wait()

    async def _ensure_reachable(self) -> None:
        """One cheap call first, so a wrong address fails in seconds rather than after the retry deadline."""
        if not self._reached:
            await self._any_node("DescribeCluster", pb.DescribeClusterRequest())

    async def list_groups(self, states: tuple[str, ...] | list[str] = ()) -> list[ListedGroup]:
        """Every node lists the groups it coordinates, as Kafka's admin client asks every broker; asked again
        until every partition is covered (a failover leaves some uncovered for a moment), within `deadline_s`."""
        request = pb.ListGroupsRequest(states_filter=list(states), coordinated_only=True)
        loop = asyncio.get_running_loop()
        deadline, backoff = loop.time() + self.deadline_s, Backoff()
        while True:
            cluster = await self.describe_cluster()
            groups: dict[str, ListedGroup] = {}
            covered: set[int] = set()
            for node in cluster.nodes:
                try:
                    reply = await self._connections.stub(f"{node.host}:{node.port}").ListGroups(
                        request, timeout=max(min(10.0, deadline - loop.time()), 0.1)
                    )
                except grpc.aio.AioRpcError:
                    continue
                if reply.error_code != Errors.NONE:
                    raise error_for(reply.error_code, reply.error_message)
                covered.update(reply.partitions)
                for g in reply.groups:
                    groups[g.group_id] = ListedGroup(g.group_id, g.protocol_type, g.group_state)
            missing = sorted(set(range(cluster.partition_count)) - covered)
            if not missing:
                return sorted(groups.values(), key=lambda g: g.group_id)
            if loop.time() > deadline:
                raise error_for(Errors.COORDINATOR_NOT_AVAILABLE, f"no coordinator listed partitions {missing}")
            await backoff.wait()

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster as one node sees it, each partition's voters' lag as its leader sees it (asked of each
        leader in turn; a partition whose leader does not answer keeps the first node's view, without lags)."""
        reply = await self._any_node("DescribeCluster", pb.DescribeClusterRequest())
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code)
        partitions = {p.partition_id: p for p in reply.partitions}
        addresses = {n.node_id: f"{n.host}:{n.port}" for n in reply.nodes}
        for leader in sorted({p.leader_node_id for p in reply.partitions} - {reply.node_id, -1}):
            if leader not in addresses:
                continue
            try:
                view = await self._connections.stub(addresses[leader]).DescribeCluster(
                    pb.DescribeClusterRequest(), timeout=min(self.deadline_s, 5.0)
                )
            except grpc.aio.AioRpcError:
                continue
            partitions.update({p.partition_id: p for p in view.partitions if p.replica_states})
        return ClusterDescription(
            answered_by=reply.node_id,
            partition_count=reply.partition_count,
            nodes=tuple(NodeInfo(n.node_id, n.host, n.port, n.alive, n.incarnation) for n in reply.nodes),
            partitions=tuple(
                PartitionInfo(
                    p.partition_id,
                    p.leader_node_id,
                    p.term,
                    p.commit_index,
                    tuple(p.replica_node_ids),
                    tuple((r.node_id, r.lag) for r in p.replica_states),
                )
                for p in sorted(partitions.values(), key=lambda p: p.partition_id)
            ),
            cluster_id=reply.cluster_id,
        )

    async def describe_settings(self) -> tuple[int, list[NodeSetting]]:
        """The node id and settings of the first bootstrap node that answers (give one address to ask that node).
        Admin only: `ClusterAuthorizationFailed` otherwise."""
        reply = await self._any_node("DescribeSettings", pb.DescribeSettingsRequest())
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        settings = [NodeSetting(s.name, s.value, s.source, s.default_value, s.sensitive) for s in reply.settings]
        return reply.node_id, settings

    async def add_voter(self, node: str) -> list[int]:
        """Makes `node` (`id=host:port:raft_port[@client_host:client_port]`, as in `peers`) a voter of every
        partition; the partitions this call changed. Start the node first (with `peers` naming the voters and
        itself): it catches up from the leaders, then counts toward their quorums."""
        timeout_ms = int(self.deadline_s * 1000)
        reply = await self._any_node("AddRaftVoter", pb.AddRaftVoterRequest(node=node, timeout_ms=timeout_ms))
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return list(reply.partitions_changed)

    async def remove_voter(self, node_id: int) -> list[int]:
        """Removes node `node_id` from every partition's voters; the partitions this call changed. Asked of another
        node (a node cannot remove itself); where `node_id` leads, it is asked to hand over first."""
        request = pb.RemoveRaftVoterRequest(node_id=node_id, timeout_ms=int(self.deadline_s * 1000))
        reply = await self._another_node(node_id, "RemoveRaftVoter", request)
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return list(reply.partitions_changed)

    async def replace_voter(self, node: str) -> list[int]:
        """Makes `node` (`id=host:port:raft_port[@...]`) the voter in place of the one with its id (a dead machine's
        successor at a new address): the old one is removed once `node` answers, then `node` is added; the
        partitions this call changed. Asked of another node; idempotent. Start the new node first."""
        request = pb.AddRaftVoterRequest(node=node, timeout_ms=int(self.deadline_s * 1000), replace=True)
        reply = await self._another_node(_node_id(node), "AddRaftVoter", request)
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return list(reply.partitions_changed)

    async def _another_node(self, node_id: int, method: str, request: Any) -> Any:
        """`method` at the first live node other than `node_id` that answers: the others stop talking to a voter
        being removed, so neither its removal nor its successor's addition can go through it."""
        cluster = await self.describe_cluster()
        others = [f"{n.host}:{n.port}" for n in cluster.nodes if n.node_id != node_id and n.alive]
        last = "no other node is alive"
        for address in others:
            try:
                return await getattr(self._connections.stub(address), method)(request, timeout=self.deadline_s + 5)
            except grpc.aio.AioRpcError as exc:
                last = f"{address}: {exc.code().name} {exc.details() or ''}".strip()
        raise error_for(Errors.COORDINATOR_NOT_AVAILABLE, f"no node but {node_id} answered: {last}")

    async def read_events(self, address: str) -> AsyncIterator[pb.ReadEventsResponse]:
        """The event files of the node at `address`, streamed (docs/EVENTS.md); within `deadline_s` in all."""
        stream = self._connections.stub(address).ReadEvents(pb.ReadEventsRequest(), timeout=self.deadline_s)
        async for reply in stream:
            if reply.error_code != Errors.NONE:
                raise error_for(reply.error_code, reply.error_message)
            yield reply

    # -- the group's coordinator ----------------------------------------------------------------------

    async def _call(self, group_id: str, method: str, request: Any) -> Any:
        """One RPC to the group's coordinator, retried across loads and moves until `deadline_s`.

        Raises `InvalidGroupId` for an id no node accepts, `CoordinatorUnavailable` (or the last retriable code's
        error) when the deadline passes, `InvalidRequest` when the node refuses the message itself,
        `GroupAuthorizationFailed` when the node's ACL refuses this caller the group.
        """
        await self._ensure_reachable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline_s
        backoff = Backoff()
        while True:
            remaining = deadline - loop.time()
            try:
                address = await self._connections.coordinator(group_id, timeout_s=max(remaining, 0.0))
            except BootstrapUnreachable as exc:
                # Some node answered before (`_ensure_reachable`): this group's coordinator is what is missing.
                raise CoordinatorUnavailable(str(exc), exc.tried, exc.last_cause) from None
            try:
                reply = await getattr(self._connections.stub(address), method)(
                    request, timeout=max(min(remaining, self._connections.request_timeout_s), 0.5)
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    raise error_for(Errors.INVALID_REQUEST, f"{method}: {exc.details()}") from None
                code: int | None = None
                detail = f"{address} {exc.code().name}"
            else:
                code = _first_code(reply)
                if code not in REDISCOVER and code not in RETRY_SAME_NODE:
                    return reply
                detail = f"{address} {error_name(code)}"
            if code not in RETRY_SAME_NODE:
                self._connections.forget(group_id)
            if loop.time() >= deadline:
                raise error_for(code if code is not None else Errors.COORDINATOR_NOT_AVAILABLE, f"{method}: {detail}")
            await backoff.wait()

    async def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        """One description per id, in the order asked; a group that failed carries its own error code."""

        async def one(group_id: str) -> GroupDescription:
            try:
                reply = await self._call(group_id, "DescribeGroups", pb.DescribeGroupsRequest(group_ids=[group_id]))
            except BootstrapUnreachable:
                raise
            except GroupcoordError as exc:
                return GroupDescription(group_id, exc.code, exc.message)
            return group_description(reply.groups[0])

        await self._ensure_reachable()
        return list(await asyncio.gather(*(one(g) for g in group_ids)))

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Code per group: NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ..."""

        async def one(group_id: str) -> int:
            try:
                reply: pb.DeleteGroupsResponse = await self._call(
                    group_id, "DeleteGroups", pb.DeleteGroupsRequest(group_ids=[group_id])
                )
            except BootstrapUnreachable:
                raise
            except GroupcoordError as exc:
                return exc.code
            return reply.results[0].error_code

        await self._ensure_reachable()
        unique = list(dict.fromkeys(group_ids))
        return dict(zip(unique, await asyncio.gather(*(one(g) for g in unique)), strict=True))

    async def add_members(self, group_id: str, instance_ids: list[str]) -> dict[str, int]:
        """Pre-registers static instances: their later joins cost one rebalance in all. Code per instance."""
        request = pb.AddMembersToGroupRequest(group_id=group_id, group_instance_ids=list(instance_ids))
        reply = await self._call(group_id, "AddMembersToGroup", request)
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return {r.group_instance_id: r.error_code for r in reply.results}

    async def remove_members(self, group_id: str, instance_ids: list[str], reason: str = "") -> dict[str, int]:
        """Removes static members by instance id (no member id): the group rebalances at once. Code per instance."""
        members = [pb.LeaveGroupRequest.MemberIdentity(group_instance_id=i, reason=reason) for i in instance_ids]
        reply = await self._call(group_id, "LeaveGroup", pb.LeaveGroupRequest(group_id=group_id, members=members))
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return {m.group_instance_id: m.error_code for m in reply.members}

    async def list_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, str]]:
        reply = await self._call(group_id, "OffsetFetch", pb.OffsetFetchRequest(group_id=group_id))
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        offsets: dict[TopicPartition, tuple[int, str]] = {}
        for topic in reply.topics:
            for p in topic.partitions:
                if p.error_code != Errors.NONE:
                    raise error_for(p.error_code, f"offset of {topic.name}:{p.partition_index}")
                offsets[(topic.name, p.partition_index)] = (p.committed_offset, p.metadata)
        return offsets

    async def alter_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """A "simple" commit (generation -1, no member): accepted only while the group is Empty (or new).

        Returns the code per partition; a live group answers e.g. UNKNOWN_MEMBER_ID for each of them.
        """
        request = pb.OffsetCommitRequest(group_id=group_id, generation_id=-1)
        by_topic: dict[str, Any] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            if topic not in by_topic:
                by_topic[topic] = request.topics.add(name=topic)
            by_topic[topic].partitions.add(partition_index=partition, committed_offset=offset)
        reply = await self._call(group_id, "OffsetCommit", request)
        return {(t.name, p.partition_index): p.error_code for t in reply.topics for p in t.partitions}

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Kafka's OffsetDelete: removes the group's committed offsets of `partitions`. Code per partition: NONE
        (deleted, or nothing was committed) or GROUP_SUBSCRIBED_TO_TOPIC (a live consumer group reads the topic).

        Raises the code's error (client/errors.py) for the whole request: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (a
        live group of another protocol type), GROUP_AUTHORIZATION_FAILED (an admin identity is needed), ...
        """
        request = pb.OffsetDeleteRequest(group_id=group_id)
        by_topic: dict[str, Any] = {}
        for topic, partition in sorted(set(partitions)):
            if topic not in by_topic:
                by_topic[topic] = request.topics.add(name=topic)
            by_topic[topic].partitions.add(partition_index=partition)
        reply = await self._call(group_id, "OffsetDelete", request)
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return {(t.name, p.partition_index): p.error_code for t in reply.topics for p in t.partitions}

    # -- topics ---------------------------------------------------------------------------------------

    async def _topic_call(self, name: str, method: str, request: Any) -> list[Any]:
        """A request about one topic name, at the coordinator of the partition the name hashes to (as a group id
        does), retried as `_call` retries; its results. A name FindCoordinator refuses as a group id (longer than the
        cluster's group_max_id_length) goes to any node, which refuses an illegal topic name itself."""
        try:
            reply = await self._call(name, method, request)
        except BootstrapUnreachable:
            raise
        except GroupcoordError as exc:
            if exc.code != Errors.INVALID_GROUP_ID:
                raise
            reply = await self._any_node(method, request)
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return list(reply.results)

    async def create_topics(self, topics: Sequence[tuple[str, int]], validate_only: bool = False) -> list[CreatedTopic]:
        """Creates each (name, partitions) topic (-1 partitions: the cluster's `default_num_partitions`); one result
        per topic, in the order asked. A failed topic fails alone (TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION,
        INVALID_PARTITIONS; a name listed twice is INVALID_REQUEST). `validate_only` checks without creating."""
        listings: dict[str, list[int]] = {}
        for i, (name, _) in enumerate(topics):
            listings.setdefault(name, []).append(i)

        async def one(name: str, indexes: list[int]) -> list[tuple[int, CreatedTopic]]:
            asked = [pb.CreateTopicsRequest.Topic(name=name, num_partitions=topics[i][1]) for i in indexes]
            request = pb.CreateTopicsRequest(topics=asked, validate_only=validate_only)
            try:
                answers = await self._topic_call(name, "CreateTopics", request)
            except BootstrapUnreachable:
                raise
            except GroupcoordError as exc:
                return [(i, CreatedTopic(name, exc.code, exc.message)) for i in indexes]
            return [
                (i, CreatedTopic(name, a.error_code, a.error_message, a.topic_id, a.num_partitions))
                for i, a in zip(indexes, answers, strict=True)
            ]

        await self._ensure_reachable()
        answered = await asyncio.gather(*(one(name, indexes) for name, indexes in listings.items()))
        by_index = dict(pair for pairs in answered for pair in pairs)
        return [by_index[i] for i in range(len(topics))]

    async def delete_topics(self, names: Sequence[str]) -> dict[str, int]:
        """Code per topic: NONE, UNKNOWN_TOPIC_OR_PARTITION, ..."""

        async def one(name: str) -> int:
            try:
                answers: list[pb.DeleteTopicsResponse.Result] = await self._topic_call(
                    name, "DeleteTopics", pb.DeleteTopicsRequest(names=[name])
                )
            except BootstrapUnreachable:
                raise
            except GroupcoordError as exc:
                return exc.code
            return answers[0].error_code

        await self._ensure_reachable()
        unique = list(dict.fromkeys(names))
        return dict(zip(unique, await asyncio.gather(*(one(n) for n in unique)), strict=True))

    async def list_topics(self, names: Sequence[str] = ()) -> list[TopicInfo]:
        """The registry, sorted by name (only the `names` that exist, when given), as one node has committed it."""
        reply = await self._any_node("ListTopics", pb.ListTopicsRequest(names=list(names)))
        if reply.error_code != Errors.NONE:
            raise error_for(reply.error_code, reply.error_message)
        return [TopicInfo(t.name, t.num_partitions, t.topic_id) for t in reply.topics]
