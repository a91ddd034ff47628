"""The cross-replica state check's bookkeeping (raft/digest.py); tests/cluster/test_storage_faults.py has it on
real nodes."""

from __future__ import annotations

import logging

import pytest

from groupcoord.logfields import FIELDS
from groupcoord.raft.digest import StateDigests, proposal, state_digest


def test_replicas_with_the_same_state_agree_and_count_their_checks():
    leader, follower = StateDigests(0), StateDigests(0)
    state = {"version": 1, "groups": [{"id": "g", "offsets": [["t", 0, 42]]}]}
    for index in (10, 20, 30):
        payload = proposal(leader.latest())
        for replica in (leader, follower):
            replica.on_entry(index, payload, proposer=1, digest=state_digest(state, 3))
    assert (follower.checks, follower.mismatch) == (2, None)  # 20 checks 10, 30 checks 20
    assert leader.latest() == (30, state_digest(state, 3))


def test_a_replica_whose_state_differs_raises_the_alarm_once(caplog: pytest.LogCaptureFixture):
    leader, odd = StateDigests(2), StateDigests(2)
    good = state_digest({"groups": [["g", 42]]}, 1)
    bad = state_digest({"groups": [["g", 43]]}, 1)
    assert good != bad
    leader.on_entry(10, b"", 1, good)
    odd.on_entry(10, b"", 1, bad)
    with caplog.at_level(logging.ERROR, logger="groupcoord.raft.digest"):
        for index in (20, 30):
            payload = proposal(leader.latest())
            leader.on_entry(index, payload, 1, good)
            odd.on_entry(index, payload, 1, bad)
    assert odd.mismatch is not None and (odd.mismatch.index, odd.mismatch.proposer) == (10, 1)
    assert (odd.mismatch.mine, odd.mismatch.theirs) == (bad, good)
    [line] = [r for r in caplog.records if r.getMessage() == "partition.digest_mismatch"]
    said = getattr(line, FIELDS)
    assert (said["partition"], said["index"], said["node_id"]) == (2, 10, 1)
    assert leader.mismatch is None


def test_a_check_of_an_index_this_replica_never_hashed_is_skipped():
    """A replica restored from a later snapshot has no digest of the earlier index: nothing to compare."""
    replica = StateDigests(0)
    replica.on_entry(50, proposal((40, b"x" * 16)), 1, b"y" * 16)
    replica.on_entry(60, b"\xff\x00garbage", 1, b"y" * 16)
    assert (replica.checks, replica.mismatch) == (0, None)
