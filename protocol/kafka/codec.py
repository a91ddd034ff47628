"""Kafka frames in and out, through kio's generated message classes: no hand-written byte layouts here.

A request frame is `length:int32` then the request header (v1, or v2 for a flexible version) and the body. The
header's first fields (api key, version, correlation id) sit at fixed places in every header version, so they are
read before the body's schema is chosen; everything else goes through kio. A response is the response header (v0,
or v1 for a flexible version, except ApiVersions: always v0, so a client that does not know the broker yet can read
it) and the body.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta, i64Timedelta

from groupcoord.protocol.kafka.tags import read_skipping_unknown_tags

API_VERSIONS_KEY = 18
# api key -> (name, lowest, highest version served). Only versions the client tests exercise are advertised; kio
# knows the others, but a version nobody has tried is a version nobody has checked.
APIS: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 9),
    1: ("Fetch", 4, 16),
    2: ("ListOffsets", 1, 7),
    3: ("Metadata", 0, 13),
    8: ("OffsetCommit", 2, 10),
    9: ("OffsetFetch", 1, 10),
    10: ("FindCoordinator", 0, 6),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 6),
    16: ("ListGroups", 0, 5),
    17: ("SaslHandshake", 1, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    36: ("SaslAuthenticate", 0, 2),
    42: ("DeleteGroups", 0, 2),
    47: ("OffsetDelete", 0, 0),
}
_HEAD = struct.Struct(">hhi")
_LENGTH = struct.Struct(">i")


class MalformedFrame(ValueError):
    """A frame kio cannot read as the request its header names: the connection is closed."""


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # The kio request entity; None for an API or version this listener does not serve.
    body: Any


def read_request(frame: bytes) -> Request:
    """Parses one frame (without its length prefix). An unserved API or version gives a Request with no body, so
    the caller can answer it as Kafka does; bytes that do not parse raise MalformedFrame."""
    if len(frame) < _HEAD.size:
        raise MalformedFrame(f"a request header needs {_HEAD.size} bytes, the frame has {len(frame)}")
    api_key, version, correlation_id = _HEAD.unpack_from(frame)
    schema = request_schema(api_key, version)
    if schema is None:
        return Request(api_key, version, correlation_id, None, None)
    try:
        header, body = _read(schema, frame, native=True)
    except Exception:  # kio's native reader raises ValueError, KeyError, IndexError, UnicodeDecodeError...
        try:
            # Most likely a tagged field this version does not know, which Kafka's rule says to skip.
            header, body = _read(schema, frame, native=False)
        except Exception as exc:
            raise MalformedFrame(f"{APIS[api_key][0]} v{version}: {exc.__class__.__name__}: {exc}") from None
    return Request(api_key, version, correlation_id, header.client_id, body)


def _read(schema: Any, frame: bytes, native: bool) -> tuple[Any, Any]:
    header_schema = schema.__header_schema__
    if native:
        header, used = entity_reader(header_schema)(frame, 0)  # kio's readers answer the bytes they read
        body, _ = entity_reader(schema)(frame, used)
    else:
        header, end = read_skipping_unknown_tags(header_schema, frame, 0, is_request_header=True)
        body, _ = read_skipping_unknown_tags(schema, frame, end)
    # Bytes after the request are ignored, as Kafka's own parser does: librdkafka 2.16's Metadata v13 request for
    # all topics carries three.
    _check_nulls(body)
    return header, body


def _check_nulls(entity: Any) -> None:
    """kio reads a null array or string wherever the wire has one; Kafka's parser refuses it where the schema says
    the field is not nullable, and so does this (the handlers may then rely on the schema)."""
    schema: type = type(entity)
    for name, nested in _non_nullable(schema):
        value = getattr(entity, name)
        if value is None:
            raise ValueError(f"{type(entity).__name__}.{name} is null, which the schema does not allow")
        if nested:
            for item in value if isinstance(value, tuple) else (value,):
                _check_nulls(item)
    for name in _nullable_structs(schema):
        value = getattr(entity, name)
        if value is not None:
            for item in value if isinstance(value, tuple) else (value,):
                _check_nulls(item)


@cache
def _non_nullable(schema: Any) -> tuple[tuple[str, bool], ...]:
    """(field, holds structs) for every field of `schema` that may not be null."""
    hints = _hints(schema)
    return tuple(
        (f.name, _struct_of(hints[f.name]) is not None)
        for f in dataclasses.fields(schema)
        if not _nullable(hints[f.name])
    )


@cache
def _nullable_structs(schema: Any) -> tuple[str, ...]:
    hints = _hints(schema)
    return tuple(
        f.name for f in dataclasses.fields(schema) if _nullable(hints[f.name]) and _struct_of(hints[f.name]) is not None
    )


def _nullable(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)


def _struct_of(hint: Any) -> Any:
    """The struct type a field holds (alone or in an array), else None."""
    if isinstance(hint, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is tuple:
        hint = typing.get_args(hint)[0]
    return hint if dataclasses.is_dataclass(hint) else None


@cache
def request_schema(api_key: int, version: int) -> Any:
    served = APIS.get(api_key)
    if served is None or not served[1] <= version <= served[2]:
        return None
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def response_schema(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


def write_response(api_key: int, version: int, correlation_id: int, values: dict[str, Any]) -> bytes:
    """The whole frame, length prefix included, of the response `values` describe (see `build`)."""
    schema = response_schema(api_key, version)
    header_schema = ResponseHeaderV1 if schema.__flexible__ and api_key != API_VERSIONS_KEY else ResponseHeaderV0
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header = header_schema(correlation_id=correlation_id)  # type: ignore[arg-type]  # kio's i32 is a ranged int
    entity_writer(header_schema)(buffer, header)

    entity_writer(schema)(buffer, build(schema, values))
    frame = buffer.getbuffer()
    _LENGTH.pack_into(frame, 0, len(frame) - _LENGTH.size)
    return bytes(frame)


def build(schema: Any, values: dict[str, Any]) -> Any:
    """A kio entity of `schema` from plain values: the fields this version has are taken (the others ignored, so
    one dict serves every version), error codes and durations converted, nested lists of dicts built in turn."""
    kwargs: dict[str, Any] = {}
    for name, kind, nested in _build_plan(schema):
        if name not in values:
            continue
        value = values[name]
        if kind is None:
            if nested is not None and value is not None:
                value = tuple(build(nested, item) for item in value)
        elif kind == "error_code":
            value = ErrorCode(int(value))
        elif kind == "timedelta_i32":
            value = i32Timedelta.parse(datetime.timedelta(milliseconds=int(value)))
        elif kind == "timedelta_i64":
            value = i64Timedelta.parse(datetime.timedelta(milliseconds=int(value)))
        elif kind == "uuid" and isinstance(value, str):
            value = uuid.UUID(value)
        kwargs[name] = value
    return schema(**kwargs)


@cache
def _build_plan(schema: Any) -> tuple[tuple[str, str | None, Any], ...]:
    """(field, kio's kafka_type, the struct of a list of structs) for every field of `schema`: read once per
    schema, as kio's own writers are, not for every response (a JoinGroup response naming 200 members took
    twice as long to build with them read each time)."""
    hints = _hints(schema)
    plan = []
    for field in dataclasses.fields(schema):
        kind = field.metadata.get("kafka_type")
        plan.append((field.name, kind, _nested(hints[field.name]) if kind is None else None))
    return tuple(plan)


@cache
def _hints(schema: Any) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def _nested(hint: Any) -> Any:
    """The entity class of a `tuple[Entity, ...]` field (nullable or not), else None."""
    if isinstance(hint, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is tuple:
        inner = typing.get_args(hint)[0]
        if dataclasses.is_dataclass(inner):
            return inner
    return None


def millis(value: datetime.timedelta | None) -> int:
    """A kio duration field as milliseconds (Kafka's -1 stays -1)."""
    if value is None:
        return -1
    return int(value.total_seconds() * 1000)
