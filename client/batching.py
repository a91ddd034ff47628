"""Heartbeats and offset commits batched per coordinator node, over one long-lived stream each.

A unary call pays for its set-up on both sides, and a message on a stream still pays for one message; a batch pays
that once for all the calls it carries (docs/PERFORMANCE.md). Each node gets a lane: the calls made while the lane's
previous batch is being answered go out together as the next batch, one batch in flight at a time. So a lone call
is sent at once, and under load the batches grow with the wait (as the node's group commit does with Raft entries).
Every call made through one `Connections` shares the lanes: members of one process that share it share the batches.

A failure of the stream (a transport error, the node ending it, or no answer before the last caller's deadline)
fails every call of the batch and closes the stream; the next batch opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message

from groupcoord.protocol.limits import MAX_BATCH_REQUESTS

# How long `close()` waits for gRPC to finish the streams it cancelled (it takes a loop iteration or two).
CLOSE_WAIT_S = 1.0


class StreamBroken(Exception):
    """The stream failed, ended or did not answer in time; it is closed, and the next batch opens another."""


class Stubs(Protocol):
    def stub(self, address: str) -> Any: ...


@dataclass(slots=True)
class _Pending:
    request: Message
    future: asyncio.Future[Any]
    deadline: float  # loop time after which the caller no longer waits
    timeout_s: float


@dataclass(slots=True)
class _Lane:
    call: Any = None  # the open grpc.aio.StreamStreamCall, or None
    pending: list[_Pending] = field(default_factory=list)
    inflight: list[_Pending] = field(default_factory=list)  # the batch being sent or answered
    sender: asyncio.Task[None] | None = None
    # One timer per lane, at the earliest deadline of its waiting calls (a timer per call cost the client 16 % of
    # its CPU per heartbeat, docs/PERFORMANCE.md).
    reaper: asyncio.TimerHandle | None = None


class BatchStream:
    """One batch RPC (`HeartbeatStream`, `OffsetCommitStream`) to every node, one lane per node."""

    def __init__(self, stubs: Stubs, rpc: str, batch_type: type[Message]) -> None:
        self._stubs = stubs
        self._rpc = rpc
        self._batch_type = batch_type
        self._lanes: dict[str, _Lane] = {}

    async def call(self, address: str, request: Message, timeout_s: float) -> Any:
        """The node's answer to `request`, as the unary RPC would give it; StreamBroken after `timeout_s` or a
        failure of the stream, or the call's own gRPC error (e.g. INVALID_ARGUMENT)."""
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(address)
        if lane is None:
            lane = self._lanes[address] = _Lane()
        future: asyncio.Future[Any] = loop.create_future()
        deadline = loop.time() + timeout_s
        lane.pending.append(_Pending(request, future, deadline, timeout_s))
        if lane.sender is None:
            lane.sender = loop.create_task(self._send(address, lane))
        if lane.reaper is None or deadline < lane.reaper.when():
            self._arm(address, lane, deadline)
        return await future

    def _arm(self, address: str, lane: _Lane, deadline: float) -> None:
        if lane.reaper is not None:
            lane.reaper.cancel()
        lane.reaper = asyncio.get_running_loop().call_at(deadline, self._reap, address, lane)

    def _reap(self, address: str, lane: _Lane) -> None:
        """Fails the calls of `lane` whose deadline has passed, and re-arms for the earliest of the others."""
        lane.reaper = None
        now = asyncio.get_running_loop().time()
        earliest: float | None = None
        for p in itertools.chain(lane.inflight, lane.pending):
            if p.future.done():
                continue
            if p.deadline <= now:
                p.future.set_exception(StreamBroken(f"{self._rpc}: no answer from {address} in {p.timeout_s:.1f} s"))
            elif earliest is None or p.deadline < earliest:
                earliest = p.deadline
        if earliest is not None:
            self._arm(address, lane, earliest)

    async def _send(self, address: str, lane: _Lane) -> None:
        """Sends the lane's pending calls, a batch at a time, until none is left."""
        try:
            while lane.pending:
                batch = lane.inflight = [p for p in lane.pending[:MAX_BATCH_REQUESTS] if not p.future.done()]
                del lane.pending[:MAX_BATCH_REQUESTS]
                if not batch:
                    continue
                try:
                    if lane.call is None:
                        lane.call = getattr(self._stubs.stub(address), self._rpc)()
                    async with asyncio.timeout_at(max(p.deadline for p in batch)):
                        await lane.call.write(self._batch_type(requests=[p.request for p in batch]))
                        reply = await lane.call.read()
                    if reply is grpc.aio.EOF:
                        raise StreamBroken(f"{self._rpc}: {address} ended the stream")
                    if len(reply.responses) != len(batch):
                        raise StreamBroken(f"{self._rpc}: {len(reply.responses)} answers to {len(batch)} requests")
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError, StreamBroken) as exc:
                    _close(lane)
                    failure = exc if isinstance(exc, grpc.aio.AioRpcError | StreamBroken) else StreamBroken(str(exc))
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(failure)
                    continue
                for p, answer in zip(batch, reply.responses, strict=True):
                    if not p.future.done():
                        p.future.set_result(answer)
                await asyncio.sleep(0)  # the callers just answered may call again: let them join the next batch
        finally:
            lane.sender, lane.inflight = None, []

    async def close(self) -> None:
        """Ends every stream; calls still waiting get StreamBroken."""
        lanes, self._lanes = self._lanes, {}
        calls = [lane.call for lane in lanes.values() if lane.call is not None]
        for lane in lanes.values():
            _close(lane)
            if lane.reaper is not None:
                lane.reaper.cancel()
                lane.reaper = None
            for p in lane.inflight + lane.pending:
                if not p.future.done():
                    p.future.set_exception(StreamBroken(f"{self._rpc}: closed"))
            lane.pending.clear()
            if lane.sender is not None:
                lane.sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.sender
        if calls:
            # gRPC ends a cancelled call in a task of its own: waiting for its status (briefly) means a caller that
            # stops its event loop right after close() leaves no task pending ("Task was destroyed ...").
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*(call.code() for call in calls)), CLOSE_WAIT_S)


def _close(lane: _Lane) -> None:
    if lane.call is not None:
        lane.call.cancel()
    lane.call = None
