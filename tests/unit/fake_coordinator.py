"""A fault-injecting fake coordinator: a real `grpc.aio` server on 127.0.0.1 that a real client talks to.

Each RPC answers from a per-method queue of scripted responses — a response message, an `int` error code, or a
callable `(request, context) -> response` (may be async, may abort the call) — then from `always[method]` if set,
and otherwise from a sane default:

* FindCoordinator names `coordinator` (itself unless set to another fake, `find_error` overrides);
* JoinGroup: a dynamic member with an empty id gets a fresh id; the member becomes leader of the next generation
  with itself as the only member;
* SyncGroup: the leader's own assignment from the request (else every partition of `topics`);
* Heartbeat and OffsetCommit (a call, or each request of a batch on HeartbeatStream / OffsetCommitStream),
  LeaveGroup: NONE; OffsetFetch: the offsets committed here.

Every request is recorded as `(method, request)` in `requests`, so a test asserts what the client sent, and each
batch of a stream as `(method, size)` in `batches`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from groupcoord.client.protocol import Assignment, encode_assignment
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

Scripted = Any  # a response message, an error code (int), or a callable(request, context) -> response

_RESPONSES: dict[str, type] = {
    "JoinGroup": pb.JoinGroupResponse,
    "SyncGroup": pb.SyncGroupResponse,
    "Heartbeat": pb.HeartbeatResponse,
    "LeaveGroup": pb.LeaveGroupResponse,
    "OffsetFetch": pb.OffsetFetchResponse,
}


class FakeCoordinator(pb_grpc.GroupCoordinatorServicer):
    """The scriptable servicer and its server; `await start()` / `await stop()`."""

    def __init__(self, node_id: int = 1, topics: dict[str, int] | None = None) -> None:
        self.node_id = node_id
        self.topics = dict(topics or {"t": 4})
        self.requests: list[tuple[str, Any]] = []
        self.batches: list[tuple[str, int]] = []
        self.queues: dict[str, list[Scripted]] = {}
        self.always: dict[str, Scripted] = {}  # answered every time while set (after the queue)
        self.coordinator: FakeCoordinator | None = None  # None: itself
        self.find_error: int = Errors.NONE
        self.generation = 0
        self.offsets: dict[tuple[str, int], int] = {}
        self._ids = itertools.count(1)
        self._server: grpc.aio.Server | None = None
        self.port = 0

    # -- lifecycle / scripting ------------------------------------------------------------------------

    async def start(self) -> FakeCoordinator:
        self._server = grpc.aio.server()
        pb_grpc.add_GroupCoordinatorServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def script(self, method: str, *responses: Scripted) -> None:
        """Queues answers for `method`, used once each in order before the default applies again (`None`: the
        default answer for that turn)."""
        self.queues.setdefault(method, []).extend(responses)

    def sent(self, method: str) -> list[Any]:
        """The requests of `method` received so far."""
        return [r for m, r in self.requests if m == method]

    def count(self, method: str | None = None) -> int:
        return len(self.requests) if method is None else len(self.sent(method))

    async def wait_for(self, method: str, n: int = 1, timeout_s: float = 5.0) -> list[Any]:
        """Polls (bounded) until `n` requests of `method` have arrived."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.count(method) < n:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{method}: {self.count(method)} requests, wanted {n}")
            await asyncio.sleep(0.01)
        return self.sent(method)

    async def _answer(self, method: str, request: Any, context: Any, default: Callable[[Any], Any]) -> Any:
        self.requests.append((method, request))
        queue = self.queues.get(method)
        scripted = queue.pop(0) if queue else self.always.get(method)
        if scripted is not None:
            if callable(scripted):
                result = scripted(request, context)
                return await result if inspect.isawaitable(result) else result
            if isinstance(scripted, int):
                return self._error(method, request, scripted)
            return scripted
        return default(request)

    def _error(self, method: str, request: Any, code: int) -> Any:
        if method == "OffsetCommit":
            response = pb.OffsetCommitResponse()
            for topic in request.topics:
                t = response.topics.add(name=topic.name)
                for p in topic.partitions:
                    t.partitions.add(partition_index=p.partition_index, error_code=code)
            return response
        return _RESPONSES[method](error_code=code)

    # -- RPCs -----------------------------------------------------------------------------------------

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        def default(req: Any) -> Any:
            target = self.coordinator or self
            response = pb.FindCoordinatorResponse()
            for group_id in req.group_ids:
                if self.find_error != Errors.NONE:
                    response.coordinators.add(group_id=group_id, error_code=self.find_error)
                else:
                    response.coordinators.add(
                        group_id=group_id, node_id=target.node_id, host="127.0.0.1", port=target.port
                    )
            return response

        return await self._answer("FindCoordinator", request, context, default)

    async def JoinGroup(self, request: Any, context: Any) -> Any:
        def default(req: Any) -> Any:
            member_id = req.member_id or f"{req.group_instance_id or req.client_id}-{next(self._ids)}"
            self.generation += 1
            response = pb.JoinGroupResponse(
                generation_id=self.generation,
                protocol_type=req.protocol_type,
                protocol_name=req.protocols[0].name if req.protocols else "",
                leader=member_id,
                member_id=member_id,
            )
            response.members.add(
                member_id=member_id,
                group_instance_id=req.group_instance_id,
                metadata=req.protocols[0].metadata if req.protocols else b"",
            )
            return response

        return await self._answer("JoinGroup", request, context, default)

    async def SyncGroup(self, request: Any, context: Any) -> Any:
        def default(req: Any) -> Any:
            mine = [a.assignment for a in req.assignments if a.member_id == req.member_id]
            if mine:
                payload = mine[0]
            else:
                everything = [(t, p) for t, n in self.topics.items() for p in range(n)]
                payload = encode_assignment(Assignment(tuple(everything)))
            return pb.SyncGroupResponse(protocol_type=req.protocol_type, protocol_name=req.protocol_name,
                                        assignment=payload)  # fmt: skip

        return await self._answer("SyncGroup", request, context, default)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        return await self._answer("Heartbeat", request, context, lambda req: pb.HeartbeatResponse())

    async def HeartbeatStream(self, batches: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """Each heartbeat of each batch is answered (and scripted, and recorded) as a Heartbeat call."""
        async for batch in batches:
            self.batches.append(("Heartbeat", len(batch.requests)))
            answers = [await self.Heartbeat(request, context) for request in batch.requests]
            yield pb.HeartbeatBatchResponse(responses=answers)

    async def OffsetCommitStream(self, batches: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """Each commit of each batch is answered (and scripted, and recorded) as an OffsetCommit call."""
        async for batch in batches:
            self.batches.append(("OffsetCommit", len(batch.requests)))
            answers = [await self.OffsetCommit(request, context) for request in batch.requests]
            yield pb.OffsetCommitBatchResponse(responses=answers)

    async def LeaveGroup(self, request: Any, context: Any) -> Any:
        def default(req: Any) -> Any:
            response = pb.LeaveGroupResponse()
            for m in req.members:
                response.members.add(member_id=m.member_id, group_instance_id=m.group_instance_id)
            return response

        return await self._answer("LeaveGroup", request, context, default)

    async def OffsetCommit(self, request: Any, context: Any) -> Any:
        def default(req: Any) -> Any:
            for topic in req.topics:
                for p in topic.partitions:
                    self.offsets[(topic.name, p.partition_index)] = p.committed_offset
            return self._error("OffsetCommit", req, Errors.NONE)

        return await self._answer("OffsetCommit", request, context, default)

    async def OffsetFetch(self, request: Any, context: Any) -> Any:
        def default(req: Any) -> Any:
            response = pb.OffsetFetchResponse()
            by_topic: dict[str, Any] = {}
            for (topic, partition), offset in sorted(self.offsets.items()):
                if topic not in by_topic:
                    by_topic[topic] = response.topics.add(name=topic)
                by_topic[topic].partitions.add(partition_index=partition, committed_offset=offset)
            return response

        return await self._answer("OffsetFetch", request, context, default)
