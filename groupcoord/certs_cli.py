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
    if args.if_missing and (args.dir / certs.CA_FILE).exists():
        print(f"{args.dir / certs.CA_FILE} exists: nothing written")
        return 0
    admins = _list(args.admins) if args.admins is not None else None
    if admins is not None:
        issued_names = {*clients, *(f"node-{n}" for n in range(1, args.nodes + 1))}
        unknown = [name for name in admins if name not in issued_names]
        if unknown:
            raise UserError(f"--admins: {', '.join(unknown)} is neither a --clients name nor node-1..node-{args.nodes}")
    issued = certs.init(
        args.dir, args.nodes, clients, _list(args.hosts), days=args.days, force=args.force, ca_key_file=args.ca_key_file
    )
    print(f"CA: {issued.ca} (key {args.ca_key_file or args.dir / certs.CA_KEY_FILE}: keep it off the nodes)")
    for node_id, path in enumerate(issued.nodes, start=1):
        print(f"node {node_id}: {path} for {', '.join(certs.node_hosts(node_id, _list(args.hosts)))}")
    for path in issued.clients:
        print(f"client {path.stem}: {path}")
    if admins is not None:
        print(f"ACL: {certs.write_acl(args.dir, admins)} (admins: {', '.join(admins)}; anyone else: nothing)")
    first = issued.clients[0].stem
    print(
        "\nA node: --tls-cert-file node-1.pem --tls-key-file node-1-key.pem --tls-client-ca-file ca.pem "
        f"--tls-client-auth require\nA client: --ca-file ca.pem --cert-file {first}.pem --key-file {first}-key.pem"
    )
    return 0


def _issue(args: argparse.Namespace) -> int:
    from groupcoord import certs

    path = certs.issue_client(args.dir, args.name, args.ca_key_file, days=args.days)
    print(f"client {args.name}: {path} (key {path.with_name(args.name + '-key.pem')})")
    return 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    init.add_argument(
        "--if-missing",
        action="store_true",
        help="do nothing (exit 0) when DIR already holds ca.pem: a container's first start generates, later ones keep",
    )
    init.add_argument(
        "--admins",
        metavar="NAME[,...]",
        help="also write DIR/acl.toml making these identities (--clients names, node-N) admins and nobody else "
        "anything (docs/SECURITY.md#the-acl-file)",
    )
    init.add_argument(
        "--ca-key-file",
        type=Path,
        metavar="PATH",
        help="write the CA's key here instead of DIR/ca-key.pem, so that DIR can be handed to the nodes whole",
    )
    init.set_defaults(handler=_init)
    issue = actions.add_parser(
        "issue",
        help="one more client certificate from the CA of DIR",
        description="Writes DIR/NAME.pem and NAME-key.pem (subject CN = NAME) signed by DIR/ca.pem and its key. "
        "The new identity may do nothing until acl.toml grants it something (docs/SECURITY.md#the-acl-file).",
    )
    issue.add_argument("dir", type=Path, metavar="DIR")
    issue.add_argument("name", metavar="NAME")
    issue.add_argument(
        "--ca-key-file", type=Path, metavar="PATH", help="the CA's key, if not DIR/ca-key.pem (as `init` was told)"
    )
    issue.add_argument("--days", type=int, default=825, metavar="D", help="validity (default: %(default)s)")
    issue.set_defaults(handler=_issue)
