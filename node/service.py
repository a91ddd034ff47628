"""The `groupcoord.v1.GroupCoordinator` gRPC service of a single node.

Requests arrive as raw bytes and are parsed here, so a malformed payload is answered with
INVALID_ARGUMENT (grpc's own deserializer failure would surface as INTERNAL). Group RPCs go to the core
through the driver; FindCoordinator and DescribeCluster are about nodes and are answered here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from groupcoord.coordinator import Effects, GroupCoordinator
from groupcoord.node.driver import CoreDriver, Token
from groupcoord.node.logs import fields
from groupcoord.node.metrics import NodeMetrics
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["GroupCoordinator"]
SERVICE_NAME = SERVICE.full_name
# Until the cluster exists, one node coordinates every group, all in partition 0.
PARTITION = 0

Context = grpc.aio.ServicerContext
Handler = Callable[[Message, Context], Awaitable[Message]]


def peer_host(peer: str) -> str:
    """`ipv4:10.0.0.1:5000` / `ipv6:[::1]:5000` -> the address alone, as Kafka shows a member's client_host."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        address = address.rsplit(":", 1)[0]
    return address.strip("[]") or peer


def _raw(data: bytes) -> bytes:
    return data


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """How this node is reached, as FindCoordinator and DescribeCluster report it."""

    node_id: int
    host: str
    port: int


class GroupCoordinatorService:
    def __init__(
        self,
        core: GroupCoordinator,
        driver: CoreDriver,
        node: NodeIdentity,
        max_group_id_length: int,
        metrics: NodeMetrics | None = None,
    ) -> None:
        self._core = core
        self._metrics = metrics
        self._driver = driver
        self._node = node
        self._max_group_id_length = max_group_id_length
        self._methods: dict[str, Handler] = {
            "FindCoordinator": self.find_coordinator,
            "JoinGroup": self.join_group,
            "SyncGroup": self._core_call(core.sync_group),
            "Heartbeat": self._core_call(core.heartbeat),
            "LeaveGroup": self._core_call(core.leave_group),
            "AddMembersToGroup": self._core_call(core.add_members),
            "OffsetCommit": self._core_call(core.offset_commit),
            "OffsetFetch": self._core_call(core.offset_fetch),
            "DescribeGroups": self.describe_groups,
            "ListGroups": self._core_call(core.list_groups),
            "DeleteGroups": self._core_call(core.delete_groups),
            "DescribeCluster": self.describe_cluster,
        }
        missing = {m.name for m in SERVICE.methods} ^ set(self._methods)
        if missing:
            raise RuntimeError(f"RPCs without a handler (or handlers without an RPC): {sorted(missing)}")

    def generic_handler(self) -> grpc.GenericRpcHandler:
        handlers = {
            method.name: grpc.unary_unary_rpc_method_handler(
                self._guarded(method.name, GetMessageClass(method.input_type), self._methods[method.name]),
                request_deserializer=_raw,
                response_serializer=GetMessageClass(method.output_type).SerializeToString,
            )
            for method in SERVICE.methods
        }
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _guarded(
        self, name: str, request_type: type[Message], handler: Handler
    ) -> Callable[[bytes, Context], Awaitable]:
        """Parses the request; a bug in one call becomes INTERNAL for that call, never a dead server."""

        async def handle(raw: bytes, context: Context) -> Message:
            try:
                request = request_type.FromString(raw)
            except DecodeError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {name} request: {exc}")
            try:
                return await handler(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("rpc.failed", extra=fields(rpc=name, peer=context.peer()))
                await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed on the server; see its log")

        return handle if self._metrics is None else self._metrics.instrument(name, handle)

    def _core_call(self, method: Callable[[Message, Token], Effects]) -> Handler:
        async def handle(request: Message, context: Context) -> Message:
            return await self._driver.call(lambda token: method(request, token))

        return handle

    # -- the RPCs that need more than the core ------------------------------------------------------

    async def join_group(self, request: pb.JoinGroupRequest, context: Context) -> Message:
        host = peer_host(context.peer())
        return await self._driver.call(lambda token: self._core.join_group(request, token, client_host=host))

    async def describe_groups(self, request: pb.DescribeGroupsRequest, context: Context) -> Message:
        response = await self._driver.call(lambda token: self._core.describe_groups(request, token))
        for group in response.groups:  # type: ignore[attr-defined]
            if group.error_code == Errors.NONE:
                group.coordinator_partition = PARTITION
                group.coordinator_node_id = self._node.node_id
        return response

    async def find_coordinator(self, request: pb.FindCoordinatorRequest, context: Context) -> Message:
        response = pb.FindCoordinatorResponse()
        for group_id in request.group_ids:
            entry = response.coordinators.add(group_id=group_id, partition=PARTITION)
            if not group_id or len(group_id) > self._max_group_id_length:
                entry.error_code = Errors.INVALID_GROUP_ID
                entry.error_message = f"group id must be 1 to {self._max_group_id_length} characters"
            else:
                entry.node_id, entry.host, entry.port = self._node.node_id, self._node.host, self._node.port
        return response

    async def describe_cluster(self, request: pb.DescribeClusterRequest, context: Context) -> Message:
        node = self._node
        return pb.DescribeClusterResponse(
            error_code=Errors.NONE,
            node_id=node.node_id,
            nodes=[pb.DescribeClusterResponse.Node(node_id=node.node_id, host=node.host, port=node.port, alive=True)],
            partitions=[
                pb.DescribeClusterResponse.Partition(
                    partition_id=PARTITION,
                    leader_node_id=node.node_id,
                    term=0,
                    commit_index=self._driver.batches_committed,
                    replica_node_ids=[node.node_id],
                )
            ],
            partition_count=1,
        )
