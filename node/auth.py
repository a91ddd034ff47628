"""Authorization: who is calling (a bearer token, a client certificate, or nobody) and what the ACL file lets them do.

Pure: no grpc and no I/O besides reading the ACL file once at startup, so the config layer can validate the file
before anything starts and the rules are unit-tested without a server. node/service.py asks `Acl` about each call.

The file (docs/SECURITY.md#authorization):

    admins = ["ops"]                         # may do everything, admin operations included
    [[tokens]]                               # bearer tokens, by the SHA-256 of the token, never the token itself
    identity = "team-a"
    sha256 = "<64 hex digits>"
    [[scram]]                                # SCRAM credentials for the Kafka listener's SASL (never the password)
    identity = "team-a"                      # the SCRAM user name
    mechanism = "SCRAM-SHA-256"              # or SCRAM-SHA-512
    salt = "<base64>"; stored_key = "<base64>"; server_key = "<base64>"; iterations = 8192
    [[acl]]
    identity = "team-a"                      # or "*": every caller, anonymous ones included
    group_prefixes = ["team-a."]             # or "*": every group
    operations = ["member", "describe"]      # member, offsets, describe
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupcoord.node.config import read_toml
from groupcoord.node.config_types import ConfigError

# What an ACL entry may grant on a group.
MEMBER = "member"  # JoinGroup, SyncGroup, Heartbeat, LeaveGroup of oneself, OffsetCommit as a member, OffsetFetch
OFFSETS = "offsets"  # OffsetFetch only: reading committed offsets (a lag monitor)
DESCRIBE = "describe"  # DescribeGroups, and seeing the group in ListGroups
GROUP_OPERATIONS = (MEMBER, OFFSETS, DESCRIBE)
# What a request may need besides those: any operation on the group (FindCoordinator), or an admin identity.
FIND = "find"
ADMIN = "admin"
# The label of a call refused before any group was looked at: its token is unknown or malformed.
AUTHENTICATE = "authenticate"
# A need -> the granted operations that satisfy it. Admins satisfy every need, ADMIN only them.
SATISFIED_BY: dict[str, frozenset[str]] = {
    MEMBER: frozenset({MEMBER}),
    OFFSETS: frozenset({MEMBER, OFFSETS}),
    DESCRIBE: frozenset({DESCRIBE}),
    FIND: frozenset(GROUP_OPERATIONS),
    ADMIN: frozenset(),
}
WILDCARD = "*"
TOKEN_METADATA_KEY = "authorization"
CERT_NAME_KEY = "x509_common_name"
# The identity a Kafka connection authenticated with SASL, in its requests' auth context. grpc core fills a gRPC
# call's auth context from the TLS handshake alone, so no gRPC client can put this key there.
SASL_IDENTITY_KEY = "groupcoord_sasl_identity"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


class AclError(ConfigError):
    """The ACL file is missing, not TOML, or not in the format above."""


class UnknownCredentials(Exception):
    """The call carries an `authorization` header that names no configured token: it is refused, never anonymous."""


@dataclass(frozen=True, slots=True)
class Caller:
    identity: str  # "" for an anonymous caller
    via: str  # "token", "certificate" or "anonymous"

    @property
    def name(self) -> str:
        """How logs and messages show the caller."""
        return self.identity or "anonymous"


ANONYMOUS = Caller("", "anonymous")


@dataclass(frozen=True, slots=True)
class Rule:
    identity: str
    group_prefixes: tuple[str, ...]
    operations: frozenset[str]

    def grants(self, caller: Caller, group_id: str, satisfying: frozenset[str]) -> bool:
        return (
            self.identity in (WILDCARD, caller.identity or None)
            and not self.operations.isdisjoint(satisfying)
            and any(p == WILDCARD or group_id.startswith(p) for p in self.group_prefixes)
        )


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of a SCRAM password (RFC 5802 §3): enough to check a proof, never the password."""

    identity: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class Acl:
    path: str
    admins: frozenset[str] = frozenset()
    tokens: Mapping[str, str] = field(default_factory=dict)  # SHA-256 hex digest -> identity
    rules: tuple[Rule, ...] = ()
    scram: Mapping[tuple[str, str], ScramCredential] = field(default_factory=dict)  # (mechanism, identity) ->

    def identify(
        self,
        metadata: Iterable[tuple[str, str | bytes]],
        common_names: Sequence[bytes] = (),
        sasl_identities: Sequence[bytes] = (),
    ) -> Caller:
        """The identity a Kafka connection authenticated with SASL, else a bearer token if the call has one, else
        the verified client certificate's CN, else anonymous.

        `common_names` must come from a certificate the TLS layer verified (grpc's `x509_common_name`), and
        `sasl_identities` from a SASL exchange the Kafka listener verified."""
        for name in sasl_identities:
            return Caller(name.decode("utf-8", "replace"), "sasl")
        headers = [v for k, v in metadata if k.lower() == TOKEN_METADATA_KEY]
        if headers:
            return Caller(self._token_identity(headers), "token")
        for name in common_names:
            text = name.decode("utf-8", "replace").strip()
            if text:
                return Caller(text, "certificate")
        return ANONYMOUS

    def _token_identity(self, headers: list[str | bytes]) -> str:
        if len(headers) != 1:
            raise UnknownCredentials("more than one authorization header")
        value = headers[0].decode("utf-8", "replace") if isinstance(headers[0], bytes) else headers[0]
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise UnknownCredentials("the authorization header is not 'Bearer <token>'")
        identity = self.tokens.get(hash_token(token))
        if identity is None:
            raise UnknownCredentials("unknown bearer token")
        return identity

    def is_admin(self, caller: Caller) -> bool:
        return bool(caller.identity) and caller.identity in self.admins

    def allows(self, caller: Caller, group_id: str, need: str) -> bool:
        """Whether `caller` may do what `need` stands for (a key of SATISFIED_BY) on `group_id`."""
        if self.is_admin(caller):
            return True
        satisfying = SATISFIED_BY[need]
        return any(rule.grants(caller, group_id, satisfying) for rule in self.rules)


def hash_token(token: str) -> str:
    """The digest the ACL file stores for a token: SHA-256 of its UTF-8 bytes, lowercase hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def is_self_leave(members: Sequence[Any]) -> bool:
    """A LeaveGroup of one member naming its own member id, as a member sends on close. Anything else (several
    members, or a static member named by instance id alone) removes others: an admin operation."""
    return len(members) == 1 and bool(members[0].member_id)


def group_need(rpc: str, request: Any) -> str:
    """What a one-group request needs on its group (a key of SATISFIED_BY)."""
    if rpc in ("JoinGroup", "SyncGroup", "Heartbeat"):
        return MEMBER
    if rpc == "LeaveGroup":
        return MEMBER if is_self_leave(request.members) else ADMIN
    if rpc == "OffsetCommit":
        # A commit without a member of a generation alters the offsets of a group it is not in.
        return MEMBER if request.member_id and request.generation_id >= 0 else ADMIN
    if rpc == "OffsetFetch":
        return OFFSETS
    if rpc in ("AddMembersToGroup", "OffsetDelete"):
        # OffsetDelete: Kafka asks DELETE on the group (and READ on the topics); here deleting is for admins, as
        # DeleteGroups is.
        return ADMIN
    raise ValueError(f"{rpc} is not a one-group RPC")


# -- the file -------------------------------------------------------------------------------------------------


def load_acl(path: Path) -> Acl:
    """Reads and checks the whole file; any mistake is an AclError naming the file and the key."""
    return parse_acl(read_toml(path, "acl_file", AclError), str(path))


def parse_acl(data: Mapping[str, Any], path: str) -> Acl:
    where = f"acl_file {path}"
    _known_keys(data, ("admins", "tokens", "scram", "acl"), where)
    admins = _names(data.get("admins", []), f"{where}: admins", wildcard=False)
    tokens: dict[str, str] = {}
    for i, entry in enumerate(_tables(data.get("tokens", []), f"{where}: tokens")):
        at = f"{where}: tokens[{i}]"
        _known_keys(entry, ("identity", "sha256"), at, required=True)
        identity = _name(entry["identity"], f"{at}.identity", wildcard=False)
        digest = entry["sha256"]
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise AclError(
                f"{at}.sha256: expected the 64 hex digits of a SHA-256 digest (`groupcoord token hash` prints one)"
            )
        if digest.lower() in tokens:
            raise AclError(f"{at}.sha256: the same token is listed twice")
        tokens[digest.lower()] = identity
    rules = []
    for i, entry in enumerate(_tables(data.get("acl", []), f"{where}: acl")):
        at = f"{where}: acl[{i}]"
        _known_keys(entry, ("identity", "group_prefixes", "operations"), at, required=True)
        identity = _name(entry["identity"], f"{at}.identity", wildcard=True)
        prefixes = _names(entry["group_prefixes"], f"{at}.group_prefixes", wildcard=True)
        operations = _names(entry["operations"], f"{at}.operations", wildcard=False)
        if not prefixes:
            raise AclError(f'{at}.group_prefixes: empty; use ["*"] for every group')
        if not operations:
            raise AclError(f"{at}.operations: empty; give some of {', '.join(GROUP_OPERATIONS)}")
        for op in operations:
            if op not in GROUP_OPERATIONS:
                hint = " (admin operations are granted by `admins`)" if op == ADMIN else ""
                raise AclError(f"{at}.operations: unknown {op!r}, expected {', '.join(GROUP_OPERATIONS)}{hint}")
        rules.append(Rule(identity, tuple(prefixes), frozenset(operations)))
    return Acl(path, frozenset(admins), tokens, tuple(rules), _scram(data.get("scram", []), where))


def _scram(value: object, where: str) -> dict[tuple[str, str], ScramCredential]:
    credentials: dict[tuple[str, str], ScramCredential] = {}
    keys = ("identity", "mechanism", "salt", "stored_key", "server_key", "iterations")
    for i, entry in enumerate(_tables(value, f"{where}: scram")):
        at = f"{where}: scram[{i}]"
        _known_keys(entry, keys, at, required=True)
        identity = _name(entry["identity"], f"{at}.identity", wildcard=False)
        mechanism = entry["mechanism"]
        if mechanism not in SCRAM_MECHANISMS:
            raise AclError(f"{at}.mechanism: expected one of {', '.join(SCRAM_MECHANISMS)}, got {mechanism!r}")
        iterations = entry["iterations"]
        if not isinstance(iterations, int) or isinstance(iterations, bool) or not 4096 <= iterations <= 1_000_000:
            raise AclError(f"{at}.iterations: expected an integer from 4096 to 1000000 (RFC 7677), got {iterations!r}")
        decoded = {k: _base64(entry[k], f"{at}.{k}") for k in ("salt", "stored_key", "server_key")}
        if (mechanism, identity) in credentials:
            raise AclError(f"{at}: {identity!r} has two {mechanism} credentials")
        credentials[mechanism, identity] = ScramCredential(identity, mechanism, iterations=iterations, **decoded)
    return credentials


def _base64(value: object, where: str) -> bytes:
    try:
        if not isinstance(value, str) or not value:
            raise ValueError
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise AclError(f"{where}: expected base64 (`groupcoord token scram` prints the entry)") from None


def _known_keys(table: Mapping[str, Any], known: tuple[str, ...], where: str, required: bool = False) -> None:
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise AclError(f"{where}: unknown key {key!r}{hint}; expected {', '.join(known)}")
    missing = [k for k in known if k not in table] if required else []
    if missing:
        raise AclError(f"{where}: missing {', '.join(missing)}")


def _tables(value: object, where: str) -> list[Mapping[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise AclError(f"{where}: expected an array of tables ([[...]] sections)")
    return value


def _name(value: object, where: str, wildcard: bool) -> str:
    if not isinstance(value, str) or not value.strip():
        raise AclError(f"{where}: expected a non-empty string, got {value!r}")
    if value != value.strip():
        raise AclError(f"{where}: {value!r} has leading or trailing spaces")
    if value == WILDCARD and not wildcard:
        raise AclError(f"{where}: '*' is not allowed here")
    return value


def _names(value: object, where: str, wildcard: bool) -> list[str]:
    if not isinstance(value, list):
        raise AclError(f"{where}: expected a list of strings, got {value!r}")
    return [_name(v, where, wildcard) for v in value]
