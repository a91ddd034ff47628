from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("coordinators",)
    class Coordinator(_message.Message):
        __slots__ = ("group_id", "node_id", "host", "port", "error_code", "error_message", "partition")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        NODE_ID_FIELD_NUMBER: _ClassVar[int]
        HOST_FIELD_NUMBER: _ClassVar[int]
        PORT_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        node_id: int
        host: str
        port: int
        error_code: int
        error_message: str
        partition: int
        def __init__(self, group_id: _Optional[str] = ..., node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[FindCoordinatorResponse.Coordinator]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[FindCoordinatorResponse.Coordinator, _Mapping]]] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id", "protocol_type", "protocols", "reason", "join_reason", "client_id", "client_software_name", "client_software_version")
    class JoinReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[JoinGroupRequest.JoinReason]
        RESTART: _ClassVar[JoinGroupRequest.JoinReason]
        TOPIC_METADATA_CHANGE: _ClassVar[JoinGroupRequest.JoinReason]
        UPGRADE: _ClassVar[JoinGroupRequest.JoinReason]
    UNKNOWN: JoinGroupRequest.JoinReason
    RESTART: JoinGroupRequest.JoinReason
    TOPIC_METADATA_CHANGE: JoinGroupRequest.JoinReason
    UPGRADE: JoinGroupRequest.JoinReason
    class Protocol(_message.Message):
        __slots__ = ("name", "metadata")
        NAME_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        name: str
        metadata: bytes
        def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    JOIN_REASON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SOFTWARE_NAME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[JoinGroupRequest.Protocol]
    reason: str
    join_reason: JoinGroupRequest.JoinReason
    client_id: str
    client_software_name: str
    client_software_version: str
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[JoinGroupRequest.Protocol, _Mapping]]] = ..., reason: _Optional[str] = ..., join_reason: _Optional[_Union[JoinGroupRequest.JoinReason, str]] = ..., client_id: _Optional[str] = ..., client_software_name: _Optional[str] = ..., client_software_version: _Optional[str] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error_code", "generation_id", "protocol_type", "protocol_name", "leader", "skip_assignment", "member_id", "members", "error_message", "throttle_time_ms")
    class Member(_message.Message):
        __slots__ = ("member_id", "group_instance_id", "metadata")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        group_instance_id: str
        metadata: bytes
        def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    skip_assignment: bool
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupResponse.Member]
    error_message: str
    throttle_time_ms: int
    def __init__(self, error_code: _Optional[int] = ..., generation_id: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., skip_assignment: _Optional[bool] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[JoinGroupResponse.Member, _Mapping]]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "protocol_type", "protocol_name", "assignments")
    class Assignment(_message.Message):
        __slots__ = ("member_id", "assignment")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        assignment: bytes
        def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocol_name: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupRequest.Assignment]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupRequest.Assignment, _Mapping]]] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error_code", "protocol_type", "protocol_name", "assignment", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    protocol_type: str
    protocol_name: str
    assignment: bytes
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignment: _Optional[bytes] = ..., error_message: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class HeartbeatBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[HeartbeatRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[HeartbeatRequest, _Mapping]]] = ...) -> None: ...

class HeartbeatBatchResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[HeartbeatResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[HeartbeatResponse, _Mapping]]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "members")
    class MemberIdentity(_message.Message):
        __slots__ = ("member_id", "group_instance_id", "reason")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        group_instance_id: str
        reason: str
        def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[LeaveGroupRequest.MemberIdentity]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeaveGroupRequest.MemberIdentity, _Mapping]]] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code", "members", "error_message")
    class MemberResponse(_message.Message):
        __slots__ = ("member_id", "group_instance_id", "error_code")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        group_instance_id: str
        error_code: int
        def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., error_code: _Optional[int] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    members: _containers.RepeatedCompositeFieldContainer[LeaveGroupResponse.MemberResponse]
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., members: _Optional[_Iterable[_Union[LeaveGroupResponse.MemberResponse, _Mapping]]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AddMembersToGroupRequest(_message.Message):
    __slots__ = ("group_id", "group_instance_ids")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    group_instance_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_id: _Optional[str] = ..., group_instance_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AddMembersToGroupResponse(_message.Message):
    __slots__ = ("error_code", "results", "error_message")
    class InstanceResult(_message.Message):
        __slots__ = ("group_instance_id", "error_code", "error_message")
        GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        group_instance_id: str
        error_code: int
        error_message: str
        def __init__(self, group_instance_id: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    results: _containers.RepeatedCompositeFieldContainer[AddMembersToGroupResponse.InstanceResult]
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., results: _Optional[_Iterable[_Union[AddMembersToGroupResponse.InstanceResult, _Mapping]]] = ..., error_message: _Optional[str] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "topics")
    class Partition(_message.Message):
        __slots__ = ("partition_index", "committed_offset", "committed_leader_epoch", "committed_metadata")
        PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_METADATA_FIELD_NUMBER: _ClassVar[int]
        partition_index: int
        committed_offset: int
        committed_leader_epoch: int
        committed_metadata: str
        def __init__(self, partition_index: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., committed_metadata: _Optional[str] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitRequest.Partition, _Mapping]]] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest.Topic]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitRequest.Topic, _Mapping]]] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("topics", "error_code", "error_message")
    class Partition(_message.Message):
        __slots__ = ("partition_index", "error_code")
        PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        partition_index: int
        error_code: int
        def __init__(self, partition_index: _Optional[int] = ..., error_code: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitResponse.Partition, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse.Topic]
    error_code: int
    error_message: str
    def __init__(self, topics: _Optional[_Iterable[_Union[OffsetCommitResponse.Topic, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class OffsetCommitBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[OffsetCommitRequest, _Mapping]]] = ...) -> None: ...

class OffsetCommitBatchResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[OffsetCommitResponse, _Mapping]]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "topics", "require_stable")
    class Topic(_message.Message):
        __slots__ = ("name", "partition_indexes")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITION_INDEXES_FIELD_NUMBER: _ClassVar[int]
        name: str
        partition_indexes: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, name: _Optional[str] = ..., partition_indexes: _Optional[_Iterable[int]] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchRequest.Topic]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchRequest.Topic, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error_code", "topics", "error_message")
    class Partition(_message.Message):
        __slots__ = ("partition_index", "committed_offset", "committed_leader_epoch", "metadata", "error_code")
        PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        partition_index: int
        committed_offset: int
        committed_leader_epoch: int
        metadata: str
        error_code: int
        def __init__(self, partition_index: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., error_code: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetFetchResponse.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetFetchResponse.Partition, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchResponse.Topic]
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchResponse.Topic, _Mapping]]] = ..., error_message: _Optional[str] = ...) -> None: ...

class OffsetDeleteRequest(_message.Message):
    __slots__ = ("group_id", "topics")
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetDeleteRequest.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetDeleteRequest.Partition, _Mapping]]] = ...) -> None: ...
    class Partition(_message.Message):
        __slots__ = ("partition_index",)
        PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
        partition_index: int
        def __init__(self, partition_index: _Optional[int] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetDeleteRequest.Topic]
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetDeleteRequest.Topic, _Mapping]]] = ...) -> None: ...

class OffsetDeleteResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    class Partition(_message.Message):
        __slots__ = ("partition_index", "error_code")
        PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        partition_index: int
        error_code: int
        def __init__(self, partition_index: _Optional[int] = ..., error_code: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetDeleteResponse.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetDeleteResponse.Partition, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetDeleteResponse.Topic]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetDeleteResponse.Topic, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RebalanceReason(_message.Message):
    __slots__ = ("cause", "member_id", "group_instance_id", "join_reason", "reason", "time_ms")
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    JOIN_REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    cause: str
    member_id: str
    group_instance_id: str
    join_reason: JoinGroupRequest.JoinReason
    reason: str
    time_ms: int
    def __init__(self, cause: _Optional[str] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., join_reason: _Optional[_Union[JoinGroupRequest.JoinReason, str]] = ..., reason: _Optional[str] = ..., time_ms: _Optional[int] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    class Member(_message.Message):
        __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "member_metadata", "member_assignment", "client_software_name", "client_software_version")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
        CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
        MEMBER_METADATA_FIELD_NUMBER: _ClassVar[int]
        MEMBER_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
        CLIENT_SOFTWARE_NAME_FIELD_NUMBER: _ClassVar[int]
        CLIENT_SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        group_instance_id: str
        client_id: str
        client_host: str
        member_metadata: bytes
        member_assignment: bytes
        client_software_name: str
        client_software_version: str
        def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., member_metadata: _Optional[bytes] = ..., member_assignment: _Optional[bytes] = ..., client_software_name: _Optional[str] = ..., client_software_version: _Optional[str] = ...) -> None: ...
    class Group(_message.Message):
        __slots__ = ("error_code", "group_id", "group_state", "protocol_type", "protocol_data", "members", "generation_id", "leader_id", "coordinator_partition", "coordinator_node_id", "last_rebalance_reason", "pending_instance_ids", "pending_member_count", "error_message", "coordinator_epoch")
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        GROUP_STATE_FIELD_NUMBER: _ClassVar[int]
        PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
        PROTOCOL_DATA_FIELD_NUMBER: _ClassVar[int]
        MEMBERS_FIELD_NUMBER: _ClassVar[int]
        GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
        LEADER_ID_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_PARTITION_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
        LAST_REBALANCE_REASON_FIELD_NUMBER: _ClassVar[int]
        PENDING_INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
        PENDING_MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
        error_code: int
        group_id: str
        group_state: str
        protocol_type: str
        protocol_data: str
        members: _containers.RepeatedCompositeFieldContainer[DescribeGroupsResponse.Member]
        generation_id: int
        leader_id: str
        coordinator_partition: int
        coordinator_node_id: int
        last_rebalance_reason: RebalanceReason
        pending_instance_ids: _containers.RepeatedScalarFieldContainer[str]
        pending_member_count: int
        error_message: str
        coordinator_epoch: int
        def __init__(self, error_code: _Optional[int] = ..., group_id: _Optional[str] = ..., group_state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_data: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribeGroupsResponse.Member, _Mapping]]] = ..., generation_id: _Optional[int] = ..., leader_id: _Optional[str] = ..., coordinator_partition: _Optional[int] = ..., coordinator_node_id: _Optional[int] = ..., last_rebalance_reason: _Optional[_Union[RebalanceReason, _Mapping]] = ..., pending_instance_ids: _Optional[_Iterable[str]] = ..., pending_member_count: _Optional[int] = ..., error_message: _Optional[str] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribeGroupsResponse.Group]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribeGroupsResponse.Group, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("states_filter", "coordinated_only")
    STATES_FILTER_FIELD_NUMBER: _ClassVar[int]
    COORDINATED_ONLY_FIELD_NUMBER: _ClassVar[int]
    states_filter: _containers.RepeatedScalarFieldContainer[str]
    coordinated_only: bool
    def __init__(self, states_filter: _Optional[_Iterable[str]] = ..., coordinated_only: _Optional[bool] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "groups", "error_message", "partitions")
    class ListedGroup(_message.Message):
        __slots__ = ("group_id", "protocol_type", "group_state")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
        GROUP_STATE_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        protocol_type: str
        group_state: str
        def __init__(self, group_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., group_state: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    groups: _containers.RepeatedCompositeFieldContainer[ListGroupsResponse.ListedGroup]
    error_message: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_code: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[ListGroupsResponse.ListedGroup, _Mapping]]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    class Result(_message.Message):
        __slots__ = ("group_id", "error_code")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        error_code: int
        def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[int] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupsResponse.Result, _Mapping]]] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("error_code", "node_id", "nodes", "partitions", "partition_count", "cluster_id")
    class Node(_message.Message):
        __slots__ = ("node_id", "host", "port", "alive", "incarnation")
        NODE_ID_FIELD_NUMBER: _ClassVar[int]
        HOST_FIELD_NUMBER: _ClassVar[int]
        PORT_FIELD_NUMBER: _ClassVar[int]
        ALIVE_FIELD_NUMBER: _ClassVar[int]
        INCARNATION_FIELD_NUMBER: _ClassVar[int]
        node_id: int
        host: str
        port: int
        alive: bool
        incarnation: str
        def __init__(self, node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., alive: _Optional[bool] = ..., incarnation: _Optional[str] = ...) -> None: ...
    class ReplicaState(_message.Message):
        __slots__ = ("node_id", "match_index", "lag")
        NODE_ID_FIELD_NUMBER: _ClassVar[int]
        MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
        LAG_FIELD_NUMBER: _ClassVar[int]
        node_id: int
        match_index: int
        lag: int
        def __init__(self, node_id: _Optional[int] = ..., match_index: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...
    class Partition(_message.Message):
        __slots__ = ("partition_id", "leader_node_id", "term", "commit_index", "replica_node_ids", "replica_states")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
        TERM_FIELD_NUMBER: _ClassVar[int]
        COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
        REPLICA_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
        REPLICA_STATES_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        leader_node_id: int
        term: int
        commit_index: int
        replica_node_ids: _containers.RepeatedScalarFieldContainer[int]
        replica_states: _containers.RepeatedCompositeFieldContainer[DescribeClusterResponse.ReplicaState]
        def __init__(self, partition_id: _Optional[int] = ..., leader_node_id: _Optional[int] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., replica_node_ids: _Optional[_Iterable[int]] = ..., replica_states: _Optional[_Iterable[_Union[DescribeClusterResponse.ReplicaState, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    node_id: int
    nodes: _containers.RepeatedCompositeFieldContainer[DescribeClusterResponse.Node]
    partitions: _containers.RepeatedCompositeFieldContainer[DescribeClusterResponse.Partition]
    partition_count: int
    cluster_id: str
    def __init__(self, error_code: _Optional[int] = ..., node_id: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[DescribeClusterResponse.Node, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[DescribeClusterResponse.Partition, _Mapping]]] = ..., partition_count: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class AddRaftVoterRequest(_message.Message):
    __slots__ = ("node", "timeout_ms", "replace")
    NODE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    node: str
    timeout_ms: int
    replace: bool
    def __init__(self, node: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., replace: _Optional[bool] = ...) -> None: ...

class AddRaftVoterResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions_changed")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions_changed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions_changed: _Optional[_Iterable[int]] = ...) -> None: ...

class RemoveRaftVoterRequest(_message.Message):
    __slots__ = ("node_id", "timeout_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    timeout_ms: int
    def __init__(self, node_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RemoveRaftVoterResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions_changed")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions_changed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions_changed: _Optional[_Iterable[int]] = ...) -> None: ...

class ReadEventsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ReadEventsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "node_id", "partition", "lines")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    node_id: int
    partition: int
    lines: bytes
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., partition: _Optional[int] = ..., lines: _Optional[bytes] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only")
    class Topic(_message.Message):
        __slots__ = ("name", "num_partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        num_partitions: int
        def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreateTopicsRequest.Topic]
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[CreateTopicsRequest.Topic, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("results", "error_code", "error_message")
    class Result(_message.Message):
        __slots__ = ("name", "error_code", "error_message", "topic_id", "num_partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        error_code: int
        error_message: str
        topic_id: str
        num_partitions: int
        def __init__(self, name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topic_id: _Optional[str] = ..., num_partitions: _Optional[int] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateTopicsResponse.Result]
    error_code: int
    error_message: str
    def __init__(self, results: _Optional[_Iterable[_Union[CreateTopicsResponse.Result, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("results", "error_code", "error_message")
    class Result(_message.Message):
        __slots__ = ("name", "error_code", "error_message")
        NAME_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        name: str
        error_code: int
        error_message: str
        def __init__(self, name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteTopicsResponse.Result]
    error_code: int
    error_message: str
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteTopicsResponse.Result, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("error_code", "topics", "error_message")
    class Topic(_message.Message):
        __slots__ = ("name", "num_partitions", "topic_id")
        NAME_FIELD_NUMBER: _ClassVar[int]
        NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        name: str
        num_partitions: int
        topic_id: str
        def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., topic_id: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    topics: _containers.RepeatedCompositeFieldContainer[ListTopicsResponse.Topic]
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[ListTopicsResponse.Topic, _Mapping]]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DescribeSettingsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeSettingsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "node_id", "settings")
    class Setting(_message.Message):
        __slots__ = ("name", "value", "source", "default_value", "sensitive")
        NAME_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        SOURCE_FIELD_NUMBER: _ClassVar[int]
        DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
        SENSITIVE_FIELD_NUMBER: _ClassVar[int]
        name: str
        value: str
        source: str
        default_value: str
        sensitive: bool
        def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[str] = ..., default_value: _Optional[str] = ..., sensitive: _Optional[bool] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    node_id: int
    settings: _containers.RepeatedCompositeFieldContainer[DescribeSettingsResponse.Setting]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., settings: _Optional[_Iterable[_Union[DescribeSettingsResponse.Setting, _Mapping]]] = ...) -> None: ...
