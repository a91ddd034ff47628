"""The hunks of raft/syncobj_patch.py that add Raft's pre-vote and etcd's term rules around it
(docs/ARCHITECTURE.md lists every deviation; tests/raft/test_raft_rules.py has a test per hunk that fails on the
unpatched code).

* `pre_vote`: Raft thesis §9.6. A node that was cut off kept raising its term and, on rejoining, deposed a
  healthy leader (one election per rejoin). With `conf.preVote`, a follower whose election timer expires first
  asks whether it could win (a `pre_vote` in term+1, which changes no one's term or vote and is granted only by
  nodes that have not heard from a leader within `conf.preVoteWindow` and whose log is not ahead). The window is
  our setting (`raft_pre_vote_window_ms`, upstream has none; without it, half of `raftMinTimeout`): a few heartbeat
  periods, since a healthy leader reaches its followers every period, and shorter than the election timeout, so
  that a follower whose timer ran out finds the others' windows over too. Leader leases rest on it
  (`PartitionReplica.has_lease`), and so does how soon a leader whose connections closed is replaced
  (raft/patch_leader_lost.py); the election timeout, apart from it, can then be long enough that a leader stalled
  for a moment is not voted out. Only a majority
  of grants starts the real election. A leadership transfer (TimeoutNow) skips the pre-vote. And etcd's rule:
  a node whose term ran ahead answers a lower-term AppendEntries with its term (`stale_term`), so the leader
  steps down and the cluster converges instead of that node never rejoining.
* `pre_vote_first_election`: etcd's `initial-election-tick-advance`. A replica that starts has heard from no
  leader, so its first election timer runs one to two pre-vote windows, not a whole election timeout: a new
  cluster elects its leaders at once, and a replica that restarts while its partition has a leader only asks
  for pre-votes that are refused (the others hear that leader) before the leader's AppendEntries reach it. Not
  sooner than one window, so that the pre-vote it grants itself keeps the voters' rule even for a replica
  recreated in the same process right after hearing from a leader. A new cluster's replicas first find out that
  they all hold nothing (the `fresh` messages, which a peer not yet listening misses): while they do, each
  announces again every one to two windows (`pre_vote_first_election_announce`; only where a new cluster may form,
  `initial_cluster_state` new: an empty replica of an existing one waits for a leader), and the moment one knows, its
  timer runs one to two windows again (`pre_vote_first_election_bootstrap`), so the nodes' staggered starts cost
  no election timeouts.
* `pre_vote_first_election_rank`: Kafka's preferred leader at start. The node/balance.py rotation ranks a
  partition's voters from its preferred leader (rank 0) on (`conf.firstElectionRank`), and each first timer waits
  that many whole windows more: the preferred node stands first, so a new or restarted cluster's leaders start
  where the leader balancer wants them, with no transfer (each of which costs a new leader's load, and its
  clients a retry). A preferred node that is down costs the next one a window more.
* `pre_vote_refusal_fresh*`: a replica that finds its new cluster before a peer does (that peer's link to a third
  comes up later: pysyncobj connects from the higher address only, and retries each second) stands, and the peer,
  still untrusted, refuses. The refusal says so (`voter_fresh`), and the partition's preferred node stands again
  after one to two windows instead of a whole election timeout, so it still stands first once all know; any
  other waits the election timeout, out of the preferred node's way.
* `pre_vote_refusal_*`: etcd's rule for pre-vote. A refusal carries the voter's term, and a pre-candidate whose
  term is lower takes it. Without it, a node whose log is ahead but whose term is behind could never win (its
  pre-vote at term+1 is refused by nodes with higher terms) while refusing theirs (its log is ahead): no leader.
* `pre_vote_election` also skips the election of a replica whose `may_lead` is false: the cross-replica state check
  found it odd (raft/digest.py), so it must not lead until rebuilt (it still votes). Its untrusted branch and the
  `fresh` messages `pre_vote_messages` handles belong to the catch-up (raft/patch_catch_up.py).
"""

from __future__ import annotations

from groupcoord.raft.patch_hunk import Hunk

PRE_VOTE_HUNKS: tuple[Hunk, ...] = (
    Hunk(
        "pre_vote_state",
        """        self.__transferInProgress = False
        self.__raftLog = createJournal(self.__conf.journalFile)
""",
        """        self.__transferInProgress = False
        self.__raftLog = createJournal(self.__conf.journalFile)
        self.__preVote = getattr(self.__conf, 'preVote', False)
        self.__preVoteWindow = getattr(self.__conf, 'preVoteWindow', None) or self.__conf.raftMinTimeout / 2
        self.__preVoteTerm = None
        self.__preVotes = set()
        self.__lastLeaderContact = 0
        self.__freshPeers = set()
""",
    ),
    Hunk(
        "pre_vote_first_election",
        """        self.__preVoteWindow = getattr(self.__conf, 'preVoteWindow', None) or self.__conf.raftMinTimeout / 2
""",
        """        self.__preVoteWindow = getattr(self.__conf, 'preVoteWindow', None) or self.__conf.raftMinTimeout / 2
        if self.__preVote:
            self.__raftElectionDeadline = self.__firstElectionDeadline()
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

    def __firstElectionDeadline(self):
        return monotonicTime() + self.__preVoteWindow * (1 + random.random())

    def __heardFromLeaderRecently(self):
        if self.__raftState == _RAFT_STATE.LEADER:
            return True
        return self.__raftLeader is not None and \\
            monotonicTime() - self.__lastLeaderContact < self.__preVoteWindow

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
        "pre_vote_first_election_announce",
        """                    self.__announceFresh()
""",
        """                    self.__announceFresh()
                    if self.__preVote and getattr(self.__raftLog, 'fresh', False) and \\
                            getattr(self.__conf, 'bootstrap', True):
                        self.__raftElectionDeadline = self.__firstElectionDeadline()
""",
    ),
    Hunk(
        "pre_vote_first_election_rank",
        """    def __firstElectionDeadline(self):
        return monotonicTime() + self.__preVoteWindow * (1 + random.random())
""",
        """    def __firstElectionDeadline(self):
        rank = getattr(self.__conf, 'firstElectionRank', 0)
        return monotonicTime() + self.__preVoteWindow * (1 + rank + random.random())
""",
    ),
    Hunk(
        "pre_vote_first_election_bootstrap",
        """holds nothing: a new cluster')
""",
        """holds nothing: a new cluster')
                        if self.__preVote:
                            self.__raftElectionDeadline = self.__firstElectionDeadline()
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
        "pre_vote_refusal_fresh",
        "                                         'voter_term': self.__raftCurrentTerm})",
        "                                         'voter_term': self.__raftCurrentTerm,\n"
        "                                         'voter_fresh': getattr(self.__raftLog, 'fresh', False)})",
    ),
    Hunk(
        "pre_vote_refusal_fresh_retry",
        """        if message['type'] == 'pre_vote_response':
            if message['granted'] and""",
        """        if message['type'] == 'pre_vote_response':
            if not message['granted'] and message.get('voter_fresh') and \\
                    getattr(self.__conf, 'firstElectionRank', 0) == 0 and \\
                    message['term'] == self.__preVoteTerm == self.__raftCurrentTerm + 1:
                self.__raftElectionDeadline = min(self.__raftElectionDeadline, self.__firstElectionDeadline())
            if message['granted'] and""",
    ),
)
