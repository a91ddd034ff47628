"""A demo worker: owns partitions of virtual topics through a groupcoord group and commits its progress.

    python examples/worker.py --group demo --topic orders:12 [--instance w1] [--bootstrap host:port,...]
        [--ca-file ca.pem --cert-file admin.pem --key-file admin-key.pem]   (a TLS cluster: `cluster up --tls`)

Every assignment change is printed as one JSON line (event, member, generation, partitions), so people and
tests can follow who owns what. Each second the worker "processes" one record per owned partition and
commits the next offsets. SIGTERM or Ctrl-C closes it (a static member keeps its place in the group).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time

from groupcoord.base.errors import UserError
from groupcoord.client import Assignment, GroupMember, RetriableError
from groupcoord.client.cli_flags import add_security_flags, client_security

DEFAULT_BOOTSTRAP = "127.0.0.1:50051,127.0.0.2:50051,127.0.0.3:50051"


def _topic(text: str) -> tuple[str, int]:
    name, _, count = text.partition(":")
    if not name or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITIONS, got {text!r}")
    return name, int(count)


def _say(event: str, member: GroupMember, **extra: object) -> None:
    line = {"event": event, "t": time.time(), "member": member.member_id, "instance": member.group_instance_id}
    line.update(extra)
    print(json.dumps(line), flush=True)


async def main(args: argparse.Namespace) -> int:
    member: GroupMember

    def assigned(assignment: Assignment) -> None:
        parts = [f"{t}-{p}" for t, p in assignment.partitions]
        _say("assigned", member, generation=member.generation_id, partitions=parts)

    def revoked(assignment: Assignment) -> None:
        _say(
            "revoked",
            member,
            generation=member.generation_id,
            partitions=[f"{t}-{p}" for t, p in assignment.partitions],
        )

    member = GroupMember(
        args.bootstrap.split(","),
        args.group,
        dict(args.topic),
        client_id=args.instance or f"worker-{os.getpid()}",
        group_instance_id=args.instance,
        assignor=args.assignor,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        on_assigned=assigned,
        on_revoked=revoked,
        security=args.security,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await member.start()
    progress: dict[tuple[str, int], int] = {}
    owned_before: tuple[tuple[str, int], ...] = ()
    try:
        while not stop.is_set():
            await asyncio.wait([asyncio.ensure_future(stop.wait())], timeout=args.commit_interval_s)
            owned = member.assignment.partitions
            if not owned:
                continue
            try:
                if owned != owned_before:
                    # New partitions continue from what their previous owner committed, never from our old view.
                    progress = await member.committed()
                    owned_before = owned
                batch = {tp: progress.get(tp, 0) + 1 for tp in owned}
                codes = await member.commit(batch)
            except RetriableError as exc:  # no coordinator for default_api_timeout_ms: try again next turn
                _say("commit_failed", member, error=str(exc))
                continue
            progress.update({tp: off for tp, off in batch.items() if codes.get(tp) == 0})
            _say("committed", member, generation=member.generation_id,
                 offsets={f"{t}-{p}": o for (t, p), o in batch.items() if codes.get((t, p)) == 0})  # fmt: skip
    finally:
        await member.close()
        _say("closed", member)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("GROUPCOORD_BOOTSTRAP", DEFAULT_BOOTSTRAP))
    parser.add_argument("--group", default="demo")
    parser.add_argument("--topic", type=_topic, action="append", required=True, help="TOPIC:PARTITIONS")
    parser.add_argument("--instance", default="", help="group_instance_id: a static member")
    parser.add_argument("--assignor", default="range", choices=("range", "roundrobin", "sticky"))
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    parser.add_argument("--commit-interval-s", type=float, default=1.0)
    add_security_flags(parser)
    args = parser.parse_args(argv)
    try:
        args.security = client_security(args)
    except UserError as exc:
        parser.error(str(exc))
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
