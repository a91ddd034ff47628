"""The header a node hands a request on with (node/forwarding.py): only a valid, fresh signature of this cluster's
key names a caller; anything else refuses the call rather than reading as anonymous."""

from __future__ import annotations

import pytest

from groupcoord.node.auth import Caller, UnknownCredentials
from groupcoord.node.forwarding import FORWARDED_METADATA_KEY, MAX_AGE_S, CallerForwarding

NOW = 1_000_000
FORWARDING = CallerForwarding("cluster-secret")


@pytest.mark.parametrize("caller", [Caller("ops", "sasl"), Caller("CN é.x:y", "certificate"), Caller("", "anonymous")])
def test_a_signed_header_names_its_caller_within_the_allowed_clock_skew(caller):
    header = FORWARDING.header(caller, NOW)
    assert FORWARDING.caller([header], NOW + MAX_AGE_S) == caller
    assert FORWARDING.caller([header], NOW - MAX_AGE_S) == caller


def test_no_header_is_no_forwarded_caller():
    assert FORWARDING.caller([("authorization", "Bearer x")], NOW) is None


def _tampered() -> list[tuple[str, str]]:
    key, value = FORWARDING.header(Caller("alice", "sasl"), NOW)
    via, at, _, mac = value.split(".")
    return [(key, f"{via}.{at}.b3Bz.{mac}")]  # "ops" in place of "alice", the signature kept


@pytest.mark.parametrize(
    ("metadata", "now"),
    [
        (_tampered(), NOW),
        ([CallerForwarding("another-secret").header(Caller("ops", "sasl"), NOW)], NOW),
        ([FORWARDING.header(Caller("ops", "sasl"), NOW)], NOW + MAX_AGE_S + 1),
        ([FORWARDING.header(Caller("ops", "sasl"), NOW)] * 2, NOW),
        ([(FORWARDED_METADATA_KEY, "garbage")], NOW),
        ([(FORWARDED_METADATA_KEY.upper(), "token.1.b3Bz.00")], NOW),
    ],
    ids=["tampered", "another-key", "stale", "repeated", "garbage", "bad-mac"],
)
def test_a_bad_header_refuses_the_call(metadata, now):
    with pytest.raises(UnknownCredentials):
        FORWARDING.caller(metadata, now)
