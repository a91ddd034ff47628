"""The group state machine: pure, deterministic, tested without a network."""

from groupcoord.coordinator.config import GroupConfig
from groupcoord.coordinator.coordinator import GroupCoordinator
from groupcoord.coordinator.result import CoordinatorResult, CoreCallFailed, ReentrantCall
from groupcoord.coordinator.runtime import Clock
from groupcoord.coordinator.state import Group, GroupState, GroupStore, Member

__all__ = [
    "Clock",
    "CoordinatorResult",
    "CoreCallFailed",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "GroupStore",
    "Member",
    "ReentrantCall",
]
