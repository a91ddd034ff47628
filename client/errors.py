"""The SDK's exceptions: one hierarchy, split as Kafka's clients split theirs into retriable and fatal.

    GroupcoordError                      every error the SDK raises; `code` is Kafka's error code
    ├── RetriableError                   the same call may succeed later (`retriable` is True)
    │   ├── CoordinatorUnavailable       no node named the group's coordinator before the deadline
    │   │   └── BootstrapUnreachable     no bootstrap node answered at all (a wrong address, the cluster down)
    │   ├── WaitTimedOut                 a wait the caller bounded ended first (also a TimeoutError)
    │   ├── CoordinatorLoadInProgress, NotCoordinator, RebalanceInProgress, RequestTimedOut,
    │   └── ThrottlingQuotaExceeded, UnstableOffsetCommit
    └── FatalError                       retrying the same call cannot help; a member that meets one stops
        ├── CommitFailed                 a commit from a member that holds no assignment of the current generation
        ├── FencedInstanceId             another process holds this group_instance_id
        ├── GroupAuthorizationFailed, ClusterAuthorizationFailed
        ├── InvalidGroupId, InvalidSessionTimeout, InconsistentGroupProtocol, GroupMaxSizeReached
        ├── PolicyViolation, InvalidRequest, UnknownServerError, ...
        └── (any other code: FatalError itself, with the code)

A member stops on the error `wait_failed()` raises: a `FatalError`, or a `RetriableError` whose retry deadline
passed (`BootstrapUnreachable` after `bootstrap_timeout_ms`). The mapping from codes follows Kafka's Java client
(`Errors.exception()`), where a code's exception is a `RetriableException` or not; REBALANCE_IN_PROGRESS, which
Java does not mark retriable, is retriable here because the same commit succeeds once the rebalance is over.
"""

from __future__ import annotations

from typing import ClassVar

from groupcoord.protocol.errors import Errors


def error_name(code: int) -> str:
    """Kafka's name for a code; the number itself for one this client does not know."""
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


class GroupcoordError(Exception):
    """Base of every error the SDK raises. `code`: Kafka's error code (the nearest one for an error of the SDK's
    own); `message`: what the node or the SDK said about it."""

    retriable: ClassVar[bool] = False
    default_code: ClassVar[int] = Errors.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", code: int | None = None) -> None:
        self.code: int = self.default_code if code is None else code
        self.message = message
        name = error_name(self.code)
        super().__init__(f"{name}: {message}" if message else name)


class RetriableError(GroupcoordError):
    """A transient condition: the same call may succeed if made again later."""

    retriable = True


class FatalError(GroupcoordError):
    """Retrying the same call cannot help; a member that meets one stops and revokes its assignment."""


class CoordinatorUnavailable(RetriableError):
    """No node named a coordinator for the group before the deadline. `tried`: the addresses asked;
    `last_cause`: the last failure seen (a gRPC status, an error code)."""

    default_code = Errors.COORDINATOR_NOT_AVAILABLE

    def __init__(self, message: str = "", tried: tuple[str, ...] = (), last_cause: str = "") -> None:
        super().__init__(message)
        self.tried = tried
        self.last_cause = last_cause


class BootstrapUnreachable(CoordinatorUnavailable):
    """No bootstrap node answered before the deadline: a wrong address, a firewall, the cluster down."""

    def __init__(self, tried: tuple[str, ...], last_cause: str, waited_s: float) -> None:
        super().__init__(
            f"no node answered at {','.join(tried)} within {waited_s:g} s (last: {last_cause or 'no answer'})",
            tried=tried,
            last_cause=last_cause,
        )


class WaitTimedOut(RetriableError, TimeoutError):
    """A wait the caller bounded (`wait_stable(timeout_s)`) ended first; the member goes on. A `TimeoutError` too."""

    default_code = Errors.REQUEST_TIMED_OUT


class CoordinatorLoadInProgress(RetriableError):
    """The coordinator is still loading the group's partition (a new leader replaying its log)."""

    default_code = Errors.COORDINATOR_LOAD_IN_PROGRESS


class NotCoordinator(RetriableError):
    """The node asked no longer coordinates the group (its partition's leadership moved)."""

    default_code = Errors.NOT_COORDINATOR


class RebalanceInProgress(RetriableError):
    """The group is rebalancing; the same call succeeds once the member has rejoined."""

    default_code = Errors.REBALANCE_IN_PROGRESS


class RequestTimedOut(RetriableError):
    """A request that waits for the cluster ran out of time; it is safe to repeat."""

    default_code = Errors.REQUEST_TIMED_OUT


class ThrottlingQuotaExceeded(RetriableError):
    """The group's JoinGroup rate is used up; the node's answer says how long to wait."""

    default_code = Errors.THROTTLING_QUOTA_EXCEEDED


class UnstableOffsetCommit(RetriableError):
    """An offset of the group is being committed; fetch again."""

    default_code = Errors.UNSTABLE_OFFSET_COMMIT


class CommitFailed(FatalError):
    """The commit cannot succeed: the member holds no assignment of the current generation (it has not joined
    yet, or the group rebalanced without it). Kafka's CommitFailedException; rejoin, then commit again."""

    default_code = Errors.ILLEGAL_GENERATION


class FencedInstanceId(FatalError):
    """Another process joined with this `group_instance_id`: this one must stop (static membership)."""

    default_code = Errors.FENCED_INSTANCE_ID


class GroupAuthorizationFailed(FatalError):
    """The node's ACL refuses this caller the group or the operation (docs/SECURITY.md)."""

    default_code = Errors.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailed(FatalError):
    """The operation needs a cluster admin identity (membership changes)."""

    default_code = Errors.CLUSTER_AUTHORIZATION_FAILED


class InvalidGroupId(FatalError):
    """The group id is empty or longer than the cluster's `group_max_id_length`."""

    default_code = Errors.INVALID_GROUP_ID


class InvalidSessionTimeout(FatalError):
    """The session timeout is outside the cluster's allowed range."""

    default_code = Errors.INVALID_SESSION_TIMEOUT


class InconsistentGroupProtocol(FatalError):
    """The member's protocol type or assignors share nothing with the group's."""

    default_code = Errors.INCONSISTENT_GROUP_PROTOCOL


class GroupMaxSizeReached(FatalError):
    """The group holds `group_max_size` members already."""

    default_code = Errors.GROUP_MAX_SIZE_REACHED


class PolicyViolation(FatalError):
    """A configured limit refused the request; the message names the limit."""

    default_code = Errors.POLICY_VIOLATION


class InvalidRequest(FatalError):
    """The node refused the message itself (malformed, or over a size limit)."""

    default_code = Errors.INVALID_REQUEST


class UnknownServerError(FatalError):
    """The node failed to handle the call."""

    default_code = Errors.UNKNOWN_SERVER_ERROR


class GroupIdNotFound(FatalError):
    """No such group (an `Admin` request)."""

    default_code = Errors.GROUP_ID_NOT_FOUND


class NonEmptyGroup(FatalError):
    """The group has members, or is of another protocol type (an `Admin` request)."""

    default_code = Errors.NON_EMPTY_GROUP


_BY_CODE: dict[int, type[GroupcoordError]] = {
    cls.default_code: cls
    for cls in (
        CoordinatorUnavailable,
        CoordinatorLoadInProgress,
        NotCoordinator,
        RebalanceInProgress,
        RequestTimedOut,
        ThrottlingQuotaExceeded,
        UnstableOffsetCommit,
        FencedInstanceId,
        GroupAuthorizationFailed,
        ClusterAuthorizationFailed,
        InvalidGroupId,
        InvalidSessionTimeout,
        InconsistentGroupProtocol,
        GroupMaxSizeReached,
        PolicyViolation,
        InvalidRequest,
        UnknownServerError,
        GroupIdNotFound,
        NonEmptyGroup,
    )
}


def error_for(code: int, message: str = "") -> GroupcoordError:
    """The exception for Kafka error `code`: its own class when it has one, else a `FatalError` carrying the code."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else FatalError(message, code)
