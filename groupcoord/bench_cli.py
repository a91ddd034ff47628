"""`groupcoord bench SCENARIO`: the benchmarks of docs/PERFORMANCE.md. Each starts its own 3-node cluster on
127.0.0.1-3 (free ports, a temporary dir, --group-initial-rebalance-delay-ms=0) and stops it at the end, or uses
--bootstrap. Prints a table, or JSON with --json. The client load shares the machine with the nodes, so its CPU is
reported too; no target is asserted, figures are reported as measured."""

from __future__ import annotations

import argparse

from groupcoord.client.cli_flags import add_security_flags

# The kinds of `flood` (bench/flood.py, not imported here: `--help` stays quick).
FLOODS = ("connections", "streams", "requests")
SCENARIOS = {
    "commit-latency": "one client, sequential OffsetCommit of one partition → p50/p99/max",
    "commit-throughput": "many commits in flight for a while → ops/s, p50/p99",
    "durability": "commit-latency and commit-throughput on a fresh cluster with --durability=fsync and one with "
    "--durability=memory per run → both side by side and the run's ratios fsync/memory",
    "join": "N members join one fresh group → seconds until all are Stable with an assignment",
    "rebalance": "a Stable group of N, one member leaves → seconds until the rest are Stable again",
    "scale-out": "a Stable group of N SDK members gains one, eager (sticky) and cooperative (cooperative-sticky) → "
    "partitions unowned, partition seconds unowned and seconds until Stable, and the cooperative/eager ratios",
    "failover": "G Stable groups, kill -9 of the node coordinating most → seconds until all heartbeat again",
    "heartbeats": "M members heartbeating at 3 s intervals, M stepped up → the largest M with p99 under a limit",
    "scale": "G groups x 5 members → RSS per node, DescribeGroups/ListGroups latency, failover time",
    "kafka": "commit latency, commit throughput and an M-member join over the Kafka listener (a kio client) next to "
    "gRPC unary and stream commits and the gRPC join, in the same run on one cluster → figures and the run's ratios "
    "kafka/gRPC",
    "etcd": "the reference (not for CI: needs an etcd binary, Debian's etcd-server): a 3-node etcd next to the "
    "cluster, sequential writes, writes in flight and member registrations on both in the same run (aetcd for "
    "etcd, gRPC and Kafka's protocol for groupcoord), and the same calls to a gRPC server that only echoes (the "
    "transport's floor) → figures and the run's ratios groupcoord/etcd and floor/etcd",
    "idle": "nothing connected: the nodes' CPU over a window once settled, and their RSS",
    "flood": "N idle connections, then M streams on one connection, against one node → a good client's p50/p99 "
    "and the node's RSS and fds before, during and after",
}


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated counts, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected counts of at least 1, got {text!r}")
    return sizes


def _floods(text: str) -> list[str]:
    kinds = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [k for k in kinds if k not in FLOODS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(FLOODS)}, got {text!r}")
    return kinds


def _sources(text: str) -> int:
    value = _positive(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"expected at most 100, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table goes to stderr)")
    parser.add_argument("--runs", type=_positive, default=1, metavar="N", help="runs, each on a fresh cluster; "
                        "the output has every run and the per-figure median (default: 1)")  # fmt: skip
    parser.add_argument("--bootstrap", metavar="HOST:PORT,...", help="use this running cluster instead of starting "
                        "one (not for failover and scale, which kill a node, nor durability, which sets a node "
                        "flag)")  # fmt: skip
    parser.add_argument("--node-flag", action="append", default=[], metavar="FLAG", help="extra flag for every node "
                        "the benchmark starts, e.g. --node-flag=--event-loop=asyncio (repeatable)")  # fmt: skip
    add_security_flags(parser)  # for a --bootstrap cluster that serves TLS or wants a token


def _add_options(name: str, p: argparse.ArgumentParser) -> None:
    if name in ("commit-latency", "commit-throughput", "durability", "heartbeats"):
        p.add_argument("--rpc", choices=("batched", "unary"), default="batched",
                       help="heartbeats and commits over the batch streams, one per node for the client process, as "
                       "the SDK sends them; or a unary call each (default: %(default)s)")  # fmt: skip
    if name in ("commit-latency", "durability", "kafka", "etcd"):
        p.add_argument("--ops", type=_positive, default=3000, help="sequential commits (default: %(default)s)")
    if name in ("commit-throughput", "durability", "kafka", "etcd"):
        p.add_argument("--in-flight", type=_positive, default=64, help="concurrent commits (default: %(default)s)")
        p.add_argument("--duration", type=float, default=10.0, metavar="S", help="seconds (default: %(default)s)")
        p.add_argument("--groups", type=_positive, default=8, help="single-member groups the commits are spread "
                       "over, each on a partition of its own while there are partitions left, their leaders as "
                       "evenly loaded as can be (default: %(default)s)")  # fmt: skip
    if name in ("join", "rebalance"):
        p.add_argument("--members", type=_sizes, default=[100, 1000], metavar="N,...",
                       help="group sizes, one fresh group each (default: 100,1000)")  # fmt: skip
        p.add_argument("--heartbeat-interval-ms", type=_positive, metavar="MS",
                       help="members' heartbeat interval (default: max(200, N/2) ms)")  # fmt: skip
    elif name == "scale-out":
        p.add_argument("--members", type=_sizes, default=[50, 200], metavar="N,...",
                       help="group sizes before the scale-out, one fresh group per size and protocol "
                       "(default: 50,200)")  # fmt: skip
        p.add_argument("--partitions-per-member", type=_positive, default=4, metavar="P",
                       help="the topic has P x N partitions (default: %(default)s)")  # fmt: skip
        p.add_argument("--heartbeat-interval-ms", type=_positive, default=1000, metavar="MS",
                       help="members' heartbeat interval (default: %(default)s)")  # fmt: skip
    elif name == "kafka":
        p.add_argument("--members", type=_positive, default=1000, help="members of the join: one fresh group over "
                       "Kafka and one over gRPC (default: %(default)s)")  # fmt: skip
        p.add_argument("--heartbeat-interval-ms", type=_positive, metavar="MS",
                       help="the joining members' heartbeat interval (default: max(200, N/2) ms)")  # fmt: skip
    elif name == "etcd":
        p.add_argument("--members", type=_positive, default=200, help="registrations: etcd leases and keys seen "
                       "by a watch, groupcoord members of one fresh group (default: %(default)s)")  # fmt: skip
        p.add_argument("--etcd", metavar="PATH", help="the etcd binary (default: etcd on PATH)")
    elif name == "failover":
        p.add_argument("--groups", type=_positive, default=30, help="groups, half static (default: %(default)s)")
        p.add_argument("--members-per-group", type=_positive, default=10, help="(default: %(default)s)")
        p.add_argument("--heartbeat-interval-ms", type=_positive, default=300, metavar="MS",
                       help="members' heartbeat interval (default: %(default)s)")  # fmt: skip
    elif name == "heartbeats":
        p.add_argument("--members", type=_sizes, default=[2000, 5000, 10000, 20000], metavar="M,...",
                       help="member counts to try in turn, stopping at the first over the limit "
                       "(default: 2000,5000,10000,20000)")  # fmt: skip
        p.add_argument("--members-per-group", type=_positive, default=20, help="(default: %(default)s)")
        p.add_argument("--interval-ms", type=_positive, default=3000, help="heartbeat interval (default: %(default)s)")
        p.add_argument("--window", type=float, default=15.0, metavar="S", help="measured seconds per step "
                       "(default: %(default)s)")  # fmt: skip
        p.add_argument("--warmup", type=float, metavar="S", help="seconds the members heartbeat unmeasured once "
                       "their groups are formed, at least; then until no partition has changed leader for one "
                       "interval, at most 60 s (default: one interval)")  # fmt: skip
        p.add_argument("--p99-limit-ms", type=float, default=50.0, help="(default: %(default)s)")
        p.add_argument("--clients", type=int, default=0, metavar="N", help="client processes (default: one per "
                       "3,000 heartbeats/s)")  # fmt: skip
    elif name == "scale":
        p.add_argument("--groups", type=_positive, default=10_000, help="(default: %(default)s)")
        p.add_argument("--members-per-group", type=_positive, default=5, help="(default: %(default)s)")
        p.add_argument("--clients", type=_positive, default=2, metavar="N", help="client processes forming the "
                       "groups (default: %(default)s)")  # fmt: skip
        p.add_argument("--samples", type=_positive, default=200, help="DescribeGroups calls timed "
                       "(default: %(default)s)")  # fmt: skip
    elif name == "idle":
        p.add_argument("--settle", type=float, default=10.0, metavar="S", help="seconds waited first, once every "
                       "partition has its preferred leader: past the nodes' raft_quiesce_after_ms (default: "
                       "%(default)s)")  # fmt: skip
        p.add_argument("--window", type=float, default=60.0, metavar="S", help="seconds measured: a minute spans "
                       "a round of the partitions' state checks (default: %(default)s)")  # fmt: skip
    elif name == "flood":
        p.add_argument("--connections", type=_positive, default=2000, help="connections of the connection flood, "
                       "each through the HTTP/2 preface and SETTINGS (default: %(default)s)")  # fmt: skip
        p.add_argument("--sources", type=_sources, default=1, metavar="N", help="local addresses the connection "
                       "flood comes from, 127.0.0.101 on, so that a per-address cap does not stop it all (1: the "
                       "kernel's choice; at most 100; default: %(default)s)")  # fmt: skip
        p.add_argument("--streams", type=_positive, default=10_000, help="streams of a stream flood, all on one "
                       "connection (default: %(default)s)")  # fmt: skip
        p.add_argument("--floods", type=_floods, default=list(FLOODS), metavar="KIND,...", help="the floods, in "
                       "turn: connections; streams (HEADERS of a Heartbeat, its message never sent: the node holds "
                       "each call); requests (HEADERS and the message: the node answers each) (default: "
                       f"{','.join(FLOODS)})")  # fmt: skip
        p.add_argument("--baseline-s", type=float, default=5.0, metavar="S", help="the good client measured before "
                       "any flood (default: %(default)s)")  # fmt: skip
        p.add_argument("--hold-s", type=float, default=5.0, metavar="S", help="seconds each flood is held open "
                       "(default: %(default)s)")  # fmt: skip
        p.add_argument("--after-s", type=float, default=15.0, metavar="S", help="seconds watched after each flood, "
                       "RSS read at +1, +5 and +15 s within them (default: %(default)s)")  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    from groupcoord.bench.runner import run

    return run(args)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "run a benchmark against a fresh local 3-node cluster (docs/PERFORMANCE.md)"
    bench = commands.add_parser("bench", help=text, description=__doc__.split("`: ", 1)[1])
    scenarios = bench.add_subparsers(title="scenarios", dest="scenario", required=True, metavar="SCENARIO")
    for name, text in SCENARIOS.items():
        p = scenarios.add_parser(name, help=text, description=text)
        _common(p)
        _add_options(name, p)
        p.set_defaults(handler=_run)
