"""One real node process per test module (tests use distinct group ids), and a grpc.aio stub per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import NodeProcess, start_node, stop_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = start_node(tmp_path_factory.mktemp("node") / "node.log")
    try:
        yield proc
    finally:
        stop_node(proc)


@pytest.fixture
async def channel(node: NodeProcess) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(node.address) as ch:
        yield ch


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> pb_grpc.GroupCoordinatorStub:
    return pb_grpc.GroupCoordinatorStub(channel)
