"""`groupcoord chaos`: run the chaos harness against a fresh local cluster, or re-check a saved run."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from pathlib import Path

from groupcoord.base.errors import UserError

DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, None: 1}


def _duration(text: str) -> float:
    match = DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 30m or 1h, got {text!r}")
    return float(match.group(1)) * UNIT_S[match.group(2)]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = commands.add_parser(
        "chaos",
        help="kill, pause and partition nodes of a local cluster under SDK workers, then check the invariants",
        description="Start a fresh local cluster and a fleet of SDK workers in several groups, inject faults on "
        "a seeded schedule (kill -9 of a coordinator in the join and sync phases, SIGSTOP, graceful restart, a "
        "partition of a leader from the other nodes, full-cluster restart, worker kills) while workers keep "
        "rebalancing and committing, then check the recorded histories: exclusive ownership, no lost or "
        "backward offsets, growing generations, member ids never reused, convergence, no node crash. "
        "Writes report.txt and report.json in --out; exit 0 with no violation, 1 with any. "
        "Partitions need root (network namespaces); otherwise a pause stands in. See docs/RELIABILITY.md.",
    )
    chaos.add_argument("--nodes", type=int, default=3, choices=(3, 4, 5), help="cluster size (default: 3)")
    chaos.add_argument("--partitions", type=int, default=4, help="coordinator partitions (default: 4)")
    chaos.add_argument("--groups", type=int, default=3, help="groups (default: 3)")
    chaos.add_argument("--workers", type=int, default=12, help="workers in all (default: 12)")
    chaos.add_argument("--seed", type=int, default=1, help="the schedule's seed; the report says how to replay")
    chaos.add_argument("--faults", type=int, default=12, help="faults to inject, without --duration (default: 12)")
    chaos.add_argument("--duration", type=_duration, metavar="D", help="inject faults for D (e.g. 30m) instead")
    chaos.add_argument(
        "--schedule", choices=("rotation", "random"), default="rotation",
        help="rotation: every fault kind in a fixed order; random: shuffled by the seed (default: rotation)",
    )  # fmt: skip
    chaos.add_argument("--network", choices=("auto", "netns", "loopback"), default="auto")
    chaos.add_argument("--session-timeout-ms", type=int, default=4_000)
    chaos.add_argument("--out", type=Path, help="run directory (default: .groupcoord/chaos/<time>-seed<seed>)")
    chaos.add_argument("--check", type=Path, metavar="RUN_DIR", help="only re-check a saved run directory")
    chaos.set_defaults(handler=_run)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    from groupcoord.chaos.report import check_dir, render_text, write_report

    if args.check is not None:
        if not (args.check / "harness.jsonl").exists():
            raise UserError(f"{args.check} is not a chaos run directory (no harness.jsonl)")
        result = check_dir(args.check)
        write_report(result, args.check)
        print(render_text(result, args.check))
        return 0 if result.ok else 1
    from groupcoord.chaos.harness import ChaosOptions, Harness
    from groupcoord.chaos.network import Namespaces

    if args.network == "netns" and not Namespaces.available():
        raise UserError("--network netns needs root and iproute2 (`ip`)")
    if args.workers < args.groups or args.groups < 1:
        raise UserError("need at least one worker per group")
    out = args.out or Path(".groupcoord/chaos") / f"{time.strftime('%Y%m%d-%H%M%S')}-seed{args.seed}"
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty; pick another --out")
    argv = ["groupcoord", "chaos", *sys.argv[2:]] if sys.argv[1:2] == ["chaos"] else ["groupcoord", "chaos"]
    opts = ChaosOptions(
        out=out, nodes=args.nodes, partitions=args.partitions, groups=args.groups, workers=args.workers,
        seed=args.seed, faults=args.faults, duration_s=args.duration, schedule=args.schedule,
        network=args.network, session_timeout_ms=args.session_timeout_ms, argv=argv,
    )  # fmt: skip
    print(f"chaos run in {out} (seed {args.seed}) ...", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C: nodes, workers, namespaces
    result = Harness(opts).run()
    print(render_text(result, out))
    return 0 if result.ok else 1
