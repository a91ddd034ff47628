"""The checks of node settings that look at more than one value or at a file: each refuses a configuration that
would run unsafe or not as meant, so the node stops with one line before it binds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from groupcoord.coordinator.config import GroupConfig
from groupcoord.node.config_table import SETTINGS
from groupcoord.node.config_types import ConfigError

if TYPE_CHECKING:
    from groupcoord.node.auth import Acl

# The least a cluster secret must have (`openssl rand -hex 32` gives 64 characters of 16 kinds), and words that
# mark one copied from an example (deploy/k8s/secret.example.yaml's "REPLACE-ME-...").
MIN_SECRET_LENGTH, MIN_SECRET_DISTINCT = 16, 8
SECRET_PLACEHOLDERS = ("replace-me", "replaceme", "changeme", "change-me", "placeholder", "your-secret", "xxxxxx")


class TlsSettings(TypedDict):
    """The TLS fields of NodeSettings, typed so that `NodeSettings(**tls_settings(...))` is checked."""

    tls_cert_file: str
    tls_key_file: str
    tls_client_ca_file: str
    tls_peer_ca_file: str
    tls_client_auth: str


class AclSettings(TypedDict):
    """The ACL fields of NodeSettings, typed so that `NodeSettings(**acl_settings(...))` is checked."""

    acl_file: str
    acl: Acl | None


def check_cluster_secret(secret: str) -> None:
    """Refuses a cluster secret an attacker could guess: it is all that keeps an open Raft port from being remote
    code execution (pysyncobj unpickles what peers send), so a short, repetitive or placeholder one is an error."""
    hint = "make one with `openssl rand -hex 32`"
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"cluster_secret has {len(secret)} characters, fewer than {MIN_SECRET_LENGTH}: {hint}")
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        raise ConfigError(f"cluster_secret uses fewer than {MIN_SECRET_DISTINCT} different characters: {hint}")
    folded = secret.lower().replace("_", "-")
    placeholder = next((word for word in SECRET_PLACEHOLDERS if word in folded), None)
    if placeholder is not None:
        raise ConfigError(f"cluster_secret looks like a placeholder (it contains {placeholder!r}): {hint}")


def group_config(values: dict[str, int | str]) -> GroupConfig:
    """The group settings as one GroupConfig, checked as a whole (GroupConfig refuses what contradicts itself)."""
    lo, hi = values["group_min_session_timeout_ms"], values["group_max_session_timeout_ms"]
    if int(lo) > int(hi):
        raise ConfigError(f"group_min_session_timeout_ms ({lo}) must not exceed group_max_session_timeout_ms ({hi})")
    group_kwargs: dict[str, int | None] = {}
    for s in SETTINGS:
        if s.group_field:
            value = values[s.name]
            group_kwargs[s.group_field] = value if isinstance(value, bool) else int(value) * s.scale
    group_kwargs["max_size"] = group_kwargs["max_size"] or None
    try:
        group = GroupConfig(**group_kwargs)  # type: ignore[arg-type]  # each value has its field's type, per the table
    except ValueError as exc:
        raise ConfigError(f"group settings: {exc}") from None
    return group


def _heartbeat_ms(values: dict[str, int | str]) -> int:
    return int(values["raft_batch_period_ms"]) or int(values["raft_tick_period_ms"])


def election_timeout(values: dict[str, int | str]) -> int:
    """Checked against the leader's heartbeat period: closer than two of them, followers would stand for election
    between heartbeats."""
    election = int(values["raft_election_timeout_ms"])
    heartbeat = _heartbeat_ms(values)
    if election < 2 * heartbeat:
        raise ConfigError(
            f"raft_election_timeout_ms ({election}) must be at least twice the leader's heartbeat period "
            f"({heartbeat} ms: raft_batch_period_ms when batching, else raft_tick_period_ms)"
        )
    return election


def pre_vote_window(values: dict[str, int | str]) -> int:
    """Shorter than a heartbeat period, a healthy leader's followers would grant pre-votes between its heartbeats
    (and its lease would lapse between them); longer than half the election timeout, a follower whose timer ran
    out could find the others still refusing (and beyond the timeout, the pre-vote it grants itself would break the
    bound leases rest on)."""
    window = int(values["raft_pre_vote_window_ms"])
    heartbeat = _heartbeat_ms(values)
    election = int(values["raft_election_timeout_ms"])
    if not heartbeat <= window <= election // 2:
        raise ConfigError(
            f"raft_pre_vote_window_ms ({window}) must be at least the leader's heartbeat period ({heartbeat} ms) "
            f"and at most half raft_election_timeout_ms ({election})"
        )
    return window


def sasl_mechanisms(values: dict[str, int | str]) -> tuple[str, ...]:
    """The SASL mechanisms named, each one the Kafka listener knows, and the ACL file their credentials are in."""
    from groupcoord.node.kafka.sasl import MECHANISMS  # sasl imports the ACL, whose loading imports this module

    names = tuple(n.strip() for n in str(values["kafka_sasl_mechanisms"]).split(",") if n.strip())
    for name in names:
        if name not in MECHANISMS:
            raise ConfigError(f"kafka_sasl_mechanisms: unknown {name!r}, expected some of {', '.join(MECHANISMS)}")
    if names and not values["acl_file"]:
        raise ConfigError("kafka_sasl_mechanisms needs acl_file: the SASL credentials are its tokens and [[scram]]")
    return names


def acl_settings(values: dict[str, int | str]) -> AclSettings:
    """The ACL file is read and checked here, so a mistake in it stops the node before it binds."""
    from groupcoord.node.auth import load_acl  # auth imports node/config.py, which imports this module

    path = str(values["acl_file"])
    return AclSettings(acl_file=path, acl=load_acl(Path(path)) if path else None)


def tls_settings(values: dict[str, int | str]) -> TlsSettings:
    """The TLS settings, checked as a whole: half a configuration would silently serve plaintext."""
    names = ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "tls_peer_ca_file")
    tls = {name: str(values[name]) for name in names}
    auth = str(values["tls_client_auth"])
    if bool(tls["tls_cert_file"]) != bool(tls["tls_key_file"]):
        given, missing = (
            ("tls_cert_file", "tls_key_file") if tls["tls_cert_file"] else ("tls_key_file", "tls_cert_file")
        )
        raise ConfigError(f"{given} is set but {missing} is not: TLS needs both the certificate and its key")
    if not tls["tls_cert_file"] and (tls["tls_client_ca_file"] or tls["tls_peer_ca_file"] or auth != "none"):
        raise ConfigError(
            "tls_client_ca_file, tls_peer_ca_file and tls_client_auth need TLS: set tls_cert_file and tls_key_file"
        )
    if auth == "require" and not tls["tls_client_ca_file"]:
        raise ConfigError(
            "tls_client_auth = require needs tls_client_ca_file, the CA client certificates are checked against"
        )
    if tls["tls_client_ca_file"] and auth != "require":
        raise ConfigError(
            "tls_client_ca_file is set but tls_client_auth is not `require`: grpcio either requires a client "
            "certificate or asks for none, so set tls_client_auth = require (or drop tls_client_ca_file)"
        )
    return TlsSettings(
        tls_cert_file=tls["tls_cert_file"],
        tls_key_file=tls["tls_key_file"],
        tls_client_ca_file=tls["tls_client_ca_file"],
        tls_peer_ca_file=tls["tls_peer_ca_file"],
        tls_client_auth=auth,
    )
