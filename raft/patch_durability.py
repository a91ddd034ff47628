"""The hunks of raft/syncobj_patch.py that make our journal the replica's and tie what leaves the node to what is
on stable storage (docs/ARCHITECTURE.md, Storage; tests/raft/test_storage_rules.py shows each hunk missing).

* `own_journal`: `conf.journal`, when set, is the replica's journal (ours, raft/journal.py: checksummed records,
  no mmap) instead of pysyncobj's `FileJournal`.
* `durability_barrier`: the transport's `flushDeferred()` (raft/transport.py) runs right before and right after
  each poll, so messages that wait for the journal leave after one fdatasync for the whole tick.
* `leader_self_count`: the leader counts itself toward a quorum only for entries its journal has on stable
  storage (`durableIndex`), so its AppendEntries can leave before its own fdatasync (raft/transport.py).
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

DURABILITY_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "own_journal",
        "        self.__raftLog = createJournal(self.__conf.journalFile)\n",
        """        self.__raftLog = self.__conf.journal if getattr(self.__conf, 'journal', None) is not None \\
            else createJournal(self.__conf.journalFile)
""",
    ),
    Hunk(
        "durability_barrier",
        "        self._poller.poll(timeToWait)\n",
        """        flushDeferred = getattr(self.__transport, 'flushDeferred', None)
        if flushDeferred is not None:
            flushDeferred()
        self._poller.poll(timeToWait)
        if flushDeferred is not None:
            flushDeferred()
""",
    ),
    Hunk(
        "leader_self_count",
        """                count = 1
                for node in self.__otherNodes:
                    if self.__raftMatchIndex[node] >= commitIdx:
""",
        """                count = 1 if commitIdx <= getattr(self.__raftLog, 'durableIndex', commitIdx) else 0
                for node in self.__otherNodes:
                    if self.__raftMatchIndex[node] >= commitIdx:
""",
    ),
)
