"""`groupcoord cluster describe|add-node|remove-node|replace-node|join|leave`: the cluster's nodes and
partitions, and online changes of the voters (admin identity; docs/OPERATIONS.md)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from groupcoord.admin_cli import EXIT_OK, Unreachable, add_action, connection_flags, print_json, run, table
from groupcoord.base.errors import UserError
from groupcoord.client.cli_flags import client_security
from groupcoord.node.launcher import health
from groupcoord.node.topology import Peer, format_peer, parse_peers

if TYPE_CHECKING:
    from groupcoord.client.admin import Admin
    from groupcoord.client.security import ClientSecurity

# A node as in `peers` (node/topology.py).
NODE_METAVAR = "ID=HOST:PORT:RAFT_PORT[@CLIENT_HOST:CLIENT_PORT][@kafka=KAFKA_HOST:KAFKA_PORT]"


# -- describe ---------------------------------------------------------------------------------------


def _cluster_describe(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        c = await admin.describe_cluster()
        if args.json:
            print_json(asdict(c))
            return EXIT_OK
        cluster = f"cluster {c.cluster_id}" if c.cluster_id else "cluster id not known yet"
        print(f"{cluster}; answered by node {c.answered_by}; {c.partition_count} coordinator partitions\n")
        nodes = [[n.node_id, f"{n.host}:{n.port}", n.alive, n.incarnation[:12] or "-"] for n in c.nodes]
        print(table(["NODE", "ADDRESS", "ALIVE", "INCARNATION"], nodes))
        print()
        rows = [
            [p.partition_id, p.leader_node_id if p.leader_node_id >= 0 else "none", p.term, p.commit_index,
             ",".join(map(str, p.replica_node_ids)), " ".join(f"{n}:{lag}" for n, lag in p.replica_lag) or "-"]
            for p in c.partitions
        ]  # fmt: skip
        print(table(["PARTITION", "LEADER", "TERM", "COMMIT-INDEX", "REPLICAS", "LAG"], rows))
        return EXIT_OK

    return run(args, job)


def _cluster_add_node(args: argparse.Namespace) -> int:
    return _change_voters(args, lambda admin: admin.add_voter(args.node), {"node": args.node},
                          f"{args.node} is a voter of every partition")  # fmt: skip


def _cluster_remove_node(args: argparse.Namespace) -> int:
    return _change_voters(args, lambda admin: admin.remove_voter(args.node_id), {"node_id": args.node_id},
                          f"node {args.node_id} is no voter of any partition")  # fmt: skip


def _cluster_replace_node(args: argparse.Namespace) -> int:
    return _change_voters(args, lambda admin: admin.replace_voter(args.node), {"node": args.node},
                          f"{args.node} is a voter of every partition in place of its predecessor")  # fmt: skip


def _cluster_join(args: argparse.Namespace) -> int:
    own = _own_peer(args)
    deadline = time.monotonic() + args.timeout
    _wait_listening(own, client_security(args), args.timeout)
    join = argparse.Namespace(**{**vars(args), "node": format_peer(own)})
    while True:
        try:
            return _cluster_add_node(join)
        except Unreachable:  # a start hook races the other nodes' starts (a whole cluster starting at once)
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _cluster_leave(args: argparse.Namespace) -> int:
    own = _own_peer(args)  # sets --bootstrap when it was not given
    return _cluster_remove_node(argparse.Namespace(**{**vars(args), "node_id": own.node_id}))


def _own_peer(args: argparse.Namespace) -> Peer:
    """This node's `peers` entry, by the node's own settings. Unless --bootstrap is given, the other peers are asked
    at the addresses nodes use among themselves: the command runs beside the node (a pod's hook)."""
    if not args.node_id:
        raise UserError("name this node: --node-id or GROUPCOORD_NODE_ID, as for `groupcoord node`")
    peers = parse_peers(args.peers)
    own = next((p for p in peers if p.node_id == args.node_id), None)
    if own is None:
        raise UserError(f"node {args.node_id} is not in peers ({args.peers!r}): list the voters and this node")
    others = [p.address for p in peers if p != own]
    if args.bootstrap is None:
        if not others:
            raise UserError("peers name no other node to ask: give --bootstrap")
        args.bootstrap = ",".join(others)
    return own


def _wait_listening(peer: Peer, security: ClientSecurity, timeout_s: float) -> None:
    """Until this node's gRPC server answers (a health check, whatever its status): a start hook runs beside the
    node, and a voter is added only once all its Raft ports answer, which the server waits for before it starts
    (node/server.py). The port alone is no sign: it accepts connections from the moment it is bound."""
    deadline = time.monotonic() + timeout_s
    while True:
        if health(peer.address, security=security) != "UNREACHABLE":
            return
        if time.monotonic() > deadline:
            raise Unreachable(f"this node does not answer at {peer.host}:{peer.port}")
        time.sleep(0.2)


def _change_voters(
    args: argparse.Namespace, change: Callable[[Admin], Awaitable[list[int]]], subject: dict[str, Any], done: str
) -> int:
    async def job(admin: Admin) -> int:
        changed = await change(admin)
        if args.json:
            print_json({**subject, "partitions_changed": changed})
        else:
            print(f"{done} (changed now: {_partitions(changed)})")
        return EXIT_OK

    return run(args, job)


def _partitions(changed: list[int]) -> str:
    return ",".join(map(str, changed)) or "none, it already was"


def _settings(args: argparse.Namespace) -> int:
    if args.node is not None:
        found: list[str] = []

        async def locate(admin: Admin) -> int:
            nodes = (await admin.describe_cluster()).nodes
            found.extend(f"{n.host}:{n.port}" for n in nodes if n.node_id == args.node)
            if not found:
                ids = ", ".join(str(n.node_id) for n in nodes)
                raise UserError(f"the cluster has no node {args.node} (its nodes: {ids})")
            return EXIT_OK

        run(args, locate)
        args = argparse.Namespace(**{**vars(args), "bootstrap": found[0]})

    async def job(admin: Admin) -> int:
        node_id, settings = await admin.describe_settings()
        shown = [s for s in settings if s.source != "default"] if args.changed else settings
        if args.json:
            print_json({"node_id": node_id, "settings": [asdict(s) for s in shown]})
            return EXIT_OK
        print(f"node {node_id}: {len(shown)} of {len(settings)} settings" + (" (not default)" if args.changed else ""))
        print(table(["SETTING", "VALUE", "SOURCE", "DEFAULT"], [[s.name, s.value, s.source, s.default] for s in shown]))
        return EXIT_OK

    return run(args, job)


def register_settings(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`groupcoord settings`: what a node runs with (DescribeSettings, admin identity)."""
    help_ = "the settings a node runs with and where each came from (flag, environment, config file, default)"
    parser = commands.add_parser(
        "settings", help=help_, description=help_[0].upper() + help_[1:] + ". Admin only; secrets are not shown."
    )
    connection_flags(parser)
    parser.add_argument("--node", type=int, metavar="ID", help="ask this node (default: the first that answers)")
    parser.add_argument("--changed", action="store_true", help="only the settings that are not at their default")
    parser.set_defaults(handler=_settings)


def register_cluster_describe(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`cluster describe`: nodes and partition leaders as the cluster sees them (no --dir needed)."""
    add_action(actions, "describe", "nodes, liveness and partition leaders, from any node", _cluster_describe)


def register_cluster_membership(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`cluster add-node` / `remove-node` / `replace-node`: online membership changes (admin identity;
    docs/OPERATIONS.md)."""
    add = add_action(
        actions,
        "add-node",
        "make a started node a voter of every partition (idempotent; start it first with peers naming the voters "
        "and itself)",
        _cluster_add_node,
    )
    add.add_argument("node", metavar=NODE_METAVAR)
    remove = add_action(
        actions,
        "remove-node",
        "remove a node from every partition's voters (idempotent; it hands over what it leads first), then stop it",
        _cluster_remove_node,
    )
    remove.add_argument("node_id", type=int, metavar="NODE_ID")
    replace = add_action(
        actions,
        "replace-node",
        "replace a dead node by a started successor with the same id (a new address, or the old one on an empty "
        "disk): the old voter removed, the new one added (idempotent)",
        _cluster_replace_node,
    )
    replace.add_argument("node", metavar=NODE_METAVAR)
    join = add_action(
        actions,
        "join",
        "make this node a voter of every partition, by its own node id and peers (a start hook: it waits for the "
        "node to listen, asks the other peers, and is idempotent, so it may run at every start)",
        _cluster_join,
    )
    leave = add_action(
        actions,
        "leave",
        "remove this node from every partition's voters, by its own node id and peers (run it before the node "
        "is scaled away; idempotent)",
        _cluster_leave,
    )
    for parser in (join, leave):
        parser.add_argument(
            "--node-id",
            type=int,
            default=int(os.environ.get("GROUPCOORD_NODE_ID") or 0),
            help="this node's id (default: $GROUPCOORD_NODE_ID)",
        )
        parser.add_argument(
            "--peers",
            default=os.environ.get("GROUPCOORD_PEERS", ""),
            help="the node's peers setting, this node included (default: $GROUPCOORD_PEERS)",
        )
        parser.set_defaults(bootstrap=os.environ.get("GROUPCOORD_BOOTSTRAP"))
