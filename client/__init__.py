"""The Python SDK: `GroupMember` for workers (`SyncGroupMember` for scripts), `SyncAdmin` (the blocking `Admin` of
client/admin.py), assignors, the consumer protocol payloads, `ClientSecurity` (TLS, client certificates, a token)
for clusters that ask for them, and the exceptions of client/errors.py."""

from groupcoord.client.assignors import ASSIGNORS, Assignor, get_assignor
from groupcoord.client.errors import (
    BootstrapUnreachable,
    CommitFailed,
    CoordinatorUnavailable,
    FatalError,
    FencedInstanceId,
    GroupAuthorizationFailed,
    GroupcoordError,
    InvalidGroupId,
    RebalanceInProgress,
    RetriableError,
    WaitTimedOut,
)
from groupcoord.client.member import GroupMember
from groupcoord.client.protocol import Assignment, Subscription
from groupcoord.client.security import ClientSecurity
from groupcoord.client.sync import SyncGroupMember
from groupcoord.client.sync_admin import SyncAdmin

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "BootstrapUnreachable",
    "ClientSecurity",
    "CommitFailed",
    "CoordinatorUnavailable",
    "FatalError",
    "FencedInstanceId",
    "GroupAuthorizationFailed",
    "GroupMember",
    "GroupcoordError",
    "InvalidGroupId",
    "RebalanceInProgress",
    "RetriableError",
    "Subscription",
    "SyncAdmin",
    "SyncGroupMember",
    "WaitTimedOut",
    "get_assignor",
]
