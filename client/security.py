"""How a client reaches a node: plaintext, TLS (a CA to check the node), mutual TLS (plus a client certificate),
and a bearer token. Every channel the SDK, Admin and the CLI open is built here.

The token is sent on every call as the metadata `authorization: Bearer <token>`; it is kept out of `repr` and of
every error message. A token over a plaintext channel is readable by anyone on the path: use it with a CA.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

ChannelOptions = Sequence[tuple[str, Any]]


class SecurityError(ValueError):
    """A CA, certificate or key file cannot be used (missing, unreadable, not PEM); says which, never its content."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """Files are PEM paths; empty means not used. A CA turns TLS on; a certificate and key add mutual TLS."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise SecurityError("a client certificate needs its key and a key its certificate: give both")
        if self.cert_file and not self.ca_file:
            raise SecurityError("a client certificate is only sent over TLS: give the CA file too")
        if not all("!" <= c <= "~" for c in self.token):
            # gRPC metadata values are printable ASCII; a space or newline would also break the header's format.
            raise SecurityError("the token must be printable ASCII without spaces")

    @property
    def tls(self) -> bool:
        return bool(self.ca_file)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The channel credentials, None for plaintext; reads the files now, so a bad one fails here."""
        if not self.tls:
            return None
        root = _read(self.ca_file, "CA file", b"-----BEGIN CERTIFICATE-----")
        key = _read(self.key_file, "key file", b"PRIVATE KEY-----") if self.key_file else None
        chain = _read(self.cert_file, "certificate file", b"-----BEGIN CERTIFICATE-----") if self.cert_file else None
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


PLAINTEXT = ClientSecurity()


def _read(path: str, what: str, marker: bytes) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    if marker not in data:
        raise SecurityError(f"{what} {path}: not PEM (no {marker.decode().strip('-')} block)")
    return data


def _with_token(details: grpc.aio.ClientCallDetails, metadata: tuple[tuple[str, str], ...]) -> Any:
    existing = tuple(details.metadata or ())
    merged = grpc.aio.Metadata(*existing, *metadata)
    return details._replace(metadata=merged)  # type: ignore[attr-defined]  # a namedtuple at run time, not in the stubs


class _Token:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def __repr__(self) -> str:
        return f"{type(self).__name__}(***)"


class _UnaryToken(_Token, grpc.aio.UnaryUnaryClientInterceptor):
    """Adds the token to every unary call of an aio channel (call credentials would refuse a plaintext one)."""

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(_with_token(client_call_details, self._metadata), request)


class _StreamToken(_Token, grpc.aio.UnaryStreamClientInterceptor):
    """The same for server-streaming calls (ReadEvents)."""

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(_with_token(client_call_details, self._metadata), request)


class _StreamUnaryToken(_Token, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(_with_token(client_call_details, self._metadata), request_iterator)


class _StreamStreamToken(_Token, grpc.aio.StreamStreamClientInterceptor):
    """Bidirectional streams (HeartbeatStream, OffsetCommitStream) too: the token is sent once, with the call's
    headers."""

    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(_with_token(client_call_details, self._metadata), request_iterator)


def _aio_interceptors(metadata: tuple[tuple[str, str], ...]) -> list[grpc.aio.ClientInterceptor] | None:
    """One per call type: grpc.aio files an interceptor under the first type it implements only."""
    if not metadata:
        return None
    return [_UnaryToken(metadata), _StreamToken(metadata), _StreamUnaryToken(metadata), _StreamStreamToken(metadata)]


class _SyncToken(
    _Token,
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """The same for a blocking channel (grpc.intercept_channel checks each call type on its own)."""

    def _details(self, details: Any) -> Any:
        return _SyncCallDetails(
            details.method, details.timeout, (*(details.metadata or ()), *self._metadata), details.credentials,
            getattr(details, "wait_for_ready", None), getattr(details, "compression", None),
        )  # fmt: skip

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details), request_iterator)


@dataclass(frozen=True)
class _SyncCallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: tuple[tuple[str, str], ...]
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


def aio_channels(
    security: ClientSecurity = PLAINTEXT, options: ChannelOptions = ()
) -> Callable[[str], grpc.aio.Channel]:
    """Opens grpc.aio channels with `security`: the files are read once, here (SecurityError if one is unusable),
    so a file that disappears later cannot fail a reconnect half-way through a retry loop."""
    credentials = security.credentials()
    interceptors = _aio_interceptors(security.metadata())

    def open_channel(address: str) -> grpc.aio.Channel:
        if credentials is None:
            return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
        return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)

    return open_channel


def aio_channel(address: str, security: ClientSecurity = PLAINTEXT, options: ChannelOptions = ()) -> grpc.aio.Channel:
    """One grpc.aio channel to `address` with `security`; raises SecurityError for an unusable file."""
    return aio_channels(security, options)(address)


def sync_channel(address: str, security: ClientSecurity = PLAINTEXT, options: ChannelOptions = ()) -> grpc.Channel:
    """A blocking channel to `address` with `security`; raises SecurityError for an unusable file."""
    credentials = security.credentials()
    if credentials is None:
        channel = grpc.insecure_channel(address, options=options)
    else:
        channel = grpc.secure_channel(address, credentials, options=options)
    if security.token:
        return grpc.intercept_channel(channel, _SyncToken(security.metadata()))
    return channel
