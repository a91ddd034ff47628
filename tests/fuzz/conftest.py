"""One real node for the fuzz targets that need a process, checked after every test that uses it."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import start_node, stop_node
from tests.fuzz.support import PARTITIONS, SECRET, FuzzNode, failures


@pytest.fixture(scope="package")
def fuzz_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzNode]:
    """A one-node cluster of a few partitions with a known secret and event files, shared by the targets
    of this package and stopped after them."""
    root = tmp_path_factory.mktemp("fuzz-node")
    process = start_node(
        root / "node.log",
        f"--partitions={PARTITIONS}",
        f"--cluster-secret={SECRET}",
        f"--data-dir={root / 'data'}",
        "--kafka-port=0",
        "--metrics-port=0",
    )
    # Any reply the node sends is read: the targets judge the node, not the client's 4 MB default.
    channel = grpc.insecure_channel(process.address, options=[("grpc.max_receive_message_length", -1)])
    try:
        started = next(e for e in process.events() if e.get("event") == "node.started")
        yield FuzzNode(process, int(started["raft_port"]), channel, pb_grpc.GroupCoordinatorStub(channel))
    finally:
        channel.close()
        stop_node(process)


@pytest.fixture
def node(fuzz_node: FuzzNode) -> Iterator[FuzzNode]:
    """The shared node, checked after the test: alive, no new error or traceback in its log."""
    since = len(fuzz_node.process.log_lines())
    yield fuzz_node
    assert fuzz_node.process.alive(), "the node died"
    assert not failures(fuzz_node.process, since), "\n".join(failures(fuzz_node.process, since))
