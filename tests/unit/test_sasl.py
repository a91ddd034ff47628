"""The Kafka listener's SASL (node/kafka/sasl.py) and its credentials in the ACL file (node/auth.py)."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramClient

from groupcoord.node.auth import AclError, hash_token, parse_acl
from groupcoord.node.kafka.sasl import (
    ILLEGAL_SASL_STATE,
    MECHANISMS,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    SaslSession,
    scram_credential,
)


def _acl(*credentials: tuple[str, str, str]) -> dict:
    scram = []
    for identity, mechanism, password in credentials:
        c = scram_credential(identity, mechanism, password, 4096)
        scram.append(
            {
                "identity": identity,
                "mechanism": mechanism,
                "iterations": c.iterations,
                **{k: base64.b64encode(getattr(c, k)).decode() for k in ("salt", "stored_key", "server_key")},
            }
        )
    return {"tokens": [{"identity": "team-a", "sha256": hash_token("tok-a")}], "scram": scram}


ACL = parse_acl(_acl(("alice", "SCRAM-SHA-256", "pw-a"), ("alice", "SCRAM-SHA-512", "pw-a5")), "acl.toml")


def _scram(session: SaslSession, mechanism: str, user: str, password: str) -> tuple[int, str | None]:
    assert session.handshake(mechanism) == 0
    client = ScramClient([mechanism], user, password)
    first = session.authenticate(client.get_client_first().encode())
    if first.error_code:
        return first.error_code, first.identity
    client.set_server_first(first.auth_bytes.decode())
    final = session.authenticate(client.get_client_final().encode())
    if final.error_code == 0:
        client.set_server_final(final.auth_bytes.decode())  # the client checks the server's signature too
    return final.error_code, final.identity


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_a_user_with_the_right_password(mechanism: str) -> None:
    session = SaslSession(ACL, MECHANISMS)
    password = "pw-a" if mechanism == "SCRAM-SHA-256" else "pw-a5"
    assert _scram(session, mechanism, "alice", password) == (0, "alice")
    assert session.authenticated and not session.failed


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("mallory", "pw-a")], ids=["wrong-password", "unknown-user"]
)
def test_a_wrong_password_and_an_unknown_user_fail_alike_at_the_proof(user: str, password: str) -> None:
    session = SaslSession(ACL, MECHANISMS)
    assert _scram(session, "SCRAM-SHA-256", user, password) == (SASL_AUTHENTICATION_FAILED, None)
    assert session.failed and not session.authenticated


def test_plain_takes_a_bearer_token_for_its_identity_only() -> None:
    ok = SaslSession(ACL, MECHANISMS)
    assert ok.handshake("PLAIN") == 0
    assert ok.authenticate(b"\0team-a\0tok-a").identity == "team-a"
    for attempt in (b"\0alice\0tok-a", b"\0team-a\0other", b"team-a\0tok-a", b"x\0team-a\0tok-a"):
        session = SaslSession(ACL, MECHANISMS)
        session.handshake("PLAIN")
        assert session.authenticate(attempt).error_code == SASL_AUTHENTICATION_FAILED, attempt


def test_the_handshake_refuses_what_is_not_enabled_and_the_order_is_kept() -> None:
    session = SaslSession(ACL, ("SCRAM-SHA-512",))
    assert session.authenticate(b"early").error_code == ILLEGAL_SASL_STATE
    assert session.handshake("PLAIN") == UNSUPPORTED_SASL_MECHANISM
    assert session.handshake("SCRAM-SHA-512") == 0
    assert session.handshake("SCRAM-SHA-512") == ILLEGAL_SASL_STATE


def test_garbage_in_the_exchange_is_a_failed_authentication() -> None:
    session = SaslSession(ACL, MECHANISMS)
    session.handshake("SCRAM-SHA-256")
    assert session.authenticate(b"\xff\xfe not scram").error_code == SASL_AUTHENTICATION_FAILED


def test_the_sasl_identity_comes_first_for_the_acl() -> None:
    caller = ACL.identify([("authorization", "Bearer tok-a")], [b"cn"], [b"alice"])
    assert (caller.identity, caller.via) == ("alice", "sasl")
    assert ACL.identify([], [b"cn"]).via == "certificate"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mechanism": "SCRAM-SHA-1"}, "mechanism: expected one of"),
        ({"iterations": 100}, "iterations: expected an integer from 4096"),
        ({"salt": "not base64!"}, "salt: expected base64"),
        ({"extra": 1}, "unknown key 'extra'"),
    ],
)
def test_a_bad_scram_entry_is_an_acl_error_naming_the_key(change: dict, message: str) -> None:
    data = _acl(("bob", "SCRAM-SHA-256", "pw"))
    data["scram"][0].update(change)
    with pytest.raises(AclError, match=message):
        parse_acl(data, "acl.toml")


def test_the_same_user_twice_for_one_mechanism_is_an_acl_error() -> None:
    with pytest.raises(AclError, match="two SCRAM-SHA-256 credentials"):
        parse_acl(_acl(("bob", "SCRAM-SHA-256", "a"), ("bob", "SCRAM-SHA-256", "b")), "acl.toml")
