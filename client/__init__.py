"""The Python SDK: `GroupMember` for workers, assignors, the consumer protocol payloads, and `ClientSecurity` (TLS,
client certificates, a token) for clusters that ask for them."""

from groupcoord.client.assignors import ASSIGNORS, Assignor, get_assignor
from groupcoord.client.member import GroupMember, MemberFailed
from groupcoord.client.protocol import Assignment, Subscription
from groupcoord.client.security import ClientSecurity

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "ClientSecurity",
    "GroupMember",
    "MemberFailed",
    "Subscription",
    "get_assignor",
]
