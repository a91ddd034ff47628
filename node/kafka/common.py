"""What the Kafka API modules share: the handler shape, Kafka error codes the gRPC API has no use for, and the
small conversions every module needs."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc

from groupcoord.node.auth import CERT_NAME_KEY, SASL_IDENTITY_KEY
from groupcoord.node.kafka.sasl import SaslSession
from groupcoord.node.service import Context
from groupcoord.protocol.errors import Errors

UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_ID = 100
# What Kafka sends for "authorized operations were not asked for".
NO_OPERATIONS = -(2**31)

Values = dict[str, Any]
# One API: (version, kio request, context) -> the response's values, or None for a request that gets no response.
Api = Callable[[int, Any, Context], Awaitable[Values | None]]


def member_identity(request: Any, generation_id: int) -> Values:
    """The member identity every in-group request carries, in the gRPC API's fields."""
    return {
        "group_id": request.group_id,
        "generation_id": generation_id,
        "member_id": request.member_id,
        "group_instance_id": getattr(request, "group_instance_id", None) or "",
    }


def partition_error(topic: Any, index: int) -> int:
    if topic is None or not 0 <= index < topic.num_partitions:
        return UNKNOWN_TOPIC_OR_PARTITION
    return Errors.NONE


def topic_uuid(topic_id: Any) -> uuid.UUID:
    return topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))


class RequestFailed(Exception):
    """The request layer gave up on a request (its `abort`): the connection is closed, as a broker does."""


class KafkaConnection:
    """One client connection: where it comes from, who the transport says it is (the CN of a verified client
    certificate, the identity of a SASL exchange) and, once it said so in ApiVersions v3+, its client software."""

    __slots__ = ("common_name", "peer", "sasl", "software", "software_label")

    def __init__(self, peer: str, common_name: str = "", sasl: SaslSession | None = None) -> None:
        self.peer = peer
        self.common_name = common_name
        # The connection's SASL state when the listener requires SASL; None when it does not.
        self.sasl = sasl
        # (name, version) as the client named them; None until it does. Its members carry them (DescribeGroups).
        self.software: tuple[str, str] | None = None
        # The same as counted in the metrics (capped: node/kafka/metrics.py); None when not counted.
        self.software_label: tuple[str, str] | None = None

    def auth_context(self) -> dict[str, list[bytes]]:
        verified: dict[str, list[bytes]] = {}
        if self.common_name:
            verified[CERT_NAME_KEY] = [self.common_name.encode()]
        if self.sasl is not None and self.sasl.identity is not None:
            verified[SASL_IDENTITY_KEY] = [self.sasl.identity.encode()]
        return verified


class KafkaRequestContext:
    """The request layer's view of one Kafka request (node/service.py `Context`): who sent it and from where. Kafka
    requests carry no token: the caller is who the connection proved to be, else anonymous to the ACL."""

    __slots__ = ("client_id", "connection")

    def __init__(self, connection: KafkaConnection, client_id: str) -> None:
        self.connection = connection
        self.client_id = client_id

    def peer(self) -> str:
        return self.connection.peer

    @property
    def client_software(self) -> tuple[str, str]:
        return self.connection.software or ("", "")

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def auth_context(self) -> dict[str, list[bytes]]:
        return self.connection.auth_context()

    async def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise RequestFailed(f"{code.name}: {details}")
