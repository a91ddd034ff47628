"""Online membership changes: a node becomes, or stops being, a voter of every partition (`cluster add-node`,
`cluster remove-node`, `cluster replace-node`, the AddRaftVoter / RemoveRaftVoter RPCs; Kafka's KIP-853 names).

Each partition is its own Raft group, so a change is one pysyncobj single-server change per partition, proposed
through this node's replica (pysyncobj forwards it to the partition's leader) and retried until it has committed
or the deadline passes. Both are idempotent: adding a voter that already is one, or removing one that is not, is
done at once, so a scaling hook may run them again. A leader cannot remove itself (pysyncobj refuses), so where the
node being removed leads a partition, it is first asked over Raft to hand it over (raft/transport.py). A node
cannot remove itself either: the leaders stop talking to a removed voter, so it would never hear that the change
committed; the CLI sends RemoveRaftVoter to another node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON

from groupcoord.base.errors import UserError
from groupcoord.base.logfields import fields
from groupcoord.node.cluster import NodeCluster
from groupcoord.node.topology import Peer, format_peer, parse_peers
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

log = logging.getLogger(__name__)

# How long a change keeps trying when the request names no deadline.
DEFAULT_TIMEOUT_S = 30.0
# How long a new node's Raft port may take to accept a connection before the node counts as not started.
REACH_S = 2.0
# How long one proposal may go unanswered (a leader that died with it) before it is proposed again.
ATTEMPT_TIMEOUT_S = 5.0
# The pause before proposing again after a refusal (another change in flight, no leader yet).
RETRY_S = 0.1


@dataclass(frozen=True, slots=True)
class ChangeResult:
    error: Errors
    message: str
    # The partitions whose voters this call changed (the others already had the change).
    changed: tuple[int, ...] = ()


class MembershipChanges:
    def __init__(self, cluster: NodeCluster) -> None:
        self._cluster = cluster
        self._busy = asyncio.Lock()  # one change at a time from this node: pysyncobj allows one per partition

    # -- the RPCs (node/service.py routes them here, admin only) ----------------------------------------

    async def add_raft_voter(self, request: pb.AddRaftVoterRequest, _context: object) -> pb.AddRaftVoterResponse:
        try:
            peers = parse_peers(request.node)
        except UserError as exc:
            return pb.AddRaftVoterResponse(error_code=Errors.INVALID_REQUEST, error_message=str(exc))
        if len(peers) != 1:
            return pb.AddRaftVoterResponse(
                error_code=Errors.INVALID_REQUEST, error_message="name exactly one node: id=host:port:raft_port"
            )
        result = await self.add_voter(peers[0], _timeout_s(request.timeout_ms), replace=request.replace)
        return pb.AddRaftVoterResponse(
            error_code=result.error, error_message=result.message, partitions_changed=result.changed
        )

    async def remove_raft_voter(
        self, request: pb.RemoveRaftVoterRequest, _context: object
    ) -> pb.RemoveRaftVoterResponse:
        result = await self.remove_voter(request.node_id, _timeout_s(request.timeout_ms))
        return pb.RemoveRaftVoterResponse(
            error_code=result.error, error_message=result.message, partitions_changed=result.changed
        )

    # -- the changes ------------------------------------------------------------------------------------

    async def add_voter(self, peer: Peer, timeout_s: float, replace: bool = False) -> ChangeResult:
        """Makes `peer` a voter of every partition; with `replace`, a voter with its id at another address (or
        with another spec) is removed first, once `peer` answers."""
        cluster = self._cluster
        deadline = time.monotonic() + timeout_s
        predecessor = next((p for p in cluster.peers if p.node_id == peer.node_id and p != peer), None)
        for known in cluster.peers:
            if replace and known == predecessor:
                continue
            same_id, same_address = known.node_id == peer.node_id, known.raft_address(0) == peer.raft_address(0)
            if same_id != same_address or (same_id and known != peer):
                return ChangeResult(
                    Errors.INVALID_REQUEST,
                    f"node {known.node_id} is a voter as {format_peer(known)}; remove it before adding "
                    f"{format_peer(peer)}, or replace it",
                )
        spec = format_peer(peer)
        if peer.node_id not in {p.node_id for p in cluster.peers} or (replace and predecessor is not None):
            unreachable = await _unreachable(peer, cluster.partitions)
            if unreachable:
                return ChangeResult(
                    Errors.INVALID_REQUEST,
                    f"node {peer.node_id} does not answer at {unreachable}: start it first, with peers naming the "
                    "voters and itself (a voter that is not there would count toward every quorum)",
                )
        removed: tuple[int, ...] = ()
        if replace and predecessor is not None:
            result = await self.remove_voter(predecessor.node_id, max(deadline - time.monotonic(), 0.0))
            if result.error != Errors.NONE:
                return result
            removed = result.changed

        def propose(partition: int, done: Callable[[Any, Any], None]) -> None:
            cluster.hosts[partition].replica.add_member(peer.raft_address(partition), spec, done)

        def holds(partition: int) -> bool:
            return peer.raft_address(partition) in cluster.hosts[partition].replica.members()

        async with self._busy:
            log.info("membership.add_voter", extra=fields(node=spec, partitions=cluster.partitions))
            added = await self._change(
                f"add node {peer.node_id}", propose, holds, max(deadline - time.monotonic(), RETRY_S)
            )
        return ChangeResult(added.error, added.message, tuple(sorted(set(removed) | set(added.changed))))

    async def remove_voter(self, node_id: int, timeout_s: float) -> ChangeResult:
        cluster = self._cluster
        peer = next((p for p in cluster.peers if p.node_id == node_id), None)
        if peer is None:
            return ChangeResult(Errors.NONE, f"node {node_id} is not a voter of any partition")
        if len(cluster.peers) == 1:
            return ChangeResult(Errors.INVALID_REQUEST, f"node {node_id} is the cluster's last voter")
        if node_id == cluster.node_id:
            # Its replicas would never hear that the change committed: the leaders stop talking to a removed voter.
            return ChangeResult(
                Errors.INVALID_REQUEST, f"node {node_id} cannot remove itself: send RemoveRaftVoter to another node"
            )

        def propose(partition: int, done: Callable[[Any, Any], None]) -> None:
            replica = cluster.hosts[partition].replica
            if cluster.leader_of(partition) == peer:
                replica.ask_leader_to_hand_over()  # a leader cannot remove itself; the next attempt can
                done(None, FAIL_REASON.REQUEST_DENIED)
                return
            replica.remove_member(peer.raft_address(partition), done)

        def holds(partition: int) -> bool:
            return peer.raft_address(partition) not in cluster.hosts[partition].replica.members()

        async with self._busy:
            log.info("membership.remove_voter", extra=fields(node=node_id, partitions=cluster.partitions))
            return await self._change(f"remove node {node_id}", propose, holds, timeout_s)

    async def _change(
        self,
        what: str,
        propose: Callable[[int, Callable[[Any, Any], None]], None],
        holds: Callable[[int], bool],
        timeout_s: float,
    ) -> ChangeResult:
        """Proposes the change on every partition that does not hold it yet, until each has committed it."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        pending = {k for k in range(self._cluster.partitions) if not holds(k)}
        changed: list[int] = []
        refusals: dict[int, str] = {}
        while pending:
            attempts: dict[int, asyncio.Future[Any]] = {}
            for k in sorted(pending):
                future: asyncio.Future[Any] = loop.create_future()

                def done(_result: Any, error: Any, future: asyncio.Future[Any] = future) -> None:
                    def settle() -> None:
                        if not future.done():
                            future.set_result(error)

                    loop.call_soon_threadsafe(settle)

                propose(k, done)
                attempts[k] = future
            remaining = deadline - time.monotonic()
            await asyncio.wait(attempts.values(), timeout=min(ATTEMPT_TIMEOUT_S, max(remaining, 0.0)))
            for k, future in attempts.items():
                error = future.result() if future.done() else None
                replica = self._cluster.hosts[k].replica
                if error == FAIL_REASON.SUCCESS:
                    pending.discard(k)
                    changed.append(k)
                elif holds(k) and replica.raftCommitIndex >= replica.last_log_index():
                    # Already there and committed: a repeated call, or another node's call made it.
                    pending.discard(k)
                else:
                    refusals[k] = "unanswered" if error is None else _reason(error)
            if pending and time.monotonic() >= deadline:
                detail = ", ".join(f"{k}: {refusals.get(k, '?')}" for k in sorted(pending))
                log.warning("membership.timed_out", extra=fields(change=what, pending=sorted(pending)))
                return ChangeResult(
                    Errors.REQUEST_TIMED_OUT,
                    f"{what}: partitions not changed within {timeout_s:g} s ({detail}); it is safe to run again",
                    tuple(sorted(changed)),
                )
            if pending:
                await asyncio.sleep(RETRY_S)
        log.info("membership.changed", extra=fields(change=what, partitions=sorted(changed)))
        return ChangeResult(Errors.NONE, f"{what}: done", tuple(sorted(changed)))


async def _unreachable(peer: Peer, partitions: int) -> str | None:
    """The first of the node's Raft ports that refuses a connection (and why); None when all of them answer."""
    for k in range(partitions):
        address = peer.raft_address(k)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(peer.host, peer.raft_port + k), REACH_S)
        except (OSError, TimeoutError, UnicodeError) as exc:
            return f"{address} ({exc.__class__.__name__}: {exc})"
        writer.close()
    return None


def _timeout_s(timeout_ms: int) -> float:
    return timeout_ms / 1000 if timeout_ms > 0 else DEFAULT_TIMEOUT_S


def _reason(error: Any) -> str:
    names = {
        FAIL_REASON.REQUEST_DENIED: "refused (another change in flight, or the leader is the node removed)",
        FAIL_REASON.MISSING_LEADER: "no leader",
        FAIL_REASON.NOT_LEADER: "leader changed",
        FAIL_REASON.LEADER_CHANGED: "leader changed",
        FAIL_REASON.DISCARDED: "discarded",
        FAIL_REASON.QUEUE_FULL: "queue full",
        FAIL_REASON.UNKNOWN_OUTCOME: "unknown outcome",
    }
    return names.get(error, f"failed ({error})")
