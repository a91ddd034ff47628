"""A member's heartbeats over one `HeartbeatStream` to its coordinator instead of a unary call each.

A unary call pays for its set-up on both sides; a message on an open stream does not, which makes a heartbeat
cost the node about half as much CPU (docs/PERFORMANCE.md). The stream is opened on the first heartbeat to a
node and kept while the coordinator stays there; any failure closes it, and the next heartbeat opens a new one
(to the coordinator found again, if it moved).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from groupcoord.client.discovery import Connections
from groupcoord.protocol.v1 import groupcoord_pb2 as pb


class StreamBroken(Exception):
    """The stream failed, ended or did not answer in time; it is closed, and the next heartbeat opens another."""


class HeartbeatStream:
    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self._call: Any = None  # grpc.aio.StreamStreamCall
        self._address = ""

    async def beat(self, address: str, request: pb.HeartbeatRequest, timeout_s: float) -> pb.HeartbeatResponse:
        """The coordinator's answer to one heartbeat, over the stream to `address` (opened if needed)."""
        if self._address != address:
            self.close()
            self._call, self._address = self._connections.stub(address).HeartbeatStream(), address
        try:
            async with asyncio.timeout(timeout_s):
                await self._call.write(request)
                reply = await self._call.read()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError) as exc:
            self.close()
            raise StreamBroken(str(exc)) from None
        if reply is grpc.aio.EOF:
            self.close()
            raise StreamBroken("the node ended the stream")
        return reply

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
        self._call, self._address = None, ""
