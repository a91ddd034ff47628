"""A small asyncio Kafka client on kio, for benchmarking the Kafka listener against the gRPC API.

It speaks only what the bench needs (ApiVersions, FindCoordinator, the group APIs, OffsetCommit), through kio's
generated classes: a request is the request header (v1, or v2 for a flexible version) and the body, each written by
kio's `entity_writer` from `codec.build`; a response is the response header (v0, or v1 for a flexible version except
ApiVersions, which is always v0) and the body, read by kio's `entity_reader`. The only byte layout written here is
the 4-byte frame length, as tests/kafka/wire.py does.

A `Connection` pipelines: every request gets the next correlation id and a future, and one reader task per
connection resolves the futures in the order the requests were sent (a Kafka broker answers in request order).
`KafkaClient` keeps connections per broker in named lanes, so that a request the coordinator parks (a JoinGroup
waiting for the join phase, a follower's SyncGroup waiting for the leader) never holds up the answer of a request
that must come back at once (a Heartbeat, a first JoinGroup's MEMBER_ID_REQUIRED) on the same connection, and it
finds each group's coordinator with batched FindCoordinator (v4+).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import itertools
import struct
import time
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import build

API_VERSIONS = 18
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
OFFSET_COMMIT = 8
# The version of each API this client sends (the newest the listener serves that a classic consumer group uses;
# FindCoordinator from v4 asks for many groups at once). Checked against the broker's ApiVersions on connecting.
VERSIONS = {
    API_VERSIONS: 3,
    FIND_COORDINATOR: 4,
    JOIN_GROUP: 9,
    HEARTBEAT: 4,
    LEAVE_GROUP: 5,
    SYNC_GROUP: 5,
    DESCRIBE_GROUPS: 5,
    OFFSET_COMMIT: 9,
}
CLIENT_ID = "groupcoord-bench"
SOFTWARE = ("groupcoord-bench-kio", "1.0")
# Error codes after which the group's coordinator is looked up again (as members.REDISCOVER for gRPC).
REDISCOVER = frozenset({Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS})
RETRY_S = 0.02
# Connections per broker for the requests answered at once (as members.CHANNELS_PER_NODE for gRPC).
QUICK_LANES = 2
FIND_BATCH = 500
REQUEST_TIMEOUT_S = 30.0
_LENGTH = struct.Struct(">i")


class KafkaError(RuntimeError):
    """The broker answered something this client cannot carry on from, or the connection broke."""


@cache
def schemas(api_key: int, version: int) -> tuple[Any, Any, Any, Any]:
    """(request schema, its header, response schema, its header) of one API version."""
    request = load_request_schema(api_key, version)
    response = load_response_schema(api_key, version)
    request_header = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
    response_header = ResponseHeaderV1 if response.__flexible__ and api_key != API_VERSIONS else ResponseHeaderV0
    return request, request_header, response, response_header


def encode_request(api_key: int, version: int, correlation_id: int, values: dict[str, Any]) -> bytes:
    """One request frame, length included; `values` as `codec.build` takes them."""
    schema, header, _, _ = schemas(api_key, version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    entity_writer(header)(
        buffer,
        header(
            request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=CLIENT_ID
        ),
    )
    entity_writer(schema)(buffer, build(schema, values))
    frame = buffer.getbuffer()
    _LENGTH.pack_into(frame, 0, len(frame) - _LENGTH.size)
    return bytes(frame)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity) of one response frame without its length."""
    _, _, schema, header = schemas(api_key, version)
    head, used = entity_reader(header)(frame, 0)
    body, _ = entity_reader(schema)(frame, used)
    return int(head.correlation_id), body


class Connection:
    """One TCP connection to a broker: requests written as they come, answers matched to them in order."""

    def __init__(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        # (correlation id, api key, version, future) of every request not answered yet, oldest first.
        self._waiting: collections.deque[tuple[int, int, int, asyncio.Future[Any]]] = collections.deque()
        self._broken: BaseException | None = None
        self._task = asyncio.create_task(self._read_loop())

    @classmethod
    async def open(cls, address: str) -> Connection:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(address, reader, writer)

    @property
    def broken(self) -> bool:
        return self._broken is not None

    async def request(self, api_key: int, values: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        """The response body of one request at this client's version of the API; KafkaError when the connection
        broke or no answer came in `timeout_s` (a later answer is then read and dropped)."""
        if self._broken is not None:
            raise KafkaError(f"{self.address}: connection broken: {self._broken!r}")
        version = VERSIONS[api_key]
        correlation_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # Written and queued with no await in between: the order of `_waiting` is the order on the wire.
        self._writer.write(encode_request(api_key, version, correlation_id, values))
        self._waiting.append((correlation_id, api_key, version, future))
        await self._writer.drain()
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise KafkaError(f"{self.address}: no answer to api key {api_key} in {timeout_s:.0f} s") from None

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(_LENGTH.size)
                frame = await self._reader.readexactly(_LENGTH.unpack(head)[0])
                if not self._waiting:
                    raise KafkaError(f"{self.address}: a response nobody asked for")
                expected, api_key, version, future = self._waiting.popleft()
                correlation_id, body = decode_response(api_key, version, frame)
                if correlation_id != expected:
                    raise KafkaError(f"{self.address}: correlation id {correlation_id}, expected {expected}")
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, KafkaError, ValueError) as exc:
            self._fail(exc)
        except asyncio.CancelledError:
            self._fail(KafkaError(f"{self.address}: connection closed"))
            raise

    def _fail(self, exc: BaseException) -> None:
        self._broken = exc
        while self._waiting:
            future = self._waiting.popleft()[3]
            if not future.done():
                future.set_exception(KafkaError(f"{self.address}: connection broken: {exc!r}"))
        self._writer.close()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


class KafkaClient:
    """Connections to the brokers, by (address, lane), opened on first use, each checked with ApiVersions as a
    Kafka client does; and each group's coordinator, found with batched FindCoordinator."""

    def __init__(self, bootstrap: list[str]) -> None:
        self.bootstrap = bootstrap
        self._connections: dict[tuple[str, str], asyncio.Task[Connection]] = {}
        self._coordinators: dict[str, str] = {}
        self._finding: dict[str, asyncio.Task[None]] = {}
        self._turn = itertools.count()

    async def connection(self, address: str, lane: str = "quick-0") -> Connection:
        """The connection on `lane` to `address`, opened (again, if it broke) on first use."""
        key = (address, lane)
        task = self._connections.get(key)
        if task is not None and task.done():
            if not task.cancelled() and task.exception() is None and not task.result().broken:
                return task.result()
            task = None
        if task is None:
            task = self._connections[key] = asyncio.create_task(self._open(address))
        return await asyncio.shield(task)

    async def _open(self, address: str) -> Connection:
        connection = await Connection.open(address)
        versions = await connection.request(
            API_VERSIONS, {"client_software_name": SOFTWARE[0], "client_software_version": SOFTWARE[1]}
        )
        if versions.error_code != Errors.NONE:
            await connection.close()
            raise KafkaError(f"{address}: ApiVersions error {int(versions.error_code)}")
        served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
        for api_key, version in VERSIONS.items():
            low, high = served.get(api_key, (0, -1))
            if not low <= version <= high:
                await connection.close()
                raise KafkaError(f"{address} does not serve api key {api_key} v{version} (served: {low}-{high})")
        return connection

    async def coordinator(self, group_id: str) -> str:
        """The address of the group's coordinator (cached until `forget`)."""
        while (address := self._coordinators.get(group_id)) is None:
            await self.find([group_id])
        return address

    def forget(self, group_id: str, address: str | None = None) -> None:
        """Looks the group's coordinator up again next time (if it is still `address`, when given)."""
        if address is None or self._coordinators.get(group_id) == address:
            self._coordinators.pop(group_id, None)

    async def find(self, group_ids: list[str], deadline_s: float = 60.0) -> None:
        """Asks the bootstrap brokers in turn until each group has a coordinator; a group already being looked up
        is waited for, not asked again (a thousand members of one group make one FindCoordinator)."""
        missing = [g for g in group_ids if g not in self._coordinators]
        mine = [g for g in missing if g not in self._finding]
        if mine:
            task = asyncio.create_task(self._find(mine, deadline_s))
            for g in mine:
                self._finding[g] = task
        await asyncio.gather(*{self._finding[g] for g in missing if g in self._finding})

    async def _find(self, group_ids: list[str], deadline_s: float) -> None:
        try:
            deadline = time.monotonic() + deadline_s
            missing = list(group_ids)
            for attempt in itertools.count():
                if time.monotonic() > deadline:
                    raise KafkaError(f"no coordinator for {len(missing)} groups, e.g. {missing[0]}")
                node = self.bootstrap[attempt % len(self.bootstrap)]
                try:
                    connection = await self.connection(node)
                    for start in range(0, len(missing), FIND_BATCH):
                        keys = tuple(missing[start : start + FIND_BATCH])
                        reply = await connection.request(FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": keys})
                        for found in reply.coordinators:
                            if found.error_code == Errors.NONE:
                                self._coordinators[found.key] = f"{found.host}:{found.port}"
                except (KafkaError, OSError):
                    pass
                missing = [g for g in missing if g not in self._coordinators]
                if not missing:
                    return
                await asyncio.sleep(RETRY_S)
        finally:
            for g in group_ids:
                self._finding.pop(g, None)

    async def call(
        self, group_id: str, api_key: int, values: dict[str, Any], lane: str = "", timeout_s: float = REQUEST_TIMEOUT_S
    ) -> Any | None:
        """One request to the group's coordinator on `lane` ("" for one of the quick lanes, in turn); the response,
        or None when the coordinator could not be reached or has moved (looked up again next time), after a short
        pause, as members.Router.call does for gRPC."""
        address = await self.coordinator(group_id)
        try:
            connection = await self.connection(address, lane or f"quick-{next(self._turn) % QUICK_LANES}")
            reply = await connection.request(api_key, values, timeout_s)
        except (KafkaError, OSError):
            reply = None
        if reply is None or int(getattr(reply, "error_code", Errors.NONE)) in REDISCOVER:
            self.forget(group_id, address)
            await asyncio.sleep(RETRY_S)
            return None
        return reply

    async def close(self) -> None:
        tasks = list(self._connections.values())
        self._connections.clear()
        for task in tasks:
            if not task.done():
                task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, Connection):
                await result.close()
