"""bench/grpc_floor.py, the transport's floor that `bench etcd` reports next to etcd (which CI does not install,
so the floor is run here on its own): a real echo server process, the same workloads, complete figures."""

from __future__ import annotations

import pytest

from groupcoord.bench import grpc_floor
from tests.bench.test_bench import ordered


@pytest.mark.timeout(60)
async def test_the_echo_server_answers_both_workloads_and_reports_its_cpu() -> None:
    server = grpc_floor.EchoServer()
    server.start()
    try:
        await server.wait_ready()
        seq = await grpc_floor.sequential(server, 30)
        flight = await grpc_floor.in_flight(server, 4, 0.5)
    finally:
        server.stop()
    ordered(seq["latency"], 30)
    assert seq["ops"] == 30 and seq["ops_per_s"] > 0
    assert flight["in_flight"] == 4 and flight["ops"] == flight["latency"]["count"] > 0
    for figures in (seq, flight):
        assert set(figures["nodes_cpu_percent"]) == {"1"}  # the echo process was measured, and only it
    assert server.proc is not None and server.proc.returncode == 0  # SIGTERM stops it cleanly, by its pid


def test_the_payload_is_a_one_partition_offset_commit() -> None:
    from groupcoord.protocol.v1 import groupcoord_pb2 as pb

    request = pb.OffsetCommitRequest.FromString(grpc_floor.payload())
    assert [len(t.partitions) for t in request.topics] == [1]
