"""Batch join (docs/PROTOCOL.md#batch-join-addmemberstogroup): AddMembersToGroup pre-registers static instances,
the join phase waits for all of them (bounded by the rebalance timeout) so N new instances cost one generation
bump; per-instance errors; DescribeGroups shows the instances that have not joined yet."""

from __future__ import annotations

from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.unit.harness import COMPLETING, EMPTY, PREPARING, STABLE, Client, Harness, code, records_of


def results(eff):
    return [(x.group_instance_id, code(x)) for x in eff.response.results]


def test_registration_alone_does_not_rebalance():
    h = Harness()
    a, _b = h.form("a", "b")
    eff = h.add_members("g", "n1", "n2", "n3")
    assert code(eff.response) == Errors.NONE
    assert results(eff) == [("n1", Errors.NONE), ("n2", Errors.NONE), ("n3", Errors.NONE)]
    assert [type(x) for x in eff.records] == [r.InstancesRegistered]
    g = h.group()
    assert (g.state, g.generation_id) == (STABLE, 1)
    assert list(h.describe_one().pending_instance_ids) == ["n1", "n2", "n3"]
    assert code(a.heartbeat().response) == Errors.NONE


def test_n_pre_registered_instances_cost_exactly_one_generation_bump():
    h = Harness()
    a, b = h.form("a", "b")
    h.add_members("g", "n1", "n2", "n3")
    mark = len(h.records)
    n1, n2, n3 = (h.member(n, static=True) for n in ("n1", "n2", "n3"))
    eff = n1.join()
    assert eff.response is None
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.group_instance_id) == (r.RebalanceCause.PRE_REGISTERED_JOINED, "n1")
    assert list(h.describe_one().pending_instance_ids) == ["n2", "n3"]
    a.join()
    b.join()
    assert h.group().state == PREPARING  # n2 and n3 are still outstanding
    n2.join()
    assert h.group().state == PREPARING
    assert list(h.describe_one().pending_instance_ids) == ["n3"]
    n3.join()
    g = h.group()
    assert (g.state, g.generation_id) == (COMPLETING, 2)
    assert len(g.members) == 5
    for m in (a, b, n1, n2, n3):
        assert m.generation == 2, m
    since = h.records[mark:]
    assert len([x for x in since if isinstance(x, r.RebalanceStarted)]) == 1
    assert len([x for x in since if isinstance(x, r.GenerationCompleted)]) == 1
    assert list(h.describe_one().pending_instance_ids) == []
    assert g.registered_instances == {}
    h.sync_all([a, b, n1, n2, n3])
    h.assert_replay()


def _waiting_for_n2() -> tuple[Harness, Client, Client, Client]:
    """A Stable group of a and b, n1 and n2 pre-registered, everyone but n2 rejoined: the join phase waits for n2."""
    h = Harness()
    a, b = h.form("a", "b", rebalance_timeout_ms=20_000, session_timeout_ms=30_000)
    h.add_members("g", "n1", "n2")
    n1 = h.member("n1", static=True, rebalance_timeout_ms=20_000)
    n1.join()
    a.join()
    b.join()
    return h, a, b, n1


def test_pre_registered_wait_is_bounded_by_the_rebalance_timeout():
    h, a, b, n1 = _waiting_for_n2()
    assert h.advance(19_999).records == []
    eff = h.advance(1)
    (gen,) = records_of(eff, r.GenerationCompleted)
    assert gen.generation_id == 2
    g = h.group()
    assert g.state == COMPLETING
    assert set(g.members) == {a.member_id, b.member_id, n1.member_id}
    assert g.registered_instances == {}  # the leftover registration is cleared
    assert list(h.describe_one().pending_instance_ids) == []
    # n2 joining later is an ordinary new member.
    h.sync_all([a, b, n1])
    n2 = h.member("n2", static=True)
    eff = n2.join()
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert rb.cause == r.RebalanceCause.MEMBER_JOINED


def test_pre_registration_of_an_absent_group_forms_it_in_one_generation():
    h = Harness()
    eff = h.add_members("g", "s1", "s2", "s3")
    assert results(eff) == [("s1", Errors.NONE), ("s2", Errors.NONE), ("s3", Errors.NONE)]
    d = h.describe_one()
    assert (code(d), d.group_state, list(d.pending_instance_ids)) == (Errors.NONE, "Empty", ["s1", "s2", "s3"])
    s1, s2, s3 = (h.member(n, static=True) for n in ("s1", "s2", "s3"))
    s1.join()
    assert h.group().state == PREPARING
    assert h.rebalances()[-1].cause == r.RebalanceCause.PRE_REGISTERED_JOINED
    s2.join()
    assert h.group().state == PREPARING
    s3.join()
    g = h.group()
    assert (g.state, g.generation_id, len(g.members)) == (COMPLETING, 1, 3)
    assert len(h.generations()) == 1
    assert g.leader_id == s1.member_id
    h.assert_replay()


def test_dynamic_members_still_need_a_member_id_while_instances_are_registered():
    h = Harness()
    h.add_members("g", "s1")
    assert code(h.join(client_id="d").response) == Errors.MEMBER_ID_REQUIRED


def test_per_instance_errors():
    h = Harness()
    _a, _s = h.form("a", static=["s1"])
    h.add_members("g", "n1")
    eff = h.add_members("g", "", "x" * 256, "s1", "n1", "dup", "dup", "ok")
    assert code(eff.response) == Errors.NONE
    assert results(eff) == [
        ("", Errors.INVALID_REQUEST),
        ("x" * 256, Errors.INVALID_REQUEST),
        ("s1", Errors.DUPLICATE_RESOURCE),
        ("n1", Errors.DUPLICATE_RESOURCE),
        ("dup", Errors.NONE),
        ("dup", Errors.DUPLICATE_RESOURCE),
        ("ok", Errors.NONE),
    ]
    (reg,) = records_of(eff, r.InstancesRegistered)
    assert reg.group_instance_ids == ("dup", "ok")
    assert list(h.group().registered_instances) == ["n1", "dup", "ok"]


def test_all_instances_rejected_writes_nothing():
    h = Harness()
    h.form("a", static=["s1"])
    eff = h.add_members("g", "s1", "")
    assert results(eff) == [("s1", Errors.DUPLICATE_RESOURCE), ("", Errors.INVALID_REQUEST)]
    assert eff.records == []


def test_registration_beyond_group_max_size():
    h = Harness(max_size=4)
    h.form("a", "b")
    h.add_members("g", "n1")
    eff = h.add_members("g", "n2", "n3")
    assert results(eff) == [("n2", Errors.NONE), ("n3", Errors.GROUP_MAX_SIZE_REACHED)]
    assert list(h.group().registered_instances) == ["n1", "n2"]


def test_empty_instance_list_is_invalid_request():
    h = Harness()
    eff = h.add_members("g")
    assert code(eff.response) == Errors.INVALID_REQUEST
    assert eff.records == []
    assert not h.has_group()


def test_invalid_group_id():
    h = Harness()
    for group_id in ("", "x" * 256):
        eff = h.add_members(group_id, "s1")
        assert code(eff.response) == Errors.INVALID_GROUP_ID
        assert eff.records == []


def test_registered_instances_in_preparing_join_without_a_second_rebalance():
    h = Harness()
    a, b = h.form("a", "b")
    a.join()  # leader rejoin: PreparingRebalance
    h.add_members("g", "n1")
    b.join()
    assert h.group().state == PREPARING  # n1 is awaited
    n1 = h.member("n1", static=True)
    eff = n1.join()
    assert records_of(eff, r.RebalanceStarted) == []
    assert h.group().state == COMPLETING
    assert n1.generation == a.generation == b.generation == 2


def test_describe_shows_instance_ids_of_members_and_of_instances_not_joined():
    h = Harness()
    _a, _s = h.form("a", static=["s1"])
    h.add_members("g", "n1", "n2")
    h.member("n1", static=True).join()
    d = h.describe_one()
    assert [m.group_instance_id for m in d.members] == ["", "s1", "n1"]
    assert list(d.pending_instance_ids) == ["n2"]


def test_empty_group_with_registrations_then_members_leave_returns_to_empty():
    h = Harness()
    h.add_members("g", "s1")
    s1 = h.member("s1", static=True)
    s1.join()
    assert h.group().state == COMPLETING
    s1.leave()
    assert (h.group().state, h.group().generation_id) == (EMPTY, 2)


def test_pre_registered_instances_form_a_new_group_in_one_generation_despite_the_initial_delay():
    h = Harness(initial_rebalance_delay_ms=3_000)
    h.add_members("g", "s1", "s2", "s3")
    s1, s2, s3 = (
        h.member(n, static=True, session_timeout_ms=60_000, rebalance_timeout_ms=30_000) for n in ("s1", "s2", "s3")
    )
    s1.join()
    h.advance(5_000)
    s2.join()
    h.advance(7_000)
    s3.join()  # t=12s, within the 30s rebalance timeout
    h.advance(30_000 - h.clock.now)  # t=30s: the join phase is over by now, the sync deadline is not
    assert len(h.generations()) == 1
    g = h.group()
    assert g.generation_id == 1
    assert set(g.members) == {s1.member_id, s2.member_id, s3.member_id}
    assert s1.generation == s2.generation == s3.generation == 1


def test_removing_a_pre_registered_instance_ends_the_wait_for_it():
    """`members remove` of an instance that never joined: without it the group sat in PreparingRebalance until the
    rebalance timeout (~30 s with the SDK's default); now the join phase completes at once."""
    h, a, b, n1 = _waiting_for_n2()
    assert h.group().state == PREPARING  # waiting for n2
    eff = h.leave("g", ("", "n2", "never came"))
    assert [(m.group_instance_id, code(m)) for m in eff.response.members] == [("n2", Errors.NONE)]
    (unregistered,) = records_of(eff, r.InstancesUnregistered)
    assert unregistered.group_instance_ids == ("n2",)
    (gen,) = records_of(eff, r.GenerationCompleted)
    assert gen.generation_id == 2 and h.group().state == COMPLETING
    assert list(h.describe_one().pending_instance_ids) == []
    again = h.leave("g", ("", "n2"))
    assert [code(m) for m in again.response.members] == [Errors.UNKNOWN_MEMBER_ID]
    h.sync_all([a, b, n1])
    h.assert_replay()


def test_removing_a_pre_registered_instance_of_an_idle_group_changes_only_the_registry():
    h = Harness()
    h.form("a")
    h.add_members("g", "n1")
    eff = h.leave("g", ("", "n1"))
    assert [type(x) for x in eff.records] == [r.InstancesUnregistered]
    assert h.group().state == STABLE and h.group().registered_instances == {}
    h.assert_replay()
