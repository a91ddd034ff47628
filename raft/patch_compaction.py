"""The hunks of raft/syncobj_patch.py that keep a node's partitions from writing their snapshots all at once.

pysyncobj compacts each replica's log on its own tick thread, in-line (`useFork=False`), once the log holds
`logCompactionMinEntries` or `logCompactionMinTime` has passed. The replicas of one node start together and take the
same load, so all of them reach the threshold within a tick of each other: at 100,000 groups (16 partitions of 6,250)
each snapshot packs for ~350 ms while its groups change, and sixteen at once kept the node's event loop and Raft ticks
from running for 0.35-0.9 s at a time (bench/partition_load.py; docs/PERFORMANCE.md, "The five-minute stall").

* `compaction_gate`: `conf.compactionGate`, when set, is a lock the node's replicas share; a replica that finds it
  held skips this tick's compaction (and tries again on the next), so one snapshot at a time is written per node.
  A forced compaction (`forceLogCompaction`) stays forced until it has run.
* `compaction_gate_release`: the lock is released once the snapshot is written (or its writing failed).
* `compaction_phase`: the gate alone still writes a node's snapshots back to back, and every node in the same
  seconds: replicas that started together, or last compacted together (by entry count, under the same load), fall
  due together `logCompactionMinTime` later; sixteen 350 ms snapshots in a row cost leaderships in the
  100,000-group run. With `conf.compactionPhase` (a fraction of the interval) a replica has its own slot in every
  round, the monotonic times equal to phase x interval modulo the interval; its timed snapshot falls due at the
  first of its slots after the last one before its last snapshot: at most one interval after that snapshot, as
  before, and never at another replica's slot (node/cluster.py `compaction_phase` gives every replica of the
  cluster its own). Compactions due by entry count, or forced, are not held back.
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

COMPACTION_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "compaction_gate",
        """        self.__forceLogCompaction = False

        lastAppliedEntries = self.__getEntries(self.__raftLastApplied - 1, 2)
        if len(lastAppliedEntries) < 2 or lastAppliedEntries[0][1] == self.__lastSerializedEntry:
            self.__lastSerializedTime = currTime
            return
""",
        """        lastAppliedEntries = self.__getEntries(self.__raftLastApplied - 1, 2)
        if len(lastAppliedEntries) < 2 or lastAppliedEntries[0][1] == self.__lastSerializedEntry:
            self.__forceLogCompaction = False
            self.__lastSerializedTime = currTime
            return

        compactionGate = getattr(self.__conf, 'compactionGate', None)
        if compactionGate is not None and not compactionGate.acquire(False):
            return
        self.__forceLogCompaction = False
""",
    ),
    Hunk(
        "compaction_gate_release",
        "        cluster = self.__otherNodes | {self.__selfNode}\n"
        "        self.__serializer.serialize((data, lastAppliedEntries[1], lastAppliedEntries[0], cluster), "
        "lastAppliedEntries[0][1])\n",
        """        cluster = self.__otherNodes | {self.__selfNode}
        try:
            self.__serializer.serialize(
                (data, lastAppliedEntries[1], lastAppliedEntries[0], cluster), lastAppliedEntries[0][1]
            )
        finally:
            if compactionGate is not None:
                compactionGate.release()
""",
    ),
    Hunk(
        "compaction_phase",
        """        if len(self.__raftLog) <= self.__conf.logCompactionMinEntries and \\
                                currTime - self.__lastSerializedTime <= self.__conf.logCompactionMinTime and \\
                not self.__forceLogCompaction:
            return
""",
        """        interval = self.__conf.logCompactionMinTime
        lastSlot = self.__lastSerializedTime
        compactionPhase = getattr(self.__conf, 'compactionPhase', None)
        if compactionPhase is not None:
            lastSlot -= (lastSlot - compactionPhase * interval) % interval
        if len(self.__raftLog) <= self.__conf.logCompactionMinEntries and \\
                currTime - lastSlot <= interval and not self.__forceLogCompaction:
            return
""",
    ),
)
