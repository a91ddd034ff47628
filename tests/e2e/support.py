"""Running a real `groupcoord node` process, and the group-protocol steps the e2e tests share."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

from grpc_health.v1 import health_pb2

from groupcoord.client.security import PLAINTEXT, ClientSecurity, sync_channel
from groupcoord.node import launcher
from groupcoord.node.launcher import SERVICE
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from groupcoord.protocol.v1 import groupcoord_pb2_grpc as pb_grpc

# Short enough that the timing paths run within a test, long enough that nothing expires by accident.
NODE_FLAGS = (
    "--group-min-session-timeout-ms=500",
    "--group-initial-rebalance-delay-ms=100",
    "--shutdown-grace-ms=2000",
    "--log-level=debug",
)
SESSION_MS = 10_000
REBALANCE_MS = 5_000
STARTUP_TIMEOUT_S = 20.0


@dataclass
class NodeProcess:
    proc: launcher.Proc
    log_path: Path
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def events(self) -> list[dict]:
        """The node's JSON log lines (other lines, e.g. from the gRPC C core, are skipped). A running node may be
        in the middle of writing its last line: only whole lines count."""
        text = self.log_path.read_text(errors="replace")
        whole = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in whole.splitlines() if line.startswith("{")]

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_node(
    log_path: Path, *flags: str, security: ClientSecurity = PLAINTEXT, entry: tuple[str, ...] = ("-m", "groupcoord")
) -> NodeProcess:
    """Starts a node on a port it picks itself (no race for a free port) and waits until it is SERVING
    (asked with `security`: a TLS node's health check needs its CA, and a client certificate under mTLS).
    The Kafka listener is off unless `flags` ask for it (`--kafka-port=0`): its default, 9092, may be taken.
    `entry`: what runs `groupcoord` in the Python process (a test may put a script of its own first)."""
    options = launcher.NodeOptions("127.0.0.1", 0, kafka_port=-1, flags=(*NODE_FLAGS, *flags), entry=entry)
    node = NodeProcess(launcher.start(options, log_path, truncate=True, own_session=False), log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while time.monotonic() < deadline and node.alive():
            started = [e for e in node.events() if e.get("event") == "node.started"]
            if started:
                node.port = int(started[0]["address"].rsplit(":", 1)[1])
                left = deadline - time.monotonic()
                if launcher.wait_serving({node.address: node.proc}, left, security) is None:
                    return node
                break
            time.sleep(0.05)
        raise RuntimeError("node did not become SERVING:\n" + "\n".join(node.log_lines()))
    except BaseException:
        stop_node(node)  # a node that never came up must not outlive the test
        raise


async def wait_serving(address: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """An in-process node is SERVING once every partition has a leader that committed its barrier."""
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(health_status, address) != health_pb2.HealthCheckResponse.SERVING:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{address} did not become SERVING")
        await asyncio.sleep(0.05)


def health_status(address: str, service: str = SERVICE, security: ClientSecurity = PLAINTEXT) -> int | None:
    with sync_channel(address, security) as channel:
        return launcher.health_status(channel, service)


def stop_node(node: NodeProcess, timeout_s: float = launcher.STOP_GRACE_S) -> int:
    """SIGTERM to the node's own pid, SIGKILL if it does not exit in time; returns its exit code."""
    launcher.stop_procs([node.proc], timeout_s)
    return node.proc.wait()


# -- group protocol steps ---------------------------------------------------------------------------


def join_request(group_id: str, member_id: str = "", instance_id: str = "", **overrides: object) -> pb.JoinGroupRequest:
    fields: dict = {
        "group_id": group_id,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": REBALANCE_MS,
        "protocol_type": "consumer",
        "protocols": [pb.JoinGroupRequest.Protocol(name="range", metadata=b"topic-a")],
        "client_id": "e2e",
    }
    fields.update(overrides)
    return pb.JoinGroupRequest(**fields)


async def join_dynamic(stub: pb_grpc.GroupCoordinatorStub, group_id: str) -> pb.JoinGroupResponse:
    """KIP-394: the first JoinGroup hands out a member id, the second one joins with it."""
    first = await stub.JoinGroup(join_request(group_id))
    assert first.error_code == Errors.MEMBER_ID_REQUIRED, first
    assert first.member_id
    return await stub.JoinGroup(join_request(group_id, member_id=first.member_id))


def assign(joined: pb.JoinGroupResponse) -> list[pb.SyncGroupRequest.Assignment]:
    """The leader's assignor: member i of n gets partitions i, i+n, ... of 6."""
    ids = sorted(m.member_id for m in joined.members)
    return [
        pb.SyncGroupRequest.Assignment(member_id=mid, assignment=bytes(p for p in range(6) if p % len(ids) == i))
        for i, mid in enumerate(ids)
    ]


async def sync_all(
    stub: pb_grpc.GroupCoordinatorStub, group_id: str, joins: list[pb.JoinGroupResponse], instance_ids: list[str]
) -> list[pb.SyncGroupResponse]:
    """Every member sends SyncGroup at once; only the leader's carries the assignment."""
    calls = []
    for joined, instance_id in zip(joins, instance_ids, strict=True):
        assert joined.error_code == Errors.NONE, joined
        is_leader = joined.member_id == joined.leader
        calls.append(
            stub.SyncGroup(
                pb.SyncGroupRequest(
                    group_id=group_id,
                    generation_id=joined.generation_id,
                    member_id=joined.member_id,
                    group_instance_id=instance_id,
                    protocol_type=joined.protocol_type,
                    protocol_name=joined.protocol_name,
                    assignments=assign(joined) if is_leader else [],
                )
            )
        )
    return list(await asyncio.gather(*calls))


async def heartbeat(
    stub: pb_grpc.GroupCoordinatorStub, group_id: str, member_id: str, generation_id: int, instance_id: str = ""
) -> int:
    reply = await stub.Heartbeat(
        pb.HeartbeatRequest(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=instance_id
        )
    )
    return reply.error_code


async def describe(stub: pb_grpc.GroupCoordinatorStub, group_id: str) -> pb.DescribeGroupsResponse.Group:
    reply = await stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[group_id]))
    assert len(reply.groups) == 1
    return reply.groups[0]
