"""Scrape-time metrics of the partition replicas' storage: their Raft journals (raft/journal.py: flushes, write
errors, damage found at start, replicas that take no part in elections until they have caught up), their
cross-replica state checks (raft/digest.py), the Raft messages they dropped as another cluster's, quiescence
(raft/quiescence.py: quiet partitions, node heartbeats dropped), and the round trips from the partitions this node
leads to each follower node (raft/transport.py), summed over partitions.

Read from the replicas' own counters at scrape time, so writing a journal costs no metric call. The values are
plain ints and bools written by each replica's tick thread; a scrape may see one a tick old.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from groupcoord.raft.partition import PartitionReplica
from groupcoord.raft.transport import ROUND_TRIP_BUCKETS


class ReplicaCollector(Collector):
    def __init__(self, namespace: str, replicas: Callable[[], Iterable[PartitionReplica]]) -> None:
        self._namespace = namespace
        self._replicas = replicas

    def describe(self) -> list[Metric]:
        return list(self._families([]))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(list(self._replicas()))

    def _families(self, replicas: list[PartitionReplica]) -> Iterator[Metric]:
        journals = [(replica.partition_id, replica.journal) for replica in replicas]
        ns = self._namespace
        fsyncs = CounterMetricFamily(f"{ns}_journal_fsyncs", "fdatasync calls of the Raft journals (durability=fsync)")
        fsync_seconds = CounterMetricFamily(
            f"{ns}_journal_fsync_seconds", "Time spent in fdatasync by the Raft journals"
        )
        errors = CounterMetricFamily(
            f"{ns}_journal_write_errors",
            "Failed journal writes and flushes, by errno (ENOSPC: disk full); each is retried every tick",
            labels=("error",),
        )
        failing = GaugeMetricFamily(
            f"{ns}_journal_write_failing",
            "1 while the partition's journal cannot be written: the replica sends nothing, so it neither "
            "acknowledges nor leads, until a retry succeeds",
            labels=("partition",),
        )
        damaged = GaugeMetricFamily(
            f"{ns}_journal_damage_found",
            "1 when the partition's journal or snapshot was found damaged at start (kind: torn_tail or corrupt); "
            "the damaged part was dropped, never applied (the log line journal.corrupt names the file and offset)",
            labels=("partition", "kind"),
        )
        catching_up = GaugeMetricFamily(
            f"{ns}_raft_catching_up",
            "1 while the partition's replica may lack entries it once acknowledged (damaged journal, page-cache "
            "journal after a reboot) and so takes no part in elections until it holds a committed entry of the "
            "current leader's term",
            labels=("partition",),
        )
        size = GaugeMetricFamily(f"{ns}_journal_bytes", "Bytes of the partition's journal file", labels=("partition",))
        checks = CounterMetricFamily(
            f"{ns}_replica_digest_checks", "Cross-replica state checks this node's replicas made (raft/digest.py)"
        )
        mismatch = GaugeMetricFamily(
            f"{ns}_replica_digest_mismatch",
            "1 once the partition's replica found its state differs from another replica's at the same log index "
            "(the corruption alarm; partition.digest_mismatch names both)",
            labels=("partition",),
        )
        odd = GaugeMetricFamily(
            f"{ns}_replica_out_of_service",
            "1 while the latest cross-replica state check found this node's replica of the partition odd (its state "
            "differs from the one a majority reported): it leads no more and stands for no election",
            labels=("partition",),
        )
        foreign = CounterMetricFamily(
            f"{ns}_raft_foreign_messages",
            "Raft messages dropped because they carry another cluster's id (raft.foreign_cluster names the sender)",
        )
        quiet = GaugeMetricFamily(
            f"{ns}_raft_quiet_partitions",
            "Partitions this node leads that are quiet: nothing has needed them for raft_quiesce_after_ms, so they "
            "send no Raft heartbeats and the node heartbeat keeps their followers calm",
        )
        dropped = CounterMetricFamily(
            f"{ns}_node_heartbeats_dropped",
            "Node heartbeat datagrams dropped: not signed with this cluster's secret, replayed, another cluster's, or "
            "garbage (raft/quiescence.py)",
        )
        round_trips = HistogramMetricFamily(
            f"{ns}_raft_peer_round_trip_seconds",
            "As leader, from sending an AppendEntries to a follower node to its acknowledgement (the follower's "
            "journal flush included), over all partitions this node leads",
            labels=("peer",),
        )
        by_error: dict[str, int] = {}
        for partition, journal in journals:
            label = str(partition)
            failing.add_metric([label], int(journal.write_error is not None))
            catching_up.add_metric([label], int(not journal.trusted))
            size.add_metric([label], journal.size)
            if journal.damage is not None:
                damaged.add_metric([label, "torn_tail" if journal.damage.torn_tail else "corrupt"], 1)
            for code, count in journal.write_errors.items():
                by_error[code] = by_error.get(code, 0) + count
        fsyncs.add_metric([], sum(j.fsyncs for _, j in journals))
        fsync_seconds.add_metric([], sum(j.fsync_seconds for _, j in journals))
        for code, count in sorted(by_error.items()):
            errors.add_metric([code], count)
        for replica in replicas:
            mismatch.add_metric([str(replica.partition_id)], int(replica.digests.mismatch is not None))
            odd.add_metric([str(replica.partition_id)], int(not replica.may_lead))
        checks.add_metric([], sum(replica.digests.checks for replica in replicas))
        foreign.add_metric([], sum(replica.foreign_messages for replica in replicas))
        states = [(r, r.quiescence) for r in replicas if r.quiescence is not None]
        quiet.add_metric([], sum(1 for r, q in states if q.leading_quiet and r.is_leader()))
        dropped.add_metric([], states[0][1].liveness.dropped if states else 0)
        yield from (fsyncs, fsync_seconds, errors, failing, damaged, catching_up, size, checks, mismatch, odd, foreign)
        self._round_trips(replicas, round_trips)
        yield from (quiet, dropped, round_trips)

    @staticmethod
    def _round_trips(replicas: list[PartitionReplica], family: HistogramMetricFamily) -> None:
        """One histogram per follower node, the partitions' buckets added up."""
        by_peer: dict[str, tuple[list[int], float]] = {}
        for replica in replicas:
            for peer, trips in replica.round_trips().items():
                buckets, total = by_peer.get(peer, ([0] * len(trips.buckets), 0.0))
                by_peer[peer] = ([a + b for a, b in zip(buckets, trips.buckets, strict=True)], total + trips.sum)
        for peer, (buckets, total) in sorted(by_peer.items()):
            cumulative, running = [], 0
            for bound, count in zip((*ROUND_TRIP_BUCKETS, float("inf")), buckets, strict=True):
                running += count
                cumulative.append((floatToGoString(bound), running))
            family.add_metric([peer], cumulative, total)
