"""pysyncobj's TCP transport with a durability barrier: no Raft message leaves before the journal is durable.

Every reply that depends on persistent state — a vote (term and vote), a pre-vote, an AppendEntries
acknowledgement (the entries) — is sent through here. While the journal holds records not yet on stable storage,
such messages are deferred; our patch of pysyncobj
(raft/syncobj_patch.py, `durability_barrier`) calls `flushDeferred` right before and right after each poll, which
fdatasyncs once for everything recorded in that tick (group commit) and then sends what waited. While the journal
cannot be written (disk full, I/O error) the deferred messages are dropped: the replica is mute — it neither
acknowledges nor leads — and Raft's own retransmission resumes once a later flush succeeds.

A leader's AppendEntries is not deferred: the leader's disk write overlaps its followers' (one fdatasync on the
commit path instead of two in a row), and the `leader_self_count` hunk counts the leader toward a quorum only for
entries up to the journal's `durableIndex`.
"""

from __future__ import annotations

from typing import Any

from pysyncobj.transport import TCPTransport

from groupcoord.raft.journal import CheckedJournal


class DurableTransport(TCPTransport):  # type: ignore[misc]  # pysyncobj has no type hints
    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, journal: CheckedJournal) -> None:
        self._journal = journal
        self._deferred: list[tuple[Any, Any]] = []
        super().__init__(syncObj, selfNode, otherNodes)

    def send(self, node: Any, message: Any) -> bool:
        # A leader's AppendEntries may leave before its own copy is durable (Raft thesis §10.2.1: the leader
        # writes in parallel with its followers); it counts itself toward a quorum only up to `durableIndex`.
        leader_append = message.get("type") == "append_entries" and self._journal.write_error is None
        if leader_append or (not self._deferred and self._journal.durable):
            return bool(super().send(node, message))
        self._deferred.append((node, message))
        return True

    def flushDeferred(self) -> None:
        if not self._journal.sync():
            self._deferred.clear()
            return
        deferred, self._deferred = self._deferred, []
        for node, message in deferred:
            super().send(node, message)
