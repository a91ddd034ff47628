"""The hunks of raft/syncobj_patch.py that cut the Raft messages a write costs (docs/PERFORMANCE.md, issue 23).

pysyncobj (with `appendEntriesUseBatch` off, as we run it) sends every follower an AppendEntries for each command
the moment it takes it from its queue, and another the moment an entry is applied, only to carry the new commit
index: per write and follower two messages, two answers and two journal syncs, each pickled, compressed and
encrypted.

* `coalesced_append_*`: the leader takes every queued command into its log first and then sends one
  AppendEntries per follower carrying all of them.
* `commit_rides_along`: the new commit index goes with the next AppendEntries (a new entry's, or the heartbeat a
  period later), as etcd's raft carries it. Raft's safety does not depend on when followers learn of a commit; the
  leader still answers a client when it applies.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

MESSAGES_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "coalesced_append_start",
        """    def _checkCommandsToApply(self):
        startTime = monotonicTime()
""",
        """    def _checkCommandsToApply(self):
        startTime = monotonicTime()
        appended = False
""",
    ),
    Hunk(
        "coalesced_append_take",
        """                    if not self.__conf.appendEntriesUseBatch:
                        self.__sendAppendEntries()
                else:
""",
        """                    appended = True
                else:
""",
    ),
    Hunk(
        "coalesced_append_send",
        """                self.__callErrCallback(FAIL_REASON.MISSING_LEADER, callback)

""",
        """                self.__callErrCallback(FAIL_REASON.MISSING_LEADER, callback)

        if appended and not self.__conf.appendEntriesUseBatch and self.__raftState == _RAFT_STATE.LEADER:
            self.__sendAppendEntries()

""",
    ),
    Hunk(
        "commit_rides_along",
        """                        (self.__selfCodeVersion, e.ver))

            if not self.__conf.appendEntriesUseBatch:
                needSendAppendEntries = True
""",
        """                        (self.__selfCodeVersion, e.ver))
""",
    ),
)
