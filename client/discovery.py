"""Reaching the cluster: one gRPC channel per node, each group's coordinator found and cached, and the batch
streams (client/batching.py) that carry heartbeats and offset commits.

FindCoordinator may be asked of any node; the answer is cached per group until a call to the coordinator
says it moved (COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR) or the node cannot be reached. Every retry
loop backs off exponentially with jitter, bounded, so no error path spins.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import grpc

from groupcoord.client.batching import BatchStream
from groupcoord.client.security import PLAINTEXT, ClientSecurity, aio_channels
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc


class CoordinatorUnavailable(Exception):
    """No node named a coordinator for the group before the deadline."""


class InvalidGroupId(ValueError):
    """The cluster refused the group id (INVALID_GROUP_ID): retrying cannot help."""


class GroupAuthorizationFailed(Exception):
    """The cluster refused this caller the group (GROUP_AUTHORIZATION_FAILED): retrying cannot help."""


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with full jitter: 50 ms, 100 ms, ... up to `max_s`."""

    initial_s: float = 0.05
    max_s: float = 2.0
    attempt: int = field(default=0)

    def reset(self) -> None:
        self.attempt = 0

    async def wait(self) -> None:
        ceiling = min(self.max_s, self.initial_s * 2**self.attempt)
        self.attempt += 1
        await asyncio.sleep(random.uniform(ceiling / 2, ceiling))


class Connections:
    def __init__(
        self, bootstrap: list[str], request_timeout_s: float = 30.0, security: ClientSecurity = PLAINTEXT
    ) -> None:
        if not bootstrap:
            raise ValueError("bootstrap needs at least one host:port")
        self.bootstrap = list(bootstrap)
        self.request_timeout_s = request_timeout_s
        # An unreadable CA, certificate or key fails here, in the constructor, not in a retry loop.
        self._open_channel = aio_channels(security)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._coordinators: dict[str, str] = {}
        self.heartbeats = BatchStream(self, "HeartbeatStream", pb.HeartbeatBatchRequest)
        self.commits = BatchStream(self, "OffsetCommitStream", pb.OffsetCommitBatchRequest)

    def stub(self, address: str) -> pb_grpc.GroupCoordinatorStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._open_channel(address)
        return pb_grpc.GroupCoordinatorStub(channel)

    def forget(self, group_id: str) -> None:
        """The cached coordinator said it is not (or no longer) the coordinator."""
        self._coordinators.pop(group_id, None)

    async def coordinator(self, group_id: str, timeout_s: float = 30.0) -> str:
        """The address of the group's coordinator, asking the known nodes in turn until one names it."""
        cached = self._coordinators.get(group_id)
        if cached is not None:
            return cached
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        nodes = list(self.bootstrap)
        while True:
            for address in nodes:
                # A hung node (SIGSTOP, a dead host's open socket) must not hold the caller past its deadline.
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    found = await self.stub(address).FindCoordinator(
                        pb.FindCoordinatorRequest(group_ids=[group_id]),
                        timeout=min(5.0, self.request_timeout_s, left),
                    )
                except grpc.aio.AioRpcError:
                    continue
                entry = found.coordinators[0]
                if entry.error_code == Errors.INVALID_GROUP_ID:
                    raise InvalidGroupId(f"invalid group id {group_id!r}: {entry.error_message}")
                if entry.error_code == Errors.GROUP_AUTHORIZATION_FAILED:
                    raise GroupAuthorizationFailed(entry.error_message or f"not authorized for group {group_id!r}")
                if entry.error_code == Errors.NONE:
                    address = f"{entry.host}:{entry.port}"
                    self._coordinators[group_id] = address
                    if address not in self.bootstrap:
                        self.bootstrap.append(address)
                    return address
            if loop.time() >= deadline:
                raise CoordinatorUnavailable(f"no coordinator found for group {group_id!r} via {nodes}")
            await backoff.wait()

    async def close(self) -> None:
        await self.heartbeats.close()
        await self.commits.close()
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close() for c in channels.values()), return_exceptions=True)
