"""`groupcoord events export`: one complete, de-duplicated event set from every node, read over the API from a
running cluster (`--bootstrap`) or from the nodes' data dirs."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from groupcoord.base.errors import UserError
from groupcoord.client.cli_flags import add_security_flags, client_security, unreachable_hint

if TYPE_CHECKING:
    from groupcoord.client.admin import Admin
    from groupcoord.node.events import Export, Merger

EVENTS_FILE, MANIFEST_FILE = "events.jsonl", "manifest.json"
EXIT_INCOMPLETE = 1


def _data_dirs(args: argparse.Namespace) -> list[Path]:
    from groupcoord.node.events import EVENTS_DIR

    data_dirs = list(args.data_dir or [])
    if args.cluster_dir is not None:
        from groupcoord.localstate import ClusterState

        state = ClusterState.load(args.cluster_dir)
        if state is None:
            raise UserError(f"no cluster in {args.cluster_dir} (no state.json)")
        data_dirs += [Path(node.data_dir) for node in state.nodes]
    missing = [str(d) for d in data_dirs if not (d / EVENTS_DIR).is_dir()]
    if missing:
        raise UserError(f"no {EVENTS_DIR}/ in {', '.join(missing)}: not a node's data dir, or events are off")
    return data_dirs


async def _read_node(merger: Merger, admin: Admin, node_id: int, address: str) -> None:
    """Every partition of one node, fed to the merger per partition (a stream's chunks end on whole lines)."""
    lines: dict[int, list[str]] = {}
    async for reply in admin.read_events(address):
        lines.setdefault(reply.partition, []).extend(reply.lines.decode(errors="replace").splitlines())
    for partition, partition_lines in sorted(lines.items()):
        merger.add(f"node {node_id} ({address}) partition {partition}", partition_lines)


def _from_cluster(args: argparse.Namespace, merger: Merger) -> tuple[list[str], list[str]]:
    """Streams the event files of every node the cluster lists; (nodes read, nodes that failed and why)."""
    import grpc

    from groupcoord.admin_cli import Unreachable
    from groupcoord.client.admin import Admin
    from groupcoord.client.cli_flags import parse_bootstrap
    from groupcoord.client.errors import BootstrapUnreachable, GroupcoordError

    security = client_security(args)

    async def main() -> tuple[list[str], list[str]]:
        async with Admin(parse_bootstrap(args.bootstrap), deadline_s=args.timeout, security=security) as admin:
            cluster = await admin.describe_cluster()
            read, failed = [], []
            for node in cluster.nodes:  # one at a time: a node's events are held in memory until merged
                address = f"{node.host}:{node.port}"
                try:
                    await _read_node(merger, admin, node.node_id, address)
                except GroupcoordError as exc:
                    failed.append(f"node {node.node_id} ({address}): {exc}")
                    continue
                except grpc.aio.AioRpcError as exc:  # the node is down, or the stream broke or ran out of time
                    failed.append(f"node {node.node_id} ({address}): {exc.code().name} {exc.details()}")
                    continue
                read.append(f"node {node.node_id} ({address})")
            if len(read) <= len(cluster.nodes) // 2:
                raise UserError(
                    f"only {len(read)} of {len(cluster.nodes)} nodes answered: without a majority events may be "
                    f"missing ({'; '.join(failed)})"
                )
            return read, failed

    try:
        return asyncio.run(main())
    except BootstrapUnreachable as exc:
        raise Unreachable(f"cannot reach the cluster: {exc.message}{unreachable_hint(security)}") from None


def _manifest(merged: Export, sources: list[str], unreachable: list[str]) -> dict[str, object]:
    from groupcoord.coordinator.events import EVENT_VERSION

    partitions: dict[int, dict[str, int]] = {}
    for event in merged.events:
        entry = partitions.setdefault(event["partition"], {"events": 0, "first_index": event["index"]})
        entry["events"] += 1
        entry["last_index"] = event["index"]
    return {
        "version": EVENT_VERSION,
        "events": len(merged.events),
        "sources": sources,
        "unreachable": unreachable,
        "duplicates_dropped": merged.duplicates,
        "bad_lines": merged.bad_lines,
        "conflicts": merged.conflicts,
        "holes": merged.holes,
        "partitions": {str(k): v for k, v in sorted(partitions.items())},
    }


def _export(args: argparse.Namespace) -> int:
    from groupcoord.node.events import Merger, merge

    if args.bootstrap and (args.data_dir or args.cluster_dir):
        raise UserError("give either --bootstrap (a running cluster) or --data-dir / --cluster-dir, not both")
    unreachable: list[str] = []
    if args.bootstrap:
        merger = Merger()
        sources, unreachable = _from_cluster(args, merger)
        merged = merger.result()
    else:
        data_dirs = _data_dirs(args)
        if not data_dirs:
            raise UserError("give --bootstrap, --data-dir (repeatable) or --cluster-dir")
        sources = [str(d) for d in data_dirs]
        merged = merge(data_dirs)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / EVENTS_FILE).open("w") as f:
        for event in merged.events:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")
    manifest_path = args.out / MANIFEST_FILE
    manifest_path.write_text(json.dumps(_manifest(merged, sources, unreachable), indent=2) + "\n")
    print(
        f"{len(merged.events)} events from {len(sources)} sources ({merged.duplicates} duplicates dropped) "
        f"-> {args.out / EVENTS_FILE}"
    )
    for node in unreachable:
        print(f"not read: {node}")
    problems = {
        "unreadable lines skipped": merged.bad_lines,
        "holes: events no source has (every node's files lack them)": merged.holes,
        "conflicting events: replicas disagree": merged.conflicts,
    }
    for what, found in problems.items():
        if found:
            print(f"{len(found)} {what}; see {manifest_path}")
    return EXIT_INCOMPLETE if merged.holes or merged.conflicts else 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    events = commands.add_parser(
        "events",
        help="export the cluster's event history (every committed change, docs/EVENTS.md)",
        description="Every node writes the events of the partitions it replicates to data_dir/events. "
        "`export` merges the files of all nodes into one set, each event once, in log order.",
    )
    actions = events.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="merge the events of every node into OUT/events.jsonl and OUT/manifest.json",
        description="Reads the event files of every node of a running cluster (--bootstrap: the nodes it lists, "
        "over the API) or of the data dirs given, keeps each (partition, index, position) once, writes "
        "OUT/events.jsonl in log order and OUT/manifest.json (counts, index range per partition, unreadable "
        "lines, holes, conflicts). Exit 1 when events are missing (holes) or two nodes disagree about one; "
        "3 when the cluster cannot be reached.",
    )
    export.add_argument("--out", type=Path, required=True, help="output directory")
    export.add_argument(
        "--bootstrap",
        default=os.environ.get("GROUPCOORD_BOOTSTRAP"),
        metavar="HOST:PORT[,...]",
        help="a running cluster: read every node it lists (default: $GROUPCOORD_BOOTSTRAP)",
    )
    export.add_argument("--timeout", type=float, default=120.0, help="seconds for each node's stream (default 120)")
    export.add_argument("--data-dir", type=Path, action="append", metavar="DIR", help="a node's data dir (repeat)")
    export.add_argument("--cluster-dir", type=Path, metavar="DIR", help="a `groupcoord cluster up` dir: all its nodes")
    add_security_flags(export)
    export.set_defaults(handler=_export)
