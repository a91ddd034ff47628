"""Leadership spreading: partition k prefers the node at position k % N of its N voters sorted by id.

Raft elections pick whoever times out first, and on a shared machine one process often wins most of them,
which would make one node the coordinator of most groups. Like Kafka's preferred-leader election, a node
that leads a partition it is not preferred for hands it to the preferred node (pysyncobj's
`transferLeadership`, Raft's TimeoutNow) once that node is connected; pysyncobj refuses the transfer
while the target lags, and the next round tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from groupcoord.base.logfields import fields
from groupcoord.node.partitions import PartitionHost, Role
from groupcoord.node.topology import Peer

log = logging.getLogger(__name__)

ROUND_INTERVAL_S = 2.0


def preferred_leader(partition: int, peers: Sequence[Peer]) -> Peer:
    ordered = sorted(peers, key=lambda p: p.node_id)
    return ordered[partition % len(ordered)]


def preference_rank(partition: int, peers: Sequence[Peer], node_id: int) -> int:
    """Where `node_id` stands in the partition's rotation from its preferred leader (0) on: the order in which the
    voters' first election timers run out (raft/patch_pre_vote.py), so the preferred node is elected at start."""
    ordered = sorted(p.node_id for p in peers)
    return (ordered.index(node_id) - partition) % len(ordered)


class LeaderBalancer:
    def __init__(self, node_id: int, members: Callable[[int], Sequence[Peer]], hosts: Sequence[PartitionHost]) -> None:
        self._node_id = node_id
        self._members = members  # a partition's voters: they change with membership changes
        self._hosts = hosts
        self._next_round = time.monotonic() + ROUND_INTERVAL_S

    def maybe_transfer(self) -> None:
        """At most once per round: hands every partition this node serves but should not lead to its owner."""
        now = time.monotonic()
        if now < self._next_round:
            return
        self._next_round = now + ROUND_INTERVAL_S
        for host in self._hosts:
            host.replica.step_aside_if_odd()
            # A replica the last state check found odd (raft/digest.py) is no one's preferred leader.
            odd = host.replica.digests.odd_nodes
            voters = [p for p in self._members(host.partition_id) if p.node_id not in odd]
            if host.role is not Role.LEADER or len(voters) < 2:
                continue
            target = preferred_leader(host.partition_id, voters)
            address = target.raft_address(host.partition_id)
            if target.node_id != self._node_id and host.replica.is_connected(address):
                log.info(
                    "partition.transfer",
                    extra=fields(partition=host.partition_id, to_node=target.node_id, term=host.term),
                )
                host.replica.transferLeadership(node=address)
