"""A call that raises half-way hands back what it already did, so nothing applied is left unreplicated."""

from __future__ import annotations

import pytest

from groupcoord.coordinator import CoreCallFailed, GroupConfig, GroupCoordinator
from groupcoord.coordinator.rebalance import Rebalance
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.support import FakeClock, SeqIds


def _join(member_id: str = "", metadata: bytes = b"") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[pb.JoinGroupRequest.Protocol(name="range", metadata=metadata)],
    )


def test_failed_call_returns_applied_records_and_due_replies(monkeypatch):
    core = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), FakeClock(), new_uuid=SeqIds())
    first = core.join_group(_join(), "a0").response.member_id
    assert core.join_group(_join(first), "a1").response.generation_id == 1
    member_id = core.join_group(_join(), "t0").response.member_id
    assert core.join_group(_join(member_id), "t2").response is None  # parked until `first` rejoins

    def boom(self, out, group):
        raise RuntimeError("bug")

    monkeypatch.setattr(Rebalance, "maybe_complete_join", boom)
    with pytest.raises(CoreCallFailed) as failed:
        core.join_group(_join(member_id, b"newer"), "t3")
    result = failed.value.result
    assert isinstance(failed.value.__cause__, RuntimeError)
    # The MemberUpdated it applied is handed back for replication ...
    assert [type(rec) for rec in result.records] == [r.MemberUpdated]
    assert core.store.groups["g"].members[member_id].protocols == (("range", b"newer"),)
    # ... and the superseded parked join is still answered.
    assert result.reply_for("t2").error_code == Errors.REBALANCE_IN_PROGRESS
