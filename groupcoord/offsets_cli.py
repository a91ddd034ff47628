"""`groupcoord offsets get|set|delete|reset`: a group's committed offsets, as kafka-consumer-groups handles them.

A partition is spelled `TOPIC:PARTITION` everywhere (arguments, tables, messages); `reset` also reads and writes
kafka-consumer-groups' CSV. Offsets change only while a group has no members: a live group's members would
overwrite them with their next commit, so a reset names the group's state and members and refuses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from groupcoord.admin_cli import EXIT_ITEM_FAILED, EXIT_OK, add_action, failures, print_json, run, table
from groupcoord.base.errors import UserError
from groupcoord.offset_reset import (
    FileRow,
    Planned,
    Scenario,
    TopicPartition,
    export_csv,
    offset_value,
    parse_reset_file,
    parse_topic_scope,
    partitions_in_scope,
    plan_group,
)

if TYPE_CHECKING:
    from groupcoord.client.admin import Admin, GroupDescription

INACTIVE = ("Empty", "Dead")


def parse_partition(text: str) -> TopicPartition:
    """`TOPIC:PARTITION`; the topic may itself contain ':' (the last one separates the partition)."""
    topic, colon, partition = text.rpartition(":")
    if not colon or not topic or not partition.isdigit():
        raise UserError(f"{text!r} is not TOPIC:PARTITION (e.g. orders:0)")
    return topic, int(partition)


def parse_offset(text: str) -> tuple[TopicPartition, int]:
    """`TOPIC:PARTITION=OFFSET`."""
    target, eq, offset = text.rpartition("=")
    if not eq:
        raise UserError(f"{text!r} is not TOPIC:PARTITION=OFFSET (e.g. orders:0=42)")
    try:
        tp = parse_partition(target)
    except UserError:
        raise UserError(f"{text!r} is not TOPIC:PARTITION=OFFSET (e.g. orders:0=42)") from None
    return tp, offset_value(offset, repr(text))


def active_group(d: GroupDescription) -> str:
    """Why a group's offsets cannot change now, naming what holds it (kafka-consumer-groups: "can only be reset
    if the group is inactive")."""
    who = ", ".join(f"{m.group_instance_id or m.member_id} ({m.client_id}, {m.client_host})" for m in d.members[:5])
    more = f" and {len(d.members) - 5} more" if len(d.members) > 5 else ""
    return (
        f"the group is {d.state} with {len(d.members)} member(s): {who}{more}; offsets change only while it is "
        "Empty: stop its members first"
    )


async def _why_refused(admin: Admin, group: str) -> str:
    (described,) = await admin.describe_groups([group])
    return active_group(described) if described.error_code == 0 and described.members else ""


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
                return failures({name: code}, {name: "no such group" if unknown else described.error_message})
        if args.json:
            print_json([{"topic": t, "partition": p, "offset": o, "metadata": m} for (t, p), (o, m) in offsets])
        else:
            print(table(["TOPIC", "PARTITION", "OFFSET", "METADATA"], [[t, p, o, m] for (t, p), (o, m) in offsets]))
        return EXIT_OK

    return run(args, job)


def _offsets_set(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name

    wanted = dict(parse_offset(text) for text in args.offsets)

    async def job(admin: Admin) -> int:
        results = await admin.alter_offsets(args.group, wanted)
        rows = sorted(results.items())
        if args.json:
            print_json(
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
        codes = {f"{args.group} {t}:{p}": c for (t, p), c in rows}
        why = await _why_refused(admin, args.group) if any(codes.values()) else ""
        return failures(codes, dict.fromkeys(codes, why) if why else None)

    return run(args, job)


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
            print_json([{"topic": t, "partition": p, "error_code": c, "error": error_name(c)} for (t, p), c in results])
        else:
            rows = [[t, p, "deleted" if c == 0 else error_name(c)] for (t, p), c in results]
            print(table(["TOPIC", "PARTITION", "RESULT"], rows))
        missing = [t for t in topics if all(tp[0] != t for tp in committed)]
        for topic in missing:
            print(f"groupcoord: {args.group}: no committed offsets of topic {topic!r}", file=sys.stderr)
        code = failures({f"{args.group} {t}:{p}": c for (t, p), c in results})
        return EXIT_ITEM_FAILED if missing else code

    return run(args, job)


# -- reset ------------------------------------------------------------------------------------------


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise UserError("--to-offset must be >= 0")
        return Scenario("to-offset", args.to_offset)
    if args.shift_by is not None:
        return Scenario("shift-by", args.shift_by)
    if args.from_file is not None:
        return Scenario("from-file")
    return Scenario("to-earliest" if args.to_earliest else "to-current")


def _file_rows(args: argparse.Namespace) -> list[FileRow] | None:
    if args.from_file is None:
        return None
    if args.all_topics or args.topic:
        raise UserError("--from-file names its own partitions: drop --all-topics / --topic")
    path = Path(args.from_file)
    try:
        text = sys.stdin.read() if args.from_file == "-" else path.read_text()
    except OSError as exc:
        raise UserError(f"--from-file {args.from_file}: {exc.strerror}") from None
    rows = parse_reset_file(text, args.from_file)
    named = {r.group for r in rows if r.group is not None}
    if named and args.group and not named <= set(args.group):
        unnamed = ", ".join(sorted(named - set(args.group)))
        raise UserError(f"--from-file has offsets of group(s) {unnamed} that no --group names")
    return rows


def _offsets_reset(args: argparse.Namespace) -> int:
    from groupcoord.client.errors import error_name
    from groupcoord.protocol.errors import Errors

    scenario = _scenario(args)
    rows = _file_rows(args)
    scopes = [parse_topic_scope(t) for t in args.topic or ()]
    if rows is None and not args.all_topics and not scopes:
        raise UserError("name the partitions to reset: --all-topics, --topic TOPIC[:P,...] or --from-file FILE")

    async def plan_one(admin: Admin, d: GroupDescription, registry: dict[str, int]) -> tuple[list[Planned], str]:
        if d.error_code not in (Errors.NONE, Errors.GROUP_ID_NOT_FOUND):
            return [], f"{error_name(d.error_code)} {d.error_message}".strip()
        if d.error_code == Errors.NONE and d.state not in INACTIVE:
            return [], active_group(d)
        known = d.error_code == Errors.NONE
        committed = {tp: o for tp, (o, _) in (await admin.list_offsets(d.group_id)).items()} if known else {}
        if rows is not None:
            mine = {(r.topic, r.partition): r.offset for r in rows if r.group in (None, d.group_id)}
            return plan_group(d.group_id, list(mine), committed, registry, scenario, mine), ""
        partitions, problems = partitions_in_scope(committed, registry, args.all_topics, scopes)
        return plan_group(d.group_id, partitions, committed, registry, scenario), "; ".join(problems)

    async def job(admin: Admin) -> int:
        groups = list(dict.fromkeys(args.group)) if args.group else [g.group_id for g in await admin.list_groups()]
        registry = {t.name: t.num_partitions for t in await admin.list_topics()}
        plan: list[Planned] = []
        refused: dict[str, str] = {}
        for described in await admin.describe_groups(groups):
            lines, problem = await plan_one(admin, described, registry)
            plan.extend(lines)
            if problem:
                refused[described.group_id] = problem
        for group in sorted({r.group for r in rows or () if r.group is not None} - set(groups)):
            refused[group] = "in --from-file, but --all-groups found no such group: not reset"
        results: dict[tuple[str, str, int], str] = {}
        if args.execute:
            for group in dict.fromkeys(line.group for line in plan):
                wanted = {(ln.topic, ln.partition): ln.new for ln in plan if ln.group == group and ln.new is not None}
                codes = await admin.alter_offsets(group, wanted) if wanted else {}
                for (topic, partition), code in codes.items():
                    results[(group, topic, partition)] = "committed" if code == 0 else error_name(code)
                if any(codes.values()):
                    refused[group] = await _why_refused(admin, group) or "some offsets were not committed"
        _print_plan(args, plan, results, len(groups) > 1)
        for group, why in refused.items():
            print(f"groupcoord: group {group!r}: {why}", file=sys.stderr)
        for line in plan:
            if line.problem:
                print(f"groupcoord: {line.group} {line.topic}:{line.partition}: {line.problem}", file=sys.stderr)
        if not args.execute:
            print("groupcoord: dry run, nothing committed (add --execute to commit these offsets)", file=sys.stderr)
        failed = refused or any(ln.problem for ln in plan) or any(r != "committed" for r in results.values())
        return EXIT_ITEM_FAILED if failed else EXIT_OK

    return run(args, job)


def _print_plan(
    args: argparse.Namespace, plan: list[Planned], results: dict[tuple[str, str, int], str], several: bool
) -> None:
    def outcome(line: Planned) -> str:
        if line.problem:
            return line.problem
        return results.get((line.group, line.topic, line.partition), "planned")

    if args.export:
        sys.stdout.write(export_csv(plan, several))
    elif args.json:
        keys = ("group", "topic", "partition", "current_offset", "new_offset", "result")
        print_json([dict(zip(keys, (ln.group, ln.topic, ln.partition, ln.current, ln.new, outcome(ln)), strict=True))
                    for ln in plan])  # fmt: skip
    else:
        rows = [[ln.group, ln.topic, ln.partition, _dash(ln.current), _dash(ln.new), outcome(ln)] for ln in plan]
        print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "RESULT"], rows))


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `offsets get|set|delete|reset` to the top-level subcommands."""
    from groupcoord.admin_cli import EPILOG

    offsets = commands.add_parser(
        "offsets", help="read, set, reset or delete a group's committed offsets", epilog=EPILOG
    )
    actions = offsets.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    get = add_action(actions, "get", "the group's committed offsets", _offsets_get)
    get.add_argument("group", metavar="GROUP")
    set_ = add_action(actions, "set", "commit offsets for a group with no members (Empty or new)", _offsets_set)
    set_.add_argument("group", metavar="GROUP")
    set_.add_argument("offsets", nargs="+", metavar="TOPIC:PARTITION=OFFSET")
    delete = add_action(
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
    _register_reset(actions)


def _register_reset(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reset = add_action(
        actions,
        "reset",
        "reset the offsets of groups with no members (kafka-consumer-groups --reset-offsets): prints the plan, "
        "and commits it only with --execute",
        _offsets_reset,
    )
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", metavar="GROUP", help="a group to reset (repeatable)")
    which.add_argument("--all-groups", action="store_true", help="every group of the cluster")
    reset.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    reset.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,...]",
        help="every partition of TOPIC (the registry's, and those the group has offsets for), or only P,... "
        "(repeatable)",
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    to.add_argument("--to-earliest", action="store_true", help="offset 0 (groupcoord keeps no log to start later)")
    to.add_argument("--to-current", action="store_true", help="the committed offset (a plan to --export)")
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (may be negative; >= 0)")
    to.add_argument(
        "--from-file",
        metavar="FILE",
        help="the offsets of a CSV file (TOPIC,PARTITION,OFFSET or GROUP,TOPIC,PARTITION,OFFSET lines, as --export "
        "writes; - reads stdin); the file names the partitions",
    )
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="print the plan, commit nothing (the default)")
    run_mode.add_argument("--execute", action="store_true", help="commit the plan")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV, the format --from-file reads")
