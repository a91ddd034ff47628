"""The hunks of raft/syncobj_patch.py that keep a leader from deposing itself for its own stall (issue 23).

pysyncobj's leader steps down when no majority has answered it for `leaderFallbackTimeout` (Raft's check-quorum),
measured on the wall clock between its ticks. A follower's answer is only read while the leader's tick thread polls
its sockets; when the thread is held up (a slow fdatasync behind another replica's snapshot on the same disk, a long
wait for the GIL, a tick that applies a large batch), it sends nothing and reads nothing meanwhile, and at its next
check it finds its followers silent and steps down, although they heard from it until it stalled and none of them
has stood for election. It then stands again and, in the 100,000-group runs, was re-elected at once: the partition
was unavailable for its reload (1-3 s) for nothing. etcd counts the check-quorum interval in its own ticks, so time
its leader does not run does not count against the followers; so does this.

* `fallback_own_stall_init`, `fallback_own_stall_poll`: a leader adds up the time its thread spends outside its poll
  (the work of its ticks, and a poll that returns later than it was asked to): the time it could not hear anyone.
  A replica driven by a node's Raft driver (raft/driver.py) polls through the driver, whose poller says how long
  the driver was not listening (`deafClock`); that is its deaf time instead.
* `fallback_own_stall`: at each check the followers' latest answers are moved forward by that time (never past
  now), and the sum starts again. A follower that is really gone is still found silent once the leader has listened
  for `leaderFallbackTimeout` without an answer from it (a leader that listens a tenth of the time, ten times as
  late on the wall clock). Nothing that Raft's safety or the leader lease rests on changes: the lease counts from
  the send time of acknowledged AppendEntries (raft/transport.py), and a newer leader deposes this one by its term
  as before.
* `fallback_own_stall_report*`: a leader that steps down all the same calls `_onLeaderFallback` with how long each
  follower had been silent and how long it had itself not listened, so that a log tells a lost quorum from a stall.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

FALLBACK_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "fallback_own_stall_init",
        "        self.__lastResponseTime = {}\n",
        """        self.__lastResponseTime = {}
        self.__heardUntil = monotonicTime()
        self.__deafTotal = 0.0
        self.__deafMark = 0.0
""",
    ),
    Hunk(
        "fallback_own_stall_poll",
        "        self._poller.poll(timeToWait)\n",
        """        pollFrom = monotonicTime()
        self.__deafTotal += pollFrom - self.__heardUntil
        self.__heardUntil = pollFrom
        if self.__raftState != _RAFT_STATE.LEADER:
            self.__deafMark = self.__deafClock()
        self._poller.poll(timeToWait)
        self.__heardUntil = min(monotonicTime(), pollFrom + timeToWait)
""",
    ),
    Hunk(
        "fallback_own_stall",
        "            deadline = monotonicTime() - self.__conf.leaderFallbackTimeout\n",
        """            now = monotonicTime()
            deafClock = self.__deafClock()
            deafFor, self.__deafMark = deafClock - self.__deafMark, deafClock
            for node in self.__otherNodes:
                self.__lastResponseTime[node] = min(now, self.__lastResponseTime[node] + deafFor)
            deadline = now - self.__conf.leaderFallbackTimeout
""",
    ),
    Hunk(
        "fallback_own_stall_report",
        """            if count <= (len(self.__otherNodes) + 1) / 2:
                self.__setState(_RAFT_STATE.FOLLOWER)
""",
        """            if count <= (len(self.__otherNodes) + 1) / 2:
                self._onLeaderFallback({node: now - self.__lastResponseTime[node] for node in self.__otherNodes},
                                       deafFor)
                self.__setState(_RAFT_STATE.FOLLOWER)
""",
    ),
    Hunk(
        "fallback_own_stall_report_default",
        """    def __applyLogEntries(self):
""",
        """    def _onLeaderFallback(self, silentFor, deafFor):
        pass

    def __deafClock(self):
        driverClock = getattr(self._poller, 'deafClock', None)
        if driverClock is not None:
            return driverClock()
        return self.__deafTotal + max(0.0, monotonicTime() - self.__heardUntil)

    def __applyLogEntries(self):
""",
    ),
)
