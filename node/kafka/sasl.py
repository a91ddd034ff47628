"""SASL on the Kafka listener (KIP-43, KIP-152): SaslHandshake names a mechanism, SaslAuthenticate carries its
exchange, and until it succeeds a connection may send nothing else but ApiVersions. PLAIN checks the password as a
bearer token of the ACL file (the user name must be the token's identity); SCRAM-SHA-256 and SCRAM-SHA-512 check a
proof against the salted credentials of the ACL file's `[[scram]]` entries (RFC 5802, through `scramp`), so the
node never holds a SCRAM password. The identity that authenticates is the caller the ACL judges, as a token or a
certificate is on the gRPC port.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from scramp import ScramException, ScramMechanism

from groupcoord.node.auth import SCRAM_MECHANISMS, Acl, ScramCredential, hash_token

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
# Kafka's codes for a mechanism not enabled, a failed exchange, and a request before the handshake.
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
FAILED = "Authentication failed: invalid credentials"
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
# What a connection may ask before its SASL exchange has succeeded.
SASL_APIS = frozenset({SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE})


class Sasl:
    """The listener's SASL: the credentials (the ACL file) and the mechanisms it accepts."""

    def __init__(self, acl: Acl, mechanisms: tuple[str, ...]) -> None:
        self.acl = acl
        self.mechanisms = mechanisms

    def session(self) -> SaslSession:
        return SaslSession(self.acl, self.mechanisms)


async def sasl_handshake(version: int, request: Any, context: Any) -> dict[str, Any]:
    """v1 only: the exchange then travels in SaslAuthenticate (v0 would have raw SASL frames follow)."""
    session: SaslSession | None = context.connection.sasl
    if session is None:
        return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": []}
    return {"error_code": session.handshake(request.mechanism), "mechanisms": list(session.mechanisms)}


async def sasl_authenticate(version: int, request: Any, context: Any) -> dict[str, Any]:
    session: SaslSession | None = context.connection.sasl
    if session is None:
        step = Step(ILLEGAL_SASL_STATE, "this listener has no SASL", b"")
    else:
        step = session.authenticate(request.auth_bytes)
    # session_lifetime 0: no re-authentication is asked for (KIP-368).
    return {
        "error_code": step.error_code,
        "error_message": step.message,
        "auth_bytes": step.auth_bytes,
        "session_lifetime": 0,
    }


@dataclass(frozen=True, slots=True)
class Step:
    """One SaslAuthenticate's answer: an error code (0 for none), bytes for the client, and the identity once the
    exchange has succeeded."""

    error_code: int
    message: str | None
    auth_bytes: bytes
    identity: str | None = None


class SaslSession:
    """The SASL state of one connection."""

    def __init__(self, acl: Acl, enabled: tuple[str, ...]) -> None:
        self._acl = acl
        self._enabled = enabled
        self._mechanism: str | None = None
        self._scram: object | None = None
        self._user = ""
        self.identity: str | None = None
        # Why the exchange failed, once it has: the listener answers, then closes the connection.
        self.failure = ""

    @property
    def failed(self) -> bool:
        return bool(self.failure)

    @property
    def authenticated(self) -> bool:
        return self.identity is not None

    def handshake(self, mechanism: str) -> int:
        if self._mechanism is not None or self.authenticated:
            return ILLEGAL_SASL_STATE
        if mechanism not in self._enabled:
            return UNSUPPORTED_SASL_MECHANISM
        self._mechanism = mechanism
        return 0

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self._enabled

    def authenticate(self, auth_bytes: bytes) -> Step:
        if self._mechanism is None or self.authenticated:
            step = Step(ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake, or after success", b"")
        elif self._mechanism == PLAIN:
            step = self._plain(auth_bytes)
        else:
            step = self._scram_step(auth_bytes)
        if step.error_code:
            self.failure = f"{self._mechanism or 'no mechanism'}: {step.message}"
        return step

    def _plain(self, auth_bytes: bytes) -> Step:
        """RFC 4616: [authzid] NUL authcid NUL passwd."""
        parts = auth_bytes.split(b"\0")
        if len(parts) != 3:
            return Step(SASL_AUTHENTICATION_FAILED, "PLAIN: expected authzid NUL user NUL password", b"")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        identity = self._acl.tokens.get(hash_token(password))
        if identity is None or user != identity or authzid not in ("", user):
            return Step(SASL_AUTHENTICATION_FAILED, FAILED, b"")
        self.identity = identity
        return Step(0, None, b"", identity)

    def _scram_step(self, auth_bytes: bytes) -> Step:
        assert self._mechanism is not None
        try:
            text = auth_bytes.decode("utf-8")
            if self._scram is None:
                server = ScramMechanism(self._mechanism).make_server(self._lookup)
                server.set_client_first(text)
                self._scram = server
                return Step(0, None, server.get_server_first().encode())
            server = self._scram
            server.set_client_final(text)
            final = server.get_server_final().encode()
        except (ScramException, UnicodeDecodeError, ValueError):
            self._scram = None
            return Step(SASL_AUTHENTICATION_FAILED, FAILED, b"")
        credential = self._acl.scram.get((self._mechanism, self._user))
        if credential is None:  # cannot happen: an unknown user's proof never verifies
            return Step(SASL_AUTHENTICATION_FAILED, FAILED, b"")
        self.identity = credential.identity
        return Step(0, None, final, credential.identity)

    def _lookup(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's credential callback. An unknown user gets credentials nobody can prove, so that the exchange
        fails at the proof as it does for a wrong password: the answer never tells which users exist."""
        assert self._mechanism is not None
        self._user = user
        credential = self._acl.scram.get((self._mechanism, user))
        if credential is None:
            unknown = hashlib.sha256(b"groupcoord-unknown-user\0" + user.encode()).digest()
            return unknown[:16], unknown, unknown, 4096
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations


def scram_credential(identity: str, mechanism: str, password: str, iterations: int = 8192) -> ScramCredential:
    """A new SCRAM credential for `password` (`groupcoord acl scram` prints one for the ACL file)."""
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations)
    return ScramCredential(identity, mechanism, salt, stored_key, server_key, count)
