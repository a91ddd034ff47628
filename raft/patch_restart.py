"""The hunks of raft/syncobj_patch.py that make a restarted replica use what its log and snapshot hold: the latest
configuration in its log, and the committed entries after its snapshot.

* `config_from_log` and `config_not_at_commit`: Raft's rule is that a server uses the latest configuration in its
  log, committed or not. pysyncobj applies a membership entry when it is appended, but after a restart only when
  the replay reaches it, which stops at the journal's COMMIT hint (written once a second) until a leader says more:
  a restarted replica could count votes and quorums with the voters of a second ago. Now the whole log's
  membership entries are applied once the snapshot is loaded, and the replay no longer applies them again (it
  would bring back an intermediate configuration, e.g. a voter added and then removed).
* `snapshot_keeps_suffix`: after a crash between a snapshot and the journal's compaction, a restart cleared the
  journal down to the snapshot's two entries, dropping the committed entries after them; they are kept now.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

RESTART_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "config_from_log",
        """                self.__loadDumpFile(clearJournal=False)
            self.__needLoadDumpFile = False
""",
        """                self.__loadDumpFile(clearJournal=False)
            self.__needLoadDumpFile = False
            if self.__conf.dynamicMembershipChange:
                for entry in self.__getEntries(self.__raftLog[0][1]):
                    clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                    if clusterChangeRequest is not None:
                        self.__doChangeCluster(clusterChangeRequest)
""",
    ),
    Hunk(
        "config_not_at_commit",
        """        clusterChangeRequest = self.__parseChangeClusterRequest(command)
        if clusterChangeRequest is not None:
             self.__doChangeCluster(clusterChangeRequest)
             return
""",
        """        if commandType == _COMMAND_TYPE.MEMBERSHIP:
            return
""",
    ),
    Hunk(
        "snapshot_keeps_suffix",
        """            if clearJournal or \\
                    len(self.__raftLog) < 2 or \\
                    self.__raftLog[0] != data[2] or \\
                    self.__raftLog[1] != data[1]:
                self.__raftLog.clear()
                self.__raftLog.add(*data[2])
                self.__raftLog.add(*data[1])
""",
        """            pos = data[2][1] - self.__raftLog[0][1] if len(self.__raftLog) else -1
            if clearJournal or pos < 0 or pos + 1 >= len(self.__raftLog) or \\
                    tuple(self.__raftLog[pos]) != tuple(data[2]) or \\
                    tuple(self.__raftLog[pos + 1]) != tuple(data[1]):
                self.__raftLog.clear()
                self.__raftLog.add(*data[2])
                self.__raftLog.add(*data[1])
            elif pos > 0:
                self.__raftLog.deleteEntriesTo(pos)
""",
    ),
)
