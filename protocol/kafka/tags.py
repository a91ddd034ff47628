"""Reading a message that carries tagged fields this schema does not know.

Kafka's rule (KIP-482) is that a reader skips a tagged field whose tag it does not know: that is what lets a newer
client add one without a new version. kio's native reader raises KeyError instead. This reader walks the same
schema in Python with kio's own field readers, and skips what it does not know; the codec uses it only when the
native reader has failed, so the common case stays native.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, is_optional
from kio.serial._parse import get_field_reader
from kio.serial.readers import read_int8, read_int32, read_unsigned_varint

# A reader of one value: (buffer, offset) → (value, offset after it).
Reader = Callable[[bytes, int], tuple[Any, int]]


def read_skipping_unknown_tags(schema: Any, buffer: bytes, offset: int, is_request_header: bool = False) -> Any:
    """`schema`'s entity at `offset` and the offset after it; unknown tagged fields skipped, at every depth."""
    return _entity(schema, is_request_header)(buffer, offset)


def _at(read: Any) -> Reader:
    """kio's readers answer (value, bytes read); this module's answer (value, offset after)."""

    def at(buffer: bytes, offset: int) -> tuple[Any, int]:
        value, size = read(buffer, offset)
        return value, offset + size

    return at


_uvarint = _at(read_unsigned_varint)
_int8 = _at(read_int8)
_int32 = _at(read_int32)


@cache
def _entity(schema: Any, is_request_header: bool) -> Reader:
    flexible = bool(schema.__flexible__)
    fields = dataclasses.fields(schema)
    untagged = [(f.name, _field(schema, f, is_request_header, False)) for f in fields if get_field_tag(f) is None]
    tagged = {
        int(tag): (f.name, _field(schema, f, is_request_header, True))
        for f in fields
        if (tag := get_field_tag(f)) is not None
    }

    def read(buffer: bytes, offset: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, reader in untagged:
            values[name], offset = reader(buffer, offset)
        if flexible:
            count, offset = _uvarint(buffer, offset)
            for _ in range(count):
                tag, offset = _uvarint(buffer, offset)
                size, offset = _uvarint(buffer, offset)
                end = offset + size
                if end > len(buffer):
                    raise ValueError(f"tagged field {tag} of {size} bytes runs past the end of the frame")
                known = tagged.get(tag)
                if known is not None:
                    values[known[0]], _ = known[1](buffer[:end], offset)
                offset = end
        return schema(**values), offset

    return read


def _field(schema: Any, field: Any, is_request_header: bool, is_tagged: bool) -> Reader:
    """kio's reader for a primitive field; this module's for a struct or an array of structs, so that their own
    tagged fields are read the tolerant way too."""
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        return _array(_entity(kind.type_, False), bool(schema.__flexible__) or is_tagged)
    if isinstance(kind, EntityField):
        inner = _entity(kind.type_, False)
        return _nullable(inner) if is_optional(field) else inner
    return _at(get_field_reader(schema, field, is_request_header, is_tagged))


def _array(item: Reader, compact: bool) -> Reader:
    def read(buffer: bytes, offset: int) -> tuple[Any, int]:
        if compact:
            length, offset = _uvarint(buffer, offset)
            length -= 1
        else:
            length, offset = _int32(buffer, offset)
        if length < 0:
            return None, offset
        if length > len(buffer) - offset:
            raise ValueError(f"an array of {length} structs in {len(buffer) - offset} bytes")
        items = []
        for _ in range(length):
            value, offset = item(buffer, offset)
            items.append(value)
        return tuple(items), offset

    return read


def _nullable(inner: Reader) -> Reader:
    """A nullable struct: one byte, -1 for null, then the struct."""

    def read(buffer: bytes, offset: int) -> tuple[Any, int]:
        marker, offset = _int8(buffer, offset)
        if marker < 0:
            return None, offset
        return inner(buffer, offset)

    return read
