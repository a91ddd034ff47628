"""A chaos worker: one SDK member that owns partitions, commits progress, and records its history.

    python -m groupcoord.chaos.worker --history FILE --worker NAME --incarnation N --group G --topic t:8 ...

It records what it believes (assignment acquired and released, with why) and what the coordinator
acknowledged (offsets read and committed, with send and answer times) in the format of `chaos/history.py`.
Progress is re-read with OffsetFetch at every new generation before the first commit, so a worker never
continues from its own stale view: an offset that goes backwards can only come from the coordinator.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from groupcoord.chaos.history import Recorder
from groupcoord.client import Assignment, GroupMember
from groupcoord.client.assignors import ASSIGNORS, Assignor, get_assignor, supported_protocols
from groupcoord.client.errors import GroupcoordError, RetriableError
from groupcoord.client.member import REVOKE_CLOSED
from groupcoord.client.protocol import Subscription


def _name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


class SlowAssignor:
    """A leader whose assignment takes a while (a big fleet, a slow plug-in): it keeps the group in
    CompletingRebalance long enough for the harness to land a fault in the sync phase."""

    def __init__(self, inner: Assignor, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s
        self.name = inner.name
        self.supported_protocols = supported_protocols(inner)

    def assign(self, subscriptions: dict[str, Subscription]) -> dict[str, Assignment]:
        time.sleep(self.delay_s)
        return self.inner.assign(subscriptions)


async def run(args: argparse.Namespace) -> int:
    history = Recorder(Path(args.history))
    history.write(
        "start", worker=args.worker, incarnation=args.incarnation, group=args.group, instance=args.instance,
        pid=os.getpid(), session_timeout_ms=args.session_timeout_ms,
    )  # fmt: skip
    member: GroupMember

    def assigned(assignment: Assignment) -> None:
        history.write("assigned", member=member.member_id, generation=member.generation_id,
                      partitions=[_name(tp) for tp in assignment.partitions])  # fmt: skip

    def revoked(assignment: Assignment) -> None:
        history.write("revoked", member=member.member_id, generation=member.generation_id,
                      partitions=[_name(tp) for tp in assignment.partitions], reason=member.revoke_reason,
                      last_heartbeat_ok=member.last_heartbeat_ok)  # fmt: skip

    assignor = get_assignor(args.assignor)
    member = GroupMember(
        args.bootstrap.split(","),
        args.group,
        dict(args.topic),
        client_id=args.worker,
        group_instance_id=args.instance,
        assignor=SlowAssignor(assignor, args.assign_delay_ms / 1000) if args.assign_delay_ms else assignor,
        session_timeout_ms=args.session_timeout_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        on_assigned=assigned,
        on_revoked=revoked,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await member.start()
    # Stopping cancels the work even mid-call: a commit retried against an unreachable cluster must not
    # hold the worker past its SIGTERM.
    work = asyncio.ensure_future(_work(member, history, args.commit_interval_s))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([work, stopping], return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
    except GroupcoordError as exc:
        history.write("fatal", member=member.member_id, generation=member.generation_id, error=str(exc))
        return 1
    finally:
        for task in (work, stopping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, GroupcoordError):
                await task
        await member.close()
    history.write("closed", member=member.member_id, generation=member.generation_id, reason=REVOKE_CLOSED)
    return 0


async def _work(member: GroupMember, history: Recorder, interval_s: float) -> None:
    """Commits progress forever; returns (or raises the member's error) only when the member stops. A commit or
    fetch that ran out of its deadline (the cluster unreachable for a while) is tried again at the next turn."""
    progress: dict[tuple[str, int], int] = {}
    fetched_generation = -1
    failed = asyncio.ensure_future(member.wait_failed())
    while True:
        await asyncio.wait([failed], timeout=interval_s)
        if failed.done():
            failed.result()
            return
        generation, owned = member.generation_id, member.assignment.partitions
        if not owned:
            continue
        if generation != fetched_generation:
            sent = time.monotonic()
            try:
                offsets = await member.committed()
            except RetriableError:
                continue
            history.write("fetch", member=member.member_id, generation=generation, sent=sent,
                          offsets={_name(tp): o for tp, o in offsets.items()})  # fmt: skip
            progress, fetched_generation = offsets, generation
            continue
        if member.generation_id != generation:
            continue
        batch = {tp: progress.get(tp, 0) + 1 for tp in owned}
        sent = time.monotonic()
        try:
            codes = await member.commit(batch)
        except RetriableError:
            continue
        acked = {tp: offset for tp, offset in batch.items() if codes.get(tp) == 0}
        if acked:
            history.write("commit", member=member.member_id, generation=generation, sent=sent,
                          offsets={_name(tp): o for tp, o in acked.items()})  # fmt: skip
        rejected = {_name(tp): codes.get(tp, -1) for tp in batch if tp not in acked}
        if rejected:
            history.write("commit_rejected", member=member.member_id, generation=generation, sent=sent,
                          codes=rejected)  # fmt: skip
        progress.update(acked)


def _topic(text: str) -> tuple[str, int]:
    name, _, count = text.partition(":")
    if not name or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITIONS, got {text!r}")
    return name, int(count)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--incarnation", type=int, default=0)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", type=_topic, action="append", required=True, help="TOPIC:PARTITIONS")
    parser.add_argument("--instance", default="", help="group_instance_id: a static member")
    parser.add_argument("--assignor", default="range", choices=sorted(ASSIGNORS))
    parser.add_argument("--assign-delay-ms", type=int, default=0)
    parser.add_argument("--session-timeout-ms", type=int, default=4_000)
    parser.add_argument("--rebalance-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=400)
    parser.add_argument("--commit-interval-s", type=float, default=0.2)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(run(parse(sys.argv[1:]))))
