"""Many group members in one process over a few shared channels, following the real protocol.

Thousands of SDK `GroupMember`s, each with its own channel and tasks, would measure the client; here a
member is a small record and a coroutine, and all members share a `Router` (two channels per node and a
cache of each group's coordinator). The protocol is the SDK's: JoinGroup (MEMBER_ID_REQUIRED, then again
with the id), the leader assigns with the range assignor over the members' subscriptions, SyncGroup,
Heartbeat; with `Router(batched=True)`, as the SDK sends them, heartbeats and commits go over the batch streams
(HeartbeatStream, OffsetCommitStream: one per node for the whole process, client/batching.py), else unary calls;
REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID mean rejoin, and COORDINATOR_NOT_AVAILABLE /
NOT_COORDINATOR / a transport error mean find the coordinator again.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from groupcoord.client.assignors import RangeAssignor
from groupcoord.client.batching import BatchStream, StreamBroken
from groupcoord.client.protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupcoord.client.security import PLAINTEXT, ClientSecurity, aio_channels
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)
CHANNELS_PER_NODE = 2
RETRY_S = 0.02
# How often a wait for a group to form looks at its members' tasks for one that failed.
TASK_CHECK_S = 0.1
RPC_TIMEOUT_S = 5.0
REDISCOVER = frozenset({Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS})
REJOIN = frozenset({Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID})
TOPIC = "bench"


class BenchError(RuntimeError):
    """The cluster answered something a correct member cannot carry on from."""


class Router:
    """Shared channels and each group's coordinator address."""

    def __init__(self, bootstrap: list[str], batched: bool = True, security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.batched = batched
        self._streams = {
            "Heartbeat": BatchStream(self, "HeartbeatStream", pb.HeartbeatBatchRequest),
            "OffsetCommit": BatchStream(self, "OffsetCommitStream", pb.OffsetCommitBatchRequest),
        }
        self._open = aio_channels(security, CHANNEL_OPTIONS)
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        # One stub per channel: a stub builds a callable per method, which cost the client 13 % of its CPU in a
        # 1,000-member join when it was built for every call.
        self._stubs: dict[str, list[pb_grpc.GroupCoordinatorAsyncStub]] = {}
        self._turn = itertools.count()
        self._coordinators: dict[str, str] = {}

    def stub(self, address: str) -> pb_grpc.GroupCoordinatorAsyncStub:
        stubs = self._stubs.get(address)
        if stubs is None:
            channels = self._channels[address] = [self._open(address) for _ in range(CHANNELS_PER_NODE)]
            stubs = self._stubs[address] = [pb_grpc.GroupCoordinatorStub(channel) for channel in channels]
        return stubs[next(self._turn) % len(stubs)]

    async def coordinator(self, group_id: str) -> str:
        address = self._coordinators.get(group_id)
        if address is None:
            await self.find([group_id])
            address = self._coordinators[group_id]
        return address

    def forget(self, group_id: str, address: str) -> None:
        if self._coordinators.get(group_id) == address:
            del self._coordinators[group_id]

    async def find(self, group_ids: list[str], deadline_s: float = 60.0) -> None:
        """Asks the bootstrap nodes in turn until each group has a coordinator (500 groups per call)."""
        deadline = time.monotonic() + deadline_s
        missing = [g for g in group_ids if g not in self._coordinators]
        for attempt in itertools.count():
            if not missing:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"no coordinator for {len(missing)} groups, e.g. {missing[0]}")
            node = self.bootstrap[attempt % len(self.bootstrap)]
            try:
                for start in range(0, len(missing), 500):
                    reply = await self.stub(node).FindCoordinator(
                        pb.FindCoordinatorRequest(group_ids=missing[start : start + 500]), timeout=RPC_TIMEOUT_S
                    )
                    for found in reply.coordinators:
                        if found.error_code == Errors.NONE:
                            self._coordinators[found.group_id] = f"{found.host}:{found.port}"
            except grpc.aio.AioRpcError:
                pass
            missing = [g for g in missing if g not in self._coordinators]
            if missing:
                await asyncio.sleep(RETRY_S)

    async def call(self, group_id: str, method: str, request: Any, timeout_s: float = RPC_TIMEOUT_S) -> Any | None:
        """The reply, or None after the coordinator was unreachable or moved (looked up again next time)."""
        address = await self.coordinator(group_id)
        try:
            if self.batched and method in self._streams:
                reply = await self._streams[method].call(address, request, timeout_s)
            else:
                reply = await getattr(self.stub(address), method)(request, timeout=timeout_s)
        except (grpc.aio.AioRpcError, StreamBroken):
            reply = None
        if reply is None or getattr(reply, "error_code", Errors.NONE) in REDISCOVER:
            self.forget(group_id, address)
            await asyncio.sleep(RETRY_S)
            return None
        return reply

    async def close(self) -> None:
        for stream in self._streams.values():
            await stream.close()
        for channels in self._channels.values():
            for channel in channels:
                await channel.close()
        self._channels.clear()
        self._stubs.clear()


@dataclass
class Member:
    group_id: str
    group_instance_id: str = ""
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 30_000
    member_id: str = ""
    generation_id: int = -1
    joining: bool = True
    synced_at: float = 0.0  # perf_counter() of the last successful SyncGroup
    assignment: bytes = b""
    heartbeats: int = 0
    # (perf_counter at the answer, latency in ms) of successful heartbeats while `record` is set.
    latencies: list[tuple[float, float]] = field(default_factory=list)
    record: bool = False
    errors: dict[str, int] = field(default_factory=dict)

    def count_error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def subscription(partitions: int) -> bytes:
    return encode_subscription(Subscription({TOPIC: partitions}))


def assign(members: Any) -> list[pb.SyncGroupRequest.Assignment]:
    """The leader's job, as the SDK does it: decode every subscription, range-assign, encode."""
    subscriptions = {m.member_id: decode_subscription(m.metadata) for m in members}
    assigned = RangeAssignor().assign(subscriptions)
    return [
        pb.SyncGroupRequest.Assignment(member_id=m, assignment=encode_assignment(assigned.get(m, Assignment(()))))
        for m in subscriptions
    ]


async def join(router: Router, m: Member, metadata: bytes) -> None:
    """JoinGroup + SyncGroup until this member has an assignment in some generation."""
    m.joining = True
    protocol = pb.JoinGroupRequest.Protocol(name=RangeAssignor.name, metadata=metadata)
    request = pb.JoinGroupRequest(
        group_id=m.group_id,
        group_instance_id=m.group_instance_id,
        client_id="bench",
        protocol_type=PROTOCOL_TYPE,
        protocols=[protocol],
        session_timeout_ms=m.session_timeout_ms,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
    )
    while True:
        request.member_id = m.member_id
        joined = await router.call(m.group_id, "JoinGroup", request, m.rebalance_timeout_ms / 1000 + 10)  # fmt: skip
        if joined is None:
            continue
        if joined.error_code == Errors.MEMBER_ID_REQUIRED:
            m.member_id = joined.member_id
            continue
        if joined.error_code in REJOIN:
            m.count_error(Errors(joined.error_code).name)
            if joined.error_code == Errors.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            await asyncio.sleep(RETRY_S)
            continue
        if joined.error_code != Errors.NONE:
            raise BenchError(f"JoinGroup {m.group_id}: error {joined.error_code} {joined.error_message}")
        m.member_id = joined.member_id
        sync = pb.SyncGroupRequest(group_id=m.group_id, member_id=m.member_id, group_instance_id=m.group_instance_id)
        sync.generation_id, sync.protocol_name = joined.generation_id, joined.protocol_name
        sync.protocol_type = PROTOCOL_TYPE
        if joined.leader == joined.member_id and not joined.skip_assignment:
            sync.assignments.extend(assign(joined.members))
        synced = await router.call(m.group_id, "SyncGroup", sync, m.rebalance_timeout_ms / 1000 + 10)
        if synced is None:
            continue
        if synced.error_code in REJOIN:
            if synced.error_code == Errors.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            continue
        if synced.error_code != Errors.NONE:
            raise BenchError(f"SyncGroup {m.group_id}: error {synced.error_code} {synced.error_message}")
        m.generation_id, m.assignment, m.joining = joined.generation_id, synced.assignment, False
        m.synced_at = time.perf_counter()
        return


async def heartbeat(router: Router, m: Member) -> int | None:
    """One Heartbeat; its error code, or None when the coordinator could not be reached."""
    request = pb.HeartbeatRequest(
        group_id=m.group_id, generation_id=m.generation_id, member_id=m.member_id, group_instance_id=m.group_instance_id
    )
    sent = time.perf_counter()
    reply: pb.HeartbeatResponse | None = await router.call(m.group_id, "Heartbeat", request)
    if reply is None:
        m.count_error("unreachable")
        return None
    if reply.error_code == Errors.NONE:
        m.heartbeats += 1
        if m.record:
            now = time.perf_counter()
            m.latencies.append((now, (now - sent) * 1000))
    elif reply.error_code == Errors.FENCED_INSTANCE_ID:
        raise BenchError(f"Heartbeat {m.group_id}: {m.group_instance_id} fenced")
    else:
        m.count_error(Errors(reply.error_code).name)
    return reply.error_code


async def run_member(
    router: Router, m: Member, metadata: bytes, interval_s: Callable[[], float], stop: asyncio.Event
) -> None:
    """Join, then heartbeat every `interval_s()` (read each time: a scenario changes it) until `stop`, which is
    looked at after each sleep (to end at once, cancel the task); after a failed heartbeat the next one follows at
    once. A plain sleep, not a wait on `stop`: that would cost each heartbeat a task of its own in this client.

    Each member keeps its own schedule, one interval after the previous heartbeat was due, as a worker process of
    its own would. Timed from the answer, every slow answer pushed that member's later heartbeats back, and the
    heartbeats of thousands of members in one client drifted into bunches (twice the mean rate every third
    second). Timed from the actual send, one stall of this client (which hosts thousands of members, unlike a
    worker) sent every member due during it at once, and they stayed in step for good: up to 42 groups in one
    10 ms slot at 20,000 members. A member late by more than an interval starts its schedule again from now."""
    await join(router, m, metadata)
    code: int | None = Errors.NONE
    due = time.perf_counter()
    while not stop.is_set():
        if code == Errors.NONE:
            step = interval_s()
            due += step
            await asyncio.sleep(max(due - time.perf_counter(), 0.0))
            if stop.is_set():
                return
            now = time.perf_counter()
            if now - due > step:
                due = now
        else:
            due = time.perf_counter()
        code = await heartbeat(router, m)
        if code in REJOIN:
            if code == Errors.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            await join(router, m, metadata)
            code = Errors.NONE
            due = time.perf_counter()


def stable(members: Sequence[Member], above_generation: int = 0) -> bool:
    """Every member has an assignment in one and the same generation (above `above_generation`) and nobody
    is rejoining."""
    generations = {m.generation_id for m in members}
    return len(generations) == 1 and min(generations) > above_generation and not any(m.joining for m in members)


async def wait_stable(
    members: Sequence[Member],
    timeout_s: float,
    above_generation: int = 0,
    poll_s: float = 0.005,
    tasks: Iterable[asyncio.Task[None]] = (),
) -> float:
    """perf_counter() of the last SyncGroup that made the group stable; BenchError after `timeout_s`, and within
    `TASK_CHECK_S` the error of any of the members' `tasks` that failed (a refused join ends the run, not the
    timeout; looked at less often than the poll, so that thousands of members cost the client little)."""
    deadline = time.monotonic() + timeout_s
    checked = 0.0
    while not stable(members, above_generation):
        now = time.monotonic()
        if now - checked >= TASK_CHECK_S:
            checked = now
            failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None), None)
            if failed is not None:
                raise failed.exception()  # type: ignore[misc]  # not None: `failed` was picked for having one
        if now > deadline:
            joining = sum(m.joining for m in members)
            raise BenchError(f"{members[0].group_id}: not stable after {timeout_s:.0f} s ({joining} still joining)")
        await asyncio.sleep(poll_s)
    return max(m.synced_at for m in members)


async def leave(router: Router, members: list[Member]) -> None:
    """One batch LeaveGroup for all of them (KIP-345), so a scenario ends without session expiries."""
    identities = [
        pb.LeaveGroupRequest.MemberIdentity(member_id=m.member_id, group_instance_id=m.group_instance_id)
        for m in members
    ]
    await router.call(members[0].group_id, "LeaveGroup", pb.LeaveGroupRequest(group_id=members[0].group_id,
                                                                              members=identities))  # fmt: skip


async def describe(router: Router, group_id: str) -> tuple[pb.DescribeGroupsResponse.Group, float]:
    """The group as its coordinator describes it, and how long the call took in ms."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sent = time.perf_counter()
        reply = await router.call(group_id, "DescribeGroups", pb.DescribeGroupsRequest(group_ids=[group_id]))
        if reply is not None:
            return reply.groups[0], (time.perf_counter() - sent) * 1000
    raise BenchError(f"DescribeGroups {group_id}: no coordinator answered in 30 s")
