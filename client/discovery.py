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
from groupcoord.client.errors import BootstrapUnreachable, CoordinatorUnavailable, error_for
from groupcoord.client.security import PLAINTEXT, ClientSecurity, aio_channels
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc


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

    def stub(self, address: str) -> pb_grpc.GroupCoordinatorAsyncStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._open_channel(address)
        return pb_grpc.GroupCoordinatorStub(channel)

    def known_coordinator(self, group_id: str) -> str:
        """The cached coordinator's address ("" while none is known)."""
        return self._coordinators.get(group_id, "")

    def forget(self, group_id: str) -> None:
        """The cached coordinator said it is not (or no longer) the coordinator."""
        self._coordinators.pop(group_id, None)

    async def coordinator(self, group_id: str, timeout_s: float = 30.0) -> str:
        """The address of the group's coordinator, asking the known nodes in turn until one names it.

        Raises `BootstrapUnreachable` when no node answered at all before the deadline, `CoordinatorUnavailable`
        when nodes answered but none named a coordinator, and the code's error (`InvalidGroupId`,
        `GroupAuthorizationFailed`) when a node refused the group."""
        cached = self._coordinators.get(group_id)
        if cached is not None:
            return cached
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_s
        nodes = list(self.bootstrap)
        answered = False
        last = ""
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
                except grpc.aio.AioRpcError as exc:
                    last = f"{address}: {exc.code().name} {exc.details() or ''}".rstrip()
                    continue
                answered = True
                entry = found.coordinators[0]
                if entry.error_code == Errors.NONE:
                    address = f"{entry.host}:{entry.port}"
                    self._coordinators[group_id] = address
                    if address not in self.bootstrap:
                        self.bootstrap.append(address)
                    return address
                error = error_for(entry.error_code, entry.error_message or f"group {group_id!r}")
                if not error.retriable:
                    raise error
                last = f"{address}: {error}"
            if loop.time() >= deadline:
                if not answered:
                    raise BootstrapUnreachable(tuple(nodes), last, round(loop.time() - started, 3))
                raise CoordinatorUnavailable(
                    f"no coordinator found for group {group_id!r} via {','.join(nodes)} (last: {last})",
                    tried=tuple(nodes),
                    last_cause=last,
                )
            await backoff.wait()

    async def close(self) -> None:
        await self.heartbeats.close()
        await self.commits.close()
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close() for c in channels.values()), return_exceptions=True)
