"""`offsets reset`'s plan (groupcoord/offset_reset.py): scopes, scenarios and kafka-consumer-groups' CSV."""

from __future__ import annotations

import pytest

from groupcoord.base.errors import UserError
from groupcoord.offset_reset import (
    FileRow,
    Planned,
    Scenario,
    TopicScope,
    export_csv,
    parse_reset_file,
    parse_topic_scope,
    partitions_in_scope,
    plan_group,
)

COMMITTED = {("orders", 0): 10, ("orders", 2): 3, ("clicks", 1): 7}
REGISTRY = {"orders": 4}


def test_topic_scope_spellings():
    assert parse_topic_scope("orders") == TopicScope("orders", None)
    assert parse_topic_scope("orders:0,2,2") == TopicScope("orders", (0, 2))
    assert parse_topic_scope("ns:orders:1") == TopicScope("ns:orders", (1,))
    for bad in ("orders:", "orders:x", ":1", "orders:1,,2", ""):
        with pytest.raises(UserError):
            parse_topic_scope(bad)


def test_scope_all_topics_is_what_the_group_committed():
    assert partitions_in_scope(COMMITTED, REGISTRY, True, []) == ([("clicks", 1), ("orders", 0), ("orders", 2)], [])


def test_scope_of_a_topic_is_the_registry_and_the_committed_partitions():
    chosen, problems = partitions_in_scope(COMMITTED, REGISTRY, False, [TopicScope("orders", None)])
    assert chosen == [("orders", p) for p in range(4)] and problems == []
    chosen, problems = partitions_in_scope(COMMITTED, {}, False, [TopicScope("clicks", None)])
    assert chosen == [("clicks", 1)] and problems == []
    chosen, problems = partitions_in_scope(COMMITTED, REGISTRY, False, [TopicScope("nothing", None)])
    assert chosen == [] and problems == ["topic 'nothing': not in the topic registry and no committed offsets of it"]
    chosen, _ = partitions_in_scope(COMMITTED, REGISTRY, False, [TopicScope("orders", (3, 1)), TopicScope("x", (0,))])
    assert chosen == [("orders", 3), ("orders", 1), ("x", 0)]


def test_scenarios():
    tps = [("orders", 0), ("orders", 1)]

    def news(scenario: Scenario) -> list[tuple[int | None, str]]:
        return [(p.new, p.problem) for p in plan_group("g", tps, COMMITTED, REGISTRY, scenario)]

    assert news(Scenario("to-offset", 42)) == [(42, ""), (42, "")]
    assert news(Scenario("to-earliest")) == [(0, ""), (0, "")]
    assert news(Scenario("to-current")) == [(10, ""), (None, "no committed offset to keep")]
    assert news(Scenario("shift-by", -4)) == [(6, ""), (None, "no committed offset to shift")]
    assert news(Scenario("shift-by", -40)) == [(0, ""), (None, "no committed offset to shift")]  # never below 0
    assert news(Scenario("shift-by", 5)) == [(15, ""), (None, "no committed offset to shift")]
    from_file = {("orders", 0): 99}
    planned = plan_group("g", list(from_file), COMMITTED, REGISTRY, Scenario("from-file"), from_file)
    assert planned == [Planned("g", "orders", 0, 10, 99)]


def test_a_partition_beyond_a_registered_topic_is_named():
    (line,) = plan_group("g", [("orders", 9)], COMMITTED, REGISTRY, Scenario("to-earliest"))
    assert line.new is None and line.problem == "topic 'orders' has 4 partitions"
    (line,) = plan_group("g", [("unregistered", 9)], COMMITTED, REGISTRY, Scenario("to-earliest"))
    assert line.new == 0 and line.problem == ""


def test_the_csv_round_trip():
    plan = [Planned("a", "orders", 0, 10, 5), Planned("a", "orders", 1, None, None, "x"), Planned("b", "t", 2, 1, 0)]
    one = export_csv(plan, several_groups=False)
    assert one == "orders,0,5\nt,2,0\n"
    assert parse_reset_file(one, "f") == [FileRow(None, "orders", 0, 5), FileRow(None, "t", 2, 0)]
    several = export_csv(plan, several_groups=True)
    assert several == "a,orders,0,5\nb,t,2,0\n"
    assert parse_reset_file("\n" + several + "\n", "f") == [FileRow("a", "orders", 0, 5), FileRow("b", "t", 2, 0)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders,0\n", "plan.csv:1: expected TOPIC,PARTITION,OFFSET or GROUP,TOPIC,PARTITION,OFFSET"),
        ("orders,0,1\norders,x,1\n", "plan.csv:2: 'x' is not a partition number"),
        ("orders,0,ten\n", "plan.csv:1: offset 'ten' is not an integer"),
        ("orders,0,-1\n", "plan.csv:1: offset must be >= 0"),
        ("\n\n", "plan.csv: no offsets in the file"),
    ],
)
def test_a_bad_file_names_its_line(text: str, message: str):
    with pytest.raises(UserError) as raised:
        parse_reset_file(text, "plan.csv")
    assert str(raised.value) == message
