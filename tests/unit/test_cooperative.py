"""cooperative-sticky (KIP-429) and the rebalance protocol a member's assignors allow.

The property that makes the cooperative protocol safe: no member is given a partition that another member
declares it owns. And the one that makes it useful: two rounds (give up, then hand over) reach the full sticky
assignment, and partitions that stay put are never taken away in between.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from groupcoord.client.assignors import (
    COOPERATIVE,
    EAGER,
    CooperativeStickyAssignor,
    RangeAssignor,
    StickyAssignor,
    rebalance_protocol,
    topic_counts,
)
from groupcoord.client.protocol import Assignment, Subscription
from tests.unit.test_assignors import SETTINGS, check_valid, owners, subscriptions, with_owned

COOP = CooperativeStickyAssignor()


class PlainAssignor:
    """A user's assignor that declares nothing: eager only, as in Kafka."""

    name = "mine"

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        return RangeAssignor().assign(subscriptions)


def test_protocol_is_cooperative_only_if_every_assignor_supports_it() -> None:
    assert rebalance_protocol([COOP]) == COOPERATIVE
    assert rebalance_protocol([COOP, RangeAssignor()]) == EAGER
    assert rebalance_protocol([StickyAssignor()]) == EAGER
    assert rebalance_protocol([PlainAssignor()]) == EAGER


def test_a_partition_owned_elsewhere_waits_for_the_next_round() -> None:
    """Kafka's example: C0 owns all of t0; C1 joins. Round 1 gives C1 nothing (C0 still owns what it should get);
    C0 gives up its excess; round 2 hands it to C1. C0's kept partitions stay with it in both rounds."""
    topics = {"t0": 4}
    first = COOP.assign({"C0": Subscription(topics, owned=(("t0", 0), ("t0", 1), ("t0", 2), ("t0", 3))),
                         "C1": Subscription(topics)})  # fmt: skip
    assert first["C1"].partitions == ()
    assert first["C0"].partitions == (("t0", 2), ("t0", 3))
    second = COOP.assign({"C0": Subscription(topics, owned=first["C0"].partitions), "C1": Subscription(topics)})
    assert second["C0"].partitions == (("t0", 2), ("t0", 3))
    assert second["C1"].partitions == (("t0", 0), ("t0", 1))


def test_a_partition_two_members_claim_goes_to_neither() -> None:
    topics = {"t0": 2}
    result = COOP.assign(
        {"C0": Subscription(topics, owned=(("t0", 0),)), "C1": Subscription(topics, owned=(("t0", 0),))}
    )
    assert ("t0", 0) not in owners(result)
    assert ("t0", 1) in owners(result)


@SETTINGS
@given(subs=subscriptions(owned=True))
def test_never_gives_a_member_what_another_claims(subs: dict[str, Subscription]) -> None:
    result = COOP.assign(subs)
    assert list(result) == list(subs)
    assert all(n == 1 for n in Counter(tp for a in result.values() for tp in a.partitions).values())
    claimed_by = {m: set(s.owned) for m, s in subs.items()}
    for member, assignment in result.items():
        for tp in assignment.partitions:
            assert tp[0] in subs[member].topics
            assert not any(tp in claimed_by[other] for other in subs if other != member)
    # What is held back is exactly what the sticky target moves away from a claimant, or several claim.
    target = owners(StickyAssignor().assign(subs))
    assert owners(result) == {tp: m for tp, m in target.items() if all(tp not in claimed_by[o] for o in subs if o != m)}


@SETTINGS
@given(subs=subscriptions(owned=True))
def test_rounds_reach_the_full_assignment_and_stay(subs: dict[str, Subscription]) -> None:
    """Each round every member owns what the previous one gave it (it revoked the rest). Within three rounds
    every partition is assigned (two, unless balancing differing subscriptions moves one again), after which
    rounds change nothing."""
    rounds = [COOP.assign(subs)]
    while len(rounds) < 3 and set(owners(rounds[-1])) != {
        (t, p) for t, n in topic_counts(subs).items() for p in range(n)
    }:
        rounds.append(COOP.assign(with_owned(subs, rounds[-1])))
    check_valid(subs, rounds[-1])
    assert COOP.assign(with_owned(subs, rounds[-1])) == rounds[-1]


@SETTINGS
@given(subs=subscriptions(identical=True), newcomer=st.text("xyz", min_size=1, max_size=2))
def test_scale_out_moves_only_what_the_newcomer_gets(subs: dict[str, Subscription], newcomer: str) -> None:
    before = COOP.assign(subs)  # nobody owns anything yet: the whole assignment at once
    check_valid(subs, before)
    joined = with_owned(subs, before) | {newcomer: Subscription(next(iter(subs.values())).topics)}
    first = COOP.assign(joined)
    assert first[newcomer].partitions == ()
    # Every partition a member keeps stays with it; only those the newcomer will get are revoked.
    revoked = {tp for m in subs for tp in set(before[m].partitions) - set(first[m].partitions)}
    second = COOP.assign(with_owned(joined, first))
    check_valid(joined, second)
    assert set(second[newcomer].partitions) == revoked
    assert len(revoked) == sum(topic_counts(subs).values()) // len(joined)


def test_an_eager_members_previous_assignment_keeps_sticky_sticky_without_a_claim() -> None:
    """Eager members revoke before they join, so they own nothing; what they held before (`previous`) still keeps
    the sticky target sticky, and cooperative-sticky holds nothing back for it (no one has to give it up)."""
    topics = {"t0": 4}
    subs = {
        "C0": Subscription(topics, previous=(("t0", 2), ("t0", 3))),
        "C1": Subscription(topics, previous=(("t0", 0), ("t0", 1))),
    }
    for assignor in (StickyAssignor(), COOP):
        result = assignor.assign(subs)
        assert result["C0"].partitions == (("t0", 2), ("t0", 3))
        assert result["C1"].partitions == (("t0", 0), ("t0", 1))
    # A claim (owned) goes before another member's previous assignment.
    subs["C1"] = Subscription(topics, owned=(("t0", 2),))
    assert ("t0", 2) in StickyAssignor().assign(subs)["C1"].partitions
