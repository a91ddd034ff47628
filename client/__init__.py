"""The Python SDK: `GroupMember` for workers, assignors and the consumer protocol payloads."""

from groupcoord.client.assignors import ASSIGNORS, Assignor, get_assignor
from groupcoord.client.member import GroupMember, MemberFailed
from groupcoord.client.protocol import Assignment, Subscription

__all__ = ["ASSIGNORS", "Assignment", "Assignor", "GroupMember", "MemberFailed", "Subscription", "get_assignor"]
