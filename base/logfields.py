"""`extra=fields(key=value)`: key/value pairs on a log record, printed by node/logs.py's formatter.

It lives at the top of the package so every layer (raft, node) can attach fields without importing the
node's logging setup.
"""

from __future__ import annotations

from typing import Any

FIELDS = "fields"


def fields(**values: Any) -> dict[str, dict[str, Any]]:
    """The `extra=` argument that attaches key/value pairs to a log record."""
    return {FIELDS: values}
