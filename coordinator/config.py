"""Group coordinator settings, with Kafka's names and defaults where Kafka has them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # group.min.session.timeout.ms / group.max.session.timeout.ms
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    # group.max.size; None means unlimited.
    max_size: int | None = None
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

    def __post_init__(self) -> None:
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        if self.max_size is not None and self.max_size < 1:
            raise ValueError("max_size must be >= 1 (or None for unlimited)")
        if self.initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if self.offsets_retention_check_interval_ms <= 0:
            raise ValueError("offsets_retention_check_interval_ms must be > 0")
