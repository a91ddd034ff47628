"""`--bootstrap`, `--ca-file`, `--cert-file`, `--key-file`, `--token`: how every client command reaches a cluster.

Each flag falls back to its environment variable (GROUPCOORD_CA_FILE, ...); a flag wins. The token is best given
through the environment (flags show in `ps`), and never appears in help, logs or error messages.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from groupcoord.base.errors import UserError

if TYPE_CHECKING:
    from groupcoord.client.security import ClientSecurity

FLAGS = {
    "ca_file": ("--ca-file", "GROUPCOORD_CA_FILE", "PEM CA that signed the nodes' certificates: turns TLS on"),
    "cert_file": ("--cert-file", "GROUPCOORD_CERT_FILE", "PEM client certificate, for nodes that require one (mTLS)"),
    "key_file": ("--key-file", "GROUPCOORD_KEY_FILE", "PEM key of --cert-file"),
    "token": ("--token", "GROUPCOORD_TOKEN", "bearer token sent with every call (prefer the environment variable)"),
}


def add_security_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS and credentials (default: plaintext, no token)")
    for dest, (flag, env, text) in FLAGS.items():
        group.add_argument(flag, dest=dest, metavar="TOKEN" if dest == "token" else "FILE", help=f"{text} (${env})")


def client_security(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ClientSecurity:
    """The flags over their environment variables; a file that cannot be used is a one-line UserError."""
    from groupcoord.client.security import ClientSecurity, SecurityError

    values: dict[str, str] = {
        dest: getattr(args, dest, "") or environ.get(env, "") for dest, (_, env, _) in FLAGS.items()
    }
    try:
        security = ClientSecurity(**values)
        security.credentials()
    except SecurityError as exc:
        raise UserError(str(exc)) from None
    return security


def unreachable_hint(security: ClientSecurity) -> str:
    """What to try when no node answered: a refused TLS handshake looks like a closed socket to the client."""
    if not security.tls:
        return " (if the nodes serve TLS, give --ca-file)"
    if not security.cert_file:
        return " (if the nodes require client certificates, give --cert-file and --key-file)"
    return ""


def parse_bootstrap(text: str) -> list[str]:
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise UserError("--bootstrap needs at least one host:port")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65_536:
            raise UserError(f"--bootstrap: {address!r} is not host:port")
    return addresses
