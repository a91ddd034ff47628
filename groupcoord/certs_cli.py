"""`groupcoord certs init DIR`: a development CA with node and client certificates (groupcoord/certs.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from groupcoord.base.errors import UserError


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _init(args: argparse.Namespace) -> int:
    from groupcoord import certs

    clients = _list(args.clients)
    if not clients:
        raise UserError("--clients needs at least one name (e.g. admin)")
    issued = certs.init(args.dir, args.nodes, clients, _list(args.hosts), days=args.days, force=args.force)
    print(f"CA: {issued.ca} (key {args.dir / certs.CA_KEY_FILE}: keep it off the nodes)")
    for node_id, path in enumerate(issued.nodes, start=1):
        print(f"node {node_id}: {path} for {', '.join(certs.node_hosts(node_id, _list(args.hosts)))}")
    for path in issued.clients:
        print(f"client {path.stem}: {path}")
    first = issued.clients[0].stem
    print(
        "\nA node: --tls-cert-file node-1.pem --tls-key-file node-1-key.pem --tls-client-ca-file ca.pem "
        f"--tls-client-auth require\nA client: --ca-file ca.pem --cert-file {first}.pem --key-file {first}-key.pem"
    )
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser(
        "certs",
        help="make a development CA and TLS certificates for nodes and clients",
        description="Development certificates for TLS on the client port (docs/SECURITY.md#tls); not a production PKI.",
    )
    actions = group.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init",
        help="write a CA, one server certificate per node and one client certificate per identity into DIR",
        description="Writes DIR/ca.pem and ca-key.pem, node-N.pem and node-N-key.pem for nodes 1..N (valid for "
        "127.0.0.N, nodeN, localhost, 127.0.0.1 and --hosts), and NAME.pem, NAME-key.pem per client (subject CN = "
        "NAME, the identity the server's authorization sees). ECDSA P-256, keys mode 0600. Refuses a DIR that "
        "already holds a CA unless --force.",
    )
    init.add_argument("dir", type=Path, metavar="DIR")
    init.add_argument("--nodes", type=int, default=3, metavar="N", help="node certificates (default: %(default)s)")
    init.add_argument(
        "--hosts",
        default="",
        metavar="HOST[,...]",
        help="more names or IP addresses every node certificate is valid for (e.g. a real host name)",
    )
    init.add_argument(
        "--clients",
        default="admin",
        metavar="NAME[,...]",
        help="client identities, one certificate each (default: %(default)s)",
    )
    init.add_argument(
        "--days", type=int, default=825, metavar="D", help="validity of node and client certificates (default: 825)"
    )
    init.add_argument("--force", action="store_true", help="replace an existing CA and every certificate in DIR")
    init.set_defaults(handler=_init)
