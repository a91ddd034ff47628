"""The Raft timing and behaviour of a partition replica (`PartitionReplica`, raft/partition.py), one value for
every partition of a node (node/server.py derives it from the node settings).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """pysyncobj timing, tuned for failover well inside the minimum session timeout (see docs/ARCHITECTURE.md)."""

    # Election timeout range (pysyncobj defaults 0.4-1.4 s; etcd's election timeout is 1 s). It bounds only how soon
    # a leader that went silent with its connections open is replaced; a dead one is replaced after the pre-vote
    # window, and a starting replica's first timer is that window too (raft/patch_pre_vote.py).
    election_min_s: float = 1.0
    election_max_s: float = 3.0
    # How often the leader sends AppendEntries when batching (default 0.1 s adds up to 100 ms per commit).
    append_entries_period_s: float = 0.05
    # Send each command at once instead of waiting for the next period.
    append_entries_use_batch: bool = False
    # A leader that has not heard from a quorum for this long steps down (default 30 s); time its own tick thread
    # was held up does not count (raft/patch_fallback.py).
    leader_fallback_timeout_s: float = 1.0
    # Idle connections are not dropped before a send (pysyncobj >= 0.3.12 drops them and with it the
    # first RequestVote after a leader crash); reconnects are attempted every second.
    connection_timeout_s: float = 60.0
    connection_retry_s: float = 1.0
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 300.0
    tick_period_s: float = 0.05
    # Raft's pre-vote (raft/patch_pre_vote.py): a node that was cut off does not depose a healthy leader on return.
    # It also bounds how soon another leader can be elected, which is what leader leases rely on (`has_lease`).
    pre_vote: bool = True
    # How long after hearing from its leader a follower refuses pre-votes (raft/patch_pre_vote.py): it bounds leader
    # leases and how soon a leader whose connections closed (a killed process) is replaced, apart from the election
    # timeout, which only bounds how soon a leader that went silent is.
    pre_vote_window_s: float = 0.1
    # "fsync": entries, term and vote are on stable storage before any Raft message that depends on them leaves
    # (raft/journal.py, raft/transport.py); "memory": the page cache only (lost with the OS, not with the process).
    durability: str = "fsync"
    # Whether replicas that all hold nothing may form a new cluster (`initial_cluster_state` new); else an empty
    # replica only ever catches up from a leader.
    bootstrap: bool = True
    # How often a leader proposes a cross-replica state check (raft/digest.py); 0 turns them off.
    digest_interval_s: float = 60.0
    # Quiescence (raft/quiescence.py): a partition nothing has needed for this long stops its heartbeats while the
    # node-level heartbeat shows its leader alive; 0 turns it off. Both sides then poll only this often.
    quiesce_after_s: float = 5.0
    rest_tick_s: float = 1.0
    # "partition": every replica ticks on a thread of its own (pysyncobj's); "node": one thread polls and ticks every
    # replica of the node (raft/driver.py): fewer wake-ups and GIL hand-overs, and every replica waits for the
    # others' work (an fdatasync, a snapshot) on it.
    threads: str = "partition"
