"""The hunks of raft/syncobj_patch.py that keep a leader from deposing itself for its own stall (issue 23).

pysyncobj's leader steps down when no majority has answered it for `leaderFallbackTimeout` (Raft's check-quorum),
measured on the wall clock between its ticks. When the leader's own tick thread is held up (a slow fdatasync behind
another replica's snapshot on the same disk, a long wait for the GIL), it sends nothing meanwhile, so nothing comes
back, and at its next tick it finds its followers silent and steps down, although they heard from it until it
stalled and none of them has stood for election. It then stands again and, in the 100,000-group runs, was
re-elected at once: the partition was unavailable for its reload (1-3 s) for nothing. etcd counts the check-quorum
interval in its own ticks, so time its leader does not run does not count against the followers; so does this.

* `fallback_own_stall_init`, `fallback_own_stall_poll`: each tick notes the latest time its poll may return.
* `fallback_own_stall`: the time by which the tick comes later than that is the thread's own stall; the followers'
  latest answers are moved forward by it (never past now) before the check. A follower that is really gone is
  still found silent once the leader has run for `leaderFallbackTimeout` without an answer. Nothing that Raft's
  safety or the leader lease rests on changes: the lease counts from the send time of acknowledged AppendEntries
  (raft/transport.py), and a newer leader deposes this one by its term as before.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

FALLBACK_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "fallback_own_stall_init",
        "        self.__lastResponseTime = {}\n",
        "        self.__lastResponseTime = {}\n        self.__pollUntil = monotonicTime()\n",
    ),
    Hunk(
        "fallback_own_stall_poll",
        "        self._poller.poll(timeToWait)\n",
        "        self.__pollUntil = monotonicTime() + timeToWait\n        self._poller.poll(timeToWait)\n",
    ),
    Hunk(
        "fallback_own_stall",
        "            deadline = monotonicTime() - self.__conf.leaderFallbackTimeout\n",
        """            now = monotonicTime()
            stalled = now - self.__pollUntil
            if stalled > 0:
                for node in self.__otherNodes:
                    self.__lastResponseTime[node] = min(now, self.__lastResponseTime[node] + stalled)
            deadline = now - self.__conf.leaderFallbackTimeout
""",
    ),
)
