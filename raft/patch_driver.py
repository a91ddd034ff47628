"""The hunks of raft/syncobj_patch.py that let one thread drive all of a node's replicas (raft/driver.py).

pysyncobj offers `autoTick = False` and `doTick()` for a caller that ticks a replica itself, but its poller is its
own (one per replica), its constructor then binds the port in a busy loop on the caller's thread, and its
`destroy()` runs on the caller's thread, whatever the replica's ticker is doing. With `conf.driver` set:

* `driver_poller`: `conf.poller` is the replica's poller (the driver's `ReplicaPoller`, a view of one epoll);
* `driver_add`: the constructor hands the replica to the driver, whose first tick binds its port (and retries
  every `bindRetryTime`, as pysyncobj's own tick thread does);
* `driver_destroy`, `driver_destroy_synchronous`: `destroy()` has the driver destroy the replica on its thread
  (`destroy_synchronous()` waits until it has);
* `driver_next_tick`: `_nextTickWait()` says when the replica wants its next tick (what its own thread would
  wait: raft/patch_quiescence.py, raft/patch_leader_lost.py), and `_afterDriverPoll()` runs what follows a poll
  (the durability barrier's flush, raft/patch_durability.py): a follower's answer leaves right after the message it
  answers, as on its own thread, not after the work of its next tick.

Without `conf.driver` nothing changes. The driver's deaf time reaches a leader through its poller's `deafClock`
(raft/patch_fallback.py), and `_wake` writes the replica's pipe, which is in the driver's epoll
(raft/patch_quiescence.py).
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

DRIVER_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "driver_poller",
        "        self._poller = createPoller(self.__conf.pollerType)\n",
        "        self._poller = getattr(self.__conf, 'poller', None) or createPoller(self.__conf.pollerType)\n",
    ),
    Hunk(
        "driver_add",
        """        else:
            try:
                while not self.__transport.ready:
                    self.__transport.tryGetReady()
""",
        """        elif getattr(self.__conf, 'driver', None) is not None:
            self.__conf.driver.add(self)
        else:
            try:
                while not self.__transport.ready:
                    self.__transport.tryGetReady()
""",
    ),
    Hunk(
        "driver_destroy",
        """        if self.__conf.autoTick:
            self.__destroying = True
        else:
            self._doDestroy()
""",
        """        if self.__conf.autoTick:
            self.__destroying = True
        elif getattr(self.__conf, 'driver', None) is not None:
            self.__conf.driver.destroy(self)
        else:
            self._doDestroy()
""",
    ),
    Hunk(
        "driver_destroy_synchronous",
        """        self.destroy()
        self.__thread.join()
""",
        """        if getattr(self.__conf, 'driver', None) is not None:
            self.__conf.driver.destroy(self, wait=True)
            return
        self.destroy()
        self.__thread.join()
""",
    ),
    Hunk(
        "driver_next_tick",
        """    def __tickWait(self):
""",
        """    def _nextTickWait(self):
        return self.__tickWait()

    def _afterDriverPoll(self):
        flushDeferred = getattr(self.__transport, 'flushDeferred', None)
        if flushDeferred is not None:
            flushDeferred()

    def __tickWait(self):
""",
    ),
)
