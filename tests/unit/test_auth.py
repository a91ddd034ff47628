"""node/auth.py: identities (token, certificate, anonymous), ACL matching, what each request needs, and the checks
of the ACL file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.node import auth
from groupcoord.node.auth import ANONYMOUS, AclError, Caller, UnknownCredentials, hash_token, load_acl, parse_acl
from groupcoord.node.config_types import ConfigError
from groupcoord.node.logs import LogBudget
from groupcoord.protocol.v1 import groupcoord_pb2 as pb
from tests.unit.profiles import examples

TOKEN_A, TOKEN_OPS = "token-of-team-a", "token-of-ops"
ACL_TEXT = f"""
admins = ["ops"]

[[tokens]]
identity = "team-a"
sha256 = "{hash_token(TOKEN_A)}"

[[tokens]]
identity = "ops"
sha256 = "{hash_token(TOKEN_OPS).upper()}"

[[acl]]
identity = "team-a"
group_prefixes = ["team-a.", "shared."]
operations = ["member", "describe"]

[[acl]]
identity = "lag-monitor"
group_prefixes = ["*"]
operations = ["offsets"]

[[acl]]
identity = "*"
group_prefixes = ["public."]
operations = ["member"]
"""

TEAM_A = Caller("team-a", "token")
OPS = Caller("ops", "token")
MONITOR = Caller("lag-monitor", "certificate")


@pytest.fixture
def acl(tmp_path: Path) -> auth.Acl:
    path = tmp_path / "acl.toml"
    path.write_text(ACL_TEXT)
    return load_acl(path)


def bearer(token: str) -> list[tuple[str, str]]:
    return [("user-agent", "test"), ("authorization", f"Bearer {token}")]


# -- identities --------------------------------------------------------------------------------------------------


def test_a_known_token_names_its_identity_and_wins_over_a_certificate(acl):
    assert acl.identify(bearer(TOKEN_A)) == TEAM_A
    assert acl.identify(bearer(TOKEN_A), [b"lag-monitor"]) == TEAM_A
    # The file may hold a digest in upper case; the scheme is case-insensitive (RFC 6750).
    assert acl.identify([("authorization", f"bearer  {TOKEN_OPS} ")]) == OPS
    assert acl.identify([("authorization", f"Bearer {TOKEN_OPS}".encode())]) == OPS


@pytest.mark.parametrize(
    "metadata",
    [
        [("authorization", "Bearer not-a-listed-token")],
        [("authorization", "Bearer ")],
        [("authorization", f"Basic {TOKEN_A}")],
        [("authorization", TOKEN_A)],
        [("authorization", f"Bearer {TOKEN_A}"), ("authorization", f"Bearer {TOKEN_OPS}")],
    ],
)
def test_an_unknown_or_malformed_token_is_refused_not_anonymous(acl, metadata):
    with pytest.raises(UnknownCredentials) as refused:
        acl.identify(metadata, [b"team-a"])
    assert TOKEN_A not in str(refused.value) and hash_token(TOKEN_A) not in str(refused.value)


def test_without_a_token_the_certificate_names_the_caller_else_anonymous(acl):
    assert acl.identify([("user-agent", "x")], [b"lag-monitor"]) == MONITOR
    assert acl.identify([], [b"  "]) == ANONYMOUS
    assert acl.identify([]) == ANONYMOUS
    assert ANONYMOUS.name == "anonymous" and TEAM_A.name == "team-a"


# -- matching ----------------------------------------------------------------------------------------------------


def test_group_prefixes_and_operations(acl):
    assert acl.allows(TEAM_A, "team-a.orders", auth.MEMBER)
    assert acl.allows(TEAM_A, "shared.x", auth.DESCRIBE)
    assert not acl.allows(TEAM_A, "team-b.orders", auth.MEMBER)
    assert not acl.allows(TEAM_A, "team-a", auth.MEMBER)  # "team-a." is a prefix, not a name
    # `member` lets a member read its offsets; `offsets` alone allows only that.
    assert acl.allows(TEAM_A, "team-a.orders", auth.OFFSETS)
    assert acl.allows(MONITOR, "team-b.orders", auth.OFFSETS)
    assert not acl.allows(MONITOR, "team-b.orders", auth.MEMBER)
    assert not acl.allows(MONITOR, "team-b.orders", auth.DESCRIBE)
    # FindCoordinator needs any operation on the group.
    assert acl.allows(MONITOR, "anything", auth.FIND)
    assert not acl.allows(TEAM_A, "team-b.orders", auth.FIND)


def test_the_wildcard_identity_covers_everyone_including_anonymous(acl):
    for caller in (ANONYMOUS, TEAM_A, Caller("someone-else", "certificate")):
        assert acl.allows(caller, "public.chat", auth.MEMBER)
        assert not acl.allows(caller, "public.chat", auth.DESCRIBE)
    assert not acl.allows(ANONYMOUS, "team-a.orders", auth.FIND)


def test_admin_operations_need_an_admin_who_may_do_everything(acl):
    assert not acl.allows(TEAM_A, "team-a.orders", auth.ADMIN)
    assert not acl.allows(ANONYMOUS, "public.chat", auth.ADMIN)
    for need in auth.SATISFIED_BY:
        assert acl.allows(OPS, "any.group", need)
    assert acl.is_admin(OPS) and not acl.is_admin(TEAM_A) and not acl.is_admin(ANONYMOUS)
    # A certificate with an admin's name is that admin: identities are one namespace.
    assert acl.is_admin(Caller("ops", "certificate"))


def test_an_empty_acl_allows_nobody_anything():
    empty = parse_acl({}, "empty.toml")
    assert not empty.allows(ANONYMOUS, "g", auth.FIND)
    assert not empty.allows(TEAM_A, "g", auth.MEMBER)


# -- what a request needs ----------------------------------------------------------------------------------------


def leave(*members: tuple[str, str]) -> pb.LeaveGroupRequest:
    return pb.LeaveGroupRequest(
        group_id="g",
        members=[pb.LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members],
    )


@pytest.mark.parametrize(
    ("rpc", "request_", "need"),
    [
        ("JoinGroup", pb.JoinGroupRequest(group_id="g"), auth.MEMBER),
        ("SyncGroup", pb.SyncGroupRequest(group_id="g"), auth.MEMBER),
        ("Heartbeat", pb.HeartbeatRequest(group_id="g"), auth.MEMBER),
        ("LeaveGroup", leave(("m1", "")), auth.MEMBER),
        ("LeaveGroup", leave(("m1", "static-1")), auth.MEMBER),
        ("LeaveGroup", leave(("", "static-1")), auth.ADMIN),
        ("LeaveGroup", leave(("m1", ""), ("m2", "")), auth.ADMIN),
        ("LeaveGroup", leave(), auth.ADMIN),
        ("OffsetCommit", pb.OffsetCommitRequest(group_id="g", member_id="m1", generation_id=3), auth.MEMBER),
        ("OffsetCommit", pb.OffsetCommitRequest(group_id="g", member_id="m1", generation_id=0), auth.MEMBER),
        ("OffsetCommit", pb.OffsetCommitRequest(group_id="g", generation_id=-1), auth.ADMIN),
        ("OffsetCommit", pb.OffsetCommitRequest(group_id="g", member_id="m1", generation_id=-1), auth.ADMIN),
        ("OffsetCommit", pb.OffsetCommitRequest(group_id="g", generation_id=3), auth.ADMIN),
        ("OffsetFetch", pb.OffsetFetchRequest(group_id="g"), auth.OFFSETS),
        ("AddMembersToGroup", pb.AddMembersToGroupRequest(group_id="g"), auth.ADMIN),
        ("OffsetDelete", pb.OffsetDeleteRequest(group_id="g"), auth.ADMIN),
    ],
)
def test_group_need(rpc, request_, need):
    assert auth.group_need(rpc, request_) == need


def test_group_need_refuses_an_rpc_that_is_not_about_one_group():
    with pytest.raises(ValueError, match="DescribeGroups"):
        auth.group_need("DescribeGroups", pb.DescribeGroupsRequest())


# -- the file ----------------------------------------------------------------------------------------------------

DIGEST = hash_token("t")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("admins = [", "not valid TOML"),
        ('admin = ["ops"]', "unknown key 'admin' (did you mean 'admins'?)"),
        ('admins = "ops"', "admins: expected a list of strings"),
        ("admins = [1]", "admins: expected a non-empty string, got 1"),
        ('admins = ["*"]', "admins: '*' is not allowed here"),
        ('admins = [" ops"]', "has leading or trailing spaces"),
        ('tokens = ["x"]', "tokens: expected an array of tables"),
        ('[[tokens]]\nidentity = "a"', "tokens[0]: missing sha256"),
        (f'[[tokens]]\nidentity = "a"\nsha256 = "{DIGEST}"\ntoken = "t"', "tokens[0]: unknown key 'token'"),
        ('[[tokens]]\nidentity = "a"\nsha256 = "abc"', "tokens[0].sha256: expected the 64 hex digits"),
        (f'[[tokens]]\nidentity = "a"\nsha256 = "{DIGEST[:-1]}g"', "tokens[0].sha256: expected the 64 hex digits"),
        (f'[[tokens]]\nidentity = "*"\nsha256 = "{DIGEST}"', "tokens[0].identity: '*' is not allowed here"),
        (
            f'[[tokens]]\nidentity = "a"\nsha256 = "{DIGEST}"\n[[tokens]]\nidentity = "b"\nsha256 = "{DIGEST.upper()}"',
            "tokens[1].sha256: the same token is listed twice",
        ),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = ["x."]', "acl[0]: missing operations"),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = ["x."]\noperations = ["admin"]', "granted by `admins`"),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = ["x."]\noperations = ["read"]', "unknown 'read', expected member"),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = ["x."]\noperations = []', "acl[0].operations: empty"),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = []\noperations = ["member"]', 'use ["*"] for every group'),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = [""]\noperations = ["member"]', "expected a non-empty string"),
        ('[[acl]]\nidentity = "a"\ngroup_prefixes = "x."\noperations = ["member"]', "expected a list of strings"),
        ('[[acl]]\nidentity = ""\ngroup_prefixes = ["x."]\noperations = ["member"]', "acl[0].identity: expected a"),
        (
            '[[acl]]\nidentity = "a"\ngroups = ["x."]\noperations = ["member"]',
            "acl[0]: unknown key 'groups' (did you mean 'group_prefixes'?)",
        ),
    ],
)
def test_a_bad_file_is_a_config_error_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "acl.toml"
    path.write_text(text)
    with pytest.raises(AclError) as error:
        load_acl(path)
    assert isinstance(error.value, ConfigError)
    assert str(error.value).startswith(f"acl_file {path}: ")
    assert message in str(error.value)


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(AclError, match=r"acl_file .*missing\.toml: No such file"):
        load_acl(tmp_path / "missing.toml")


def test_the_node_settings_load_the_acl_file(tmp_path):
    from argparse import Namespace

    from groupcoord.node.config import load
    from groupcoord.node.config_table import SETTINGS

    path = tmp_path / "acl.toml"
    path.write_text(ACL_TEXT)
    blank = Namespace(config=None, **{s.name: None for s in SETTINGS})
    assert load(blank, {}).acl is None
    settings = load(blank, {"GROUPCOORD_ACL_FILE": str(path)})
    assert settings.acl_file == str(path) and settings.acl is not None and settings.acl.is_admin(OPS)
    path.write_text("admins = 3")
    with pytest.raises(ConfigError, match="admins: expected a list"):
        load(blank, {"GROUPCOORD_ACL_FILE": str(path)})


def test_token_hash_reads_the_token_on_stdin(monkeypatch, capsys):
    import io

    from groupcoord.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert main(["token", "hash"]) == 0
    assert capsys.readouterr().out == hash_token("s3cret") + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["token", "hash"]) == 2
    assert "no token given on stdin" in capsys.readouterr().err


def test_the_refusal_log_budget_drops_lines_beyond_its_rate_and_says_how_many():
    budget = LogBudget(per_second=2)
    assert [budget.take(10.0), budget.take(10.1), budget.take(10.2), budget.take(10.9)] == [0, 0, None, None]
    assert budget.take(11.0) == 2  # a new second: logged, with the two left out before it
    assert budget.take(11.1) == 0
    assert budget.take(11.2) is None


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["authorization", "Authorization", "x-other"]), st.text() | st.binary())),
    st.lists(st.binary(max_size=80), max_size=2),
)
def test_identify_never_fails_on_hostile_metadata_but_with_unknown_credentials(metadata, names):
    acl = parse_acl({"tokens": [{"identity": "team-a", "sha256": hash_token(TOKEN_A)}]}, "acl.toml")
    try:
        caller = acl.identify(metadata, names)
    except UnknownCredentials as refused:
        # One of three fixed messages: nothing the caller sent is echoed.
        assert str(refused) in (
            "more than one authorization header",
            "the authorization header is not 'Bearer <token>'",
            "unknown bearer token",
        )
    else:
        assert caller.via in ("certificate", "anonymous") or caller.identity == "team-a"
