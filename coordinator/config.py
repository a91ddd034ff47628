"""Group coordinator settings, with Kafka's names and defaults where Kafka has them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # group.min.session.timeout.ms / group.max.session.timeout.ms
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    # group.max.size; None means unlimited. Kafka's default is unlimited; 10,000 still fits the 5,000-member bench.
    max_size: int | None = 10_000
    # group.initial.rebalance.delay.ms
    initial_rebalance_delay_ms: int = 3_000
    # offset.metadata.max.bytes
    offset_metadata_max_bytes: int = 4_096
    # offsets.retention.minutes (7 days) and offsets.retention.check.interval.ms
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    offsets_retention_check_interval_ms: int = 600_000
    # KIP-394 ids handed out and not joined yet, per group: a hard cap on top of their expiry.
    max_pending_members: int = 10_000
    # Longest group id, group instance id, client id and protocol name accepted (characters).
    max_id_length: int = 255
    # Total protocol metadata bytes of one member; larger JoinGroups get INVALID_REQUEST.
    max_member_metadata_bytes: int = 1_048_576
    # Protocols one member may offer.
    max_protocols: int = 64
    # Bytes of one member's assignment in the leader's SyncGroup (the whole SyncGroup is bounded by the
    # node's max_request_bytes); larger ones get POLICY_VIOLATION.
    max_assignment_bytes: int = 1_048_576
    # Groups one coordinator partition holds, and the partitions a node leads together (the node passes its
    # count with each call that may create a group); a new group beyond either gets POLICY_VIOLATION. 0: no limit.
    max_groups_per_partition: int = 25_000
    max_groups_per_node: int = 100_000
    # JoinGroup admission per group: a token bucket of `join_burst` refilled at `join_rate_per_s` on the
    # leader (soft state); a JoinGroup without a token gets THROTTLING_QUOTA_EXCEEDED. 0 rate: no limit.
    join_rate_per_s: int = 1_000
    join_burst: int = 30_000
    # Partitions in one OffsetCommit / OffsetFetch (a topic without partitions counts as one). With Kafka's topic
    # names (at most 249 of [a-zA-Z0-9._-]) 5,000 keeps a commit's offsets_committed event line under 1.5 MB.
    offset_commit_max_partitions: int = 5_000
    offset_fetch_max_partitions: int = 10_000
    # The topic registry (coordinator/topics.py, node/topics.py). num.partitions: what a topic created with -1
    # partitions gets (the Kafka listener's auto-created topics do); auto.create.topics.enable: whether a Kafka
    # Metadata request naming an unknown topic creates it; and the most partitions a topic may have (CreateTopics
    # beyond it gets INVALID_PARTITIONS).
    default_num_partitions: int = 1
    auto_create_topics: bool = True
    max_topic_partitions: int = 10_000

    def __post_init__(self) -> None:
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        if self.max_size is not None and self.max_size < 1:
            raise ValueError("max_size must be >= 1 (or None for unlimited)")
        if self.initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if self.offsets_retention_check_interval_ms <= 0:
            raise ValueError("offsets_retention_check_interval_ms must be > 0")
        if self.join_rate_per_s and self.join_burst < 1:
            raise ValueError("join_burst must be >= 1 when join_rate_per_s is set")
        if self.offset_commit_max_partitions < 1 or self.offset_fetch_max_partitions < 1:
            raise ValueError("offset_commit_max_partitions and offset_fetch_max_partitions must be >= 1")
        if not 1 <= self.default_num_partitions <= self.max_topic_partitions:
            raise ValueError("need 1 <= default_num_partitions <= max_topic_partitions")
