"""pysyncobj's `SyncObj`, with our patch for the places where pysyncobj 0.3.17 breaks Raft's rules.

The patch is a list of small hunks applied, at import, to the `syncobj.py` of the pinned pysyncobj (checked by its
SHA-256, so an upgrade fails loudly instead of patching code it was not written for); the module is compiled
from the result, and its relative imports resolve to the installed pysyncobj package. Everything else of
pysyncobj (transport, serializer, config) is used as installed; the journal is ours. docs/ARCHITECTURE.md lists
every deviation; tests/raft/test_raft_rules.py and test_storage_rules.py have a test per hunk that fails on the
unpatched code.

Why hunks and not a subclass: each fix sits inside one of pysyncobj's long inline methods (`_onTick`,
`__onMessageReceived`), so a subclass would have to re-implement them around a dozen name-mangled attributes.

The hunks:

* `conflict_only_truncation`: a follower truncated its log after `prevLogIdx` on *every* AppendEntries that
  overlapped its log, even when the entries matched, so a retransmission (pysyncobj caps a message at 64 KiB and
  resends after a late acknowledgement) could leave it briefly holding fewer entries than it had acknowledged —
  a kill then loses them. Raft §5.3: skip the entries already held, truncate only from the first one whose term
  conflicts. The commit index a message may set is then bounded by the last entry that message vouches for
  (Raft: min(leaderCommit, index of last new entry)), or a stale entry kept after them could be committed.
* `monotone_next_index`: a late success acknowledgement moved the leader's nextIndex for that follower *back*
  over entries already in flight, which caused the retransmissions above.
* `chunk_finish`: an entry of 64 KiB or more is sent in chunks; the last chunk was chosen by the length of the
  first entry's command instead of the pickled entry being sent, so a follower could never reassemble it.
* `pre_vote`: Raft thesis §9.6. A node that was cut off kept raising its term and, on rejoining, deposed a
  healthy leader (one election per rejoin). With `conf.preVote`, a follower whose election timer expires first
  asks whether it could win (a `pre_vote` in term+1, which changes no one's term or vote and is granted only by
  nodes that have not heard from a leader within half of `raftMinTimeout` and whose log is not ahead; half,
  because after a leader dies the followers' last messages from it are up to a heartbeat apart, and a refused
  pre-vote costs a whole election timeout, while a healthy leader reaches its followers every heartbeat period,
  far more often); only a majority
  of grants starts the real election. A leadership transfer (TimeoutNow) skips the pre-vote. And etcd's rule:
  a node whose term ran ahead answers a lower-term AppendEntries with its term (`stale_term`), so the leader
  steps down and the cluster converges instead of that node never rejoining.
* `pre_vote_refusal_*`: etcd's rule for pre-vote. A refusal carries the voter's term, and a pre-candidate whose
  term is lower takes it. Without it, a node whose log is ahead but whose term is behind could never win (its
  pre-vote at term+1 is refused by nodes with higher terms) while refusing theirs (its log is ahead): no leader.
* `own_journal`: `conf.journal`, when set, is the replica's journal (ours, raft/journal.py: checksummed records,
  no mmap) instead of pysyncobj's `FileJournal`.
* `durability_barrier`: the transport's `flushDeferred()` (raft/transport.py) runs right before and right after
  each poll, so messages that wait for the journal leave after one fdatasync for the whole tick.
* `leader_self_count`: the leader counts itself toward a quorum only for entries its journal has on stable
  storage (`durableIndex`), so its AppendEntries can leave before its own fdatasync (raft/transport.py).
* `pre_vote_election` also skips the election of a replica whose `may_lead` is false: the cross-replica state check
  found it odd (raft/digest.py), so it must not lead until rebuilt (it still votes).
* `catch_up_*` (and the untrusted branch of `pre_vote_election`): a replica whose journal is untrusted (it may
  lack entries it acknowledged) grants no vote or pre-vote and stands for no election until it holds a committed
  entry of the current leader's term. A *fresh* journal (made at this start: a new cluster, or a wiped data
  directory — the node cannot tell) is untrusted too; while fresh it sends `fresh` to its peers at each election
  timeout, a replica whose log holds nothing (pristine) answers it with `fresh`, and a fresh replica is trusted
  once every other replica of the partition has said `fresh` to it: then no replica held anything, so nothing
  acknowledged can be missing (a brand-new cluster forms once all its nodes have started), unless
  `conf.bootstrap` is false (`initial_cluster_state = existing`): then it only ever catches up. One wiped among
  replicas that hold data hears no `fresh` from them and catches up instead.
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

import hashlib
import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

UPSTREAM_VERSION = "0.3.17"
UPSTREAM_SHA256 = "e8bdf06797085d734df86e24ab4802fe87893dff77268565ec036f7ad4a1cfe4"
MODULE_NAME = "groupcoord.raft._syncobj"


@dataclass(frozen=True)
class Hunk:
    name: str
    old: str
    new: str


HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "conflict_only_truncation",
        """                if len(prevEntries) > 1:
                    # rollback cluster changes
                    if self.__conf.dynamicMembershipChange:
                        for entry in reversed(prevEntries[1:]):
                            clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                            if clusterChangeRequest is not None:
                                self.__doChangeCluster(clusterChangeRequest, reverse=True)

                    if prevLogIdx + 1 <= self.__raftLastApplied:
                        logger.critical(
                            'truncating already-applied log entries from index %d '
                            '(last applied: %d) - state machine may have diverged from '
                            'other cluster members', prevLogIdx + 1, self.__raftLastApplied)
                    self.__deleteEntriesFrom(prevLogIdx + 1)
""",
        """                existing = prevEntries[1:]
                skip = 0
                while skip < len(newEntries) and skip < len(existing) and \\
                        existing[skip][2] == newEntries[skip][2]:
                    skip += 1
                newEntries = newEntries[skip:]
                if newEntries and skip < len(existing):
                    conflictIdx = newEntries[0][1]
                    if self.__conf.dynamicMembershipChange:
                        for entry in reversed(existing[skip:]):
                            clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                            if clusterChangeRequest is not None:
                                self.__doChangeCluster(clusterChangeRequest, reverse=True)
                    if conflictIdx <= self.__raftLastApplied:
                        logger.critical('conflicting entry at index %d is already applied (last applied: %d)',
                                        conflictIdx, self.__raftLastApplied)
                    self.__deleteEntriesFrom(conflictIdx)
""",
    ),
    Hunk(
        "conflict_only_truncation_ack",
        """                nextNodeIdx = prevLogIdx + 1
                if newEntries:
                    nextNodeIdx = newEntries[-1][1] + 1

                self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)
""",
        """                lastNewIdx = prevLogIdx + skip + len(newEntries)
                self.__sendNextNodeIdx(node, nextNodeIdx=lastNewIdx + 1, success=True)
                leaderCommitIndex = min(leaderCommitIndex, lastNewIdx)
""",
    ),
    Hunk(
        "monotone_next_index",
        """                        self.__raftNextIndex[node] = nextNodeIdx
                self.__lastResponseTime[node] = monotonicTime()""",
        """                        self.__raftNextIndex[node] = max(self.__raftNextIndex[node], nextNodeIdx)
                self.__lastResponseTime[node] = monotonicTime()""",
    ),
    Hunk(
        "chunk_finish",
        "elif pos + batchSizeBytes >= len(entries[0][0]):",
        "elif pos + batchSizeBytes >= len(entry):",
    ),
    Hunk(
        "pre_vote_state",
        """        self.__transferInProgress = False
        self.__raftLog = createJournal(self.__conf.journalFile)
""",
        """        self.__transferInProgress = False
        self.__raftLog = createJournal(self.__conf.journalFile)
        self.__preVote = getattr(self.__conf, 'preVote', False)
        self.__preVoteTerm = None
        self.__preVotes = set()
        self.__lastLeaderContact = 0
        self.__freshPeers = set()
""",
    ),
    Hunk(
        "pre_vote_election",
        """                self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()
                self.__transferInProgress = False
                self.__raftLeader = None
                self.__setState(_RAFT_STATE.CANDIDATE)
                self.__setCurrentTerm(self.__raftCurrentTerm + 1, self.__selfNode.id)
                self.__votesCount = 1
                for node in self.__otherNodes:
                    self.__transport.send(node, {
                        'type': 'request_vote',
                        'term': self.__raftCurrentTerm,
                        'last_log_index': self.__getCurrentLogIndex(),
                        'last_log_term': self.__getCurrentLogTerm(),
                    })
                self.__onLeaderChanged()
                if self.__votesCount > (len(self.__otherNodes) + 1) / 2:
                    self.__onBecomeLeader()
""",
        """                self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()
                if not getattr(self.__raftLog, 'trusted', True):
                    self.__announceFresh()
                elif not getattr(self, 'may_lead', True):
                    pass
                elif self.__preVote and not self.__transferInProgress and self.__otherNodes:
                    self.__startPreVote()
                else:
                    self.__startElection()
""",
    ),
    Hunk(
        "pre_vote_methods",
        """    def __applyLogEntries(self):
""",
        """    def __announceFresh(self):
        if getattr(self.__raftLog, 'fresh', False):
            for node in self.__otherNodes:
                self.__transport.send(node, {'type': 'fresh'})

    def __startPreVote(self):
        self.__preVoteTerm = self.__raftCurrentTerm + 1
        self.__preVotes = {self.__selfNode}
        for node in self.__otherNodes:
            self.__transport.send(node, {
                'type': 'pre_vote',
                'term': self.__preVoteTerm,
                'last_log_index': self.__getCurrentLogIndex(),
                'last_log_term': self.__getCurrentLogTerm(),
            })

    def __startElection(self):
        self.__preVoteTerm = None
        self.__transferInProgress = False
        self.__raftLeader = None
        self.__setState(_RAFT_STATE.CANDIDATE)
        self.__setCurrentTerm(self.__raftCurrentTerm + 1, self.__selfNode.id)
        self.__votesCount = 1
        for node in self.__otherNodes:
            self.__transport.send(node, {
                'type': 'request_vote',
                'term': self.__raftCurrentTerm,
                'last_log_index': self.__getCurrentLogIndex(),
                'last_log_term': self.__getCurrentLogTerm(),
            })
        self.__onLeaderChanged()
        if self.__votesCount > (len(self.__otherNodes) + 1) / 2:
            self.__onBecomeLeader()

    def __candidateLogUpToDate(self, lastLogIdx, lastLogTerm):
        if lastLogTerm != self.__getCurrentLogTerm():
            return lastLogTerm > self.__getCurrentLogTerm()
        return lastLogIdx >= self.__getCurrentLogIndex()

    def __heardFromLeaderRecently(self):
        if self.__raftState == _RAFT_STATE.LEADER:
            return True
        return self.__raftLeader is not None and \\
            monotonicTime() - self.__lastLeaderContact < self.__conf.raftMinTimeout / 2

    def __applyLogEntries(self):
""",
    ),
    Hunk(
        "pre_vote_messages",
        """        if message['type'] == 'request_vote' and self.__selfNode is not None:
""",
        """        if message['type'] == 'fresh':
            if not getattr(self.__raftLog, 'pristine', False):
                return
            if not message.get('reply'):
                self.__transport.send(node, {'type': 'fresh', 'reply': True})
            if self.__raftLog.fresh:
                self.__freshPeers.add(node)
                if self.__freshPeers >= self.__otherNodes:
                    if getattr(self.__conf, 'bootstrap', True):
                        self.__raftLog.set_trusted('every replica of the partition holds nothing: a new cluster')
                    else:
                        self.__raftLog.bootstrap_refused()
            return

        if message['type'] == 'pre_vote' and self.__selfNode is not None:
            granted = message['term'] > self.__raftCurrentTerm and \\
                not self.__heardFromLeaderRecently() and \\
                self.__candidateLogUpToDate(message['last_log_index'], message['last_log_term'])
            self.__transport.send(node, {'type': 'pre_vote_response', 'term': message['term'], 'granted': granted})
            return

        if message['type'] == 'pre_vote_response':
            if message['granted'] and self.__preVoteTerm is not None and \\
                    message['term'] == self.__preVoteTerm == self.__raftCurrentTerm + 1 and \\
                    self.__raftState != _RAFT_STATE.LEADER:
                self.__preVotes.add(node)
                if len(self.__preVotes) > (len(self.__otherNodes) + 1) / 2:
                    self.__startElection()
            return

        if message['type'] == 'append_entries' and message['term'] < self.__raftCurrentTerm and self.__preVote:
            self.__transport.send(node, {'type': 'stale_term', 'term': self.__raftCurrentTerm})
            return

        if message['type'] == 'stale_term' and message['term'] > self.__raftCurrentTerm:
            self.__setCurrentTerm(message['term'], None)
            self.__setState(_RAFT_STATE.FOLLOWER)
            self.__raftLeader = None
            return

        if message['type'] == 'request_vote' and self.__selfNode is not None:
""",
    ),
    Hunk(
        "pre_vote_leader_contact",
        """            self.__raftLeader = node
            if message['term'] > self.__raftCurrentTerm:
                self.__setCurrentTerm(message['term'], None)
""",
        """            self.__raftLeader = node
            self.__lastLeaderContact = monotonicTime()
            self.__preVoteTerm = None
            if message['term'] > self.__raftCurrentTerm:
                self.__setCurrentTerm(message['term'], None)
""",
    ),
    Hunk(
        "pre_vote_refusal_term",
        "'term': message['term'], 'granted': granted})",
        "'term': message['term'], 'granted': granted,\n"
        "                                         'voter_term': self.__raftCurrentTerm})",
    ),
    Hunk(
        "pre_vote_refusal_adopt",
        """        if message['type'] == 'pre_vote_response':
""",
        """        if message['type'] == 'pre_vote_response' and not message['granted'] and \
                message.get('voter_term', 0) > self.__raftCurrentTerm and self.__raftState != _RAFT_STATE.LEADER:
            self.__setCurrentTerm(message['voter_term'], None)
            self.__setState(_RAFT_STATE.FOLLOWER)
            self.__raftLeader = None
            self.__preVoteTerm = None
            return

        if message['type'] == 'pre_vote_response':
""",
    ),
    Hunk(
        "own_journal",
        "        self.__raftLog = createJournal(self.__conf.journalFile)\n",
        """        self.__raftLog = self.__conf.journal if getattr(self.__conf, 'journal', None) is not None \\
            else createJournal(self.__conf.journalFile)
""",
    ),
    Hunk(
        "durability_barrier",
        "        self._poller.poll(timeToWait)\n",
        """        flushDeferred = getattr(self.__transport, 'flushDeferred', None)
        if flushDeferred is not None:
            flushDeferred()
        self._poller.poll(timeToWait)
        if flushDeferred is not None:
            flushDeferred()
""",
    ),
    Hunk(
        "leader_self_count",
        """                count = 1
                for node in self.__otherNodes:
                    if self.__raftMatchIndex[node] >= commitIdx:
""",
        """                count = 1 if commitIdx <= getattr(self.__raftLog, 'durableIndex', commitIdx) else 0
                for node in self.__otherNodes:
                    if self.__raftMatchIndex[node] >= commitIdx:
""",
    ),
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
        if self.__conf.autoTick and not self.__conf.appendEntriesUseBatch and PIPE_NOTIFIER_ENABLED:
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
            if heard is not None and monotonicTime() - heard < self.__conf.raftMinTimeout:
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
            if heard is not None and self.__raftElectionDeadline < heard + self.__conf.raftMinTimeout:
                self.__raftElectionDeadline = heard + self.__generateRaftTimeout()
            if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():
""",
    ),
    Hunk(
        "pre_vote_quiet",
        """        return self.__raftLeader is not None and \\
            monotonicTime() - self.__lastLeaderContact < self.__conf.raftMinTimeout / 2
""",
        """        heard = self.__quietLeaderHeard()
        if heard is not None and monotonicTime() - heard < self.__conf.raftMinTimeout * 3 / 4:
            return True
        return self.__raftLeader is not None and \\
            monotonicTime() - self.__lastLeaderContact < self.__conf.raftMinTimeout / 2
""",
    ),
)


class PatchError(RuntimeError):
    """The installed pysyncobj is not the one the patch was written for."""


def upstream_source() -> str:
    spec = importlib.util.find_spec("pysyncobj.syncobj")
    if spec is None or spec.origin is None:
        raise PatchError("pysyncobj is not installed")
    data = Path(spec.origin).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != UPSTREAM_SHA256:
        raise PatchError(
            f"{spec.origin} is not pysyncobj {UPSTREAM_VERSION}'s syncobj.py (sha256 {digest}): raft/syncobj_patch.py "
            "must be brought up to date with it"
        )
    return data.decode()


def patched_source(source: str, hunks: tuple[Hunk, ...] = HUNKS) -> str:
    for hunk in hunks:
        found = source.count(hunk.old)
        if found != 1:
            raise PatchError(f"hunk {hunk.name!r} matches {found} places, not one")
        source = source.replace(hunk.old, hunk.new)
    return source


def load(hunks: tuple[Hunk, ...] = HUNKS, name: str = MODULE_NAME) -> types.ModuleType:
    """The patched module (with `hunks`; tests load it without one to show what each fixes)."""
    module = types.ModuleType(name)
    module.__package__ = "pysyncobj"  # its relative imports are the installed package's
    module.__file__ = f"<pysyncobj {UPSTREAM_VERSION} syncobj.py, patched by raft/syncobj_patch.py>"
    code = compile(patched_source(upstream_source(), hunks), module.__file__, "exec")
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


_module = sys.modules.get(MODULE_NAME) or load()
SyncObj = _module.SyncObj
replicated = _module.replicated
