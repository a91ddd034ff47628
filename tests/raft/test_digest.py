"""The cross-replica state check's bookkeeping (raft/digest.py); tests/cluster/test_storage_faults.py has it on
real nodes."""

from __future__ import annotations

import hashlib
import logging

import msgpack
import pytest

from groupcoord.base.logfields import FIELDS
from groupcoord.raft.digest import StateDigests, proposal, state_digest


def test_the_digest_is_the_hash_every_earlier_version_computed():
    """Replicas of two versions compare digests during a rolling upgrade: the bytes hashed must not change."""
    state = {"version": 1, "groups": [{"group_id": "g", "offsets": [["t", 0, 42, -1, "", 7]]}]}
    before = hashlib.blake2b(msgpack.packb([state, 12], use_bin_type=True), digest_size=16).digest()
    assert state_digest(msgpack.packb(state, use_bin_type=True), 12) == before


def test_replicas_with_the_same_state_agree_and_count_their_checks():
    leader, follower = StateDigests(0), StateDigests(0)
    state = {"version": 1, "groups": [{"id": "g", "offsets": [["t", 0, 42]]}]}
    for index in (10, 20, 30):
        payload = proposal(leader.latest())
        for replica in (leader, follower):
            replica.on_entry(index, payload, proposer=1, digest=state_digest(msgpack.packb(state), 3))
    assert (follower.checks, follower.mismatch) == (2, None)  # 20 checks 10, 30 checks 20
    assert leader.latest() == (30, state_digest(msgpack.packb(state), 3))


def test_a_replica_whose_state_differs_raises_the_alarm_once(caplog: pytest.LogCaptureFixture):
    leader, odd = StateDigests(2), StateDigests(2)
    good = state_digest(msgpack.packb({"groups": [["g", 42]]}), 1)
    bad = state_digest(msgpack.packb({"groups": [["g", 43]]}), 1)
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


GOOD, BAD, OTHER = b"g" * 16, b"b" * 16, b"o" * 16


def _round(replica: StateDigests, index: int, reports: dict[int, bytes]) -> None:
    """A digest entry at `index`, then the reports of each node on it, in log order."""
    replica.on_entry(index, b"", 1, reports.get(1, GOOD))
    for node, digest in reports.items():
        replica.on_report(index, node, digest)


def test_the_majority_of_reports_finds_the_odd_replica_at_the_next_check(caplog: pytest.LogCaptureFixture):
    replica = StateDigests(0)
    with caplog.at_level(logging.WARNING, logger="groupcoord.raft.digest"):
        _round(replica, 10, {1: GOOD, 2: BAD, 3: GOOD})
        assert replica.odd_nodes == frozenset()  # judged only when the next round begins
        _round(replica, 20, {1: GOOD, 2: BAD, 3: GOOD})
        assert (replica.odd_nodes, replica.verdicts) == (frozenset({2}), 1)
        replica.on_report(10, 2, GOOD)  # a late or repeated report of a judged round changes nothing
        _round(replica, 30, {1: GOOD, 3: GOOD, 2: GOOD})  # node 2 rebuilt: it agrees again
        assert replica.odd_nodes == frozenset({2})  # round 20's verdict
        replica.on_entry(40, b"", 1, GOOD)
        assert (replica.odd_nodes, replica.verdicts) == (frozenset(), 3)
    said = [getattr(r, FIELDS) for r in caplog.records if r.getMessage() == "partition.odd_replicas"]
    assert [(s["index"], s["odd_nodes"], s["agreed_by"]) for s in said] == [(10, [2], [1, 3]), (30, [], [1, 2, 3])]


def test_the_leader_itself_can_be_the_odd_one():
    replica = StateDigests(0)
    _round(replica, 10, {1: BAD, 2: GOOD, 3: GOOD})
    replica.on_entry(20, b"", 2, GOOD)
    assert replica.odd_nodes == frozenset({1})


@pytest.mark.parametrize(
    "reports",
    [
        {1: GOOD},  # one report is no majority
        {1: GOOD, 2: BAD},  # a tie
        {1: GOOD, 2: BAD, 3: OTHER},  # three opinions
        {1: GOOD, 2: GOOD, 3: BAD, 4: BAD},  # two against two
    ],
)
def test_no_verdict_without_a_strict_majority_of_two_or_more(reports: dict[int, bytes]):
    replica = StateDigests(0)
    _round(replica, 10, reports)
    replica.on_entry(20, b"", 1, GOOD)
    assert (replica.odd_nodes, replica.verdicts) == (frozenset(), 0)
