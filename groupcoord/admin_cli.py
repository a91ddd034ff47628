"""`groupcoord groups|members|topics ...`: the Admin client for operators, and the plumbing every admin command
shares (offsets_cli, cluster_admin_cli, events_cli).

Exit codes scripts rely on: 0 every item OK; 1 some item (or the one request) failed with a Kafka error code,
named on stderr; 2 usage error; 3 the cluster could not be reached. grpc loads only inside a handler, so
`--help` and a mistyped flag stay fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from groupcoord.base.errors import UserError
from groupcoord.client.cli_flags import add_security_flags, client_security, parse_bootstrap, unreachable_hint

if TYPE_CHECKING:
    from groupcoord.client.admin import Admin, GroupDescription

DEFAULT_BOOTSTRAP = "127.0.0.1:50051,127.0.0.2:50051,127.0.0.3:50051"
EXIT_OK, EXIT_ITEM_FAILED, EXIT_UNREACHABLE = 0, 1, 3


class Unreachable(UserError):
    """No node of --bootstrap answered."""

    exit_code = EXIT_UNREACHABLE


class RequestFailed(UserError):
    """The request as a whole was refused with a Kafka error code."""

    exit_code = EXIT_ITEM_FAILED


# -- plumbing ---------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart, like `kafka-consumer-groups.sh`."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def failures(items: dict[str, int], messages: dict[str, str] | None = None) -> int:
    """Names every failed item on stderr, with the node's message when there is one; the exit code for the lot."""
    from groupcoord.client.errors import error_name

    failed = {k: c for k, c in items.items() if c != 0}
    for key, code in failed.items():
        message = (messages or {}).get(key)
        print(f"groupcoord: {key}: {error_name(code)}" + (f" ({message})" if message else ""), file=sys.stderr)
    return EXIT_ITEM_FAILED if failed else EXIT_OK


def run(args: argparse.Namespace, job: Callable[[Admin], Awaitable[int]]) -> int:
    """Runs `job` with an Admin on --bootstrap; maps whole-request failures to one line and an exit code."""
    bootstrap = parse_bootstrap(args.bootstrap)
    security = client_security(args)
    from groupcoord.client.admin import Admin
    from groupcoord.client.errors import BootstrapUnreachable, GroupcoordError

    async def main() -> int:
        async with Admin(
            bootstrap,
            deadline_s=args.timeout,
            connect_timeout_s=min(5.0, args.timeout),
            security=security,
            fail_fast_refused=True,
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
            print_json([asdict(g) for g in groups])
        else:
            print(table(["GROUP", "STATE", "PROTOCOL-TYPE"], [[g.group_id, g.state, g.protocol_type] for g in groups]))
        return EXIT_OK

    return run(args, job)


def _groups_describe(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    if bool(args.groups) == args.all_groups:
        raise UserError("name the groups to describe, or give --all-groups")

    async def job(admin: Admin) -> int:
        ids = args.groups or [g.group_id for g in await admin.list_groups()]
        described = await admin.describe_groups(ids)
        if args.offsets:
            rows = [row for d in described if d.error_code == 0 for row in await _offset_rows(admin, d)]
            if args.json:
                keys = ("group", "topic", "partition", "current_offset", "member_id", "host", "client_id")
                print_json([dict(zip(keys, row, strict=True)) for row in rows])
            else:
                print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "MEMBER-ID", "HOST", "CLIENT-ID"],
                            [[c if c is not None else "-" for c in row] for row in rows]))  # fmt: skip
        elif args.json:
            out = []
            for d in described:
                item = asdict(d)
                item["error"] = error_name(d.error_code)
                for member in item["members"]:
                    member["partitions"] = [f"{t}:{p}" for t, p in member["partitions"]]
                out.append(item)
            print_json(out)
        else:
            print("\n\n".join(_describe_block(d) for d in described))
        return failures({d.group_id: d.error_code for d in described})

    return run(args, job)


async def _offset_rows(admin: Admin, d: GroupDescription) -> list[tuple[Any, ...]]:
    """kafka-consumer-groups --describe --offsets: each partition the group has an offset for or a member owns."""
    committed = {tp: offset for tp, (offset, _) in (await admin.list_offsets(d.group_id)).items()}
    owners = {tp: m for m in d.members for tp in m.partitions}
    return [
        (d.group_id, t, p, committed.get((t, p)), *((m.member_id, m.client_host, m.client_id) if m else (None,) * 3))
        for (t, p) in sorted(committed.keys() | owners.keys())
        for m in [owners.get((t, p))]
    ]


def _describe_block(d: GroupDescription) -> str:
    from groupcoord.client.errors import error_name

    if d.error_code != 0:
        return f"GROUP {d.group_id}: {error_name(d.error_code)}"
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
    return "\n".join(block)


def _groups_delete(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        results = await admin.delete_groups(args.groups)
        if args.json:
            print_json([{"group_id": g, "error_code": c, "error": error_name(c)} for g, c in results.items()])
        else:
            print(table(["GROUP", "RESULT"], [[g, "deleted" if c == 0 else error_name(c)] for g, c in results.items()]))
        return failures(results)

    return run(args, job)


# -- members ----------------------------------------------------------------------------------------


def _members_result(args: argparse.Namespace, results: dict[str, int], done: str) -> int:
    from groupcoord.client.errors import error_name

    if args.json:
        print_json([{"group_instance_id": i, "error_code": c, "error": error_name(c)} for i, c in results.items()])
    else:
        print(table(["INSTANCE-ID", "RESULT"], [[i, done if c == 0 else error_name(c)] for i, c in results.items()]))
    return failures({f"{args.group}/{i}": c for i, c in results.items()})


def _members_add(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        return _members_result(args, await admin.add_members(args.group, args.instances), "added")

    return run(args, job)


def _members_remove(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        results = await admin.remove_members(args.group, args.instances, reason=args.reason)
        return _members_result(args, results, "removed")

    return run(args, job)


# -- topics -----------------------------------------------------------------------------------------


def _topics_create(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        created = await admin.create_topics([(name, args.partitions) for name in dict.fromkeys(args.topics)])
        if args.json:
            print_json([{**asdict(t), "error": error_name(t.error_code)} for t in created])
        else:
            rows = [
                [t.name, t.num_partitions, t.topic_id, "created"] if t.error_code == 0 else
                [t.name, "-", "-", error_name(t.error_code)]
                for t in created
            ]  # fmt: skip
            print(table(["TOPIC", "PARTITIONS", "TOPIC-ID", "RESULT"], rows))
        return failures({t.name: t.error_code for t in created}, {t.name: t.error_message for t in created})

    return run(args, job)


def _topics_list(args: argparse.Namespace) -> int:
    async def job(admin: Admin) -> int:
        topics = await admin.list_topics(args.topics)
        if args.json:
            print_json([asdict(t) for t in topics])
        else:
            print(table(["TOPIC", "PARTITIONS", "TOPIC-ID"], [[t.name, t.num_partitions, t.topic_id] for t in topics]))
        return EXIT_OK

    return run(args, job)


def _topics_delete(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    async def job(admin: Admin) -> int:
        results = await admin.delete_topics(args.topics)
        if args.json:
            print_json([{"name": t, "error_code": c, "error": error_name(c)} for t, c in results.items()])
        else:
            print(table(["TOPIC", "RESULT"], [[t, "deleted" if c == 0 else error_name(c)] for t, c in results.items()]))
        return failures(results)

    return run(args, job)


# -- registration -----------------------------------------------------------------------------------

EPILOG = (
    "exit codes: 0 all OK; 1 some item failed (named on stderr, e.g. GROUP_ID_NOT_FOUND); 2 usage error; "
    "3 cluster unreachable"
)


def connection_flags(parser: argparse.ArgumentParser) -> None:
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
        help="retry deadline while coordinators move (default: %(default)s; an unreachable cluster fails in 5 s, "
        "one that refuses connections at once)",
    )
    add_security_flags(parser)


def add_action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_: str,
    handler: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".", epilog=EPILOG)
    connection_flags(parser)
    parser.set_defaults(handler=handler)
    return parser


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `groups`, `members`, `topics` and `offsets` to the top-level subcommands."""
    groups = commands.add_parser("groups", help="list, describe and delete groups", epilog=EPILOG)
    actions = groups.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    listing = add_action(actions, "list", "list groups (from any node)", _groups_list)
    listing.add_argument("--state", action="append", metavar="S", help="only groups in state S (repeatable)")
    describe = add_action(
        actions, "describe", "members, state, generation and pending instances of groups", _groups_describe
    )
    describe.add_argument("groups", nargs="*", metavar="GROUP")
    describe.add_argument("--all-groups", action="store_true", help="every group of the cluster")
    describe.add_argument(
        "--offsets", action="store_true", help="one table of committed offsets and the members that own them"
    )
    delete = add_action(actions, "delete", "delete Empty groups and their offsets", _groups_delete)
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    members = commands.add_parser("members", help="pre-register or remove static members", epilog=EPILOG)
    actions = members.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    add = add_action(
        actions, "add", "pre-register static instances: their joins then cost one rebalance in all", _members_add
    )
    add.add_argument("group", metavar="GROUP")
    add.add_argument("instances", nargs="+", metavar="INSTANCE")
    remove = add_action(
        actions, "remove", "remove static members by instance id (immediate rebalance)", _members_remove
    )
    remove.add_argument("group", metavar="GROUP")
    remove.add_argument("instances", nargs="+", metavar="INSTANCE")
    remove.add_argument("--reason", default="", metavar="TEXT", help="recorded as the rebalance's reason")

    topics = commands.add_parser("topics", help="create, list and delete topics (the registry)", epilog=EPILOG)
    actions = topics.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    create = add_action(actions, "create", "create topics, each with a new topic id", _topics_create)
    create.add_argument("topics", nargs="+", metavar="NAME")
    create.add_argument(
        "--partitions",
        type=int,
        default=-1,
        metavar="N",
        help="partitions of each topic (default: -1, the cluster's default_num_partitions)",
    )
    listing = add_action(actions, "list", "topics with their partitions and ids (from any node)", _topics_list)
    listing.add_argument("topics", nargs="*", metavar="NAME", help="only these topics (default: all)")
    delete = add_action(actions, "delete", "delete topics", _topics_delete)
    delete.add_argument("topics", nargs="+", metavar="NAME")
