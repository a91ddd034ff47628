"""The log lines an operator reads about groups: one INFO line per membership change and per rebalance start and
end, as Kafka's group coordinator logs them ("Preparing to rebalance group ... (reason: ...)", "Stabilized group
... generation ...", "Member ... has left group ...").

They come from the events of committed records (coordinator/events.py), so they say what took effect, not what was
asked. Every replica sees every event, but only the node whose coordinator proposed the record logs it, once per
change in the whole cluster; a journal replayed at start logs nothing (the hook gets live entries only). Every
replica follows when each group's rebalance started, so a coordinator that took over in the middle of one still
says how long it took.
"""

from __future__ import annotations

import logging
from typing import Any

from groupcoord.base.logfields import fields
from groupcoord.coordinator.events import Event

log = logging.getLogger(__name__)

MEMBERSHIP = frozenset({"member_joined", "member_left", "member_expired", "member_replaced", "group_deleted"})


class GroupLog:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._rebalance_started_ms: dict[str, int] = {}

    def __call__(self, events: list[Event]) -> None:
        for event in events:
            kind, group = event["kind"], event["group"]
            if kind == "rebalance_started":
                self._rebalance_started_ms.setdefault(group, event["time_ms"])
            ended = kind == "sync_completed" or event["state"] in ("Empty", "Dead")
            started = self._rebalance_started_ms.pop(group, None) if ended and kind != "rebalance_started" else None
            if event["node"] != self.node_id:
                continue
            if kind in MEMBERSHIP or kind in ("rebalance_started", "generation_completed"):
                log.info(f"group.{kind}", extra=fields(**_fields(event)))
            elif kind == "sync_completed":
                took = {} if started is None else {"took_ms": event["time_ms"] - started}
                members = len(event["details"].get("members", ()))
                log.info("group.rebalance_completed", extra=fields(**_fields(event), members=members, **took))


def _fields(event: Event) -> dict[str, Any]:
    """Group, generation, state, and the member and reason when the event has them."""
    out: dict[str, Any] = {"group": event["group"], "generation": event["generation"], "state": event["state"]}
    for name in ("member", "reason"):
        if event[name]:
            out[name] = event[name]
    details = event["details"]
    for name in ("group_instance_id", "client_id", "client_host", "client_reason", "old_member_id", "join_reason",
                 "protocol", "leader"):  # fmt: skip
        if details.get(name):
            out[name] = details[name]
    if "members" in details and event["kind"] in ("rebalance_started", "generation_completed"):
        out["members"] = len(details["members"])
    return out
