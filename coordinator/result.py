"""What a coordinator call returns: Kafka's CoordinatorResult, the records it wrote and the replies it produced.

Records are already applied to the shard's store, in order; each reply is addressed by the opaque token of the
request it answers. A parked request's reply comes out of a later call (another request, or `tick()` when a timer
fires). The caller must not send a reply before the records produced up to that reply are committed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from groupcoord.protocol import records as r

Token = Hashable
Message = Any


@dataclass(slots=True)
class CoordinatorResult:
    """Kafka's CoordinatorResult carries one response; a call here may also answer requests parked before it, so
    `replies` is a list and `response` picks the call's own (`token`)."""

    records: list[r.Record] = field(default_factory=list)
    replies: list[tuple[Token, Message]] = field(default_factory=list)
    token: Token | None = None

    def reply(self, token: Token, message: Message) -> None:
        self.replies.append((token, message))

    @property
    def response(self) -> Message | None:
        """The reply to the call's own request, or None when it was parked."""
        return self.reply_for(self.token)

    def reply_for(self, token: Token) -> Message | None:
        for t, message in self.replies:
            if t == token:
                return message
        return None


class CoreCallFailed(Exception):
    """A call raised half-way. `result` holds what it did before: records already applied to the store (the caller
    must still replicate them, or replicas diverge) and replies already due to other requests."""

    def __init__(self, result: CoordinatorResult) -> None:
        super().__init__("coordinator call failed")
        self.result = result


class ReentrantCall(RuntimeError):
    """A public call made while another runs on the same shard (from a callback such as `node_groups`): its records
    would be applied under the outer call and returned apart from them, so it is refused."""
