"""The node the process-level fuzz targets share, and what they check it with before and after."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.e2e.support import NodeProcess

SECRET = "fuzz-cluster-secret"
PARTITIONS = 4
# Offsets committed before a fuzz run and fetched after it: acknowledged data the fuzzing must not touch.
ANCHOR_GROUP = "fuzz-anchor"


@dataclass
class FuzzNode:
    process: NodeProcess
    raft_port: int
    channel: grpc.Channel
    stub: pb_grpc.GroupCoordinatorStub

    @property
    def kafka_port(self) -> int:
        [started] = [e for e in self.process.events() if e.get("event") == "node.started"]
        return int(started["kafka_address"].rsplit(":", 1)[1])

    @property
    def raft_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.raft_port + k) for k in range(PARTITIONS)]


def failures(node: NodeProcess, since: int) -> list[str]:
    """Log lines after line `since` that show an unhandled exception or an error."""
    bad = []
    for line in node.log_lines()[since:]:
        if not line.startswith("{"):
            if "Traceback" in line:
                bad.append(line)
        elif '"exc":' in line or '"level": "error"' in line or '"level": "critical"' in line:
            bad.append(line)
    return bad


def anchor(stub: pb_grpc.GroupCoordinatorStub, offset: int) -> None:
    """A simple commit (generation -1, no member) of `offset` to three partitions of the anchor group."""
    partitions = [pb.OffsetCommitRequest.Partition(partition_index=i, committed_offset=offset + i) for i in range(3)]
    request = pb.OffsetCommitRequest(
        group_id=ANCHOR_GROUP, generation_id=-1, topics=[pb.OffsetCommitRequest.Topic(name="t", partitions=partitions)]
    )
    reply = stub.OffsetCommit(request, timeout=10)
    assert [p.error_code for p in reply.topics[0].partitions] == [Errors.NONE] * 3, reply


def anchored(stub: pb_grpc.GroupCoordinatorStub) -> list[int]:
    request = pb.OffsetFetchRequest(
        group_id=ANCHOR_GROUP, topics=[pb.OffsetFetchRequest.Topic(name="t", partition_indexes=[0, 1, 2])]
    )
    reply = stub.OffsetFetch(request, timeout=10)
    assert reply.error_code == Errors.NONE, reply
    return [p.committed_offset for p in reply.topics[0].partitions]


def raft_view(stub: pb_grpc.GroupCoordinatorStub) -> list[tuple[int, int, int]]:
    """(partition, leader, term) of every partition: a fuzz run that changes these caused an election."""
    reply = stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=10)
    return [(p.partition_id, p.leader_node_id, p.term) for p in reply.partitions]
