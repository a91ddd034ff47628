"""The `groupcoord` command line: one subcommand per job (`node` today; cluster, groups, ... later)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version

from groupcoord.errors import UserError
from groupcoord.node import config as node_config


def _run_node(args: argparse.Namespace) -> int:
    from groupcoord.node.server import run  # grpc and uvloop load only for the command that serves

    return run(node_config.load(args, os.environ))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="groupcoord", description="A consumer-group coordinator (Kafka's classic group protocol) over gRPC."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('groupcoord')}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

    node = commands.add_parser(
        "node",
        help="run a coordinator node in the foreground",
        description="Run a coordinator node until SIGTERM or SIGINT. Settings: flags > environment > --config file "
        "> defaults; see docs/CONFIG.md.",
    )
    node_config.add_arguments(node)
    node.set_defaults(handler=_run_node)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UserError as exc:
        print(f"groupcoord: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
