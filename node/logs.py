"""Structured logs: one line per event, `event key=value ...` as text or one JSON object per line.

Log with `log.info("event.name", extra=fields(key=value))`; records from libraries (grpc, asyncio) go
through the same formatter, so every line has the same shape.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from groupcoord.base.logfields import FIELDS as _FIELDS
from groupcoord.base.logfields import fields

__all__ = ["LogBudget", "fields", "setup"]


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def _payload(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    out: dict[str, Any] = dict(getattr(record, _FIELDS, {}))
    if record.exc_info:
        out["exc"] = formatter.formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(_payload(record, self))
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """Values that are not plain words are JSON-quoted, so a traceback stays on its event's line."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        for key, value in _payload(record, self).items():
            text = str(value)
            if not text or any(c.isspace() or c in '"=' for c in text):
                text = json.dumps(text)
            parts.append(f"{key}={text}")
        return " ".join(parts)


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class LogBudget:
    """At most `per_second` log lines a second about one kind of thing a client can repeat at will (refusals,
    hostile input), so that it cannot flood the log.

    The metrics count every occurrence; the next line logged says how many were left out before it."""

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self._window = float("-inf")
        self._used = 0
        self._skipped = 0

    def take(self, now: float) -> int | None:
        """None: do not log this one. Else log it, with the returned number of lines left out since the last."""
        if now - self._window >= 1.0:
            self._window, self._used = now, 0
        if self._used >= self.per_second:
            self._skipped += 1
            return None
        self._used += 1
        skipped, self._skipped = self._skipped, 0
        return skipped
