"""The settings that feed the coordinator's `GroupConfig` (coordinator/config.py): group sizes, timeouts, rates
and offset limits, each declared with the GroupConfig field it sets so that its default is that field's.
"""

from __future__ import annotations

from groupcoord.coordinator.config import GroupConfig
from groupcoord.node.config_types import Setting

MS_PER_MINUTE = 60_000
_GROUP_DEFAULTS = GroupConfig()


def _group(name: str, field: str, help: str, minimum: int = 0, scale: int = 1) -> Setting:
    """A setting whose default is its GroupConfig field's, in this setting's unit."""
    default = getattr(_GROUP_DEFAULTS, field)
    return Setting(name, default // scale, help, minimum=minimum, group_field=field, scale=scale)


GROUP_SETTINGS: tuple[Setting, ...] = (
    _group(
        "group_min_session_timeout_ms",
        "min_session_timeout_ms",
        "Shortest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT).",
        minimum=1,
    ),
    _group(
        "group_max_session_timeout_ms",
        "max_session_timeout_ms",
        "Longest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT).",
        minimum=1,
    ),
    Setting(
        "group_max_size",
        _GROUP_DEFAULTS.max_size or 0,
        "Most members a group may have (else GROUP_MAX_SIZE_REACHED); 0 means unlimited.",
        group_field="max_size",
    ),
    _group(
        "group_initial_rebalance_delay_ms",
        "initial_rebalance_delay_ms",
        "How long the first rebalance of an Empty group waits for more members to arrive.",
    ),
    _group(
        "offset_metadata_max_bytes",
        "offset_metadata_max_bytes",
        "Longest metadata string of one committed offset (else OFFSET_METADATA_TOO_LARGE).",
    ),
    _group(
        "offsets_retention_minutes",
        "offsets_retention_ms",
        "How long the offsets of an Empty group are kept after it became Empty.",
        minimum=1,
        scale=MS_PER_MINUTE,
    ),
    _group(
        "offsets_retention_check_interval_ms",
        "offsets_retention_check_interval_ms",
        "How often expired offsets and empty groups are looked for.",
        minimum=1,
    ),
    _group(
        "group_max_pending_members",
        "max_pending_members",
        "Most member ids per group handed out with MEMBER_ID_REQUIRED and not joined yet.",
        minimum=1,
    ),
    _group(
        "group_max_id_length",
        "max_id_length",
        "Longest group id, group instance id, client id and protocol name (characters).",
        minimum=1,
    ),
    _group(
        "group_max_member_metadata_bytes",
        "max_member_metadata_bytes",
        "Most protocol metadata bytes one member may send in a JoinGroup (else INVALID_REQUEST).",
    ),
    _group("group_max_protocols", "max_protocols", "Most protocols one member may offer.", minimum=1),
    _group(
        "group_max_assignment_bytes",
        "max_assignment_bytes",
        "Most bytes of one member's assignment in the leader's SyncGroup (else POLICY_VIOLATION).",
    ),
    _group(
        "max_groups_per_partition",
        "max_groups_per_partition",
        "Most groups one coordinator partition holds; a new group beyond it gets POLICY_VIOLATION. 0: no limit.",
    ),
    _group(
        "max_groups_per_node",
        "max_groups_per_node",
        "Most groups in the partitions this node leads; a new group beyond it gets POLICY_VIOLATION. 0: no limit.",
    ),
    _group(
        "group_join_rate_per_s",
        "join_rate_per_s",
        "JoinGroups per second admitted per group (else THROTTLING_QUOTA_EXCEEDED); 0: no limit.",
    ),
    _group(
        "group_join_burst",
        "join_burst",
        "JoinGroups a group may send at once before `group_join_rate_per_s` applies.",
        minimum=1,
    ),
    _group(
        "offset_commit_max_partitions",
        "offset_commit_max_partitions",
        "Most partitions in one OffsetCommit (else POLICY_VIOLATION for the whole request).",
        minimum=1,
    ),
    _group(
        "offset_fetch_max_partitions",
        "offset_fetch_max_partitions",
        "Most partitions named in one OffsetFetch (else POLICY_VIOLATION).",
        minimum=1,
    ),
    Setting(
        "auto_create_topics",
        _GROUP_DEFAULTS.auto_create_topics,
        "Whether a Kafka Metadata request naming an unknown topic creates it (Kafka's auto.create.topics.enable).",
        group_field="auto_create_topics",
    ),
    _group(
        "default_num_partitions",
        "default_num_partitions",
        "Partitions of a topic created without a count (Kafka's num.partitions; auto-created topics get these).",
        minimum=1,
    ),
    _group(
        "max_topic_partitions",
        "max_topic_partitions",
        "Most partitions a topic may be created with (else INVALID_PARTITIONS).",
        minimum=1,
    ),
)
