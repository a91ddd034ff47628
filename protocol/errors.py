"""Kafka's error codes, carried in `error_code` fields of every response (never as gRPC status)."""

from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    """Kafka's numbers; the names are Kafka's `Errors` enum names."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    # A topic the registry does not hold (DeleteTopics), Kafka's code for an unknown topic.
    UNKNOWN_TOPIC_OR_PARTITION = 3
    # A request that waits for the cluster (AddRaftVoter, RemoveRaftVoter) ran out of time; safe to repeat.
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    # CreateTopics: a topic name that is not Kafka's (1 to 249 of [a-zA-Z0-9._-], not "." or "..").
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    # "Group authorization failed": the caller's identity may not do this to this group, or the operation
    # needs an admin identity (docs/SECURITY.md#authorization). Fatal for a member: retrying cannot help.
    GROUP_AUTHORIZATION_FAILED = 30
    # The operation needs a cluster admin identity (membership changes).
    CLUSTER_AUTHORIZATION_FAILED = 31
    TOPIC_ALREADY_EXISTS = 36
    # CreateTopics: fewer than one partition, or more than `max_topic_partitions`.
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    # A configured limit refused the request (groups per partition or node, assignment size, partitions per
    # offset request); error_message names the limit. Fatal for a member: retrying cannot help.
    POLICY_VIOLATION = 44
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    # OffsetDelete: the group's members are subscribed to the partition's topic, so its offset stays.
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    # The group's JoinGroup rate is used up; retry after the response's throttle_time_ms.
    THROTTLING_QUOTA_EXCEEDED = 89
    # "A request illegally referred to the same resource twice": AddMembersToGroup with an instance id
    # that is listed twice, already registered, or already a member.
    DUPLICATE_RESOURCE = 92
