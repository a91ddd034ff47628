"""One Raft driver thread per node: it polls the sockets of all the node's replicas and ticks them (issue 23).

pysyncobj gives every replica a thread of its own that polls its sockets and ticks every `autoTickPeriod`: 16
partitions are 16 threads waking 20 times a second and handing the GIL to each other on every message. The driver
runs the same ticks on one thread: one `epoll` holds every replica's descriptors (each replica sees it through a
`ReplicaPoller`, which pysyncobj takes as its poller: raft/patch_driver.py), the driver blocks on it until the
earliest replica is due, then ticks each replica whose descriptors fired, that was woken (`_wake`, a new command:
the replica's pipe is in the same epoll) or whose time came. A replica's next time is what its own thread would
have waited (`_nextTickWait`: the tick period, a quiet replica's rest, a follower's election timer).

What a replica's own thread did implicitly, the driver does explicitly:

* **Deaf time** (raft/patch_fallback.py): a leader does not count against its followers the time it could not
  hear them. With the driver, every replica hears its peers while the driver waits in `epoll`, and none does while
  it ticks or dispatches; `deaf_clock()` adds up the latter, and each leader counts its growth since its last check.
* **Destroy**: `destroy()` of a driven replica is carried out on the driver's thread (its sockets, journal and
  descriptors are the driver's), so it cannot race a tick of the same replica.
* **Stalls**: a replica's tick holds up every other replica of the node for as long as it takes: an fdatasync, a
  snapshot (the compaction gate already writes one at a time per node), a large apply. The deaf clock keeps such a
  stall from deposing a leader, as it does a stall of a replica's own thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.poller import POLL_EVENT_TYPE

from groupcoord.base.logfields import fields

log = logging.getLogger(__name__)

_TO_EPOLL = (
    (POLL_EVENT_TYPE.READ, select.EPOLLIN),
    (POLL_EVENT_TYPE.WRITE, select.EPOLLOUT),
    (POLL_EVENT_TYPE.ERROR, select.EPOLLERR),
)
# How long the driver sleeps at most with nothing due: a replica added or woken writes the wake pipe anyway.
IDLE_WAIT_S = 1.0
# After an unexpected error in a turn, before the next (pysyncobj's tick thread waits a tick period).
ERROR_PAUSE_S = 0.05


class _Slot:
    """One replica of the driver: its poller view, when it is next due, and whether something woke it."""

    __slots__ = ("active", "destroyed", "due", "gone", "poller", "replica")

    def __init__(self, poller: ReplicaPoller) -> None:
        self.poller = poller
        self.replica: Any = None
        self.due = 0.0
        self.active = True
        self.destroyed = False
        self.gone = threading.Event()


class ReplicaPoller:
    """pysyncobj's Poller interface for one replica, on the driver's epoll; its `poll` does not wait: the driver
    polls for every replica."""

    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver
        self._slot = _Slot(self)
        self.descriptors: set[int] = set()

    def subscribe(self, descr: int, callback: Callable[[int, int], None], eventMask: int) -> None:
        self.descriptors.add(descr)
        self._driver.subscribe(descr, callback, eventMask, self._slot)

    def unsubscribe(self, descr: int) -> None:
        self.descriptors.discard(descr)
        self._driver.unsubscribe(descr, self._slot)

    def poll(self, timeout: float) -> None:
        """What arrived is dispatched by the driver before it ticks the replica."""

    def deafClock(self) -> float:
        return self._driver.deaf_clock()


class RaftDriver:
    """The thread that ticks every replica of a node. `poller()` before a replica is made (its `SyncObjConf.poller`),
    `add()` from the replica's constructor (raft/patch_driver.py), `stop()` at the end."""

    def __init__(self, name: str = "raft-driver") -> None:
        self._epoll = select.epoll()
        self._callbacks: dict[int, tuple[_Slot, Callable[[int, int], None]]] = {}
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._added: list[_Slot] = []
        self._doomed: list[_Slot] = []
        self._stopping = False
        self._ended = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        # Seconds the driver was not waiting in epoll (and so no replica could hear its peers), up to `_heard_until`.
        self._deaf = 0.0
        self._heard_until = raft_clock()
        self.ticks = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- what replicas and their owner call (any thread) -------------------------------------------------

    def poller(self) -> ReplicaPoller:
        return ReplicaPoller(self)

    def add(self, replica: Any) -> None:
        """Starts driving `replica`, whose `SyncObjConf.poller` came from `poller()`."""
        slot: _Slot = replica._poller._slot
        slot.replica = replica
        with self._lock:
            self._added.append(slot)
        self.wake()

    def destroy(self, replica: Any, wait: bool = False) -> None:
        """Destroys `replica` on the driver's thread (pysyncobj's `_doDestroy`), and stops driving it; `wait`: returns
        once it is destroyed (or the driver has ended)."""
        slot: _Slot = replica._poller._slot
        with self._lock:
            self._doomed.append(slot)
        self.wake()
        if wait and threading.current_thread() is not self._thread:
            while not slot.gone.is_set() and self._thread.is_alive():
                slot.gone.wait(0.1)

    def wake(self) -> None:
        with self._lock:  # not after the pipe is closed: its descriptor may be another file's by then
            if self._ended:
                return
            with contextlib.suppress(BlockingIOError):  # the pipe is full: the driver has been woken already
                os.write(self._wake_w, b"w")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Destroys every replica still driven, then ends the thread (again: nothing)."""
        with self._lock:
            self._stopping = True
        self.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def deaf_clock(self) -> float:
        deaf: float = self._deaf + max(0.0, raft_clock() - self._heard_until)
        return deaf

    def subscribe(self, descr: int, callback: Callable[[int, int], None], event_mask: int, slot: _Slot) -> None:
        mask = 0
        for ours, theirs in _TO_EPOLL:
            if event_mask & ours:
                mask |= theirs
        # pysyncobj subscribes a connection again after every write it could finish: mostly a modify.
        if descr in self._callbacks:
            try:
                self._epoll.modify(descr, mask)
            except FileNotFoundError:  # closed without an unsubscribe, and the number given to a new socket
                self._epoll.register(descr, mask)
        else:
            try:
                self._epoll.register(descr, mask)
            except FileExistsError:
                self._epoll.modify(descr, mask)
        self._callbacks[descr] = (slot, callback)

    def unsubscribe(self, descr: int, slot: _Slot) -> None:
        """Only the slot's own: a descriptor closed without one and reused by another replica stays that one's."""
        entry = self._callbacks.get(descr)
        if entry is None or entry[0] is not slot:
            return
        del self._callbacks[descr]
        with contextlib.suppress(KeyError, OSError, ValueError):  # closed already
            self._epoll.unregister(descr)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                try:
                    if not self._turn():
                        break
                except Exception:
                    # As pysyncobj's tick thread: a thread that ended would leave every replica of the node mute.
                    log.exception("raft.driver_failed")
                    time.sleep(ERROR_PAUSE_S)
        finally:
            for slot in self._slots:
                self._destroy(slot)
            self._slots.clear()
            with self._lock:
                self._ended = True
                self._epoll.close()
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _turn(self) -> bool:
        """One wait and the ticks it makes due; False once stopping."""
        now = raft_clock()
        if any(slot.active for slot in self._slots):
            timeout = 0.0
        else:
            timeout = min((slot.due for slot in self._slots), default=now + IDLE_WAIT_S) - now
            timeout = min(max(timeout, 0.0), IDLE_WAIT_S)
        self._deaf += now - self._heard_until
        events = self._epoll.poll(timeout)
        self._heard_until = min(raft_clock(), now + timeout)
        for descr, event in events:
            if descr == self._wake_r:
                self._drain_wake()
                continue
            entry = self._callbacks.get(descr)
            if entry is None:
                continue
            slot, callback = entry
            slot.active = True
            try:
                callback(descr, _from_epoll(event))
            except Exception:
                log.exception("raft.driver_callback_failed", extra=fields(fd=descr))
        if not self._changes():
            return False
        # Those with news first, each as its own thread would after a poll: first the durability barrier's flush
        # (a follower's answer leaves after one fdatasync, raft/transport.py), then a tick.
        active = [slot for slot in self._slots if slot.active]
        for slot in active:
            self._flush(slot)
        for slot in active:
            self._tick(slot)
        now = raft_clock()
        for slot in self._slots:
            if slot.due <= now:
                self._tick(slot)
        return True

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _changes(self) -> bool:
        """Takes in added replicas and destroys doomed ones; False once stopping."""
        with self._lock:
            added, self._added = self._added, []
            doomed, self._doomed = self._doomed, []
            stopping = self._stopping
        self._slots.extend(added)
        for slot in doomed:
            self._destroy(slot)
        if doomed:
            self._slots = [slot for slot in self._slots if not slot.destroyed]
        return not stopping

    def _tick(self, slot: _Slot) -> None:
        slot.active = False
        replica = slot.replica
        self.ticks += 1
        try:
            replica.doTick(0.0)
            wait = replica._nextTickWait()
        except Exception:
            # As pysyncobj's own tick thread: log, and try again a tick period later.
            log.exception("raft.tick_failed", extra=fields(partition=getattr(replica, "partition_id", None)))
            wait = replica.conf.autoTickPeriod
        slot.due = raft_clock() + wait

    def _flush(self, slot: _Slot) -> None:
        try:
            slot.replica._afterDriverPoll()
        except Exception:
            log.exception("raft.flush_failed", extra=fields(partition=getattr(slot.replica, "partition_id", None)))

    def _destroy(self, slot: _Slot) -> None:
        if slot.destroyed:
            return
        slot.destroyed = True
        if slot.replica is not None:
            try:
                slot.replica._doDestroy()
            except Exception:
                partition = getattr(slot.replica, "partition_id", None)
                log.exception("raft.destroy_failed", extra=fields(partition=partition))
        for descr in list(slot.poller.descriptors):
            slot.poller.unsubscribe(descr)
        slot.gone.set()


def _from_epoll(event: int) -> int:
    mask = 0
    if event & select.EPOLLIN:
        mask |= POLL_EVENT_TYPE.READ
    if event & select.EPOLLOUT:
        mask |= POLL_EVENT_TYPE.WRITE
    if event & (select.EPOLLERR | select.EPOLLHUP):
        mask |= POLL_EVENT_TYPE.ERROR
    return mask
