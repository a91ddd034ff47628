"""Requests a node hands on to the leader of another coordinator partition, for the client it serves.

Kafka clients send CreateTopics and DeleteTopics (and, through auto-creation, Metadata) to any broker, but a topic
is created or deleted by the leader of its coordinator partition. The node serves the topics it leads itself and
hands the others on over gRPC to the leader's client port, at the address the nodes reach each other by (`peers`,
not the address advertised to clients), with this node's TLS credentials (node/tls.py `peer_credentials`) and the
client's identity in a header signed with the cluster's key (node/forwarding.py): the leader authorizes the request
as the client's, with the same ACL, as if the client had called it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord.client.discovery import Backoff
from groupcoord.node.auth import Caller
from groupcoord.node.cluster import NodeCluster
from groupcoord.node.forwarding import CallerForwarding
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

# How long a request waits for another node before it answers without that node's part.
HAND_ON_DEADLINE_S = 5.0
# A partition's answer that says it is led elsewhere: the leader moved, the hand-on asks the new one.
ELSEWHERE = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)


class HandOnFailed(Exception):
    """No leader of the partition answered before the deadline."""


class HandOn:
    def __init__(
        self,
        cluster: NodeCluster,
        credentials: grpc.ChannelCredentials | None,
        forwarding: CallerForwarding,
        deadline_s: float = HAND_ON_DEADLINE_S,
    ) -> None:
        self._cluster = cluster
        self._credentials = credentials
        self._forwarding = forwarding
        self._deadline_s = deadline_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    def partition_for(self, key: str) -> int:
        """The coordinator partition of a group id or topic name."""
        return partition_for(key, self._cluster.partitions)

    async def call(
        self, partition: int, method: str, request: Message, caller: Caller, led_elsewhere: Callable[[Any], bool]
    ) -> Any:
        """`method` of the GroupCoordinator service at the leader of `partition`, for `caller`; asked again, of the
        leader as it is then, while the answer is `led_elsewhere` or the call fails, until the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline_s
        backoff = Backoff(max_s=0.5)
        last = "no leader"
        while True:
            leader = self._cluster.leader_of(partition)
            left = deadline - loop.time()
            if leader is not None:
                stub = pb_grpc.GroupCoordinatorStub(self._channel(leader.address))
                try:
                    reply = await getattr(stub, method)(
                        request, timeout=max(left, 0.1), metadata=(self._forwarding.header(caller, time.time()),)
                    )
                except grpc.aio.AioRpcError as exc:
                    last = f"node {leader.node_id} at {leader.address}: {exc.code().name} {exc.details()}"
                else:
                    if not led_elsewhere(reply):
                        return reply
                    last = f"node {leader.node_id} no longer leads it"
            if loop.time() >= deadline:
                raise HandOnFailed(f"partition {partition}: {last}")
            await backoff.wait()

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address)
            else:
                channel = grpc.aio.secure_channel(address, self._credentials)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
