"""The `groupcoord` command line: one subcommand per job (`node`, `cluster`, `groups`, `members`, `offsets`,
`topics`, `health`, `chaos`, `events`, `analyze`, `bench`, `token`, `certs`, `completion`).

Handlers import what they run lazily (the node's server, the bench, Spark); the SDK, and with it grpc, loads with the
flags. The console script enters through groupcoord/console.py, which sets gRPC's fork support off first.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from groupcoord import admin_cli, bench_cli, certs_cli, cluster_admin_cli, events_cli, offsets_cli
from groupcoord.base.errors import UserError
from groupcoord.chaos import cli as chaos_cli
from groupcoord.client.cli_flags import add_security_flags, client_security, parse_bootstrap
from groupcoord.node import config as node_config
from groupcoord.pipeline import cli as pipeline_cli

# `health --check`: the health service names a node answers (node/server.py).
HEALTH_CHECKS = {
    "cluster": "groupcoord.v1.GroupCoordinator",
    "readiness": "groupcoord.readiness",
    "liveness": "groupcoord.liveness",
}
# The exit status of a process that SIGPIPE ended (128 + 13), which is what a shell reports for `yes | head`.
SIGPIPE_EXIT = 141


def _run_node(args: argparse.Namespace) -> int:
    from groupcoord.node.server import run  # grpc and uvloop load only for the command that serves

    return run(node_config.load(args, os.environ))


def _cluster_up(args: argparse.Namespace) -> int:
    from groupcoord import localcluster

    # The flags' dest names are UpOptions' fields.
    opts = {f.name: getattr(args, f.name) for f in dataclasses.fields(localcluster.UpOptions)}
    return localcluster.up(localcluster.UpOptions(**opts))


def _cluster_down(args: argparse.Namespace) -> int:
    from groupcoord import localcluster

    return localcluster.down(args.dir, purge=args.purge)


def _cluster_status(args: argparse.Namespace) -> int:
    from groupcoord import localstatus

    return localstatus.status(args.dir, as_json=args.json)


def _one_node(args: argparse.Namespace) -> int:
    from groupcoord import localnodes

    if args.action == "stop-node":
        return localnodes.stop_node(args.dir, args.node_id)
    if args.action == "start-node":
        return localnodes.start_node(args.dir, args.node_id, args.timeout)
    return localnodes.restart_node(args.dir, args.node_id, args.timeout)


def _add_one_node(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], default_dir: Path, dir_help: str
) -> None:
    what = {
        "stop-node": "stop one node of the cluster (SIGTERM, SIGKILL after 10 s); the others keep serving",
        "start-node": "start a stopped node again, from its own data, and wait until it serves",
        "restart-node": "stop one node, then start it again and wait until it serves",
    }
    for name, help_ in what.items():
        parser = actions.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        parser.add_argument("node_id", type=int, metavar="N", help="the node's id (node N runs on 127.0.0.N)")
        parser.add_argument("--dir", type=Path, default=default_dir, help=dir_help)
        if name != "stop-node":
            parser.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait (60)")
        parser.set_defaults(handler=_one_node)


def _health(args: argparse.Namespace) -> int:
    from groupcoord.node.launcher import health

    if args.address:
        addresses = [args.address]
    elif os.environ.get("GROUPCOORD_BOOTSTRAP"):
        addresses = parse_bootstrap(os.environ["GROUPCOORD_BOOTSTRAP"])
    else:
        addresses = [f"127.0.0.1:{os.environ.get(node_config.ENV_PREFIX + 'PORT', '50051')}"]
    security = client_security(args)
    serving = True
    for address in addresses:
        status = health(address, args.timeout, security, HEALTH_CHECKS[args.check])
        print(f"{address}: {status}")
        serving = serving and status == "SERVING"
    return 0 if serving else 1


def _add_health(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = commands.add_parser(
        "health",
        help="ask a node whether it is serving (exit 0) or not (exit 1), e.g. as a container health check",
        description="The gRPC health check of one node (or of every node of $GROUPCOORD_BOOTSTRAP). `cluster` (the "
        "default): SERVING once every partition has a leader; `readiness`: this node serves (it has learned every "
        "partition's leader once, and reaches a majority of the nodes); `liveness`: the node runs. Exit 0 when "
        "every node asked is SERVING, 1 otherwise (NOT_SERVING, or UNREACHABLE).",
    )
    health.add_argument(
        "--check", choices=tuple(HEALTH_CHECKS), default="cluster", help="which check (default: %(default)s)"
    )
    health.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="the node (default: every node of $GROUPCOORD_BOOTSTRAP, else 127.0.0.1 and $GROUPCOORD_PORT, or 50051)",
    )
    health.add_argument("--timeout", type=float, default=2.0, metavar="S", help="seconds (default: 2)")
    add_security_flags(health)
    health.set_defaults(handler=_health)


def _token_hash(args: argparse.Namespace) -> int:
    import getpass

    from groupcoord.node.auth import hash_token

    token = (getpass.getpass("token: ") if sys.stdin.isatty() else sys.stdin.readline()).strip()
    if not token:
        raise UserError("no token given on stdin")
    print(hash_token(token))
    return 0


def _token_scram(args: argparse.Namespace) -> int:
    import base64
    import getpass

    from groupcoord.node.kafka.sasl import scram_credential

    password = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    if not password:
        raise UserError("no password given on stdin")
    if args.iterations < 4096:
        raise UserError(f"--iterations {args.iterations}: at least 4096 (RFC 7677)")
    c = scram_credential(args.identity, args.mechanism, password, args.iterations)
    b64 = {k: base64.b64encode(getattr(c, k)).decode() for k in ("salt", "stored_key", "server_key")}
    print(f'[[scram]]\nidentity = "{c.identity}"\nmechanism = "{c.mechanism}"')
    print(f'salt = "{b64["salt"]}"\nstored_key = "{b64["stored_key"]}"\nserver_key = "{b64["server_key"]}"')
    print(f"iterations = {c.iterations}")
    return 0


def _add_token(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = commands.add_parser(
        "token",
        help="bearer tokens for the ACL file",
        description="Print the SHA-256 digest that the ACL file's [[tokens]] entries hold for a token "
        "(docs/SECURITY.md#authorization). The token is read from stdin (typed without echo on a terminal), "
        "never from the command line, so it stays out of shell history and `ps`.",
    )
    actions = token.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    actions.add_parser("hash", help="read a token on stdin, print its sha256 for the ACL file").set_defaults(
        handler=_token_hash
    )
    scram = actions.add_parser(
        "scram",
        help="read a password on stdin, print the [[scram]] entry of the ACL file for the Kafka listener's SASL",
        description="Salts and hashes the password (RFC 5802) into the entry a node checks SCRAM proofs against; "
        "the password itself is printed nowhere and kept nowhere.",
    )
    scram.add_argument("--identity", required=True, help="the SCRAM user name, and the identity the ACL judges")
    scram.add_argument("--mechanism", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"), default="SCRAM-SHA-256")
    scram.add_argument("--iterations", type=int, default=8192, help="PBKDF2 iterations, 4096 or more")
    scram.set_defaults(handler=_token_scram)


def _add_cluster(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = commands.add_parser(
        "cluster",
        help="start, stop and inspect a local cluster of node processes on 127.0.0.1..N",
        description="A cluster of 3-5 node processes on this machine, node i on 127.0.0.i, everything it needs "
        "(state.json, secret, data dirs, JSON logs) under --dir. See docs/OPERATIONS.md#local-cluster.",
    )
    actions = cluster.add_subparsers(title="actions", dest="action", required=True, metavar="ACTION")
    dir_help = "the cluster's directory (default: %(default)s)"
    default_dir = Path(".groupcoord/cluster")

    up = actions.add_parser(
        "up",
        help="start the cluster (or restart the one in --dir) and wait until every partition has a leader",
        description="Start N node processes, wait until each is SERVING (every partition has a leader), print "
        "their addresses. On a dir whose nodes are stopped it restarts the same cluster with its data; "
        "nodes, partitions and ports are then those it was created with.",
        epilog="Extra flags after -- go to every `groupcoord node`, e.g. "
        "`groupcoord cluster up -- --log-level=debug --group-initial-rebalance-delay-ms=0`.",
    )
    up.add_argument("--nodes", type=int, metavar="N", help="3 to 5 (default: 3)")
    up.add_argument("--dir", type=Path, default=default_dir, help=dir_help)
    up.add_argument("--partitions", type=int, metavar="P", help="coordinator partitions (default: 16)")
    up.add_argument("--base-port", type=int, metavar="PORT", help="client gRPC port of every node (default: 50051)")
    up.add_argument(
        "--raft-base-port", type=int, metavar="PORT", help="partition k's Raft port is this + k (default: 25051)"
    )
    up.add_argument(
        "--kafka-base-port",
        type=int,
        metavar="PORT",
        help="Kafka listener port of every node, on its own 127.0.0.N (default: 9092, TLS with --tls; -1: none); "
        "a restart keeps the last one given",
    )
    up.add_argument("--metrics", action="store_true", help="serve Prometheus metrics on every node")
    up.add_argument("--metrics-port", type=int, metavar="PORT", help="metrics port (default: 9464; implies --metrics)")
    up.add_argument("--json", action="store_true", help="print the nodes as JSON")
    up.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait (default: 60)")
    up.add_argument(
        "--foreground",
        action="store_true",
        help="stay in the foreground printing changes (a node exits, a partition changes leader) until Ctrl-C "
        "or SIGTERM, then stop the cluster",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="serve TLS with client certificates required, from a development CA made in DIR/tls on first use",
    )
    up.add_argument(
        "--tls-dir", type=Path, metavar="CERTS", help="use the certificates of `certs init CERTS` (implies --tls)"
    )
    up.add_argument("node_args", nargs="*", metavar="-- NODE_FLAG", help="flags for every `groupcoord node` (after --)")
    up.set_defaults(handler=_cluster_up)

    down = actions.add_parser(
        "down",
        help="stop the cluster's nodes (SIGTERM, SIGKILL after 10 s)",
        description="Stop the nodes in --dir's state.json: SIGTERM, then SIGKILL after 10 s. A pid that is no "
        "longer this cluster's node is left alone. Exit 0 also when nothing was running.",
    )
    down.add_argument("--dir", type=Path, default=default_dir, help=dir_help)
    down.add_argument("--purge", action="store_true", help="then remove the dir: data, logs, secret")
    down.set_defaults(handler=_cluster_down)

    status = actions.add_parser(
        "status",
        help="each node's health and the partition leaders",
        description="Each node's process and health, and DescribeCluster from the first node that answers. "
        "Exit 0 when every node is SERVING, 1 otherwise.",
    )
    status.add_argument("--dir", type=Path, default=default_dir, help=dir_help)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=_cluster_status)
    _add_one_node(actions, default_dir, dir_help)
    cluster_admin_cli.register_cluster_describe(actions)
    cluster_admin_cli.register_cluster_membership(actions)


def _completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0


def _add_completion(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, tcsh)",
        description="A completion script for every command and flag, generated from the parser itself (shtab). "
        'bash: `eval "$(groupcoord completion bash)"` in ~/.bashrc, or save it as '
        "/etc/bash_completion.d/groupcoord; zsh: save it as a file `_groupcoord` on $fpath.",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    completion.set_defaults(handler=_completion)


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
    _add_cluster(commands)
    _add_health(commands)
    _add_token(commands)
    admin_cli.register(commands)
    offsets_cli.register(commands)
    cluster_admin_cli.register_settings(commands)
    chaos_cli.register(commands)
    events_cli.register(commands)
    pipeline_cli.register(commands)
    bench_cli.register(commands)
    certs_cli.register(commands)
    _add_completion(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
        sys.stdout.flush()  # a reader that went away shows here, not as noise at the interpreter's exit
        return code
    except UserError as exc:
        print(f"groupcoord: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout's reader closed early (`| head`): stop quietly with the status of a process ended by SIGPIPE, as
        # other command-line tools do; stdout goes to /dev/null so that the interpreter's own flush stays quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_EXIT
