"""A node of a test module's own, with a metrics port, for the HTTP/2 targets whose node logs what the shared
node's log checks would fail on (tests/fuzz/test_h2_fuzz.py's metrics target, test_h2_regressions.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.support import NodeProcess, start_node, stop_node
from tests.fuzz.support import SECRET


@contextmanager
def lone_node_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A one-partition node with a metrics port, stopped at the end."""
    root = tmp_path_factory.mktemp("h2-node")
    process = start_node(
        root / "node.log",
        "--partitions=1",
        "--metrics-port=0",
        f"--cluster-secret={SECRET}",
        f"--data-dir={root / 'data'}",
    )
    try:
        yield process
    finally:
        stop_node(process)


def started(process: NodeProcess) -> dict[str, Any]:
    """The node's `node.started` event: its bound ports."""
    return next(e for e in process.events() if e.get("event") == "node.started")


def metrics_port(process: NodeProcess) -> int:
    """The port the node's metrics server bound."""
    return int(started(process)["metrics_address"].rsplit(":", 1)[1])
