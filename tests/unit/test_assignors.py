"""Assignors: Kafka's documented examples, validity/determinism/balance properties, and the sticky bounds.

Sticky bound asserted (identical subscriptions, N partitions, M members, q, r = divmod(N, M)): let c_i be the
number of partitions member i validly claims (owned, still subscribed, still existing; a partition claimed twice
counts for the lowest member id). No balanced assignment keeps more than
    K = sum(min(c_i, q)) + min(r, #{i : c_i > q})
claimed partitions with their claimant, and the sticky assignor keeps exactly K. Special cases asserted too:
from a balanced assignment, adding a member moves exactly N // (M + 1) partitions (only what the newcomer needs)
and removing one moves none of the survivors' partitions (only the removed member's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.client.assignors import (
    ASSIGNORS,
    Assignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    get_assignor,
    topic_counts,
)
from groupcoord.client.protocol import Assignment, Subscription, TopicPartition
from tests.unit.profiles import examples

# The assignors that assign every partition; cooperative-sticky holds some back (tests/unit/test_cooperative.py).
ALL = sorted((a for a in ASSIGNORS.values() if a.name != "cooperative-sticky"), key=lambda a: a.name)
TOPICS = ("t0", "t1", "t2", "t3")
MEMBER_IDS = st.lists(st.text("abcm01", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)
TOPIC_SETS = st.sets(st.sampled_from(TOPICS), max_size=len(TOPICS))
COUNTS = st.integers(0, 9)
# Includes stale claims: a topic nobody subscribes to and partitions beyond every count.
OWNED = st.lists(st.tuples(st.sampled_from((*TOPICS, "gone")), st.integers(0, 11)), unique=True, max_size=8)
SETTINGS = settings(
    max_examples=examples(150), database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def subscriptions(draw: st.DrawFn, identical: bool = False, owned: bool = False) -> dict[str, Subscription]:
    """Members with random (or identical) topic sets; each member may declare its own, disagreeing counts."""
    shared = draw(TOPIC_SETS)
    subs: dict[str, Subscription] = {}
    for member in draw(MEMBER_IDS):
        names = shared if identical else draw(TOPIC_SETS)
        topics = {t: draw(COUNTS) for t in sorted(names)}
        subs[member] = Subscription(topics, owned=tuple(draw(OWNED)) if owned else ())
    return subs


def owners(result: dict[str, Assignment]) -> dict[TopicPartition, str]:
    return {tp: member for member, a in result.items() for tp in a.partitions}


def loads(result: dict[str, Assignment]) -> list[int]:
    return [len(a.partitions) for a in result.values()]


def check_valid(subs: dict[str, Subscription], result: dict[str, Assignment]) -> None:
    """Every member present in input order; every partition of every subscribed topic owned once, by a subscriber."""
    assert list(result) == list(subs)
    every = Counter(tp for a in result.values() for tp in a.partitions)
    assert all(n == 1 for n in every.values()), "a partition is assigned twice"
    expected = {(t, p) for t, n in topic_counts(subs).items() for p in range(n)}
    assert set(every) == expected
    for member, assignment in result.items():
        assert all(t in subs[member].topics for t, _ in assignment.partitions)


def with_owned(subs: dict[str, Subscription], result: dict[str, Assignment]) -> dict[str, Subscription]:
    """The next generation's subscriptions: same topics, owning what `result` gave."""
    owned = {m: result[m].partitions if m in result else () for m in subs}
    return {m: Subscription(s.topics, owned=owned[m]) for m, s in subs.items()}


# --- hand-checked examples ------------------------------------------------------------------------------------


def two_members_two_topics() -> dict[str, Subscription]:
    return {"C0": Subscription({"t0": 3, "t1": 3}), "C1": Subscription({"t0": 3, "t1": 3})}


def test_range_matches_kafkas_example() -> None:
    result = RangeAssignor().assign(two_members_two_topics())
    assert result["C0"].partitions == (("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1))
    assert result["C1"].partitions == (("t0", 2), ("t1", 2))


def test_roundrobin_matches_kafkas_example() -> None:
    result = RoundRobinAssignor().assign(two_members_two_topics())
    assert result["C0"].partitions == (("t0", 0), ("t0", 2), ("t1", 1))
    assert result["C1"].partitions == (("t0", 1), ("t1", 0), ("t1", 2))


def test_roundrobin_matches_kafkas_uneven_subscription_example() -> None:
    """Kafka's javadoc: C0 [t0], C1 [t0, t1], C2 [t0, t1, t2]; t0/t1/t2 have 1/2/3 partitions."""
    subs = {
        "C0": Subscription({"t0": 1}),
        "C1": Subscription({"t0": 1, "t1": 2}),
        "C2": Subscription({"t0": 1, "t1": 2, "t2": 3}),
    }
    result = RoundRobinAssignor().assign(subs)
    assert result["C0"].partitions == (("t0", 0),)
    assert result["C1"].partitions == (("t1", 0),)
    assert result["C2"].partitions == (("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2))


def test_range_gives_the_extra_partitions_to_the_first_members_by_id() -> None:
    subs = {m: Subscription({"t": 8}) for m in ("c", "a", "b")}
    result = RangeAssignor().assign(subs)
    assert list(result) == ["c", "a", "b"]  # JoinGroup order kept
    assert result["a"].partitions == (("t", 0), ("t", 1), ("t", 2))
    assert result["b"].partitions == (("t", 3), ("t", 4), ("t", 5))
    assert result["c"].partitions == (("t", 6), ("t", 7))


@pytest.mark.parametrize("assignor", ALL, ids=lambda a: a.name)
def test_largest_declared_count_wins_and_only_subscribers_get_a_topic(assignor: Assignor) -> None:
    subs = {
        "old": Subscription({"t": 2}),  # an older view of t
        "new": Subscription({"t": 4, "u": 2}),
        "idle": Subscription({}),
    }
    result = assignor.assign(subs)
    check_valid(subs, result)
    assert {tp for a in result.values() for tp in a.partitions} == {("t", p) for p in range(4)} | {("u", 0), ("u", 1)}
    assert all(t == "t" for t, _ in result["old"].partitions)
    assert result["idle"] == Assignment(())


@pytest.mark.parametrize("assignor", ALL, ids=lambda a: a.name)
def test_empty_inputs(assignor: Assignor) -> None:
    assert assignor.assign({}) == {}
    subs = {"a": Subscription({"t": 0}), "b": Subscription({})}
    assert assignor.assign(subs) == {"a": Assignment(()), "b": Assignment(())}


def test_sticky_keeps_previous_owners() -> None:
    subs = {
        "a": Subscription({"t": 4}, owned=(("t", 3), ("t", 2))),
        "b": Subscription({"t": 4}, owned=(("t", 0), ("t", 1))),
    }
    result = StickyAssignor().assign(subs)
    assert result["a"].partitions == (("t", 2), ("t", 3))
    assert result["b"].partitions == (("t", 0), ("t", 1))


def test_sticky_conflicting_claim_goes_to_the_lowest_member_id() -> None:
    subs = {
        "b": Subscription({"t": 2}, owned=(("t", 0),)),
        "a": Subscription({"t": 2}, owned=(("t", 0),)),
    }
    result = StickyAssignor().assign(subs)
    assert result["a"].partitions == (("t", 0),)
    assert result["b"].partitions == (("t", 1),)


def test_sticky_ignores_stale_claims() -> None:
    """Claims on an unsubscribed topic or a partition beyond the count are dropped, not kept."""
    subs = {
        "a": Subscription({"t": 2}, owned=(("gone", 0), ("t", 5))),
        "b": Subscription({"t": 2, "u": 1}, owned=(("t", 0), ("t", 1))),
        "c": Subscription({"t": 2}, owned=(("u", 0),)),
    }
    result = StickyAssignor().assign(subs)
    check_valid(subs, result)
    # b is the only subscriber of u, so it keeps u0 and hands both t partitions on to balance.
    assert result["b"].partitions == (("u", 0),)
    assert {result["a"].partitions, result["c"].partitions} == {(("t", 0),), (("t", 1),)}


def test_sticky_new_member_takes_from_the_most_loaded() -> None:
    subs = {
        "a": Subscription({"t": 6}, owned=tuple(("t", p) for p in range(4))),
        "b": Subscription({"t": 6}, owned=(("t", 4), ("t", 5))),
        "c": Subscription({"t": 6}),
    }
    result = StickyAssignor().assign(subs)
    assert loads(result) == [2, 2, 2]
    assert result["b"].partitions == (("t", 4), ("t", 5))
    assert set(result["a"].partitions) < {("t", p) for p in range(4)}


def test_sticky_donor_gives_away_what_it_was_handed_before_what_it_owned() -> None:
    """With differing subscriptions the fill can overload a member; balancing then moves its new partitions first.

    Fill (t before u, least loaded first): c gets t1, a gets t2 and u1, b gets u0 and u3, so a holds 4 and c 1.
    Balancing moves one t partition from a to c: t2 (just handed to a), not t0 (which a owned).
    """
    subs = {
        "a": Subscription({"t": 3, "u": 4}, owned=(("t", 0),)),
        "b": Subscription({"u": 4}, owned=(("u", 2),)),
        "c": Subscription({"t": 3}),
    }
    result = StickyAssignor().assign(subs)
    assert result["a"].partitions == (("t", 0), ("u", 1))
    assert result["b"].partitions == (("u", 0), ("u", 2), ("u", 3))
    assert result["c"].partitions == (("t", 1), ("t", 2))


def test_sticky_fills_the_partitions_with_fewest_candidates_first() -> None:
    """u0 can only go to a or b, t0 to anyone: placing u0 first lets a keep t1 and nobody move.

    In plain order t0 would go to b, then u0 to a, and a would have to hand its owned t1 to c.
    """
    subs = {
        "a": Subscription({"t": 2, "u": 1}, owned=(("t", 1),)),
        "b": Subscription({"t": 2, "u": 1}),
        "c": Subscription({"t": 2}),
    }
    result = StickyAssignor().assign(subs)
    assert result == {"a": Assignment((("t", 1),)), "b": Assignment((("u", 0),)), "c": Assignment((("t", 0),))}


def test_registry() -> None:
    assert set(ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky"}
    assert all(get_assignor(name).name == name for name in ASSIGNORS)
    with pytest.raises(ValueError, match="unknown assignor 'cooperative'"):
        get_assignor("cooperative")


# --- properties -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ALL, ids=lambda a: a.name)
@SETTINGS
@given(subs=subscriptions(owned=True))
def test_valid_and_deterministic(assignor: Assignor, subs: dict[str, Subscription]) -> None:
    result = assignor.assign(subs)
    check_valid(subs, result)
    assert assignor.assign(subs) == result
    # The JoinGroup order only orders the output: the same members in another order get the same partitions.
    reordered = assignor.assign(dict(reversed(subs.items())))
    assert list(reordered) == list(reversed(subs))
    assert dict(reordered) == dict(result)


@pytest.mark.parametrize("assignor", [RoundRobinAssignor(), StickyAssignor()], ids=lambda a: a.name)
@SETTINGS
@given(subs=subscriptions(identical=True, owned=True))
def test_identical_subscriptions_balanced(assignor: Assignor, subs: dict[str, Subscription]) -> None:
    counts = loads(assignor.assign(subs))
    assert max(counts) - min(counts) <= 1


@SETTINGS
@given(subs=subscriptions())
def test_range_balanced_per_topic(subs: dict[str, Subscription]) -> None:
    """Range balances each topic among its subscribers (across topics the first members get every extra)."""
    result = RangeAssignor().assign(subs)
    for topic in topic_counts(subs):
        per_member = [sum(1 for t, _ in result[m].partitions if t == topic) for m in subs if topic in subs[m].topics]
        assert max(per_member) - min(per_member) <= 1


@SETTINGS
@given(subs=subscriptions(owned=True))
def test_sticky_no_single_move_improves_balance(subs: dict[str, Subscription]) -> None:
    """Local balance for any subscriptions, so members with identical topic sets are within 1 of each other."""
    result = StickyAssignor().assign(subs)
    for donor in result.values():
        for recipient, taken in result.items():
            if len(donor.partitions) >= len(taken.partitions) + 2:
                assert not any(t in subs[recipient].topics for t, _ in donor.partitions)
    by_topics: dict[tuple[str, ...], list[int]] = {}
    for member, sub in subs.items():
        by_topics.setdefault(tuple(sub.topics), []).append(len(result[member].partitions))
    assert all(max(group) - min(group) <= 1 for group in by_topics.values())


@SETTINGS
@given(subs=subscriptions(owned=True))
def test_sticky_is_a_fixpoint(subs: dict[str, Subscription]) -> None:
    """With unchanged membership and subscriptions, owning the last result changes nothing."""
    first = StickyAssignor().assign(subs)
    assert StickyAssignor().assign(with_owned(subs, first)) == first


def valid_claims(subs: dict[str, Subscription]) -> dict[TopicPartition, str]:
    counts = topic_counts(subs)
    claims: dict[TopicPartition, str] = {}
    for member in sorted(subs):
        for t, p in subs[member].owned:
            if t in subs[member].topics and p < counts[t]:
                claims.setdefault((t, p), member)
    return claims


def max_keepable(subs: dict[str, Subscription]) -> int:
    """K of the module docstring: the most claims any balanced assignment of identical subscriptions can keep."""
    total = sum(topic_counts(subs).values())
    q, r = divmod(total, len(subs))
    claimed = Counter(valid_claims(subs).values())
    return sum(min(claimed[m], q) for m in subs) + min(r, sum(1 for m in subs if claimed[m] > q))


def kept(subs: dict[str, Subscription], result: dict[str, Assignment]) -> int:
    now = owners(result)
    return sum(1 for tp, member in valid_claims(subs).items() if now[tp] == member)


@SETTINGS
@given(subs=subscriptions(identical=True, owned=True))
def test_sticky_keeps_the_most_possible(subs: dict[str, Subscription]) -> None:
    """Arbitrary (overlapping, stale) claims: exactly K claims are kept, so moved == claimed - K is minimal."""
    assert kept(subs, StickyAssignor().assign(subs)) == max_keepable(subs)


@SETTINGS
@given(
    subs=subscriptions(identical=True),
    newcomer=st.text("xyz", min_size=1, max_size=2),
    leaver=st.integers(0, 10),
)
def test_sticky_membership_changes_move_the_minimum(subs: dict[str, Subscription], newcomer: str, leaver: int) -> None:
    sticky = StickyAssignor()
    before = sticky.assign(subs)
    total = sum(topic_counts(subs).values())
    previous = owners(before)

    joined = with_owned(subs, before) | {newcomer: Subscription(next(iter(subs.values())).topics)}
    after_join = sticky.assign(joined)
    moved = sum(1 for tp, member in owners(after_join).items() if previous[tp] != member)
    assert moved == total // len(joined) == len(after_join[newcomer].partitions)
    assert kept(joined, after_join) == max_keepable(joined)

    gone = list(subs)[leaver % len(subs)]
    left = {m: s for m, s in with_owned(subs, before).items() if m != gone}
    if left:
        after_leave = sticky.assign(left)
        moved = sum(1 for tp, member in owners(after_leave).items() if previous[tp] not in (member, gone))
        # Only the leaver's partitions move, unless its leaving changed the topics' partition counts (members may
        # disagree on them, and the largest count wins): then the balance of what is left may need a move too.
        assert moved == 0 or topic_counts(left) != topic_counts(subs)
        counts = loads(after_leave)
        assert max(counts) - min(counts) <= 1


def test_sticky_large_groups() -> None:
    """200 members, 5 000 partitions: a fresh group, then one more member, then everything owned by one member
    (the first to start) and 199 joining. (Each takes ~0.1 s; timing belongs to bench/, not to this test.)"""
    topics = {f"t{i}": 500 for i in range(10)}
    everything = tuple((t, p) for t in topics for p in range(500))
    subs = {f"m{i:03}": Subscription(topics) for i in range(200)}
    first = StickyAssignor().assign(subs)
    joined = with_owned(subs, first) | {"new": Subscription(topics)}
    second = StickyAssignor().assign(joined)
    startup = {m: Subscription(topics, owned=everything if m == "m000" else ()) for m in subs}
    third = StickyAssignor().assign(startup)
    check_valid(joined, second)
    assert len(second["new"].partitions) == 5000 // 201
    assert sorted(loads(third)) == [25] * 200


SCRIPT = """
import json
from groupcoord.client.assignors import ASSIGNORS
from groupcoord.client.protocol import Subscription
subs = {
    f"m{i}": Subscription({f"t{j}": 3 + i + j for j in range(5) if (i + j) % 3}, owned=(("t1", i), ("t2", 2 * i)))
    for i in (7, 3, 0, 5, 1, 6, 2, 4)
}
print(json.dumps({n: {m: a.partitions for m, a in x.assign(subs).items()} for n, x in ASSIGNORS.items()}))
"""


def test_same_output_under_any_hash_seed() -> None:
    """Two leaders are two processes: string hashing (set order) differs between them, the assignment must not."""
    outputs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", SCRIPT],
                env={**os.environ, "PYTHONHASHSEED": seed},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for seed in ("1", "2", "3")
    ]
    assert outputs[0] == outputs[1] == outputs[2]
