"""The Kafka listener: one asyncio server on the node's event loop, a reader and a writer per connection.

Requests on one connection are served concurrently (a parked JoinGroup does not hold up the member's Heartbeat on
another connection, nor a Metadata call on this one) and answered in request order, as Kafka's brokers do: the
writer awaits each request's task in the order the requests came. A frame over `kafka_max_frame_bytes`, one kio
cannot read, an API or version not served, or more connections than `kafka_max_connections` closes that
connection with one log line (budgeted); the node goes on.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from ssl import SSLContext
from typing import Any

from groupcoord.node.kafka.apis import KafkaApis, api_keys
from groupcoord.node.kafka.common import UNSUPPORTED_VERSION, KafkaConnection, KafkaRequestContext, RequestFailed
from groupcoord.node.kafka.metrics import KafkaMetrics
from groupcoord.node.kafka.sasl import SASL_APIS, Sasl
from groupcoord.node.logs import LogBudget, fields
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.kafka.codec import API_VERSIONS_KEY, APIS, MalformedFrame, read_request, write_response

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
# Requests read ahead of their responses on one connection; the reader waits beyond this (back pressure).
MAX_IN_FLIGHT = 64
# A TLS client that has not finished its handshake by then is disconnected.
HANDSHAKE_TIMEOUT_S = 10.0
# Connection-level log lines per second, at most.
LOG_PER_S = 10


class KafkaListener:
    def __init__(
        self,
        apis: KafkaApis,
        max_frame_bytes: int,
        max_connections: int,
        metrics: KafkaMetrics | None = None,
        ssl: SSLContext | None = None,
        sasl: Sasl | None = None,
    ) -> None:
        self._apis = apis
        self._metrics = metrics
        self._ssl = ssl
        self._sasl = sasl
        self._max_frame_bytes = max_frame_bytes
        self._max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # One budget per kind of line, so that a client repeating one thing cannot silence the others.
        self._budgets: dict[str, LogBudget] = {}

    async def start(self, host: str, port: int) -> int:
        """Binds; returns the port (the one asked for, or the one picked for port 0)."""
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            reuse_address=True,
            ssl=self._ssl,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl else None,
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._apis.close()
        await self._server.wait_closed()
        self._server = None

    @property
    def apis(self) -> KafkaApis:
        return self._apis

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername") or ("?", 0)
        peer = f"ipv6:[{peername[0]}]:{peername[1]}" if ":" in str(peername[0]) else f"ipv4:{peername[0]}:{peername[1]}"
        if len(self._connections) >= self._max_connections:
            self._note(
                "kafka.connection_refused",
                peer,
                f"{len(self._connections)} connections open, at most kafka_max_connections = {self._max_connections}",
            )
            writer.close()
            return
        self._connections.add(task)
        connection = KafkaConnection(
            peer, _common_name(writer.get_extra_info("peercert")), self._sasl.session() if self._sasl else None
        )
        if self._metrics is not None:
            self._metrics.on_connection(1)
        try:
            await self._serve(reader, writer, connection)
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            if self._metrics is not None:
                self._metrics.on_connection(-1)
                if connection.software_label is not None:
                    self._metrics.on_client_software(connection.software_label, -1)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: KafkaConnection
    ) -> None:
        peer = connection.peer
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        sender = asyncio.ensure_future(self._send(answers, writer, connection))
        try:
            while not sender.done():
                try:
                    head = await reader.readexactly(_LENGTH.size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                (length,) = _LENGTH.unpack(head)
                if not 0 < length <= self._max_frame_bytes:
                    self._note(
                        "kafka.frame_refused",
                        peer,
                        f"a frame of {length} bytes; kafka_max_frame_bytes = {self._max_frame_bytes}",
                    )
                    break
                try:
                    frame = await reader.readexactly(length)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                task = self._dispatch(frame, connection)
                if task is None:
                    break
                await answers.put(task)
            await answers.put(None)
            await sender
        finally:
            sender.cancel()
            while not answers.empty():
                pending = answers.get_nowait()
                if pending is not None:
                    pending.cancel()

    def _dispatch(self, frame: bytes, connection: KafkaConnection) -> asyncio.Task[bytes | None] | None:
        """Starts serving one request; None when the connection must be closed instead."""
        peer = connection.peer
        try:
            request = read_request(frame)
        except MalformedFrame as exc:
            self._note("kafka.malformed_request", peer, str(exc))
            return None
        sasl = connection.sasl
        if sasl is not None and not sasl.authenticated and request.api_key not in SASL_APIS:
            # Kafka's rule: before SASL succeeds, a connection may only ask for the API versions and authenticate.
            self._note("kafka.unauthenticated_request", peer, f"api key {request.api_key} before SASL authentication")
            return None
        if sasl is not None and sasl.failed:
            return None
        if request.body is None:
            if request.api_key == API_VERSIONS_KEY:
                # Kafka's rule: an ApiVersions version the broker does not know is answered at v0, with the list.
                values = {"error_code": UNSUPPORTED_VERSION, "api_keys": api_keys(), "throttle_time": 0}
                if self._metrics is not None:
                    self._metrics.on_response(API_VERSIONS_KEY, request.api_version, values)
                frame_out = write_response(API_VERSIONS_KEY, 0, request.correlation_id, values)
                return asyncio.ensure_future(_ready(frame_out))
            name = APIS[request.api_key][0] if request.api_key in APIS else f"api key {request.api_key}"
            self._note("kafka.unsupported_request", peer, f"{name} v{request.api_version} is not served")
            return None
        context = KafkaRequestContext(connection, request.client_id or "")
        return asyncio.ensure_future(self._answer(request, context))

    async def _answer(self, request: Any, context: KafkaRequestContext) -> bytes | None:
        handler = self._apis.apis[request.api_key]
        values = await handler(request.api_version, request.body, context)
        if self._metrics is not None:
            self._metrics.on_response(request.api_key, request.api_version, values)
        if request.api_key == API_VERSIONS_KEY and request.api_version >= 3 and values is not None:
            self._identify(context, request.body, values["error_code"])
        if values is None:
            return None
        return write_response(request.api_key, request.api_version, request.correlation_id, values)

    async def _send(
        self,
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
        writer: asyncio.StreamWriter,
        connection: KafkaConnection,
    ) -> None:
        peer = connection.peer
        while (task := await answers.get()) is not None:
            try:
                frame = await task
            except RequestFailed as exc:
                self._note("kafka.request_failed", peer, str(exc))
                return
            except Exception:
                log.exception("kafka.request_failed", extra=fields(peer=peer))
                return
            if frame is None:
                continue
            writer.write(frame)
            try:
                await writer.drain()
            except ConnectionError:
                return
            if connection.sasl is not None and connection.sasl.failed:
                # A failed authentication is answered, then the connection is closed, as Kafka does.
                self._note("kafka.authentication_failed", peer, connection.sasl.failure)
                return

    def _identify(self, context: KafkaRequestContext, body: Any, code: int) -> None:
        """ApiVersions v3+ names the client software: counted by it while the connection lasts, and logged once."""
        connection = context.connection
        if code != Errors.NONE or connection.software is not None:
            return
        software = (body.client_software_name, body.client_software_version)
        connection.software = software
        if self._metrics is not None:
            connection.software_label = self._metrics.on_client_software(software, 1)
        skipped = self._budget("kafka.client").take(time.monotonic())
        if skipped is not None:
            log.info(
                "kafka.client",
                extra=fields(
                    peer=connection.peer,
                    client_id=context.client_id,
                    software_name=software[0],
                    software_version=software[1],
                    not_logged_before=skipped,
                ),
            )

    def _budget(self, event: str) -> LogBudget:
        budget = self._budgets.get(event)
        if budget is None:
            budget = self._budgets[event] = LogBudget(LOG_PER_S)
        return budget

    def _note(self, event: str, peer: str, why: str) -> None:
        skipped = self._budget(event).take(time.monotonic())
        if skipped is not None:
            log.warning(event, extra=fields(peer=peer, why=why, not_logged_before=skipped))


async def _ready(frame: bytes) -> bytes:
    return frame


def _common_name(certificate: dict[str, Any] | None) -> str:
    """The CN of the client certificate the TLS handshake verified (mutual TLS); "" without one."""
    for entry in (certificate or {}).get("subject", ()):
        for key, value in entry:
            if key == "commonName":
                return str(value)
    return ""
