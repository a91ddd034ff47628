"""`groupcoord events export`: one complete, de-duplicated event set from the event files of every node."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from groupcoord.errors import UserError

EVENTS_FILE, MANIFEST_FILE = "events.jsonl", "manifest.json"


def _export(args: argparse.Namespace) -> int:
    from groupcoord.coordinator.events import EVENT_VERSION
    from groupcoord.node.events import EVENTS_DIR, merge

    data_dirs = list(args.data_dir or [])
    if args.cluster_dir is not None:
        from groupcoord import localcluster

        state = localcluster.ClusterState.load(args.cluster_dir)
        if state is None:
            raise UserError(f"no cluster in {args.cluster_dir} (no state.json)")
        data_dirs += [Path(node.data_dir) for node in state.nodes]
    if not data_dirs:
        raise UserError("give --data-dir (repeatable) or --cluster-dir")
    missing = [str(d) for d in data_dirs if not (d / EVENTS_DIR).is_dir()]
    if missing:
        raise UserError(f"no {EVENTS_DIR}/ in {', '.join(missing)}: not a node's data dir, or events are off")
    merged = merge(data_dirs)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / EVENTS_FILE).open("w") as f:
        for event in merged.events:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")
    partitions: dict[int, dict[str, int]] = {}
    for event in merged.events:
        entry = partitions.setdefault(event["partition"], {"events": 0, "first_index": event["index"]})
        entry["events"] += 1
        entry["last_index"] = event["index"]
    manifest = {
        "version": EVENT_VERSION,
        "events": len(merged.events),
        "sources": [str(d) for d in data_dirs],
        "duplicates_dropped": merged.duplicates,
        "bad_lines": merged.bad_lines,
        "conflicts": merged.conflicts,
        "partitions": {str(k): v for k, v in sorted(partitions.items())},
    }
    (args.out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    print(
        f"{len(merged.events)} events from {len(data_dirs)} data dirs ({merged.duplicates} duplicates dropped) "
        f"-> {args.out / EVENTS_FILE}"
    )
    if merged.bad_lines:
        print(f"{len(merged.bad_lines)} unreadable lines skipped, listed in {args.out / MANIFEST_FILE}")
    if merged.conflicts:
        print(f"{len(merged.conflicts)} conflicting events: replicas disagree, see {args.out / MANIFEST_FILE}")
        return 1
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    events = commands.add_parser(
        "events",
        help="export the cluster's event history (every committed change, docs/EVENTS.md)",
        description="Every node writes the events of the partitions it replicates to data_dir/events. "
        "`export` merges the files of all nodes into one set, each event once, in log order.",
    )
    actions = events.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="merge the event files of several nodes into OUT/events.jsonl and OUT/manifest.json",
        description="Reads data_dir/events of every node given, keeps each (partition, index, position) "
        "once, writes OUT/events.jsonl in log order and OUT/manifest.json (counts, index range per partition, "
        "unreadable lines, conflicts). Exit 1 when two nodes disagree about an event.",
    )
    export.add_argument("--out", type=Path, required=True, help="output directory")
    export.add_argument("--data-dir", type=Path, action="append", metavar="DIR", help="a node's data dir (repeat)")
    export.add_argument("--cluster-dir", type=Path, metavar="DIR", help="a `groupcoord cluster up` dir: all its nodes")
    export.set_defaults(handler=_export)
