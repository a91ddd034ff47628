"""The hunks of raft/syncobj_patch.py that shorten a failover when the leader's process dies (issue 23).

A process killed (kill -9, a crash, an OOM kill) has its TCP connections closed by the kernel, so its followers read
end-of-stream at once; pysyncobj only dropped the node from its connected set and let the election timer run its
full course, a random time in [`raftMinTimeout`, `raftMaxTimeout`] after the last AppendEntries: the first of two
followers stood for election about a third of a second after the kill, and its partitions answered nothing
meanwhile. ZooKeeper's followers look for a new leader the moment their connection to it breaks.

* `leader_lost_timer`: a follower whose connection to its leader closes moves its election timer to the earliest
  time its pre-vote can be granted, the pre-vote window (`conf.preVoteWindow`) after it last heard from that leader
  (a voter grants no pre-vote before, `pre_vote_messages`), plus a random part of up to half the window, so that
  the followers do not stand at the same moment and split the vote. The election timeout does not enter: it can be
  long (a stalled leader keeps its partitions) while a dead one is replaced within about one and a half windows.
  A quiet partition's follower counts from the leader node's latest heartbeat instead (raft/patch_quiescence.py).
  Nothing in the voters' rule changes, so neither does the bound leader leases rest on (`PartitionReplica.has_lease`):
  a leader alive behind a closed connection keeps its lease, and its next AppendEntries re-arms the timer as
  before. Only with pre-vote on: without it, a candidate would raise the term of a healthy cluster on every dropped
  connection.
* `leader_lost_tick_wait`: a follower's tick thread waits no longer than until its election timer (pysyncobj
  checked the timer only every tick period, up to 50 ms late, a third of the time this saves).
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

LEADER_LOST_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "leader_lost_timer",
        """    def __onNodeDisconnected(self, node):
        self.__connectedNodes.discard(node)
""",
        """    def __onNodeDisconnected(self, node):
        self.__connectedNodes.discard(node)
        if node == self.__raftLeader and self.__raftState == _RAFT_STATE.FOLLOWER and self.__preVote and \\
                not self.__transferInProgress:
            window = self.__preVoteWindow
            lost = self.__lastLeaderContact + window + window / 2 * random.random()
            self.__raftElectionDeadline = min(self.__raftElectionDeadline, lost)
""",
    ),
    Hunk(
        "leader_lost_tick_wait",
        """                return quiescence.rest_tick_s
        return self.__conf.autoTickPeriod
""",
        """                return quiescence.rest_tick_s
        if self.__raftState != _RAFT_STATE.LEADER:
            left = self.__raftElectionDeadline - monotonicTime()
            if 0 < left < self.__conf.autoTickPeriod:
                return left
        return self.__conf.autoTickPeriod
""",
    ),
)
