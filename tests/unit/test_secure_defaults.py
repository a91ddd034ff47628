"""The checks a node makes of how exposed it is: a guessable cluster secret is refused, and a node that listens
beyond this machine without an ACL says at start what an anonymous client may do."""

from __future__ import annotations

import argparse
import secrets

import pytest

from groupcoord.node import config
from groupcoord.node.server import open_access_warning


def _load(secret: str) -> config.NodeSettings:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return config.load(parser.parse_args([]), {"GROUPCOORD_CLUSTER_SECRET": secret})


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        ("short-secret", "has 12 characters, fewer than 16"),
        ("abababababababababab", "fewer than 8 different characters"),
        ("REPLACE-ME-with-openssl-rand-hex-32", "looks like a placeholder (it contains 'replace-me')"),
        ("please_CHANGE_ME_before_use", "looks like a placeholder (it contains 'change-me')"),
    ],
)
def test_a_guessable_cluster_secret_is_refused_with_a_hint(secret: str, why: str):
    with pytest.raises(config.ConfigError) as refused:
        _load(secret)
    assert why in str(refused.value) and "openssl rand -hex 32" in str(refused.value)
    assert secret not in str(refused.value)  # the message never repeats the secret


@pytest.mark.parametrize(
    "make",
    [lambda: secrets.token_hex(32), lambda: secrets.token_urlsafe(16), lambda: "cluster-test-secret", lambda: ""],
    ids=["hex-32", "urlsafe-16", "tests-secret", "none"],
)
def test_random_secrets_and_no_secret_are_accepted(make):
    secret = make()
    assert _load(secret).cluster_secret == secret


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.3", "::1", "[::1]", "localhost"])
def test_loopback_is_quiet(host: str):
    assert open_access_warning(host, "", tls=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "coord-1.internal"])
def test_beyond_loopback_without_an_acl_warns_what_anyone_may_do(host: str):
    warning = open_access_warning(host, "", tls=False)
    assert warning is not None and f"no acl_file while listening on {host}" in warning
    assert "commit and reset offsets" in warning and "read the traffic" in warning
    assert "read the traffic" not in (open_access_warning(host, "", tls=True) or "")
    assert open_access_warning(host, "/etc/groupcoord/acl.toml", tls=False) is None
