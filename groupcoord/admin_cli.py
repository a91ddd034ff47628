"""`groupcoord groups|members|offsets|topics ...` and `groupcoord cluster describe|add-node|remove-node|replace-node`:
the Admin client for operators.

Exit codes scripts rely on: 0 every item OK; 1 some item (or the one request) failed with a Kafka error code,
named on stderr; 2 usage error; 3 the cluster could not be reached. grpc loads only inside a handler, so
`--help` and a mistyped flag stay fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from groupcoord.errors import UserError
from groupcoord.node.topology import Peer, format_peer, parse_peers
from groupcoord.security_flags import add_security_flags, client_security, unreachable_hint

if TYPE_CHECKING:
    from groupcoord.client.admin import Admin

DEFAULT_BOOTSTRAP = "127.0.0.1:50051,127.0.0.2:50051,127.0.0.3:50051"
EXIT_OK, EXIT_ITEM_FAILED, EXIT_UNREACHABLE = 0, 1, 3
# A node as in `peers` (node/topology.py).
NODE_METAVAR = "ID=HOST:PORT:RAFT_PORT[@CLIENT_HOST:CLIENT_PORT][@kafka=KAFKA_HOST:KAFKA_PORT]"


class Unreachable(UserError):
    """No node of --bootstrap answered."""

    exit_code = EXIT_UNREACHABLE


class RequestFailed(UserError):
    """The request as a whole was refused with a Kafka error code."""

    exit_code = EXIT_ITEM_FAILED


# -- plumbing ---------------------------------------------------------------------------------------


def parse_bootstrap(text: str) -> list[str]:
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise UserError("--bootstrap needs at least one host:port")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65_536:
            raise UserError(f"--bootstrap: {address!r} is not host:port")
    return addresses


def parse_offset(text: str) -> tuple[tuple[str, int], int]:
    """`TOPIC:PARTITION=OFFSET`; the topic may itself contain ':' (the last one separates the partition)."""
    target, eq, offset = text.rpartition("=")
    topic, colon, partition = target.rpartition(":")
    if not eq or not colon or not topic or not partition.isdigit():
        raise UserError(f"{text!r} is not TOPIC:PARTITION=OFFSET (e.g. orders:0=42)")
    try:
        value = int(offset)
    except ValueError:
        raise UserError(f"{text!r}: offset {offset!r} is not an integer") from None
    if value < 0:
        raise UserError(f"{text!r}: offset must be >= 0")
    return (topic, int(partition)), value


def parse_partition(text: str) -> tuple[str, int]:
    """`TOPIC:PARTITION`; the topic may itself contain ':' (the last one separates the partition)."""
    topic, colon, partition = text.rpartition(":")
    if not colon or not topic or not partition.isdigit():
        raise UserError(f"{text!r} is not TOPIC:PARTITION (e.g. orders:0)")
    return topic, int(partition)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart, like `kafka-consumer-groups.sh`."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def _failures(items: dict[str, int], messages: dict[str, str] | None = None) -> int:
    """Names every failed item on stderr, with the node's message when there is one; the exit code for the lot."""
    from groupcoord.client.errors import error_name

    failed = {k: c for k, c in items.items() if c != 0}
    for key, code in failed.items():
        message = (messages or {}).get(key)
        print(f"groupcoord: {key}: {error_name(code)}" + (f" ({message})" if message else ""), file=sys.stderr)
    return EXIT_ITEM_FAILED if failed else EXIT_OK


def _run(args: argparse.Namespace, job: Callable[[Admin], Awaitable[int]]) -> int:
    """Runs `job` with an Admin on --bootstrap; maps whole-request failures to one line and an exit code."""
    bootstrap = parse_bootstrap(args.bootstrap)
    security = client_security(args)
    from groupcoord.client.admin import Admin
    from groupcoord.client.errors import BootstrapUnreachable, GroupcoordError

    async def main() -> int:
        async with Admin(
            bootstrap, deadline_s=args.timeout, connect_timeout_s=min(5.0, args.timeout), security=security
        ) as admin:
            return await job(admin)

    try:
        return asyncio.run(main())
    except BootstrapUnreachable as exc:
        raise Unreachable(f"cannot reach the cluster: {exc.message}{unreachable_hint(security)}") from None
    except GroupcoordError as exc:
        raise RequestFailed(str(exc)) from None


# -- groups -----------------------------------------------------------------------------------------


def _groups_list(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        groups = sorted(await admin.list_groups(args.state or ()), key=lambda g: g.group_id)
        if args.json:
            _print_json([asdict(g) for g in groups])
        else:
            print(table(["GROUP", "STATE", "PROTOCOL-TYPE"], [[g.group_id, g.state, g.protocol_type] for g in groups]))
        return EXIT_OK

    return _run(args, job)


def _groups_describe(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        described = await admin.describe_groups(args.groups)
        if args.json:
            out = []
            for d in described:
                item = asdict(d)
                item["error"] = error_name(d.error_code)
                out.append(item)
            _print_json(out)
        else:
            blocks = []
            for d in described:
                if d.error_code != 0:
                    blocks.append(f"GROUP {d.group_id}: {error_name(d.error_code)}")
                    continue
                head = table(
                    ["GROUP", "STATE", "PROTOCOL", "GENERATION", "COORDINATOR", "LAST-REBALANCE"],
                    [[
                        d.group_id, d.state, f"{d.protocol_type}/{d.protocol or '-'}", d.generation_id,
                        f"node {d.coordinator_node_id} (partition {d.coordinator_partition})",
                        d.last_rebalance_cause or "-",
                    ]],
                )  # fmt: skip
                rows = [
                    [
                        m.member_id + (" *" if m.member_id == d.leader_id else ""),
                        m.group_instance_id or "-",
                        m.client_id,
                        m.client_host,
                        f"{m.client_software_name} {m.client_software_version}".strip() or "-",
                        ",".join(f"{t}:{p}" for t, p in m.partitions) or "-",
                    ]
                    for m in d.members
                ]
                block = [
                    head,
                    "",
                    table(["MEMBER-ID (* leader)", "INSTANCE-ID", "CLIENT-ID", "HOST", "SOFTWARE", "ASSIGNMENT"], rows),
                ]
                if d.pending_instance_ids:
                    block.append(f"pending instance ids: {', '.join(d.pending_instance_ids)}")
                if d.pending_member_count:
                    block.append(f"pending dynamic members: {d.pending_member_count}")
                blocks.append("\n".join(block))
            print("\n\n".join(blocks))
        return _failures({d.group_id: d.error_code for d in described})

    return _run(args, job)


def _groups_delete(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        results = await admin.delete_groups(args.groups)
        if args.json:
            _print_json([{"group_id": g, "error_code": c, "error": error_name(c)} for g, c in results.items()])
        else:
            print(table(["GROUP", "RESULT"], [[g, "deleted" if c == 0 else error_name(c)] for g, c in results.items()]))
        return _failures(results)

    return _run(args, job)


# -- members ----------------------------------------------------------------------------------------


def _members_result(args: argparse.Namespace, results: dict[str, int], done: str) -> int:
    from groupcoord.client.errors import error_name

    if args.json:
        _print_json([{"group_instance_id": i, "error_code": c, "error": error_name(c)} for i, c in results.items()])
    else:
        print(table(["INSTANCE-ID", "RESULT"], [[i, done if c == 0 else error_name(c)] for i, c in results.items()]))
    return _failures({f"{args.group}/{i}": c for i, c in results.items()})


def _members_add(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        return _members_result(args, await admin.add_members(args.group, args.instances), "added")

    return _run(args, job)


def _members_remove(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        results = await admin.remove_members(args.group, args.instances, reason=args.reason)
        return _members_result(args, results, "removed")

    return _run(args, job)


# -- offsets ----------------------------------------------------------------------------------------


def _offsets_get(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        offsets = sorted((await admin.list_offsets(args.group)).items())
        if not offsets:
            # No offsets and no group are different answers (kafka-consumer-groups: "does not exist").
            (described,) = await admin.describe_groups([args.group])
            if described.error_code != 0:
                from groupcoord.protocol.errors import Errors

                name, code = f"group {args.group!r}", described.error_code
                unknown = code == Errors.GROUP_ID_NOT_FOUND
                return _failures({name: code}, {name: "no such group" if unknown else described.error_message})
        if args.json:
            _print_json([{"topic": t, "partition": p, "offset": o, "metadata": m} for (t, p), (o, m) in offsets])
        else:
            print(table(["TOPIC", "PARTITION", "OFFSET", "METADATA"], [[t, p, o, m] for (t, p), (o, m) in offsets]))
        return EXIT_OK

    return _run(args, job)


def _offsets_set(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    wanted = dict(parse_offset(text) for text in args.offsets)

    async def job(admin: Admin) -> int:
        results = await admin.alter_offsets(args.group, wanted)
        rows = sorted(results.items())
        if args.json:
            _print_json(
                [
                    {"topic": t, "partition": p, "offset": wanted[(t, p)], "error_code": c, "error": error_name(c)}
                    for (t, p), c in rows
                ]
            )
        else:
            print(
                table(
                    ["TOPIC", "PARTITION", "OFFSET", "RESULT"],
                    [[t, p, wanted[(t, p)], "committed" if c == 0 else error_name(c)] for (t, p), c in rows],
                )
            )
        return _failures({f"{args.group} {t}:{p}": c for (t, p), c in rows})

    return _run(args, job)


def _offsets_delete(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    named = [parse_partition(text) for text in args.partitions]
    topics = list(dict.fromkeys(args.topic or ()))
    if not named and not topics:
        raise UserError("name the offsets to delete: TOPIC:PARTITION arguments, or --topic TOPIC")

    async def job(admin: Admin) -> int:
        # --topic: every partition of the topic the group has an offset for, as it reads them now.
        committed = [tp for tp in await admin.list_offsets(args.group) if tp[0] in topics] if topics else []
        results = sorted((await admin.delete_offsets(args.group, [*named, *committed])).items())
        if args.json:
            _print_json(
                [{"topic": t, "partition": p, "error_code": c, "error": error_name(c)} for (t, p), c in results]
            )
        else:
            rows = [[t, p, "deleted" if c == 0 else error_name(c)] for (t, p), c in results]
            print(table(["TOPIC", "PARTITION", "RESULT"], rows))
        missing = [t for t in topics if all(tp[0] != t for tp in committed)]
        for topic in missing:
            print(f"groupcoord: {args.group}: no committed offsets of topic {topic!r}", file=sys.stderr)
        code = _failures({f"{args.group} {t}:{p}": c for (t, p), c in results})
        return EXIT_ITEM_FAILED if missing else code

    return _run(args, job)


# -- topics -----------------------------------------------------------------------------------------


def _topics_create(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        created = await admin.create_topics([(name, args.partitions) for name in dict.fromkeys(args.topics)])
        if args.json:
            _print_json([{**asdict(t), "error": error_name(t.error_code)} for t in created])
        else:
            rows = [
                [t.name, t.num_partitions, t.topic_id, "created"] if t.error_code == 0 else
                [t.name, "-", "-", error_name(t.error_code)]
                for t in created
            ]  # fmt: skip
            print(table(["TOPIC", "PARTITIONS", "TOPIC-ID", "RESULT"], rows))
        return _failures({t.name: t.error_code for t in created}, {t.name: t.error_message for t in created})

    return _run(args, job)


def _topics_list(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        topics = await admin.list_topics(args.topics)
        if args.json:
            _print_json([asdict(t) for t in topics])
        else:
            print(table(["TOPIC", "PARTITIONS", "TOPIC-ID"], [[t.name, t.num_partitions, t.topic_id] for t in topics]))
        return EXIT_OK

    return _run(args, job)


def _topics_delete(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        results = await admin.delete_topics(args.topics)
        if args.json:
            _print_json([{"name": t, "error_code": c, "error": error_name(c)} for t, c in results.items()])
        else:
            print(table(["TOPIC", "RESULT"], [[t, "deleted" if c == 0 else error_name(c)] for t, c in results.items()]))
        return _failures(results)

    return _run(args, job)


# -- cluster describe -------------------------------------------------------------------------------


def _cluster_describe(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        c = await admin.describe_cluster()
        if args.json:
            _print_json(asdict(c))
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

    return _run(args, job)


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
    _wait_listening(own, args.timeout)
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


def _wait_listening(peer: Peer, timeout_s: float) -> None:
    """Until this node's client port accepts connections (it opens once the Raft replicas have started): a start
    hook runs beside the node, and a voter is added only once it answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((peer.host, peer.port), timeout=1).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise Unreachable(f"this node does not answer at {peer.host}:{peer.port}: {exc}") from None
            time.sleep(0.2)


def _change_voters(
    args: argparse.Namespace, change: Callable[[Admin], Awaitable[list[int]]], subject: dict[str, Any], done: str
) -> int:
    async def job(admin: Admin) -> int:
        changed = await change(admin)
        if args.json:
            _print_json({**subject, "partitions_changed": changed})
        else:
            print(f"{done} (changed now: {_partitions(changed)})")
        return EXIT_OK

    return _run(args, job)


def _partitions(changed: list[int]) -> str:
    return ",".join(map(str, changed)) or "none, it already was"


# -- registration -----------------------------------------------------------------------------------

EPILOG = (
    "exit codes: 0 all OK; 1 some item failed (named on stderr, e.g. GROUP_ID_NOT_FOUND); 2 usage error; "
    "3 cluster unreachable"
)


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("GROUPCOORD_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT[,...]",
        help="nodes to ask first (default: $GROUPCOORD_BOOTSTRAP or %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="retry deadline while coordinators move (default: %(default)s; an unreachable cluster fails in 5 s)",
    )
    add_security_flags(parser)


def _action(actions: argparse._SubParsersAction, name: str, help_: str, handler: Callable) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".", epilog=EPILOG)
    _connection_flags(parser)
    parser.set_defaults(handler=handler)
    return parser


def register(commands: argparse._SubParsersAction) -> None:
    """Adds `groups`, `members`, `topics` and `offsets` to the top-level subcommands."""
    groups = commands.add_parser("groups", help="list, describe and delete groups", epilog=EPILOG)
    actions = groups.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    listing = _action(actions, "list", "list groups (from any node)", _groups_list)
    listing.add_argument("--state", action="append", metavar="S", help="only groups in state S (repeatable)")
    describe = _action(
        actions, "describe", "members, state, generation and pending instances of groups", _groups_describe
    )
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    delete = _action(actions, "delete", "delete Empty groups and their offsets", _groups_delete)
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    members = commands.add_parser("members", help="pre-register or remove static members", epilog=EPILOG)
    actions = members.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    add = _action(
        actions, "add", "pre-register static instances: their joins then cost one rebalance in all", _members_add
    )
    add.add_argument("group", metavar="GROUP")
    add.add_argument("instances", nargs="+", metavar="INSTANCE")
    remove = _action(actions, "remove", "remove static members by instance id (immediate rebalance)", _members_remove)
    remove.add_argument("group", metavar="GROUP")
    remove.add_argument("instances", nargs="+", metavar="INSTANCE")
    remove.add_argument("--reason", default="", metavar="TEXT", help="recorded as the rebalance's reason")

    topics = commands.add_parser("topics", help="create, list and delete topics (the registry)", epilog=EPILOG)
    actions = topics.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    create = _action(actions, "create", "create topics, each with a new topic id", _topics_create)
    create.add_argument("topics", nargs="+", metavar="NAME")
    create.add_argument(
        "--partitions",
        type=int,
        default=-1,
        metavar="N",
        help="partitions of each topic (default: -1, the cluster's default_num_partitions)",
    )
    listing = _action(actions, "list", "topics with their partitions and ids (from any node)", _topics_list)
    listing.add_argument("topics", nargs="*", metavar="NAME", help="only these topics (default: all)")
    delete = _action(actions, "delete", "delete topics", _topics_delete)
    delete.add_argument("topics", nargs="+", metavar="NAME")

    offsets = commands.add_parser("offsets", help="read, set or delete a group's committed offsets", epilog=EPILOG)
    actions = offsets.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    get = _action(actions, "get", "the group's committed offsets", _offsets_get)
    get.add_argument("group", metavar="GROUP")
    set_ = _action(actions, "set", "commit offsets for a group with no members (Empty or new)", _offsets_set)
    set_.add_argument("group", metavar="GROUP")
    set_.add_argument("offsets", nargs="+", metavar="TOPIC:PARTITION=OFFSET")
    delete = _action(
        actions,
        "delete",
        "delete committed offsets (Kafka's OffsetDelete): any of an Empty group; of a live consumer group, only those "
        "of topics it does not subscribe to",
        _offsets_delete,
    )
    delete.add_argument("group", metavar="GROUP")
    delete.add_argument("partitions", nargs="*", metavar="TOPIC:PARTITION")
    delete.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="every partition of TOPIC the group has an offset for (repeatable)",
    )


def register_cluster_describe(actions: argparse._SubParsersAction) -> None:
    """`cluster describe`: nodes and partition leaders as the cluster sees them (no --dir needed)."""
    _action(actions, "describe", "nodes, liveness and partition leaders, from any node", _cluster_describe)


def register_cluster_membership(actions: argparse._SubParsersAction) -> None:
    """`cluster add-node` / `remove-node` / `replace-node`: online membership changes (admin identity;
    docs/OPERATIONS.md)."""
    add = _action(
        actions,
        "add-node",
        "make a started node a voter of every partition (idempotent; start it first with peers naming the voters "
        "and itself)",
        _cluster_add_node,
    )
    add.add_argument("node", metavar=NODE_METAVAR)
    remove = _action(
        actions,
        "remove-node",
        "remove a node from every partition's voters (idempotent; it hands over what it leads first), then stop it",
        _cluster_remove_node,
    )
    remove.add_argument("node_id", type=int, metavar="NODE_ID")
    replace = _action(
        actions,
        "replace-node",
        "replace a dead node by a started successor with the same id (a new address, or the old one on an empty "
        "disk): the old voter removed, the new one added (idempotent)",
        _cluster_replace_node,
    )
    replace.add_argument("node", metavar=NODE_METAVAR)
    join = _action(
        actions,
        "join",
        "make this node a voter of every partition, by its own node id and peers (a start hook: it waits for the "
        "node to listen, asks the other peers, and is idempotent, so it may run at every start)",
        _cluster_join,
    )
    leave = _action(
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
