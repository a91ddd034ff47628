"""Runs one scenario `--runs` times, each on a fresh cluster that is always stopped, and prints every run and
the per-figure medians."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from groupcoord.base.errors import UserError
from groupcoord.bench import cooperative, durability, etcd, flood, groups, idle, kafka_bench, offsets, scale
from groupcoord.bench.cluster import BASE_FLAGS, MANY_MEMBERS_FLAGS, BenchCluster
from groupcoord.bench.members import BenchError
from groupcoord.bench.stats import emit, machine, median_of
from groupcoord.client.cli_flags import FLAGS, client_security, parse_bootstrap
from groupcoord.client.security import PLAINTEXT, ClientSecurity

# uvloop.run takes a coroutine, not any awaitable.
Scenario = Callable[[BenchCluster, argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]
KILLS_A_NODE = ("failover", "scale")
# Scenarios that start several clusters per run, each with node flags of its own (bench/durability.py).
OWN_CLUSTERS = ("durability",)
# Scenarios that start their cluster with the Kafka listener on (bench/kafka_bench.py).
KAFKA = ("kafka",)
# Scenarios that start a reference system next to their cluster (bench/etcd.py).
REFERENCE = ("etcd",)


def _scenario(name: str, index: int = 0) -> Scenario:
    table: dict[str, Scenario] = {
        "commit-latency": lambda c, a: offsets.commit_latency(c, a.ops, a.rpc == "batched"),
        "commit-throughput": lambda c, a: offsets.commit_throughput(
            c, a.in_flight, a.duration, a.groups, a.rpc == "batched"
        ),
        "join": lambda c, a: groups.join(c, a.members, a.heartbeat_interval_ms),
        "rebalance": lambda c, a: groups.rebalance(c, a.members, a.heartbeat_interval_ms),
        "scale-out": lambda c, a: cooperative.scale_out(c, a.members, a.partitions_per_member, a.heartbeat_interval_ms),
        "failover": lambda c, a: groups.failover(c, a.groups, a.members_per_group, a.heartbeat_interval_ms),
        "heartbeats": lambda c, a: scale.heartbeats(c, a),
        "scale": lambda c, a: scale.scale(c, a),
        "flood": lambda c, a: flood.flood(c, a),
        "idle": lambda c, a: idle.idle(c, a.settle, a.window),
        # The run's index turns the order of Kafka and gRPC round from one run to the next.
        "kafka": lambda c, a: kafka_bench.kafka_vs_grpc(c, a, index),
        # The same: the run's index turns which system goes first.
        "etcd": lambda c, a: etcd.etcd_vs_groupcoord(c, a, index),
    }
    return table[name]


def _options(args: argparse.Namespace) -> dict[str, Any]:
    skip = {"handler", "command", "scenario", "json", "runs", "bootstrap", "node_flag", *FLAGS}
    return {k: v for k, v in vars(args).items() if k not in skip}


def _run_once(
    args: argparse.Namespace,
    index: int,
    flags: list[str],
    bootstrap: list[str] | None,
    security: ClientSecurity,
    flags_by_mode: dict[str, list[str]],
) -> tuple[dict[str, Any], list[str], dict[str, list[str]]]:
    """One run on a cluster of its own (or the --bootstrap one) → its figures, the node flags, durability's flags."""
    if args.scenario in OWN_CLUSTERS:
        result, flags_by_mode = durability.run_once(flags, args, index)
        return result, [*BASE_FLAGS, *flags], flags_by_mode
    if args.scenario in KAFKA or args.scenario in REFERENCE:  # the reference measures Kafka's path too
        cluster = kafka_bench.cluster(flags)
    else:
        cluster = BenchCluster(flags, bootstrap, security=security)
    try:
        cluster.start()
        result = uvloop.run(_scenario(args.scenario, index)(cluster, args))
    finally:
        cluster.stop()
    return result, cluster.node_flags if cluster.owned else [], flags_by_mode


def run(args: argparse.Namespace) -> int:
    bootstrap = parse_bootstrap(args.bootstrap) if args.bootstrap else None
    if bootstrap and args.scenario in KILLS_A_NODE:
        raise UserError(f"{args.scenario} kills a node: it needs a cluster of its own (no --bootstrap)")
    if bootstrap and args.scenario in OWN_CLUSTERS:
        raise UserError(f"{args.scenario} sets node flags: it needs clusters of its own (no --bootstrap)")
    if bootstrap and args.scenario in KAFKA:
        raise UserError(f"{args.scenario} starts its cluster with the Kafka listener on: no --bootstrap")
    if bootstrap and args.scenario in REFERENCE:
        raise UserError(f"{args.scenario} compares a cluster of its own with the reference: no --bootstrap")
    if args.scenario in REFERENCE:
        etcd.etcd_binary(args.etcd)  # before any cluster starts: says what is missing
    if args.scenario == "durability" and any(f.startswith("--durability") for f in args.node_flag):
        raise UserError("durability sets --durability on each of its clusters: no --node-flag=--durability")
    security = client_security(args)
    if security != PLAINTEXT and not bootstrap:
        raise UserError("--ca-file, --cert-file, --key-file and --token are for a --bootstrap cluster")
    runs: list[dict[str, Any]] = []
    node_flags: list[str] = []
    flags_by_mode: dict[str, list[str]] = {}
    for index in range(args.runs):
        # flood and idle measure the nodes' defaults.
        flags = args.node_flag if args.scenario in ("flood", "idle") else [*MANY_MEMBERS_FLAGS, *args.node_flag]
        if args.scenario == "scale":
            flags = [*scale.NODE_FLAGS, *flags]
        load = round(os.getloadavg()[0], 2)
        try:
            result, node_flags, flags_by_mode = _run_once(args, index, flags, bootstrap, security, flags_by_mode)
        except BenchError as exc:  # what the cluster answered, or did not in time: a message, not a traceback
            raise UserError(f"bench {args.scenario}, run {index + 1}: {exc}") from None
        runs.append({"loadavg_1m_before": load, **result})
        # Each run as it ends, so that a long series that is cut short still leaves its figures.
        print(f"run {len(runs)}: {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    median = median_of(runs)
    emit(
        {
            "scenario": args.scenario,
            "options": _options(args),
            "cluster": {
                "bootstrap": bootstrap,
                "node_flags": node_flags,
                # durability: all the node flags of each mode's clusters, its --durability included.
                **({"node_flags_by_mode": flags_by_mode} if flags_by_mode else {}),
            },
            "machine": machine(),
            "median": median,
            # kafka: the issue's targets against the median of the runs' own ratios; etcd: the ratios are in the
            # runs (and their median) themselves.
            **({"targets": kafka_bench.targets(median)} if args.scenario in KAFKA else {}),
            "runs": runs,
        },
        args.json,
    )
    return 0
