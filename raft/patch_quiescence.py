"""The hunks of raft/syncobj_patch.py that let an idle partition stop its Raft heartbeats (raft/quiescence.py
decides when, and its node-level UDP heartbeat shows the followers that the leader is alive).

* `quiet_*`: a quiet leader (`quiescence.leader_quiet`: its log fully replicated, committed and applied) sends no
  AppendEntries and counts its followers' node-level heartbeats toward its leader fallback timeout; a follower's
  election timer runs from its leader node's latest heartbeat; both poll every `rest_tick_s`, and `_wake` ends a
  resting poll at once. A follower whose connection to the leader closed does not rest, and its timer runs out
  when its pre-vote can first be granted (as `leader_lost_timer` does for a partition in use), not an election
  timeout after the last heartbeat.
* `pre_vote_quiet`: a follower that heard its leader node's heartbeat within one and a half pre-vote windows
  refuses pre-votes, as it would within one window after an AppendEntries (the heartbeat is a datagram: one lost
  must not let a pre-vote through).
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

QUIESCENCE_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "quiet_state",
        """        self.__lastReadonlyCheck = 0
""",
        """        self.__lastReadonlyCheck = 0
        self.__quiet = False
""",
    ),
    Hunk(
        "quiet_methods",
        """    def __applyLogEntries(self):
""",
        """    def _wake(self):
        if not self.__conf.appendEntriesUseBatch and PIPE_NOTIFIER_ENABLED:
            try:
                self.__pipeNotifier.notify()
            except OSError:
                pass

    def __quietLeader(self):
        quiescence = getattr(self.__conf, 'quiescence', None)
        if quiescence is None:
            return False
        last = self.__getCurrentLogIndex()
        settled = self.__raftCommitIndex == last and self.__raftLastApplied == last and \\
            all(self.__raftMatchIndex.get(node, 0) == last for node in self.__otherNodes)
        return quiescence.leader_quiet(settled, last, self.__otherNodes)

    def __quietLeaderHeard(self):
        quiescence = getattr(self.__conf, 'quiescence', None)
        if quiescence is None or self.__raftState != _RAFT_STATE.FOLLOWER or self.__raftLeader is None:
            return None
        return quiescence.leader_heard(self.__raftLeader, self.__raftCurrentTerm)

    def __tickWait(self):
        quiescence = getattr(self.__conf, 'quiescence', None)
        if quiescence is not None:
            if self.__raftState == _RAFT_STATE.LEADER and self.__quiet:
                return quiescence.rest_tick_s
            heard = self.__quietLeaderHeard()
            if heard is not None and monotonicTime() - heard < self.__conf.raftMinTimeout and \\
                    self.__raftLeader in self.__connectedNodes:
                return quiescence.rest_tick_s
        return self.__conf.autoTickPeriod

    def __applyLogEntries(self):
""",
    ),
    Hunk(
        "quiet_tick_wait",
        "                    self._onTick(self.__conf.autoTickPeriod)\n",
        "                    self._onTick(self.__tickWait())\n",
    ),
    Hunk(
        "quiet_leader",
        """            self.__leaderCommitIndex = self.__raftCommitIndex
            deadline = monotonicTime() - self.__conf.leaderFallbackTimeout
""",
        """            self.__leaderCommitIndex = self.__raftCommitIndex
            wasQuiet, self.__quiet = self.__quiet, self.__quietLeader()
            if wasQuiet or self.__quiet:
                for node in self.__otherNodes:
                    self.__lastResponseTime[node] = max(self.__lastResponseTime[node],
                                                        self.__conf.quiescence.node_heard(node))
            deadline = monotonicTime() - self.__conf.leaderFallbackTimeout
""",
    ),
    Hunk(
        "quiet_leader_rests",
        """            if monotonicTime() > self.__newAppendEntriesTime or needSendAppendEntries:
                self.__sendAppendEntries()
""",
        """            if needSendAppendEntries or (monotonicTime() > self.__newAppendEntriesTime and not self.__quiet):
                self.__sendAppendEntries()
""",
    ),
    Hunk(
        "quiet_follower_timer",
        """            if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():
""",
        """            heard = None if self.__transferInProgress else self.__quietLeaderHeard()
            if heard is not None and self.__raftLeader not in self.__connectedNodes and self.__preVote:
                lost = max(heard + self.__preVoteWindow * 3 / 2, self.__lastLeaderContact + self.__preVoteWindow)
                if self.__raftElectionDeadline < lost:
                    self.__raftElectionDeadline = lost + self.__preVoteWindow / 2 * random.random()
            elif heard is not None and self.__raftElectionDeadline < heard + self.__conf.raftMinTimeout:
                self.__raftElectionDeadline = heard + self.__generateRaftTimeout()
            if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():
""",
    ),
    Hunk(
        "pre_vote_quiet",
        """        return self.__raftLeader is not None and \\
            monotonicTime() - self.__lastLeaderContact < self.__preVoteWindow
""",
        """        heard = self.__quietLeaderHeard()
        if heard is not None and monotonicTime() - heard < self.__preVoteWindow * 3 / 2:
            return True
        return self.__raftLeader is not None and \\
            monotonicTime() - self.__lastLeaderContact < self.__preVoteWindow
""",
    ),
)
