"""Who a request handed on by another node is for: a header only the cluster's nodes can make.

A node that serves a client's request partly elsewhere (a Kafka CreateTopics naming topics whose partition another
node leads, node/handon.py) calls that node over gRPC. The callee must judge the request as the client's, not as
the calling node's: the header names the client's identity, signed with a key derived from the cluster secret,
which only the nodes hold — as Kafka's envelope requests (KIP-590) carry the principal from broker to controller.

A signature is good for MAX_AGE_S either side of the receiver's clock, so a header seen on a plaintext wire cannot
be replayed for long. A header that fails the check refuses the call; it is never read as anonymous.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable

from groupcoord.node.auth import Caller, UnknownCredentials

FORWARDED_METADATA_KEY = "groupcoord-forwarded-caller"
# How far the signing time may be from the receiver's clock: the clock skew the nodes may have, as Kerberos's
# default five minutes.
MAX_AGE_S = 300
_DOMAIN = b"groupcoord forwarded caller\0"


class CallerForwarding:
    """Signs and checks the header with a key of its own per cluster secret (never the secret itself)."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(_DOMAIN + secret.encode()).digest()

    def header(self, caller: Caller, now: float) -> tuple[str, str]:
        identity = base64.urlsafe_b64encode(caller.identity.encode()).decode()
        body = f"{caller.via}.{int(now)}.{identity}"
        return FORWARDED_METADATA_KEY, f"{body}.{self._mac(body)}"

    def caller(self, metadata: Iterable[tuple[str, str | bytes]], now: float) -> Caller | None:
        """The caller a valid header names; None without the header; UnknownCredentials for a bad one."""
        values = [v for k, v in metadata if k.lower() == FORWARDED_METADATA_KEY]
        if not values:
            return None
        if len(values) > 1:
            raise UnknownCredentials(f"{FORWARDED_METADATA_KEY} given {len(values)} times")
        value = values[0] if isinstance(values[0], str) else values[0].decode("ascii", "replace")
        body, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            raise UnknownCredentials(f"{FORWARDED_METADATA_KEY} is not signed with this cluster's key")
        via, signed_at, identity = body.split(".", 2)
        if abs(now - int(signed_at)) > MAX_AGE_S:
            raise UnknownCredentials(f"{FORWARDED_METADATA_KEY} is stale (signed at {signed_at}, now {int(now)})")
        try:
            name = base64.urlsafe_b64decode(identity).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise UnknownCredentials(f"{FORWARDED_METADATA_KEY} names no identity") from None
        return Caller(name, via)

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
