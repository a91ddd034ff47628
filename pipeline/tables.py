"""The tables of `groupcoord analyze`: pure DataFrame -> DataFrame functions of the events (docs/EVENTS.md).

No I/O and no Python UDFs, so they run unchanged embedded or under `spark-submit --master ...` (executors need no
Python package). Within a partition the log order (`index`, `position`) is the truth; `time_ms` is the writing
leader's wall clock, used for durations and minute buckets only.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

STARTED, COMPLETED, DELETED = "rebalance_started", "generation_completed", "group_deleted"
REPLACED, AVOIDED, BARRIER, COMMITTED = "member_replaced", "rebalance_avoided", "barrier_committed", "offsets_committed"
# churn column -> the event kind it counts
CHURN = {
    "joins": "member_joined",
    "leaves": "member_left",
    "expirations": "member_expired",
    "replacements": REPLACED,
    "pending_expired": "pending_member_expired",
}
MINUTE_MS = 60_000


def in_range(events: DataFrame, since_ms: int | None, until_ms: int | None) -> DataFrame:
    """Events with since_ms <= time_ms < until_ms; with a bound, events without a time (old barriers) drop out."""
    if since_ms is not None:
        events = events.filter(F.col("time_ms") >= since_ms)
    if until_ms is not None:
        events = events.filter(F.col("time_ms") < until_ms)
    return events


def _minute(time_ms: Column) -> Column:
    return time_ms - F.pmod(time_ms, F.lit(MINUTE_MS))


def rebalances(events: DataFrame) -> DataFrame:
    """One row per rebalance: from the first `rebalance_started` after the group's previous generation to the next
    `generation_completed`. Later `rebalance_started` events of the same rebalance are counted as `restarts`, not as
    rebalances of their own. A `group_deleted` also closes an open rebalance (completed false), so a group re-created
    under the same id does not continue its predecessor's rebalance. `members_before` counts the previous
    generation's members (0 for a new or deleted group; null when that generation is before the data), and
    `members_after` the new generation's.
    """
    started = F.col("kind") == STARTED
    closes = (~started).cast("int")
    marks = events.filter(F.col("kind").isin(STARTED, COMPLETED, DELETED))
    # The number of closing events before a row is the rebalance it belongs to; a closer belongs to the one it closes.
    log_order = Window.partitionBy("partition", "group").orderBy("index", "position")
    so_far = log_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    marks = marks.withColumn("rebalance", F.sum(closes).over(so_far) - closes)
    members = F.array_size(F.col("details.members")).alias("members")
    at_start = F.struct("index", "position", "time_ms", "reason", "member", "details.join_reason", "generation")
    at_end = F.struct("kind", "time_ms", "generation", members)
    per = marks.groupBy("partition", "group", "rebalance").agg(
        F.min(F.when(started, at_start)).alias("start"),
        F.count(F.when(started, 1)).alias("starts"),
        F.max(F.when(~started, at_end)).alias("end"),
    )
    # What the previous rebalance ended in: its generation's members, or none after a deletion.
    previous = F.lag("end").over(Window.partitionBy("partition", "group").orderBy("rebalance"))
    members_before = F.when(
        previous.isNotNull(), F.when(previous.kind == COMPLETED, previous.members).otherwise(0)
    ).when(F.col("start.generation") == 0, 0)
    per = per.withColumn("members_before", members_before)
    completed = F.coalesce(F.col("end.kind") == COMPLETED, F.lit(False))
    end_ms = F.when(completed, F.col("end.time_ms"))
    return (
        per.filter(F.col("starts") > 0)
        .select(
            "group",
            "partition",
            F.col("start.time_ms").alias("start_ms"),
            end_ms.alias("end_ms"),
            (end_ms - F.col("start.time_ms")).alias("duration_ms"),
            F.col("start.reason").alias("reason"),
            F.col("start.member").alias("trigger_member"),
            F.col("start.join_reason").alias("join_reason"),
            F.col("start.generation").alias("generation_before"),
            F.when(completed, F.col("end.generation")).alias("generation_after"),
            "members_before",
            F.when(completed, F.col("end.members")).alias("members_after"),
            (F.col("starts") - 1).alias("restarts"),
            completed.alias("completed"),
        )
        .orderBy("group", "start_ms")
    )


def rebalances_by_reason(rebalances: DataFrame) -> DataFrame:
    """Rebalances per cause; the duration figures are over the completed ones (exact percentiles, interpolated)."""
    duration = F.col("duration_ms")
    return (
        rebalances.groupBy("reason")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.count(F.when(F.col("completed"), 1)).alias("completed"),
            F.percentile(duration, 0.5).alias("p50_ms"),
            F.percentile(duration, 0.95).alias("p95_ms"),
            F.max(duration).alias("max_ms"),
        )
        .orderBy(F.col("count").desc(), "reason")
    )


def avoided(events: DataFrame) -> DataFrame:
    """Rebalances that did not happen: a static member replaced in a Stable group with no `rebalance_started` of
    that group in the same log entry (a replacement that changes the protocol or asks for a rebalance does start
    one, in the same entry, while the replacement event itself still says Stable), and every `rebalance_avoided`
    marker, whose reason (`restart`, `known_member`) is the kind.
    """
    columns: list[Column | str] = [F.col("details.group_instance_id").alias("group_instance_id"), "generation"]
    rebalanced = events.filter(F.col("kind") == STARTED).select("partition", "index", "group").distinct()
    static = (
        events.filter((F.col("kind") == REPLACED) & (F.col("state") == "Stable"))
        .join(rebalanced, ["partition", "index", "group"], "left_anti")
        .select("group", "time_ms", F.lit("static_replacement").alias("kind"), "member", *columns)
    )
    markers = events.filter(F.col("kind") == AVOIDED).select(
        "group", "time_ms", F.col("reason").alias("kind"), "member", *columns
    )
    return static.unionByName(markers).orderBy("group", "time_ms", "kind")


def avoided_by_group(avoided: DataFrame) -> DataFrame:
    """How many rebalances each group was spared, per kind."""
    return avoided.groupBy("group", "kind").agg(F.count(F.lit(1)).alias("count")).orderBy("group", "kind")


def churn(events: DataFrame) -> DataFrame:
    """Membership changes per group and UTC minute (only minutes with at least one)."""
    kind = F.col("kind")
    return (
        events.filter(kind.isin(*CHURN.values()) & F.col("time_ms").isNotNull())
        .groupBy("group", _minute(F.col("time_ms")).alias("minute_ms"))
        .agg(*[F.count(F.when(kind == k, 1)).alias(name) for name, k in CHURN.items()])
        .select("group", F.timestamp_millis("minute_ms").alias("minute"), "minute_ms", *CHURN)
        .orderBy("group", "minute_ms")
    )


def unavailability(events: DataFrame) -> DataFrame:
    """Per failover, the time from the old leader's last event to the new leader's barrier, i.e. when the partition
    had no coordinator that wrote anything. A barrier counts when its term is higher than the previous barrier's in
    the partition's log (the first barrier in the data has no known predecessor). The old leader's last event is
    the last timed one of the highest older term: terms only grow along a log. On an idle partition that event may
    be long before the failure, so the window is an upper bound; on a busy one it is close to the real gap.
    """
    log_order = Window.partitionBy("partition").orderBy("index", "position")
    barriers = (
        events.filter(F.col("kind") == BARRIER)
        .withColumn("previous_term", F.lag("term").over(log_order))
        .filter(F.col("time_ms").isNotNull() & (F.col("term") > F.col("previous_term")))
        .select(
            "partition",
            "index",
            F.col("term").alias("new_term"),
            F.col("node").alias("new_node"),
            F.col("time_ms").alias("barrier_ms"),
        )
    )
    last_per_term = (
        events.filter(F.col("time_ms").isNotNull())
        .groupBy("partition", F.col("term").alias("old_term"))
        .agg(F.max(F.struct("index", "position", "time_ms", "node")).alias("last"))
    )
    older = barriers.join(last_per_term, "partition").filter(F.col("old_term") < F.col("new_term"))
    last_old = F.struct("old_term", F.col("last.time_ms").alias("time_ms"), F.col("last.node").alias("node"))
    return (
        older.groupBy("partition", "index", "new_term", "new_node", "barrier_ms")
        .agg(F.max(last_old).alias("old"))
        .select(
            "partition",
            F.col("old.old_term").alias("old_term"),
            "new_term",
            F.col("old.node").alias("old_node"),
            "new_node",
            F.col("old.time_ms").alias("last_old_ms"),
            "barrier_ms",
            (F.col("barrier_ms") - F.col("old.time_ms")).alias("window_ms"),
        )
        .orderBy("partition", "barrier_ms")
    )


def commit_rates(events: DataFrame) -> DataFrame:
    """Offset commits per group and UTC minute; commits_per_s averages over the whole minute."""
    return (
        events.filter((F.col("kind") == COMMITTED) & F.col("time_ms").isNotNull())
        .groupBy("group", _minute(F.col("time_ms")).alias("minute_ms"))
        .agg(
            F.count(F.lit(1)).alias("commits"),
            F.coalesce(F.sum("details.count"), F.lit(0)).alias("offsets"),
        )
        .select(
            "group",
            F.timestamp_millis("minute_ms").alias("minute"),
            "minute_ms",
            "commits",
            "offsets",
            (F.col("commits") / (MINUTE_MS / 1000)).alias("commits_per_s"),
        )
        .orderBy("group", "minute_ms")
    )


def all_tables(events: DataFrame) -> dict[str, DataFrame]:
    """Every output table by name, in the order they are written (derived tables after their source)."""
    found_rebalances, found_avoided = rebalances(events), avoided(events)
    return {
        "rebalances": found_rebalances,
        "rebalances_by_reason": rebalances_by_reason(found_rebalances),
        "avoided": found_avoided,
        "avoided_by_group": avoided_by_group(found_avoided),
        "churn": churn(events),
        "unavailability": unavailability(events),
        "commit_rates": commit_rates(events),
    }
