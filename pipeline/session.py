"""A SparkSession tuned for a quick start: on small inputs Spark's fixed cost (JVM start, first query) dominates."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"
# Errors only, from the JVM's first line on: Spark's default profile logs INFO until the session exists, and its
# shell notice ("Setting default log level ...") is keyed on the logger of the class that starts Python's gateway.
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""
# For the driver JVM we start, which runs a short batch job: C2, the optimising JIT, waits for about ten times the
# default call and loop counts. Per-row code still reaches it, while the planner code that each query runs a few
# thousand times stays with C1. Compilation was the largest CPU consumer of `analyze` on 2 cores (docs/PERFORMANCE.md,
# "Analytics job").
JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000",
    "-XX:Tier4MinInvocationThreshold=20000",
    "-XX:Tier4CompileThreshold=100000",
    "-XX:Tier4BackEdgeThreshold=400000",
)
BATCH_GC = "-XX:+UseParallelGC"  # less CPU and memory than the default G1 for a job this short
JAVA_ENV = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def is_local(master: str) -> bool:
    """`local`, `local[N]`, `local[*]`, `local[N,F]`: the embedded engine, driver and executors in this process."""
    return master == "local" or master.startswith("local[")


def java_options() -> list[str]:
    """The JIT options, and the batch collector unless the environment picks a collector: the JVM refuses two."""
    chosen = any(re.search(r"-XX:\+Use\w+GC\b", os.environ.get(name, "")) for name in JAVA_ENV)
    return [*JIT_OPTIONS] if chosen else [BATCH_GC, *JIT_OPTIONS]


def under_spark_submit() -> bool:
    """spark-submit started this Python driver: its JVM is already up, with its own --master and logging."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build(master: str | None = None, shuffle_partitions: int = 4, app_name: str = "groupcoord-analyze") -> SparkSession:
    """A session for `master`; without one, spark-submit's `--master` when it started us, else local[*].

    Few shuffle partitions because the tables are small aggregates (the default 200 means 200 tiny tasks per
    shuffle); no UI (its server costs start time and a port); the driver on loopback when local, so a laptop
    without a resolvable hostname or on a VPN still starts; UTC so that minute windows and CSV times are the
    same on every machine.
    """
    submitted = under_spark_submit()
    if master is None and not submitted:
        master = DEFAULT_MASTER
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.log.level", "ERROR")
    )
    if master is not None:
        builder = builder.master(master)
    if master is not None and is_local(master):
        # SPARK_LOCAL_IP is read by the JVM at start: without it Spark warns that the hostname resolves to
        # loopback and binds an interface address of its own.
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        builder = builder.config("spark.driver.bindAddress", LOOPBACK).config("spark.driver.host", LOOPBACK)
    if submitted:
        return builder.getOrCreate()
    # We start the driver's JVM: give it the quiet logging from its start (it reads the file once, at start) and
    # the JVM options.
    with tempfile.NamedTemporaryFile("w", prefix="groupcoord-log4j2-", suffix=".properties", delete=False) as f:
        f.write(LOG4J2)
    try:
        options = " ".join([f"-Dlog4j2.configurationFile={Path(f.name).as_uri()}", *java_options()])
        return builder.config("spark.driver.extraJavaOptions", options).getOrCreate()
    finally:
        os.unlink(f.name)
