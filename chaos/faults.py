"""The faults a chaos run injects. Each one is timed against the cluster's real state (the coordinator of a
group, the phase its rebalance is in) and written to the history before and after it acts."""

from __future__ import annotations

import random
import shutil
import signal
import time
from collections.abc import Callable
from typing import Any

from groupcoord.chaos.cluster import ChaosCluster
from groupcoord.chaos.history import Recorder
from groupcoord.chaos.workers import Fleet, WorkerPlan
from groupcoord.raft.journal_records import MAGIC

PREPARING, COMPLETING = "PreparingRebalance", "CompletingRebalance"
PHASE_WAIT_S = 6.0
PHASE_POLL_S = 0.01

# One cycle of the scripted schedule: every kind early, so that a short run covers them all.
ROTATION = (
    "kill_join", "kill_sync", "pause", "partition", "kill_worker", "restart_node", "one_way_partition",
    "kill_join", "replace_node", "kill_sync", "wipe_node", "restart_cluster", "fill_disk", "damage_journal",
    "kill_sync", "partition", "clock_jump", "kill_join", "pause", "restart_node", "one_way_partition", "pause",
    "kill_worker",
)  # fmt: skip
# Fault events that end a fault rather than start one.
ENDINGS = ("resume_node", "heal_partition", "restart_worker", "free_disk", "voter_added", "clock_fixed")
# How long a node that was started again may take to listen before it is added back as a voter.
LISTEN_WAIT_S = 30.0
NODE_FAULTS = frozenset(ROTATION) - {"kill_worker"}
# Groups with committed offsets and no members (Kafka's simple commits): offset retention could expire them early
# if a wrong clock reached it (the clock_jump fault), and the checker requires every acknowledged one at the end.
IDLE_GROUPS = tuple(f"idle-{i}" for i in range(8))
IDLE_TOPIC = "idle"
# How far a clock_jump sets a node's wall clock off, either way: past the default offset retention of 7 days.
CLOCK_JUMP_DAYS = (8, 30)


class Faults:
    def __init__(self, cluster: ChaosCluster, fleet: Fleet, history: Recorder, rng: random.Random) -> None:
        self.cluster, self.fleet, self.history, self.rng = cluster, fleet, history, rng
        self.groups = sorted({plan.group for plan in fleet.plans})
        self.slow_groups = sorted({plan.group for plan in fleet.plans if plan.assign_delay_ms})
        self.injected_at = 0.0  # when the last fault started acting
        self._idle_offset = 0

    def _fault(self, kind: str, **data: Any) -> None:
        t = self.history.write("fault", kind=kind, **data)
        if kind not in ENDINGS:
            self.injected_at = t

    def run(self, kind: str) -> None:
        actions: dict[str, Callable[[], None]] = {
            "kill_join": lambda: self.kill_in_phase(PREPARING),
            "kill_sync": lambda: self.kill_in_phase(COMPLETING),
            "pause": self.pause,
            "partition": self.partition,
            "kill_worker": self.kill_worker,
            "restart_node": self.restart_node,
            "restart_cluster": self.restart_cluster,
            "wipe_node": self.wipe_node,
            "damage_journal": self.damage_journal,
            "one_way_partition": self.one_way_partition,
            "replace_node": self.replace_node,
            "fill_disk": self.fill_disk,
            "clock_jump": self.clock_jump,
        }
        actions[kind]()

    # -- helpers --------------------------------------------------------------------------------------

    def _dynamic(self, group: str) -> WorkerPlan | None:
        plans = [p for p in self.fleet.plans if p.group == group and not p.static]
        return self.rng.choice(plans) if plans else None

    def _coordinator(self, group: str) -> int:
        node_id = self.cluster.coordinator(group)
        return node_id if node_id is not None else self.rng.randint(1, self.cluster.size)

    def _wait_phase(self, group: str, phase: str) -> str:
        """Polls the group's coordinator until the group is in `phase`; returns the state last seen."""
        seen = "unknown"
        deadline = time.monotonic() + PHASE_WAIT_S
        while time.monotonic() < deadline:
            described = self.cluster.describe(group)
            if described is not None:
                seen = described[1].group_state
                if seen == phase:
                    break
            time.sleep(PHASE_POLL_S)
        return seen

    # -- node faults ----------------------------------------------------------------------------------

    def kill_in_phase(self, phase: str) -> None:
        """kill -9 of a group's coordinator while its rebalance is in `phase`: a dynamic member leaves (the
        group goes to PreparingRebalance) and comes back; the slow-assigning groups stay in
        CompletingRebalance long enough to be hit there."""
        candidates = self.slow_groups if phase == COMPLETING and self.slow_groups else self.groups
        group = self.rng.choice(candidates)
        node_id = self._coordinator(group)
        trigger = self._dynamic(group)
        if trigger is not None:
            self.fleet.stop(trigger.name)
            if phase == COMPLETING:
                self.fleet.start(trigger.name)
        seen = self._wait_phase(group, phase)
        self.cluster.signal(node_id, signal.SIGKILL)
        self._fault("kill_node", node=node_id, group=group, wanted=phase, phase=seen)
        if trigger is not None and phase == PREPARING:
            self.fleet.start(trigger.name)
        time.sleep(self.rng.uniform(0.5, 2.0))
        self.cluster.start(node_id)

    def pause(self) -> None:
        """SIGSTOP of a group's coordinator, half of the time in the middle of a rebalance."""
        group = self.rng.choice(self.groups)
        node_id = self._coordinator(group)
        trigger = self._dynamic(group) if self.rng.random() < 0.5 else None
        if trigger is not None:
            self.fleet.stop(trigger.name)
        seen = self._phase(group)
        self.cluster.signal(node_id, signal.SIGSTOP)
        pause_s = self.rng.uniform(1.5, 4.0)
        self._fault("pause_node", node=node_id, group=group, phase=seen, seconds=round(pause_s, 3))
        if trigger is not None:
            self.fleet.start(trigger.name)
        time.sleep(pause_s)
        self.cluster.signal(node_id, signal.SIGCONT)
        self._fault("resume_node", node=node_id)

    def _phase(self, group: str) -> str:
        described = self.cluster.describe(group)
        return described[1].group_state if described is not None else "unknown"

    def partition(self) -> None:
        """Cuts a busy group's coordinator (the leader of its Raft partition) off from every other node, while
        clients can still reach it, and restarts one of the group's members meanwhile."""
        self._partition(one_way=False)

    def one_way_partition(self) -> None:
        """A busy group's coordinator hears nothing from the other nodes (inbound), or they hear nothing from it
        (outbound), while clients still reach it."""
        self._partition(one_way=True)

    def _partition(self, one_way: bool) -> None:
        """3-5 s of it; without network namespaces a pause stands in, and the history says so."""
        if not self.cluster.network.can_partition:
            self._fault("partition_unavailable", network=self.cluster.network.name)
            self.pause()
            return
        group = self.rng.choice(self.groups)
        node_id = self._coordinator(group)
        others = [n for n in self.cluster.nodes if n != node_id]
        trigger = None if one_way else self._dynamic(group)
        inbound = not one_way or self.rng.random() < 0.5
        self.cluster.network.partition(node_id, others, inbound=inbound, outbound=not one_way or not inbound)
        seconds = self.rng.uniform(3.0, 5.0)
        kind = "one_way_partition" if one_way else "partition_node"
        data = {"direction": "inbound" if inbound else "outbound"} if one_way else {}
        self._fault(kind, node=node_id, group=group, phase=self._phase(group), seconds=round(seconds, 3), **data)
        if trigger is not None:
            self.fleet.restart(trigger.name)
        time.sleep(seconds)
        self.cluster.network.heal()
        self._fault("heal_partition", node=node_id)

    def replace_node(self) -> None:
        """Online membership: a group's coordinator is removed from every partition's voters (RemoveRaftVoter at
        another node), stopped, its data directory wiped, started again empty and added back (AddRaftVoter): a
        pod rescheduled onto an empty volume, with the scaling hooks of deploy/README.md."""
        group = self.rng.choice(self.groups)
        node_id = self._coordinator(group)
        via = self.rng.choice([n for n in self.cluster.nodes if n != node_id])
        seen = self._phase(group)
        removed = self.cluster.change_voters(via, remove=node_id)
        self._fault("replace_node", node=node_id, group=group, phase=seen, via=via, removed=removed)
        self.cluster.signal(node_id, signal.SIGTERM)
        shutil.rmtree(self.cluster.data_dir(node_id), ignore_errors=True)
        time.sleep(self.rng.uniform(0.5, 1.5))
        self.cluster.start(node_id)
        self.cluster.wait_listening(node_id, LISTEN_WAIT_S)
        self._fault("voter_added", node=node_id, via=via, added=self.cluster.change_voters(via, add=node_id))

    def fill_disk(self) -> None:
        """A busy group's coordinator runs out of disk (its data directory is a small tmpfs) for 2-4 s: its event
        files fail at once, its journals once the megabyte each preallocates is used (the replica is then mute)."""
        if self.cluster.disk_mb is None:
            self._fault("fill_disk_unavailable", reason="the data directories are not on tmpfs (needs root)")
            self.pause()
            return
        group = self.rng.choice(self.groups)
        node_id = self._coordinator(group)
        filler = self.cluster.data_dir(node_id) / "filler"
        chunk = b"\0" * (1 << 20)
        with filler.open("wb", buffering=0) as f:
            try:
                while True:
                    f.write(chunk)
            except OSError:
                pass  # ENOSPC: the disk is full
        seconds = self.rng.uniform(2.0, 4.0)
        self._fault("fill_disk", node=node_id, group=group, phase=self._phase(group), seconds=round(seconds, 3))
        time.sleep(seconds)
        filler.unlink(missing_ok=True)
        self._fault("free_disk", node=node_id)

    def commit_idle(self) -> None:
        """A new offset for every idle group, each recorded once acknowledged (one that is not is not recorded)."""
        self._idle_offset += 1
        offset = self._idle_offset
        for group in IDLE_GROUPS:
            sent = time.monotonic()
            if self.cluster.commit(group, IDLE_TOPIC, 0, offset):
                self.history.write("idle_commit", group=group, sent=sent, offsets={f"{IDLE_TOPIC}-0": offset})

    def clock_jump(self) -> None:
        """kill -9 of a busy group's coordinator, which starts again with its wall clock 8-30 days ahead or behind
        (a bad RTC after a reboot, a VM restored from a snapshot) and leads its partitions for 2-4 s while the idle
        groups commit, then restarts with the right clock. Ahead, its own clock would expire every group's offsets;
        behind, it would stamp commits that a right clock later expires at once (docs/ARCHITECTURE.md, "Time")."""
        node_id, group, seen = self._kill_coordinator()
        days = self.rng.uniform(*CLOCK_JUMP_DAYS) * self.rng.choice((-1, 1))
        self.cluster.clock_offsets[node_id] = round(days * 86_400)
        self._fault("clock_jump", node=node_id, group=group, phase=seen, days=round(days, 3))
        self.cluster.start(node_id)
        self.cluster.wait_listening(node_id, LISTEN_WAIT_S)
        time.sleep(self.rng.uniform(2.0, 4.0))  # it takes its preferred partitions back meanwhile
        self.commit_idle()
        self.cluster.signal(node_id, signal.SIGTERM)
        del self.cluster.clock_offsets[node_id]
        self.cluster.start(node_id)
        self._fault("clock_fixed", node=node_id)

    def restart_node(self) -> None:
        """A graceful restart (SIGTERM): the node hands its partitions over before it exits."""
        group = self.rng.choice(self.groups)
        node_id = self._coordinator(group)
        seen = self._phase(group)
        self.cluster.signal(node_id, signal.SIGTERM)
        self._fault("restart_node", node=node_id, group=group, phase=seen)
        time.sleep(self.rng.uniform(0.5, 1.5))
        self.cluster.start(node_id)

    def restart_cluster(self) -> None:
        """kill -9 of every node at once, then all of them start again from their data dirs."""
        for node_id in self.cluster.nodes:
            self.cluster.signal(node_id, signal.SIGKILL)
        self._fault("restart_cluster", nodes=sorted(self.cluster.nodes))
        time.sleep(self.rng.uniform(0.5, 1.5))
        for node_id in self.cluster.nodes:
            self.cluster.start(node_id)

    def _kill_coordinator(self) -> tuple[int, str, str]:
        """kill -9 of a busy group's coordinator, waited for: (node, group, the group's state before)."""
        group = self.rng.choice(self.groups)
        node_id = self._coordinator(group)
        seen = self._phase(group)
        self.cluster.signal(node_id, signal.SIGKILL)  # returns once the process is gone
        return node_id, group, seen

    def wipe_node(self) -> None:
        """A lost volume: kill -9 of a coordinator and its whole data directory deleted; it starts again empty and
        takes part in elections only once it has caught up (docs/OPERATIONS.md, replace a dead node)."""
        node_id, group, seen = self._kill_coordinator()
        shutil.rmtree(self.cluster.data_dir(node_id), ignore_errors=True)
        self._fault("wipe_node", node=node_id, group=group, phase=seen)
        time.sleep(self.rng.uniform(0.5, 1.5))
        self.cluster.start(node_id)

    def damage_journal(self) -> None:
        """kill -9 of a coordinator, then one of its partition journals damaged: four bytes flipped inside the
        records, or the file cut short inside its last ones (a torn write). The damage must never be applied or
        served; the replica drops it and catches up (docs/OPERATIONS.md, the corruption alarm)."""
        node_id, group, seen = self._kill_coordinator()
        journals = sorted(self.cluster.data_dir(node_id).glob("partition-*.wal"))
        path = self.rng.choice(journals)
        data = bytearray(path.read_bytes())
        end = len(data.rstrip(b"\0"))  # the preallocated zeros follow the records
        if self.rng.random() < 0.5:
            how, offset = "flip", self.rng.randrange(len(MAGIC), max(end - 4, len(MAGIC) + 1))
            data[offset : offset + 4] = bytes(b ^ 0x5A for b in data[offset : offset + 4])
            path.write_bytes(bytes(data))
        else:
            how, offset = "truncate", self.rng.randrange(max(end - 64, len(MAGIC)), max(end, len(MAGIC) + 1))
            with path.open("r+b") as f:
                f.truncate(offset)
        self._fault("damage_journal", node=node_id, group=group, phase=seen, file=path.name, how=how, offset=offset)
        time.sleep(self.rng.uniform(0.5, 1.5))
        self.cluster.start(node_id)

    # -- worker faults --------------------------------------------------------------------------------

    def kill_worker(self) -> None:
        """kill -9 of a worker; it comes back as a new process (a static one usually within its session)."""
        plan = self.rng.choice(self.fleet.plans)
        self.fleet.stop(plan.name, signal.SIGKILL)
        self._fault("kill_worker", worker=plan.name, group=plan.group, static=plan.static)
        time.sleep(self.rng.uniform(0.3, 2.0))
        self.fleet.start(plan.name)
        self._fault("restart_worker", worker=plan.name, group=plan.group)
