"""A development certificate authority: the CA, one server certificate per node and one client certificate per
identity, for the local cluster and the compose deployment (docs/SECURITY.md#tls).

Keys are ECDSA P-256, written mode 0600. Node i's certificate names every address a client may use for it: the
local cluster's 127.0.0.i, the compose service `node<i>`, `localhost` and 127.0.0.1 (published ports, the container
health check), plus any extra host given. A client certificate's subject CN is its identity (`admin`, `team-a`),
which is what the server's authorization reads. Not a production PKI: no revocation, no intermediate CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from groupcoord.base.errors import UserError

CA_FILE, CA_KEY_FILE, ACL_FILE = "ca.pem", "ca-key.pem", "acl.toml"
CA_DAYS = 3650
DEFAULT_DAYS = 825  # the longest leaf validity browsers and most TLS stacks accept
DEFAULT_CLIENTS = ("admin",)
ORGANIZATION = "groupcoord development CA"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CLOCK_SKEW = datetime.timedelta(minutes=5)


def node_cert(directory: Path, node_id: int) -> tuple[Path, Path]:
    """(certificate, key) of node `node_id` in a directory `init` wrote."""
    return directory / f"node-{node_id}.pem", directory / f"node-{node_id}-key.pem"


def client_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """(certificate, key) of client identity `name` in a directory `init` wrote."""
    return directory / f"{name}.pem", directory / f"{name}-key.pem"


@dataclass(frozen=True, slots=True)
class Issued:
    """What `init` wrote, for the command to list."""

    ca: Path
    nodes: tuple[Path, ...]
    clients: tuple[Path, ...]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """Created 0600 from the start (never world-readable for a moment); replaces a file that is there."""
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """A CA signs certificates only; a leaf signs TLS handshakes only (ECDSA: digitalSignature)."""
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    usages: list[x509.ObjectIdentifier],
    hosts: list[str],
    days: int,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = (
        _builder(_name(common_name), ca_cert.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _ca(days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = _name(ORGANIZATION)
    cert = (
        _builder(name, name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def node_hosts(node_id: int, extra: list[str]) -> list[str]:
    """Every name node `node_id` is reached by: local cluster, compose service, loopback, and the extra ones."""
    hosts = [f"127.0.0.{node_id}", f"node{node_id}", "localhost", "127.0.0.1", *extra]
    return list(dict.fromkeys(hosts))


def check_names(clients: list[str], hosts: list[str]) -> None:
    """Client names become file names and subject CNs; hosts become SANs."""
    for name in clients:
        if not _NAME.match(name) or name in ("ca", "ca-key") or re.match(r"^node-\d+$", name):
            raise UserError(
                f"client name {name!r}: use letters, digits, '.', '_' or '-' (not 'ca' or 'node-N', which are "
                "taken by the CA and node files)"
            )
    if len(set(clients)) != len(clients):
        raise UserError("a client name is given twice")
    for host in hosts:
        if not host or any(c.isspace() for c in host) or "," in host:
            raise UserError(f"--hosts: {host!r} is not a host name or IP address")


def init(
    directory: Path,
    nodes: int,
    clients: list[str],
    hosts: list[str] | None = None,
    days: int = DEFAULT_DAYS,
    force: bool = False,
    ca_key_file: Path | None = None,
) -> Issued:
    """Writes a new CA and the node and client certificates it signs into `directory` (created 0700).

    Refuses when the directory already holds a CA, unless `force`: replacing a CA silently would lock every
    client that trusts the old one out. `ca_key_file` puts the CA's key elsewhere (default: `directory`), so that
    a directory handed to the nodes whole never holds it.
    """
    ca_key_path = ca_key_file or directory / CA_KEY_FILE
    extra = list(hosts or [])
    if not 1 <= nodes <= 254:
        raise UserError(f"--nodes must be between 1 and 254, got {nodes}")
    if not 1 <= days <= CA_DAYS:
        raise UserError(f"--days must be between 1 and {CA_DAYS}, got {days}")
    check_names(clients, extra)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{directory} is not a directory")
    if not force and ((directory / CA_FILE).exists() or ca_key_path.exists()):
        raise UserError(f"{directory} already holds a CA ({CA_FILE}); --force replaces it and every certificate")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_cert, ca_key = _ca(CA_DAYS)
    _write_key(ca_key_path, ca_key)
    _write_cert(directory / CA_FILE, ca_cert)
    node_files = []
    for node_id in range(1, nodes + 1):
        cert, key = _leaf(
            ca_key,
            ca_cert,
            f"node-{node_id}",
            # clientAuth too: a node's own health check (the container's) connects with the node's certificate.
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
            node_hosts(node_id, extra),
            days,
        )
        cert_path, key_path = node_cert(directory, node_id)
        _write_key(key_path, key)
        _write_cert(cert_path, cert)
        node_files.append(cert_path)
    client_files = []
    for name in clients:
        cert, key = _leaf(ca_key, ca_cert, name, [ExtendedKeyUsageOID.CLIENT_AUTH], [], days)
        cert_path, key_path = client_cert(directory, name)
        _write_key(key_path, key)
        _write_cert(cert_path, cert)
        client_files.append(cert_path)
    return Issued(directory / CA_FILE, tuple(node_files), tuple(client_files))


def issue_client(directory: Path, name: str, ca_key_file: Path | None = None, days: int = DEFAULT_DAYS) -> Path:
    """One more client certificate (subject CN = `name`) signed by the CA `init` wrote into `directory`.

    For an identity added after the first start: the operator then grants it something in acl.toml.
    """
    check_names([name], [])
    if not 1 <= days <= CA_DAYS:
        raise UserError(f"--days must be between 1 and {CA_DAYS}, got {days}")
    ca_key_path = ca_key_file or directory / CA_KEY_FILE
    try:
        ca_cert = x509.load_pem_x509_certificate((directory / CA_FILE).read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read the CA ({directory / CA_FILE}, {ca_key_path}): {e}") from e
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise UserError(f"{ca_key_path} is not the ECDSA key `groupcoord certs init` writes")
    cert_path, key_path = client_cert(directory, name)
    if cert_path.exists():
        raise UserError(f"{cert_path} exists: a client name is issued once")
    cert, key = _leaf(ca_key, ca_cert, name, [ExtendedKeyUsageOID.CLIENT_AUTH], [], days)
    _write_key(key_path, key)
    _write_cert(cert_path, cert)
    return cert_path


def write_acl(directory: Path, admins: list[str]) -> Path:
    """`directory/acl.toml` making `admins` the cluster's admins and nobody else anything (docs/SECURITY.md).

    What a deployment starts with: every other identity, anonymous callers included, is refused until an operator
    adds `[[acl]]` entries.
    """
    for name in admins:
        if not _NAME.match(name):
            raise UserError(f"--admins: {name!r} is not an identity (letters, digits, '.', '_' or '-')")
    if not admins:
        raise UserError("--admins needs at least one identity")
    path = directory / ACL_FILE
    listed = ", ".join(f'"{name}"' for name in dict.fromkeys(admins))
    path.write_text(
        "# Written by `groupcoord certs init --admins`: these identities (certificate CNs) may do everything;\n"
        "# any other caller, anonymous ones included, nothing until an [[acl]] entry grants it (docs/SECURITY.md).\n"
        f"admins = [{listed}]\n"
    )
    return path
