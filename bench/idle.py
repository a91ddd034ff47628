"""`idle`: what a cluster costs doing nothing (issue 23's goal: a 3-node cluster with 16 partitions under 5 % of
one core in total, each node under 80 MB RSS). Nothing is connected but the bench's one DescribeCluster channel,
which stays quiet while it measures: after `settle_s` (leaders elected and spread, start-up work done), the nodes'
CPU over `window_s` and their RSS at its end."""

from __future__ import annotations

import asyncio
from typing import Any

from groupcoord.bench.cluster import BenchCluster, CpuMeter


async def idle(cluster: BenchCluster, settle_s: float, window_s: float) -> dict[str, Any]:
    await asyncio.sleep(settle_s)
    cpu = CpuMeter(cluster)
    await asyncio.sleep(window_s)
    used = cpu.result()
    rss = cluster.rss_mb()
    return {
        "window_s": window_s,
        "nodes_cpu_percent_total": round(sum(used["nodes_cpu_percent"].values()), 1),
        "nodes_cpu_percent": used["nodes_cpu_percent"],
        "rss_mb": {str(i): round(mb, 1) for i, mb in rss.items()},
        "rss_mb_max": round(max(rss.values()), 1) if rss else float("nan"),
    }
