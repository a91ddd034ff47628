"""The hunks of raft/syncobj_patch.py that keep a replica whose journal is untrusted out of elections until it has
caught up (raft/journal.py's `trusted`, `fresh` and `pristine`).

* `catch_up_*` (and the untrusted branch of `pre_vote_election`): a replica whose journal is untrusted (it may
  lack entries it acknowledged) grants no vote or pre-vote and stands for no election until it holds a committed
  entry of the current leader's term. A *fresh* journal (made at this start: a new cluster, or a wiped data
  directory — the node cannot tell) is untrusted too; while fresh it sends `fresh` to its peers at each election
  timeout, a replica whose log holds nothing (pristine) answers it with `fresh`, and a fresh replica is trusted
  once every other replica of the partition has said `fresh` to it: then no replica held anything, so nothing
  acknowledged can be missing (a brand-new cluster forms once all its nodes have started), unless
  `conf.bootstrap` is false (`initial_cluster_state = existing`): then it only ever catches up. One wiped among
  replicas that hold data hears no `fresh` from them and catches up instead.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

CATCH_UP_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "catch_up_no_pre_vote",
        """            granted = message['term'] > self.__raftCurrentTerm and \\
""",
        """            granted = message['term'] > self.__raftCurrentTerm and \\
                getattr(self.__raftLog, 'trusted', True) and \\
""",
    ),
    Hunk(
        "catch_up_no_vote",
        """                    if self.__votedForNodeId is not None:
                        return
""",
        """                    if self.__votedForNodeId is not None:
                        return
                    if not getattr(self.__raftLog, 'trusted', True):
                        return
""",
    ),
    Hunk(
        "catch_up_done",
        """            self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)

        if message['type'] == 'apply_command':
""",
        """            self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)
            if not getattr(self.__raftLog, 'trusted', True):
                committed = self.__getEntries(self.__raftCommitIndex, 1)
                if committed and committed[0][2] == self.__raftCurrentTerm:
                    self.__raftLog.set_trusted()

        if message['type'] == 'apply_command':
""",
    ),
)
