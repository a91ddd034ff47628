"""TLS on the client gRPC port, on the Kafka listener, and for the calls a node makes to another's client port: the
credentials built from the node's `tls_*` settings, for grpc and for asyncio.

Every file is read and parsed here, before the server binds, so a missing file, a bad PEM or a key that does not
belong to the certificate stops the node with one line (StartupError) rather than a gRPC handshake failure for
every client later. Certificates are read once: rotating them means restarting the node.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from groupcoord.base.errors import StartupError
from groupcoord.node.config_types import NodeSettings


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise StartupError(f"{setting} {path}: cannot read it ({exc.strerror})") from None


def _certificates(data: bytes, path: str, setting: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        certificates = []
    if not certificates:
        raise StartupError(f"{setting} {path}: no PEM certificate in it")
    return certificates


def server_credentials(settings: NodeSettings) -> grpc.ServerCredentials | None:
    """None when TLS is off (no certificate configured); config.py has already checked the combinations."""
    if not settings.tls_cert_file:
        return None
    chain = _read(settings.tls_cert_file, "tls_cert_file")
    leaf = _certificates(chain, settings.tls_cert_file, "tls_cert_file")[0]
    key_pem = _read(settings.tls_key_file, "tls_key_file")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        # The message says what is wrong with the file (encrypted, not PEM), never anything of its content.
        reason = "it is encrypted" if isinstance(exc, TypeError) else "not an unencrypted PEM private key"
        raise StartupError(f"tls_key_file {settings.tls_key_file}: {reason}") from None
    public = leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if (
        key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        != public
    ):
        raise StartupError(
            f"tls_key_file {settings.tls_key_file} is not the key of the certificate in {settings.tls_cert_file}"
        )
    client_ca: bytes | None = None
    if settings.tls_client_ca_file:
        client_ca = _read(settings.tls_client_ca_file, "tls_client_ca_file")
        _certificates(client_ca, settings.tls_client_ca_file, "tls_client_ca_file")
    return grpc.ssl_server_credentials(
        [(key_pem, chain)], root_certificates=client_ca, require_client_auth=settings.tls_client_auth == "require"
    )


def server_ssl_context(settings: NodeSettings) -> ssl.SSLContext | None:
    """The Kafka listener's TLS, from the same files and client-certificate rule as the gRPC port (which
    `server_credentials` has checked first). TLS 1.2 at least, as Kafka's default `ssl.enabled.protocols`."""
    if not settings.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_ca_file:
        context.load_verify_locations(settings.tls_client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if settings.tls_client_auth == "require" else ssl.CERT_OPTIONAL
    return context


def peer_credentials(settings: NodeSettings) -> grpc.ChannelCredentials | None:
    """How this node calls another node's client port (node/handon.py): TLS when its own port has it, checking the
    peer with `tls_peer_ca_file`, else `tls_client_ca_file`, else the system's CAs, and presenting its own
    certificate for peers that require one. None for plaintext."""
    if not settings.tls_cert_file:
        return None
    setting = "tls_peer_ca_file" if settings.tls_peer_ca_file else "tls_client_ca_file"
    path = settings.tls_peer_ca_file or settings.tls_client_ca_file
    roots = None
    if path:
        roots = _read(path, setting)
        _certificates(roots, path, setting)
    return grpc.ssl_channel_credentials(
        root_certificates=roots,
        private_key=_read(settings.tls_key_file, "tls_key_file"),
        certificate_chain=_read(settings.tls_cert_file, "tls_cert_file"),
    )
