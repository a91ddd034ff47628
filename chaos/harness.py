"""One chaos run: a fresh local cluster, a worker fleet, faults on a seeded schedule, then the checker.

Phases: start the cluster and the workers → inject faults (each followed by recovery: every node back and
every partition led) while churn workers restart on purpose → quiesce → wait until every group is Stable with
exactly its live members (liveness) → stop the workers → read the final offsets → stop the nodes → check.
"""

from __future__ import annotations

import itertools
import json
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.chaos.cluster import ChaosCluster
from groupcoord.chaos.faults import IDLE_GROUPS, NODE_FAULTS, ROTATION, Faults
from groupcoord.chaos.history import HARNESS_FILE, Recorder
from groupcoord.chaos.network import Loopback, Namespaces
from groupcoord.chaos.report import check_dir, write_report
from groupcoord.chaos.verdict import Result
from groupcoord.chaos.workers import Fleet, WorkerPlan

# The node log line of a replica divergence (raft/digest.py) and what the history keeps of it.
ALARM_EVENT = "partition.digest_mismatch"
ALARM_FIELDS = ("event", "partition", "index", "ts")
OBSERVE_INTERVAL_S = 0.2
PROBE_INTERVAL_S = 0.2  # one group's probe of every node
CONVERGE_POLL_S = 0.1
RECOVERY_TIMEOUT_S = 45.0
FINAL_OFFSETS_TIMEOUT_S = 20.0
EVENT_SEGMENTS = 4  # event files kept per partition on the small chaos disks
# Group shapes, cycled over the groups: (topics, static share, assignor, assign delay). The first group rebalances
# cooperatively (KIP-429): its members keep partitions through rebalances, which the ownership rule then judges.
SHAPES = (
    ({"orders": 8}, 0.5, "cooperative-sticky", 0),
    ({"payments": 6, "refunds": 2}, 1.0, "roundrobin", 0),
    ({"audit": 8}, 0.0, "range", 400),
)


@dataclass
class ChaosOptions:
    out: Path
    nodes: int = 3
    partitions: int = 4
    groups: int = 3
    workers: int = 12
    seed: int = 1
    faults: int = 12
    duration_s: float | None = None
    schedule: str = "rotation"  # or "random"
    network: str = "auto"  # netns | loopback | auto
    session_timeout_ms: int = 4_000
    heartbeat_interval_ms: int = 400
    rebalance_timeout_ms: int = 10_000
    commit_interval_s: float = 0.2
    churn_interval_s: tuple[float, float] = (2.0, 5.0)
    ownership_tolerance_s: float = 0.5
    argv: list[str] = field(default_factory=list)
    # Each node's data directory on a tmpfs of this many MiB (as root), for the fill_disk fault.
    disk_mb: int | None = 32
    # On such a disk, the event files get this share of it (at the defaults they may grow to 128 MiB: a 30-minute
    # run filled the 32 MiB once); the rest is for journals, snapshots and the damaged copies faults leave.
    events_disk_share: float = 1 / 8
    # Cross-replica state checks this often, so that a divergence shows within the run (raft/digest.py).
    digest_interval_ms: int = 1_000

    @property
    def convergence_bound_s(self) -> float:
        """A dead member is noticed after its session timeout; its group then needs one rebalance."""
        return 2 * self.session_timeout_ms / 1000 + self.rebalance_timeout_ms / 1000


def plan_workers(opts: ChaosOptions) -> list[WorkerPlan]:
    """Spreads the workers over the groups; the first worker of each group churns (restarts on purpose)."""
    plans = []
    for g in range(opts.groups):
        topics, static_share, assignor, delay_ms = SHAPES[g % len(SHAPES)]
        count = opts.workers // opts.groups + (1 if g < opts.workers % opts.groups else 0)
        statics = round((count - 1) * static_share)
        for w in range(count):
            static = 0 < w <= statics
            plans.append(WorkerPlan(f"g{g}w{w}", f"chaos-g{g}", dict(topics), static, w == 0, assignor, delay_ms))
    return plans


def event_file_flags(opts: ChaosOptions) -> list[str]:
    """Event files sized to the nodes' small disks (node/events.py bounds them by segment size times segments)."""
    if not opts.disk_mb:
        return []
    segment = int(opts.disk_mb * 2**20 * opts.events_disk_share) // (opts.partitions * EVENT_SEGMENTS)
    return [f"--events-segment-bytes={segment}", f"--events-max-segments={EVENT_SEGMENTS}"]


def make_network(kind: str, size: int) -> Loopback | Namespaces:
    if kind == "netns" or (kind == "auto" and Namespaces.available()):
        return Namespaces(size)
    return Loopback()


class Harness:
    def __init__(self, opts: ChaosOptions) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        opts.out.mkdir(parents=True, exist_ok=True)
        self.history = Recorder(opts.out / HARNESS_FILE)
        self._stop_background = threading.Event()
        self._threads: list[threading.Thread] = []

    def run(self) -> Result:
        opts = self.opts
        network = make_network(opts.network, opts.nodes)
        try:
            plans = plan_workers(opts)
            self._record_run(plans, network.name)
            cluster = ChaosCluster(
                network, opts.nodes, opts.partitions, opts.out, self.history, secrets.token_hex(16),
                ["--group-min-session-timeout-ms=1000", "--group-initial-rebalance-delay-ms=0",
                 "--shutdown-grace-ms=1000", f"--raft-digest-interval-ms={opts.digest_interval_ms}",
                 "--offsets-retention-check-interval-ms=1000", *event_file_flags(opts)],
                disk_mb=opts.disk_mb,
            )  # fmt: skip
            fleet = Fleet(plans, opts.out, self.history, [
                f"--session-timeout-ms={opts.session_timeout_ms}",
                f"--heartbeat-interval-ms={opts.heartbeat_interval_ms}",
                f"--rebalance-timeout-ms={opts.rebalance_timeout_ms}",
                f"--commit-interval-s={opts.commit_interval_s}",
            ])  # fmt: skip
            fleet.bootstrap = ",".join(node.address for node in cluster.nodes.values())
            with self._running(cluster, fleet):
                self._inject(cluster, fleet)
                fleet.stop_all()
                self._final(cluster, plans)
        finally:
            network.close()
            self.history.close()
        result = check_dir(opts.out)
        write_report(result, opts.out)
        return result

    def _record_run(self, plans: list[WorkerPlan], network: str) -> None:
        opts = self.opts
        groups: dict[str, dict[str, object]] = {}
        for group in sorted({plan.group for plan in plans}):
            members = [plan for plan in plans if plan.group == group]
            groups[group] = {
                "workers": len(members),
                "static": sum(plan.static for plan in members),
                "topics": members[0].topics,
            }
        self.history.write(
            "run", seed=opts.seed, nodes=opts.nodes, partitions=opts.partitions, groups=groups, network=network,
            session_timeout_ms=opts.session_timeout_ms, rebalance_timeout_ms=opts.rebalance_timeout_ms,
            ownership_tolerance_s=opts.ownership_tolerance_s, convergence_bound_s=opts.convergence_bound_s,
            pending_bound=2 * max(len([p for p in plans if p.group == g]) for g in groups), argv=opts.argv,
        )  # fmt: skip

    @contextmanager
    def _running(self, cluster: ChaosCluster, fleet: Fleet) -> Iterator[None]:
        try:
            for node_id in cluster.nodes:
                cluster.start(node_id)
            if cluster.wait_healthy(RECOVERY_TIMEOUT_S) is None:
                raise RuntimeError(f"the cluster did not come up; see the node logs in {self.opts.out}")
            for plan in fleet.plans:
                fleet.start(plan.name)
            self._background(self._observe, cluster, fleet)
            self._background(self._probe, cluster, fleet)
            yield
        finally:
            self._stop_background.set()
            for thread in self._threads:
                thread.join()
            fleet.stop_all(signal.SIGKILL)
            cluster.network.heal()
            for node in cluster.nodes.values():
                if node.paused:
                    cluster.signal(node.node_id, signal.SIGCONT)
            cluster.stop_all()
            self._alarms(cluster)
            cluster.unmount_all()

    def _alarms(self, cluster: ChaosCluster) -> None:
        """The alarms the nodes logged (a replica whose state differs from another's at the same log index), into
        the history for the checker."""
        for node_id in cluster.nodes:
            log_path = self.opts.out / f"node{node_id}" / "node.log"
            lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
            for line in lines:
                if ALARM_EVENT not in line or not line.startswith("{"):
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") == ALARM_EVENT:
                    self.history.write("node_alarm", node=node_id, **{k: entry.get(k) for k in ALARM_FIELDS})

    def _background(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- phases ---------------------------------------------------------------------------------------

    def _kinds(self) -> Iterator[str]:
        """The fault kinds in order: the rotation, shuffled per cycle by the seed with --schedule random."""
        while True:
            cycle = list(ROTATION)
            if self.opts.schedule == "random":
                self.rng.shuffle(cycle)
            yield from cycle

    def _inject(self, cluster: ChaosCluster, fleet: Fleet) -> None:
        """Each fault, then recovery: every node back, then every group settled (churn held meanwhile, so the
        wait measures the fault); the end of the last fault is the quiesce point the checker measures from."""
        opts = self.opts
        faults = Faults(cluster, fleet, self.history, self.rng)
        self._converge(cluster, fleet, "start")
        faults.commit_idle()
        churning = threading.Event()
        self._background(self._churn, fleet, churning)
        deadline = None if opts.duration_s is None else time.monotonic() + opts.duration_s
        for number, kind in enumerate(self._kinds(), 1):
            churning.set()
            faults.run(kind)
            churning.clear()
            last = number >= opts.faults if deadline is None else time.monotonic() >= deadline
            if last:
                self.history.write("quiesce")
            recovered = cluster.wait_healthy(RECOVERY_TIMEOUT_S)
            self.history.write("recovered", kind=kind, node_fault=kind in NODE_FAULTS,
                               seconds=None if recovered is None else round(recovered, 3))  # fmt: skip
            self._converge(cluster, fleet, kind, since=faults.injected_at)
            if last:
                return
            time.sleep(self.rng.uniform(0.2, 1.0))

    def _churn(self, fleet: Fleet, churning: threading.Event) -> None:
        """Restarts the churn workers on purpose while a fault is in progress, so that rebalances keep
        happening under the faults."""
        churners = [plan for plan in fleet.plans if plan.churner]
        rng = random.Random(self.opts.seed + 1)
        while churners and not self._stop_background.wait(rng.uniform(*self.opts.churn_interval_s)):
            if churning.is_set():
                fleet.restart(rng.choice(churners).name)

    def _observe(self, cluster: ChaosCluster, fleet: Fleet) -> None:
        groups = sorted({plan.group for plan in fleet.plans})
        while not self._stop_background.wait(OBSERVE_INTERVAL_S):
            cluster.check_exits()
            fleet.check_exits()
            for group in groups:
                self._observe_group(cluster, group)

    def _probe(self, cluster: ChaosCluster, fleet: Fleet) -> None:
        """Asks every node about one group at a time, round the groups: who answers as its coordinator, in which
        epoch (the checker's `two_coordinators`)."""
        groups = itertools.cycle(sorted({plan.group for plan in fleet.plans}))
        while not self._stop_background.wait(PROBE_INTERVAL_S):
            group = next(groups)
            for node_id, epoch, sent, answered in cluster.probe(group):
                self.history.write("coordinator_answer", t=answered, group=group, node=node_id, epoch=epoch, sent=sent)

    def _observe_group(self, cluster: ChaosCluster, group: str) -> tuple[str, int, set[str]] | None:
        """Two threads observe (the background observer and the convergence wait): `sent` lets the checker order
        only the observations that did not overlap, as a linearizable service orders them."""
        sent = time.monotonic()
        described = cluster.describe(group)
        if described is None:
            return None
        node_id, g = described
        members = {m.member_id for m in g.members}
        self.history.write("observe", group=group, node=node_id, state=g.group_state, generation=g.generation_id,
                           members=sorted(members), pending=g.pending_member_count, sent=sent)  # fmt: skip
        return g.group_state, g.generation_id, members

    def _converge(self, cluster: ChaosCluster, fleet: Fleet, fault: str, since: float | None = None) -> None:
        """Liveness: every group Stable with exactly the members its live workers hold an assignment as."""
        groups = sorted({plan.group for plan in fleet.plans})
        start = time.monotonic()
        last: dict[str, dict[str, object] | None] = {}
        while time.monotonic() - start < self.opts.convergence_bound_s + 15:
            done = {}
            for group in groups:
                seen = self._observe_group(cluster, group)
                last[group] = seen and {"state": seen[0], "generation": seen[1], "members": sorted(seen[2])}
                if seen is not None and _settled(seen, fleet.live_members(group)):
                    done[group] = seen[1]
            if len(done) == len(groups):
                now = time.monotonic()
                self.history.write("converged", fault=fault, groups=done, seconds=round(now - start, 3),
                                   since_fault_s=None if since is None else round(now - since, 3))  # fmt: skip
                return
            time.sleep(CONVERGE_POLL_S)
        self.history.write("not_converged", fault=fault, groups=last, raft=cluster.raft_views(),
                           stacks_in_logs=cluster.dump_stacks())  # fmt: skip

    def _final(self, cluster: ChaosCluster, plans: list[WorkerPlan]) -> None:
        offsets: dict[str, dict[str, int] | None] = {}
        for group in sorted({plan.group for plan in plans} | set(IDLE_GROUPS)):
            deadline = time.monotonic() + FINAL_OFFSETS_TIMEOUT_S
            offsets[group] = cluster.offsets(group)
            while offsets[group] is None and time.monotonic() < deadline:
                time.sleep(0.2)
                offsets[group] = cluster.offsets(group)
        self.history.write("final", offsets=offsets)


def _settled(seen: tuple[str, int, set[str]], held: dict[str, tuple[str, int] | None]) -> bool:
    """The coordinator's view (state, generation, members) matches what every live worker holds."""
    state, generation, members = seen
    holdings = list(held.values())
    if any(h is None or h[1] != generation for h in holdings):
        return False
    expected = {h[0] for h in holdings if h is not None}
    return members == expected and state == ("Stable" if expected else "Empty")
