"""The hunks of raft/syncobj_patch.py that fix log replication (docs/ARCHITECTURE.md lists every deviation;
tests/raft/test_raft_rules.py has a test per hunk that fails on the unpatched code).

* `conflict_only_truncation`: a follower truncated its log after `prevLogIdx` on *every* AppendEntries that
  overlapped its log, even when the entries matched, so a retransmission (pysyncobj caps a message at 64 KiB and
  resends after a late acknowledgement) could leave it briefly holding fewer entries than it had acknowledged —
  a kill then loses them. Raft §5.3: skip the entries already held, truncate only from the first one whose term
  conflicts. The commit index a message may set is then bounded by the last entry that message vouches for
  (Raft: min(leaderCommit, index of last new entry)), or a stale entry kept after them could be committed.
* `monotone_next_index`: a late success acknowledgement moved the leader's nextIndex for that follower *back*
  over entries already in flight, which caused the retransmissions above.
* `chunk_finish`: an entry of 64 KiB or more is sent in chunks; the last chunk was chosen by the length of the
  first entry's command instead of the pickled entry being sent, so a follower could never reassemble it.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

REPLICATION_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "conflict_only_truncation",
        """                if len(prevEntries) > 1:
                    # rollback cluster changes
                    if self.__conf.dynamicMembershipChange:
                        for entry in reversed(prevEntries[1:]):
                            clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                            if clusterChangeRequest is not None:
                                self.__doChangeCluster(clusterChangeRequest, reverse=True)

                    if prevLogIdx + 1 <= self.__raftLastApplied:
                        logger.critical(
                            'truncating already-applied log entries from index %d '
                            '(last applied: %d) - state machine may have diverged from '
                            'other cluster members', prevLogIdx + 1, self.__raftLastApplied)
                    self.__deleteEntriesFrom(prevLogIdx + 1)
""",
        """                existing = prevEntries[1:]
                skip = 0
                while skip < len(newEntries) and skip < len(existing) and \\
                        existing[skip][2] == newEntries[skip][2]:
                    skip += 1
                newEntries = newEntries[skip:]
                if newEntries and skip < len(existing):
                    conflictIdx = newEntries[0][1]
                    if self.__conf.dynamicMembershipChange:
                        for entry in reversed(existing[skip:]):
                            clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                            if clusterChangeRequest is not None:
                                self.__doChangeCluster(clusterChangeRequest, reverse=True)
                    if conflictIdx <= self.__raftLastApplied:
                        logger.critical('conflicting entry at index %d is already applied (last applied: %d)',
                                        conflictIdx, self.__raftLastApplied)
                    self.__deleteEntriesFrom(conflictIdx)
""",
    ),
    Hunk(
        "conflict_only_truncation_ack",
        """                nextNodeIdx = prevLogIdx + 1
                if newEntries:
                    nextNodeIdx = newEntries[-1][1] + 1

                self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)
""",
        """                lastNewIdx = prevLogIdx + skip + len(newEntries)
                self.__sendNextNodeIdx(node, nextNodeIdx=lastNewIdx + 1, success=True)
                leaderCommitIndex = min(leaderCommitIndex, lastNewIdx)
""",
    ),
    Hunk(
        "monotone_next_index",
        """                        self.__raftNextIndex[node] = nextNodeIdx
                self.__lastResponseTime[node] = monotonicTime()""",
        """                        self.__raftNextIndex[node] = max(self.__raftNextIndex[node], nextNodeIdx)
                self.__lastResponseTime[node] = monotonicTime()""",
    ),
    Hunk(
        "chunk_finish",
        "elif pos + batchSizeBytes >= len(entries[0][0]):",
        "elif pos + batchSizeBytes >= len(entry):",
    ),
)
