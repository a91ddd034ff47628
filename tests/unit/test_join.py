"""JoinGroup (docs/PROTOCOL.md): state transitions and the JoinGroup column of the per-state table, the join flow,
request validation and the validation order, protocol vote and leader choice."""

from __future__ import annotations

import pytest

from groupcoord.coordinator import GroupCoordinator, GroupStore
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from tests.support import SeqIds
from tests.unit.harness import (
    COMPLETING,
    DEFAULT_PROTOCOLS,
    EMPTY,
    PREPARING,
    STABLE,
    Harness,
    code,
    records_of,
)

# -- state transitions ------------------------------------------------------------------------------


def test_new_group_starts_empty_at_generation_zero():
    h = Harness()
    h.join(client_id="c")
    g = h.group()
    assert (g.state, g.generation_id, g.members) == (EMPTY, 0, {})


def test_empty_to_preparing_when_a_member_is_added():
    h = Harness(initial_rebalance_delay_ms=3_000)
    s = h.member("s1", static=True)
    eff = s.join()
    assert eff.response is None  # parked for the join phase
    assert h.group().state == PREPARING
    assert [type(rec) for rec in eff.records] == [r.MemberAdded, r.RebalanceStarted]
    assert eff.records[1].cause == r.RebalanceCause.MEMBER_JOINED


def test_preparing_to_completing_answers_every_parked_join():
    h = Harness()
    a, b, c = h.member("a"), h.member("b"), h.member("c")
    for m in (a, b, c):
        assert code(m.join().response) == Errors.MEMBER_ID_REQUIRED
    assert a.join().response is None
    assert b.join().response is None
    eff = c.join()
    g = h.group()
    assert g.state == COMPLETING
    assert g.generation_id == 1
    assert records_of(eff, r.GenerationCompleted) == [
        r.GenerationCompleted("g", 1, "range", a.member_id, h.clock.wall_ms())
    ]
    replies = dict(eff.replies)
    assert set(replies) == {a.join_token, b.join_token, c.join_token}
    for m in (a, b, c):
        resp = replies[m.join_token]
        assert code(resp) == Errors.NONE
        assert (resp.generation_id, resp.protocol_type, resp.protocol_name) == (1, "consumer", "range")
        assert resp.leader == a.member_id
        assert resp.member_id == m.member_id
        assert not resp.skip_assignment
    # The leader (the first member added) gets every member with the chosen protocol's metadata.
    leader_resp = replies[a.join_token]
    assert [(x.member_id, x.metadata) for x in leader_resp.members] == [
        (a.member_id, b"range-meta"),
        (b.member_id, b"range-meta"),
        (c.member_id, b"range-meta"),
    ]
    assert not replies[b.join_token].members
    assert not replies[c.join_token].members
    h.assert_replay()


def test_preparing_to_empty_when_join_phase_completes_without_members():
    h = Harness()
    (a,) = h.form("a")
    assert h.group().generation_id == 1
    eff = a.leave()
    g = h.group()
    assert (g.state, g.generation_id, g.members, g.leader_id, g.protocol_name) == (EMPTY, 2, {}, "", "")
    assert [type(rec) for rec in eff.records] == [r.MemberRemoved, r.RebalanceStarted, r.GenerationCompleted]
    assert eff.records[-1].generation_id == 2
    h.assert_replay()


def test_new_member_ids_are_client_id_dash_uuid_for_dynamic_and_instance_id_dash_uuid_for_static():
    h = Harness()
    resp = h.join(client_id="my-client").response
    assert (code(resp), resp.member_id) == (Errors.MEMBER_ID_REQUIRED, "my-client-u1")
    s = h.member("inst-7", group_id="other", static=True)
    s.join()
    assert s.member_id == "inst-7-u2"
    assert h.group("other").static_members == {"inst-7": "inst-7-u2"}


# -- per-state table, JoinGroup column ---------------------------------------------------------------


def test_empty_group_join_with_member_id_is_unknown_member():
    h = Harness()
    a, b = h.form("a", "b")
    a.leave()
    b.leave()
    assert h.group().state == EMPTY
    eff = a.join()
    assert code(eff.response) == Errors.UNKNOWN_MEMBER_ID
    assert eff.records == []
    assert h.group().state == EMPTY


def test_join_with_member_id_to_absent_group_is_unknown_member_and_creates_nothing():
    h = Harness()
    eff = h.join(member_id="ghost-1")
    assert code(eff.response) == Errors.UNKNOWN_MEMBER_ID
    assert eff.records == []
    assert not h.has_group()


def test_preparing_known_member_join_parks_until_join_phase_completes():
    h = Harness()
    a, b = h.form("a", "b")
    assert a.join().response is None  # leader rejoin: rebalance
    assert h.group().state == PREPARING
    eff = b.join()
    assert eff.response is not None
    assert code(eff.response) == Errors.NONE
    assert code(a.join_reply()) == Errors.NONE
    assert a.generation == b.generation == 2
    assert h.group().state == COMPLETING


def test_completing_same_protocols_gets_immediate_answer_for_current_generation():
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    eff = b.join()
    resp = eff.response
    assert code(resp) == Errors.NONE
    assert (resp.generation_id, resp.leader, resp.member_id, resp.protocol_name) == (
        1,
        a.member_id,
        b.member_id,
        "range",
    )
    assert not resp.members
    assert eff.records == []
    assert h.group().state == COMPLETING


def test_completing_leader_that_lost_its_response_gets_members_again():
    """The join flow: the 'member already joined but lost the response' case answers the current generation."""
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    resp = a.join().response
    assert code(resp) == Errors.NONE
    assert resp.generation_id == 1 and resp.leader == a.member_id
    assert [m.member_id for m in resp.members] == [a.member_id, b.member_id]
    assert h.group().state == COMPLETING
    # ... and the retried generation can complete normally.
    a.sync({a.member_id: b"x", b.member_id: b"y"})
    assert h.group().state == STABLE


def test_completing_retry_after_failover_answers_current_generation():
    """A new coordinator restored from the snapshot answers a retried JoinGroup with the current generation."""
    h = Harness()
    a, b = h.form("a", "b", sync=False)
    store = GroupStore.restore(h.core.store.snapshot())
    core = GroupCoordinator(h.config, h.clock, new_uuid=SeqIds(), store=store)
    h.core = core
    resp = b.join().response
    assert code(resp) == Errors.NONE
    assert (resp.generation_id, resp.leader) == (1, a.member_id)


def test_completing_changed_protocols_rebalance():
    h = Harness()
    _a, b = h.form("a", "b", sync=False)
    eff = b.join(protocols=(("roundrobin", b"rr2"), ("range", b"r2")))
    assert eff.response is None
    assert h.group().state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.PROTOCOL_CHANGED, b.member_id)


def test_stable_leader_rejoin_rebalances():
    h = Harness()
    a, _b = h.form("a", "b")
    eff = a.join()
    assert eff.response is None
    assert h.group().state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.LEADER_REJOINED, a.member_id)


def test_stable_follower_unchanged_gets_immediate_answer_without_rebalance():
    h = Harness()
    a, b = h.form("a", "b")
    eff = b.join()
    resp = eff.response
    assert code(resp) == Errors.NONE
    assert (resp.generation_id, resp.leader, resp.member_id, resp.skip_assignment) == (
        1,
        a.member_id,
        b.member_id,
        False,
    )
    assert not resp.members
    # No rebalance: only the marker that makes the avoided one visible as an event.
    assert [(type(x), x.cause) for x in eff.records] == [(r.RebalanceAvoided, r.AvoidedCause.KNOWN_MEMBER)]
    assert h.group().state == STABLE
    # The assignment is untouched.
    assert b.sync().response.assignment == b"assign-b"


def test_stable_follower_changed_protocols_rebalance():
    h = Harness()
    a, b = h.form("a", "b")
    eff = b.join(protocols=(("range", b"new-meta"),))
    assert eff.response is None
    assert h.group().state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.PROTOCOL_CHANGED, b.member_id)
    a.join()
    assert code(b.join_reply()) == Errors.NONE
    assert a.last_join.members[1].metadata == b"new-meta"


def test_stable_new_member_rebalances():
    h = Harness()
    a, b = h.form("a", "b")
    c = h.member("c")
    eff = c.join()
    assert code(eff.response) == Errors.MEMBER_ID_REQUIRED
    assert h.group().state == STABLE  # a MEMBER_ID_REQUIRED round trip changes nothing else
    eff = c.join()
    assert eff.response is None
    assert h.group().state == PREPARING
    (rb,) = records_of(eff, r.RebalanceStarted)
    assert (rb.cause, rb.member_id) == (r.RebalanceCause.MEMBER_JOINED, c.member_id)
    a.join()
    b.join()
    assert h.group().generation_id == 2
    assert {m.generation for m in (a, b, c)} == {2}
    h.assert_replay()


def test_second_join_of_a_parked_member_replaces_the_first():
    h = Harness()
    a, b = h.form("a", "b")
    a.join()
    first = a.join_token
    eff = a.join()
    assert code(eff.reply_for(first)) == Errors.REBALANCE_IN_PROGRESS
    assert eff.response is None
    b.join()
    assert code(a.join_reply()) == Errors.NONE
    assert a.generation == 2


# -- protocol vote and leader ---------------------------------------------------------------------


def test_protocol_vote_most_votes_wins():
    h = Harness()
    a = h.member("a", protocols=(("range", b"a-r"), ("roundrobin", b"a-rr")))
    b = h.member("b", protocols=(("roundrobin", b"b-rr"), ("range", b"b-r")))
    c = h.member("c", protocols=(("roundrobin", b"c-rr"), ("range", b"c-r")))
    for m in (a, b, c):
        m.join()
    for m in (a, b, c):
        m.join()
    assert h.group().protocol_name == "roundrobin"
    assert {m.last_join.protocol_name for m in (a, b, c)} == {"roundrobin"}
    assert [x.metadata for x in a.last_join.members] == [b"a-rr", b"b-rr", b"c-rr"]


def test_protocol_vote_only_counts_protocols_every_member_supports():
    h = Harness()
    a = h.member("a", protocols=(("sticky", b"a-s"), ("range", b"a-r")))
    b = h.member("b", protocols=(("range", b"b-r"),))
    for m in (a, b):
        m.join()
    for m in (a, b):
        m.join()
    assert h.group().protocol_name == "range"


def test_leader_is_replaced_by_a_remaining_member_when_it_leaves():
    h = Harness()
    a, b, c = h.form("a", "b", "c")
    a.leave()
    b.join()
    c.join()
    g = h.group()
    assert g.state == COMPLETING
    assert g.leader_id in {b.member_id, c.member_id}
    leader = b if g.leader_id == b.member_id else c
    assert [m.member_id for m in leader.last_join.members] == [b.member_id, c.member_id]
    assert b.last_join.leader == c.last_join.leader == g.leader_id


# -- INCONSISTENT_GROUP_PROTOCOL ----------------------------------------------------------------------


def test_new_member_with_other_protocol_type_is_inconsistent():
    h = Harness()
    h.form("a")
    eff = h.join(protocol_type="connect")
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []
    eff = h.join(instance_id="s1", protocol_type="connect")
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []


def test_new_member_without_a_common_protocol_is_inconsistent():
    h = Harness()
    h.form("a", "b")
    eff = h.join(protocols=(("sticky", b""),))
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []
    eff = h.join(instance_id="s1", protocols=(("sticky", b""),))
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []
    assert h.group().state == STABLE


def test_known_member_rejoining_with_protocols_others_do_not_support_is_inconsistent():
    h = Harness()
    _a, b = h.form("a", "b")
    eff = b.join(protocols=(("sticky", b""),))
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []
    assert h.group().state == STABLE
    assert b.member_id in h.group().members


def test_pending_member_joining_with_unsupported_protocols_is_inconsistent():
    h = Harness()
    h.form("a")
    c = h.member("c")
    c.join()
    eff = c.join(protocols=(("sticky", b""),))
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert c.member_id not in h.group().members


@pytest.mark.parametrize("protocol_type, protocols", [("", DEFAULT_PROTOCOLS), ("consumer", ())])
def test_empty_protocol_type_or_no_protocols_is_inconsistent(protocol_type, protocols):
    h = Harness()
    eff = h.join(protocol_type=protocol_type, protocols=protocols)
    assert code(eff.response) == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert eff.records == []
    assert not h.has_group()


# -- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("group_id", ["", "g" * 256])
@pytest.mark.parametrize("instance_id", ["", "s1"])
def test_invalid_group_id(group_id, instance_id):
    h = Harness()
    eff = h.join(group_id=group_id, instance_id=instance_id)
    assert code(eff.response) == Errors.INVALID_GROUP_ID
    assert eff.records == []
    assert h.core.store.groups == {}


def test_longest_group_id_is_accepted():
    h = Harness()
    eff = h.join(group_id="g" * 255)
    assert code(eff.response) == Errors.MEMBER_ID_REQUIRED


@pytest.mark.parametrize("session_timeout_ms", [5_999, 1_800_001, 0, -1])
def test_session_timeout_outside_bounds_is_rejected_before_the_group_is_created(session_timeout_ms):
    h = Harness()
    eff = h.join(session_timeout_ms=session_timeout_ms)
    assert code(eff.response) == Errors.INVALID_SESSION_TIMEOUT
    assert eff.records == []
    assert not h.has_group()
    eff = h.join(session_timeout_ms=session_timeout_ms, instance_id="s1")
    assert code(eff.response) == Errors.INVALID_SESSION_TIMEOUT
    assert not h.has_group()


@pytest.mark.parametrize("session_timeout_ms", [6_000, 1_800_000])
def test_session_timeout_bounds_are_inclusive(session_timeout_ms):
    h = Harness()
    eff = h.join(session_timeout_ms=session_timeout_ms)
    assert code(eff.response) == Errors.MEMBER_ID_REQUIRED


def test_session_timeout_bounds_come_from_config():
    h = Harness(min_session_timeout_ms=1_000, max_session_timeout_ms=2_000)
    assert code(h.join(session_timeout_ms=2_001).response) == Errors.INVALID_SESSION_TIMEOUT
    assert code(h.join(session_timeout_ms=999).response) == Errors.INVALID_SESSION_TIMEOUT
    assert code(h.join(session_timeout_ms=1_500).response) == Errors.MEMBER_ID_REQUIRED


def test_session_timeout_of_a_known_member_is_checked_before_identity():
    h = Harness()
    _a, b = h.form("a", "b")
    eff = b.join(session_timeout_ms=1)
    assert code(eff.response) == Errors.INVALID_SESSION_TIMEOUT
    eff = h.join(member_id="nobody", session_timeout_ms=1)
    assert code(eff.response) == Errors.INVALID_SESSION_TIMEOUT


def test_group_id_is_checked_before_session_timeout():
    h = Harness()
    assert code(h.join(group_id="", session_timeout_ms=1).response) == Errors.INVALID_GROUP_ID


INVALID_REQUESTS = {
    "negative rebalance timeout": {"rebalance_timeout_ms": -1},
    "unknown join_reason": {"join_reason": 99},
    "duplicate protocol names": {"protocols": (("range", b"1"), ("range", b"2"))},
    "metadata too large": {"protocols": (("range", b"x" * 600), ("roundrobin", b"y" * 600))},
    "too many protocols": {"protocols": tuple((f"p{i}", b"") for i in range(5))},
}


@pytest.mark.parametrize("fields", INVALID_REQUESTS.values(), ids=INVALID_REQUESTS.keys())
@pytest.mark.parametrize("instance_id", ["", "s1"])
def test_invalid_join_requests(fields, instance_id):
    h = Harness(max_member_metadata_bytes=1_000, max_protocols=4)
    eff = h.join(instance_id=instance_id, **fields)
    assert code(eff.response) == Errors.INVALID_REQUEST
    assert eff.records == []
    assert not h.has_group()


def test_invalid_request_for_a_known_member_changes_nothing():
    h = Harness()
    _a, b = h.form("a", "b")
    eff = b.join(join_reason=99)
    assert code(eff.response) == Errors.INVALID_REQUEST
    assert eff.records == []
    assert h.group().state == STABLE


def test_join_with_unknown_member_id_on_existing_group():
    h = Harness()
    h.form("a", "b")
    eff = h.join(member_id="stranger-1")
    assert code(eff.response) == Errors.UNKNOWN_MEMBER_ID
    assert eff.records == []
    assert h.group().state == STABLE


def test_rebalance_timeout_zero_means_session_timeout():
    h = Harness()
    (a,) = h.form("a", session_timeout_ms=7_000)
    assert h.group().members[a.member_id].rebalance_timeout_ms == 7_000


def test_the_client_software_a_member_names_is_kept_and_described_and_an_overlong_one_is_cut():
    h = Harness()
    for name, software in (("kafka", "librdkafka"), ("long", "x" * 300)):
        req = h.join_req(group_id=name, instance_id=name)
        req.client_software_name, req.client_software_version = software, "2.16.0"
        h.call("join_group", req)
    kafka = h.describe_one("kafka").members[0]
    assert (kafka.client_software_name, kafka.client_software_version) == ("librdkafka", "2.16.0")
    assert h.describe_one("long").members[0].client_software_name == "x" * 255


def test_a_member_without_client_software_is_snapshotted_as_before_the_fields_existed():
    """Older nodes write members without the fields: the same store must give them the same snapshot (digest)."""
    h = Harness()
    h.join(instance_id="plain")
    req = h.join_req(group_id="named", instance_id="named")
    req.client_software_name = "librdkafka"
    h.call("join_group", req)
    by_group = {g["group_id"]: g["members"][0] for g in h.core.store.snapshot()["groups"]}
    assert "client_software_name" not in by_group["g"]
    assert by_group["named"]["client_software_name"] == "librdkafka"
    assert GroupStore.restore(h.core.store.snapshot()).snapshot() == h.core.store.snapshot()
