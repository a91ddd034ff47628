"""The `groupcoord.v1.GroupCoordinator` gRPC service of a node.

Requests arrive as raw bytes and are parsed here, so a malformed payload is answered with
INVALID_ARGUMENT (grpc's own deserializer failure would surface as INTERNAL). A group's requests go to
the host of its partition (node/partitions.py), which answers COORDINATOR_NOT_AVAILABLE unless this node
leads the partition; FindCoordinator, ListGroups and DescribeCluster are answered by any node.

With an ACL (`acl_file`) every call is checked before its handler runs (node/authorizer.py): a one-group request
that its caller may not make is answered GROUP_AUTHORIZATION_FAILED as a whole, a batch request per group,
ListGroups lists only what the caller may describe and DescribeCluster leaves out the partition details for
non-admins. Each refusal is logged (`auth.denied`) and counted. Without an ACL nothing looks at who calls.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar, cast

import grpc
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from groupcoord.coordinator import CoordinatorResult, GroupCoordinator
from groupcoord.coordinator.admin import GroupRow, add_rows, group_rows, listed_states
from groupcoord.coordinator.validation import invalid_group_id
from groupcoord.node.auth import Acl
from groupcoord.node.authorizer import Authorizer
from groupcoord.node.cluster import NodeCluster
from groupcoord.node.config_types import SettingOrigin
from groupcoord.node.events import read_partition
from groupcoord.node.forwarding import CallerForwarding
from groupcoord.node.logs import fields
from groupcoord.node.membership import MembershipChanges
from groupcoord.node.metrics import NodeMetrics
from groupcoord.node.partitions import PartitionHost, Role
from groupcoord.node.responses import error_response
from groupcoord.node.settings_rpc import NodeSettingsView
from groupcoord.node.topics import TopicRegistry
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.limits import MAX_BATCH_REQUESTS
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["GroupCoordinator"]
SERVICE_NAME = SERVICE.full_name


class Context(Protocol):
    """What the request layer needs to know of a call, whichever listener it came through: gRPC's servicer context
    has these; the Kafka listener's connection provides them too (node/kafka/listener.py)."""

    def peer(self) -> str: ...

    def invocation_metadata(self) -> Any: ...

    def auth_context(self) -> Mapping[str, Iterable[bytes]]: ...

    async def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...


# A handler takes its own RPC's request type (pb.JoinGroupRequest, ...): the RPC's name picks the handler at run
# time, so the table can only say "some request" (Any), and each handler's signature says which.
Handler = Callable[[Any, Context], Awaitable[Message]]
StreamHandler = Callable[[Any, Context], AsyncIterator[Message]]


class _GroupEntry(Protocol):
    """An entry of a per-group reply (DescribeGroups' groups, DeleteGroups' results)."""

    @property
    def group_id(self) -> str: ...


_E = TypeVar("_E", bound=_GroupEntry)


def peer_host(peer: str) -> str:
    """`ipv4:10.0.0.1:5000` / `ipv6:[::1]:5000` -> the address alone, as Kafka shows a member's client_host."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        address = address.rsplit(":", 1)[0]
    return address.strip("[]") or peer


def _raw(data: bytes) -> bytes:
    return data


# The least an entry of a DescribeGroups or FindCoordinator reply takes besides its group id: the id's own tag and
# length, an error code or partition, a state or node id, and the entry's framing.
MIN_ENTRY_BYTES = 8

# Groups a ListGroups reply gains per turn of the event loop (some 25 ms of work).
LISTING_CHUNK = 10_000


class ReplyTooLarge(Exception):
    """A reply over `max_response_bytes`: answered RESOURCE_EXHAUSTED, never built in full or sent."""


class GroupCoordinatorService:
    def __init__(
        self,
        cluster: NodeCluster,
        max_group_id_length: int,
        metrics: NodeMetrics | None = None,
        acl: Acl | None = None,
        max_response_bytes: int = 4 * 1024 * 1024,
        forwarding: CallerForwarding | None = None,
        settings: Sequence[SettingOrigin] = (),
    ) -> None:
        self._cluster = cluster
        # Without the cluster's key (a service no other node hands requests to), every forwarded header is refused.
        self.forwarding = forwarding or CallerForwarding(secrets.token_urlsafe(24))
        self._max_response_bytes = max_response_bytes
        self._metrics = metrics
        self.auth = Authorizer(acl, self.forwarding, cluster.node_id, metrics)
        self._max_group_id_length = max_group_id_length
        self._methods: dict[str, Handler] = {
            "FindCoordinator": self.find_coordinator,
            "JoinGroup": self.join_group,
            "SyncGroup": self._routed(GroupCoordinator.sync_group),
            "Heartbeat": self._routed(GroupCoordinator.heartbeat),
            "LeaveGroup": self._routed(GroupCoordinator.leave_group),
            "AddMembersToGroup": self._routed(GroupCoordinator.add_members, creates_groups=True),
            "OffsetCommit": self._routed(GroupCoordinator.offset_commit, allow_empty=True, creates_groups=True),
            "OffsetFetch": self._routed(GroupCoordinator.offset_fetch, allow_empty=True),
            "OffsetDelete": self._routed(GroupCoordinator.offset_delete, allow_empty=True),
            "DescribeGroups": self.describe_groups,
            "ListGroups": self.list_groups,
            "DeleteGroups": self.delete_groups,
            "DescribeCluster": self.describe_cluster,
        }
        membership = MembershipChanges(cluster)
        self._methods["AddRaftVoter"] = membership.add_raft_voter
        self._methods["RemoveRaftVoter"] = membership.remove_raft_voter
        # The Kafka listener reads it for Metadata, ListOffsets and Fetch (node/kafka/apis.py).
        self.topics = topics = TopicRegistry(cluster)
        self._methods["CreateTopics"] = topics.create_topics
        self._methods["DeleteTopics"] = topics.delete_topics
        self._methods["ListTopics"] = topics.list_topics
        self._methods["DescribeSettings"] = NodeSettingsView(cluster.node_id, settings).describe_settings
        self._streams: dict[str, StreamHandler] = {"ReadEvents": self.read_events}
        # Bidirectional streams of batches whose every request is answered as the named unary RPC answers it.
        self._batches: dict[str, str] = {"HeartbeatStream": "Heartbeat", "OffsetCommitStream": "OffsetCommit"}
        missing = {m.name for m in SERVICE.methods} ^ (set(self._methods) | set(self._streams) | set(self._batches))
        if missing:
            raise RuntimeError(f"RPCs without a handler (or handlers without an RPC): {sorted(missing)}")
        self._served = {name: self._serving(name, handler) for name, handler in self._methods.items()}

    async def serve(self, name: str, request: Message, context: Context) -> Message:
        """The request layer every listener shares: authorization, validation, routing to the group's partition and
        the core call, for one parsed request of the named RPC. gRPC's handlers and the Kafka listener both come
        here, so none of it exists twice."""
        return await self._served[name](request, context)

    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler[bytes, Message]]:
        """Every RPC's handler, for `add_registered_method_handlers` (node/hostile.py: only registered methods are
        served)."""
        handlers: dict[str, grpc.RpcMethodHandler[bytes, Message]] = {}
        for method in SERVICE.methods:
            request_type, serializer = GetMessageClass(method.input_type), GetMessageClass(method.output_type)
            if method.client_streaming:
                unary = self._batches[method.name]
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                    self._batched(method.name, request_type, serializer, self._serving(unary, self._methods[unary])),
                    request_deserializer=_raw,
                    response_serializer=serializer.SerializeToString,
                )
            elif method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._guarded_stream(method.name, request_type, self._streams[method.name]),
                    request_deserializer=_raw,
                    response_serializer=serializer.SerializeToString,
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._guarded(method.name, request_type, self._methods[method.name]),
                    request_deserializer=_raw,
                    response_serializer=serializer.SerializeToString,
                )
        return handlers

    @staticmethod
    async def _parse(name: str, request_type: type[Message], raw: bytes, context: Context) -> Message:
        try:
            return request_type.FromString(raw)
        except DecodeError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {name} request: {exc}")

    def _guarded_stream(
        self, name: str, request_type: type[Message], handler: StreamHandler
    ) -> Callable[[bytes, Context], AsyncIterator[Message]]:
        """`_guarded` for a response stream: a failure ends that stream with INTERNAL."""

        async def stream(raw: bytes, context: Context) -> AsyncIterator[Message]:
            request = await self._parse(name, request_type, raw, context)
            denied = self.auth.admin_denial(name, context)  # the one stream, ReadEvents, is for admins only
            if denied is not None:
                yield pb.ReadEventsResponse(
                    error_code=Errors.GROUP_AUTHORIZATION_FAILED, error_message=denied, node_id=self._cluster.node_id
                )
                return
            try:
                async for response in handler(request, context):
                    yield response
            except (grpc.aio.AbortError, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("rpc.failed", extra=fields(rpc=name, peer=context.peer()))
                await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed on the server; see its log")

        return stream

    def _guarded(
        self, name: str, request_type: type[Message], handler: Handler
    ) -> Callable[[bytes, Context], Awaitable[Message]]:
        """Parses the request, then serves it (`_serving`); malformed is INVALID_ARGUMENT, counted as such."""
        serve = self._serving(name, handler, instrumented=False)

        async def handle(raw: bytes, context: Context) -> Message:
            return await serve(await self._parse(name, request_type, raw, context), context)

        return handle if self._metrics is None else self._metrics.instrument(name, handle)

    def _serving(self, name: str, handler: Handler, instrumented: bool = True) -> Handler:
        """Authorizes and runs one parsed request; a bug in one call becomes INTERNAL for that call, never a dead
        server."""

        async def serve(request: Message, context: Context) -> Message:
            try:
                if self.auth.acl is not None:
                    response = await self.auth.authorized(name, request, context, handler)
                else:
                    response = await handler(request, context)
                self._check_size(name, response.ByteSize())
                return response
            except ReplyTooLarge as exc:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("rpc.failed", extra=fields(rpc=name, peer=context.peer()))
                await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed on the server; see its log")

        return serve if self._metrics is None or not instrumented else self._metrics.instrument(name, serve)

    def _batched(
        self, name: str, batch_type: type[Message], response_type: type[Message], serve: Handler
    ) -> Callable[[AsyncIterator[bytes], Context], AsyncIterator[Message]]:
        """A stream of batches: the requests of one batch are served together (so the commits among them share
        Raft entries) and answered in order, in one response, before the next batch is read."""

        async def stream(batches: AsyncIterator[bytes], context: Context) -> AsyncIterator[Message]:
            async for raw in batches:
                batch: Any = await self._parse(name, batch_type, raw, context)
                if len(batch.requests) > MAX_BATCH_REQUESTS:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{name}: {len(batch.requests)} requests in one message, at most {MAX_BATCH_REQUESTS}",
                    )
                answers = await asyncio.gather(*(serve(request, context) for request in batch.requests))
                response = response_type(responses=answers)
                try:
                    self._check_size(name, response.ByteSize())
                except ReplyTooLarge as exc:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
                yield response

        return stream

    def _check_names(self, name: str, group_ids: Sequence[str]) -> None:
        """Refuses a batch request whose reply would be too large before any work: every id named, repeats
        included, gets an entry of at least the id and MIN_ENTRY_BYTES."""
        self._check_size(name, sum(len(g) for g in group_ids) + MIN_ENTRY_BYTES * len(group_ids))

    def _check_size(self, name: str, size: int) -> None:
        if size > self._max_response_bytes:
            raise ReplyTooLarge(
                f"{name}: the reply would be {size} bytes, over max_response_bytes = {self._max_response_bytes}; "
                "ask for fewer groups or partitions per call"
            )

    def _bad_group_id(self, group_id: str, allow_empty: bool = False) -> bool:
        return invalid_group_id(group_id, self._max_group_id_length, allow_empty)

    def _routed(
        self, method: Callable[..., CoordinatorResult], allow_empty: bool = False, creates_groups: bool = False
    ) -> Handler:
        """Sends a one-group request to the partition of its group (validation order: group id first). A call that
        may create a group gets the node's group count, for `max_groups_per_node`."""

        async def handle(request: Message, context: Context) -> Message:
            group_id = request.group_id  # type: ignore[attr-defined]  # every routed RPC's request names its group
            if self._bad_group_id(group_id, allow_empty):
                return error_response(request, Errors.INVALID_GROUP_ID)
            host = self._cluster.host_for(group_id)
            if creates_groups:
                node_groups = self._cluster.groups_led
                return await host.call(
                    request, lambda core, token: method(core, request, token, node_groups=node_groups)
                )
            return await host.call(request, lambda core, token: method(core, request, token))

        return handle

    # -- the RPCs that need more than one partition's core -------------------------------------------

    async def join_group(self, request: pb.JoinGroupRequest, context: Context) -> Message:
        if self._bad_group_id(request.group_id):
            return error_response(request, Errors.INVALID_GROUP_ID)
        client_host = peer_host(context.peer())
        host = self._cluster.host_for(request.group_id)
        return await host.call(
            request,
            lambda core, token: core.join_group(
                request, token, client_host=client_host, node_groups=self._cluster.groups_led
            ),
        )

    async def _per_partition(
        self, group_ids: list[str], call: Callable[[PartitionHost, list[str]], Awaitable[list[_E]]]
    ) -> dict[str, _E]:
        """Runs `call` once per partition with that partition's share of `group_ids`; results by group id."""
        shares: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(group_ids):
            shares.setdefault(partition_for(group_id, self._cluster.partitions), []).append(group_id)
        answers = await asyncio.gather(*(call(self._cluster.hosts[k], ids) for k, ids in shares.items()))
        return {item.group_id: item for answer in answers for item in answer}

    async def describe_groups(self, request: pb.DescribeGroupsRequest, context: Context) -> Message:
        async def one(host: PartitionHost, ids: list[str]) -> list[pb.DescribeGroupsResponse.Group]:
            sub = pb.DescribeGroupsRequest(group_ids=ids)
            response = cast(
                pb.DescribeGroupsResponse, await host.call(sub, lambda core, token: core.describe_groups(sub, token))
            )
            # Read after the answer: the term it was answered in, or a later one of this node's. So a stale answer
            # can at worst go unnoticed by the chaos checker's `two_coordinators`, never be invented.
            epoch = host.term
            for group in response.groups:
                if group.error_code == Errors.NONE:
                    group.coordinator_partition = host.partition_id
                    group.coordinator_node_id = self._cluster.node_id
                    group.coordinator_epoch = epoch
            return list(response.groups)

        self._check_names("DescribeGroups", request.group_ids)
        by_id = await self._per_partition(list(request.group_ids), one)
        # Counted before the reply is built: a group named a million times would be a million copies.
        sizes = {g: entry.ByteSize() for g, entry in by_id.items()}
        self._check_size("DescribeGroups", sum(sizes[g] + 5 for g in request.group_ids))
        return pb.DescribeGroupsResponse(groups=[by_id[g] for g in request.group_ids])

    async def delete_groups(self, request: pb.DeleteGroupsRequest, context: Context) -> Message:
        async def one(host: PartitionHost, ids: list[str]) -> list[pb.DeleteGroupsResponse.Result]:
            sub = pb.DeleteGroupsRequest(group_ids=ids)
            response = cast(
                pb.DeleteGroupsResponse, await host.call(sub, lambda core, token: core.delete_groups(sub, token))
            )
            return list(response.results)

        by_id = await self._per_partition(list(request.group_ids), one)
        resp = pb.DeleteGroupsResponse()
        seen: set[str] = set()
        for group_id in request.group_ids:
            # A group listed twice is deleted once; the repeat finds it gone, as in one coordinator.
            code = Errors.GROUP_ID_NOT_FOUND if group_id in seen and by_id[group_id].error_code == 0 else None
            resp.results.add(group_id=group_id, error_code=by_id[group_id].error_code if code is None else code)
            seen.add(group_id)
        return resp

    async def list_groups(self, request: pb.ListGroupsRequest, context: Context) -> Message:
        """Every node holds every partition's committed state, so any node lists all groups; `coordinated_only`
        lists the partitions this node leads, from their coordinators."""
        if request.coordinated_only:
            return await self._list_coordinated(request)
        wanted = listed_states(request.states_filter)
        if isinstance(wanted, pb.ListGroupsResponse):
            return wanted
        rows: list[GroupRow] = []
        for host in self._cluster.hosts:
            with host.replica.lock:  # the tick thread applies under this lock: held for the copy only
                rows.extend(group_rows(host.replica.store, wanted))
            await asyncio.sleep(0)
        rows.sort()
        merged = pb.ListGroupsResponse(error_code=Errors.NONE)
        for start in range(0, len(rows), LISTING_CHUNK):
            add_rows(merged, rows[start : start + LISTING_CHUNK])
            await asyncio.sleep(0)  # 100,000 groups take some 0.25 s to build: other requests go on meanwhile
        return merged

    async def _list_coordinated(self, request: pb.ListGroupsRequest) -> Message:
        """A partition this node is not serving (a follower, or still loading) is left out of `partitions`."""

        def invoke(core: GroupCoordinator, token: int) -> CoordinatorResult:
            return core.list_groups(request, token)

        hosts = [h for h in self._cluster.hosts if h.role is Role.LEADER]
        parts = cast("list[pb.ListGroupsResponse]", await asyncio.gather(*(h.call(request, invoke) for h in hosts)))
        merged = pb.ListGroupsResponse(error_code=Errors.NONE)
        for host, part in zip(hosts, parts, strict=True):
            if part.error_code == Errors.INVALID_REQUEST:
                return part
            if part.error_code == Errors.NONE:
                merged.groups.extend(part.groups)
                merged.partitions.append(host.partition_id)
        merged.groups.sort(key=lambda g: g.group_id)
        return merged

    async def find_coordinator(self, request: pb.FindCoordinatorRequest, context: Context) -> Message:
        self._check_names("FindCoordinator", request.group_ids)
        response = pb.FindCoordinatorResponse()
        for group_id in request.group_ids:
            partition = partition_for(group_id, self._cluster.partitions)
            entry = response.coordinators.add(group_id=group_id, partition=partition)
            leader = self._cluster.leader_of(partition)
            if self._bad_group_id(group_id, allow_empty=True):
                entry.error_code = Errors.INVALID_GROUP_ID
                entry.error_message = f"group id must be at most {self._max_group_id_length} characters"
            elif leader is None:
                entry.error_code = Errors.COORDINATOR_NOT_AVAILABLE
                entry.error_message = f"partition {partition} has no leader right now"
            else:
                entry.node_id, entry.host, entry.port = leader.node_id, leader.client_host, leader.client_port
        return response

    async def describe_cluster(self, request: pb.DescribeClusterRequest, context: Context) -> Message:
        cluster = self._cluster
        response = pb.DescribeClusterResponse(
            error_code=Errors.NONE,
            node_id=cluster.node_id,
            partition_count=cluster.partitions,
            cluster_id=cluster.cluster_id or "",
        )
        for peer in cluster.peers:
            response.nodes.add(
                node_id=peer.node_id,
                host=peer.client_host,
                port=peer.client_port,
                alive=cluster.alive(peer),
                incarnation=cluster.incarnations.get(peer.node_id, ""),
            )
        for host in cluster.hosts:
            leader = cluster.leader_of(host.partition_id)
            voters = cluster.members_of(host.partition_id)
            partition = response.partitions.add(
                partition_id=host.partition_id,
                leader_node_id=leader.node_id if leader is not None else -1,
                term=host.replica.term(),
                commit_index=host.replica.raftCommitIndex,
                replica_node_ids=[p.node_id for p in voters],
            )
            if host.replica.is_leader():
                matched, last = host.replica.match_indexes(), host.replica.last_log_index()
                for voter in voters:
                    if voter.node_id == cluster.node_id:
                        continue
                    index = matched.get(voter.raft_address(host.partition_id), 0)
                    partition.replica_states.add(node_id=voter.node_id, match_index=index, lag=max(last - index, 0))
        return response

    async def read_events(self, request: pb.ReadEventsRequest, context: Context) -> AsyncIterator[Message]:
        """Streams this node's event files; file reads run off the event loop, one chunk at a time."""
        node_id, root = self._cluster.node_id, self._cluster.events_root
        partitions = list(request.partitions) or list(range(self._cluster.partitions))
        unknown = [k for k in partitions if not 0 <= k < self._cluster.partitions]
        if root is None or unknown:
            message = (
                f"node {node_id} writes no events (events_max_segments = 0)"
                if root is None
                else f"no partition {unknown[0]}: partitions are 0 to {self._cluster.partitions - 1}"
            )
            yield pb.ReadEventsResponse(error_code=Errors.INVALID_REQUEST, error_message=message, node_id=node_id)
            return
        for partition in partitions:
            chunks = read_partition(root, partition)
            while (lines := await asyncio.to_thread(next, chunks, None)) is not None:
                yield pb.ReadEventsResponse(node_id=node_id, partition=partition, lines=lines)
