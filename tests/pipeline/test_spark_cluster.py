"""The analytics job on a real Spark cluster (issue 7): a standalone master and one worker started from the pyspark
package on loopback, the job run by `spark-submit --master spark://...` and by `groupcoord analyze --master ...`,
and both runs' files equal to the embedded engine's for the same events (docs/ANALYZE.md has the commands)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import StructType

from groupcoord.node.launcher import free_base
from groupcoord.pipeline import analyze
from tests.pipeline.events import scenario, write
from tests.pipeline.test_analyze import NOT_JSON, TABLES

SPARK_HOME = Path(pyspark.__file__).parent
LOOPBACK = "127.0.0.1"
APP = "groupcoord-analyze"  # session.build's default app name
START_S = 60.0  # two JVMs: a few seconds on an idle 2-core machine, much longer on a busy one
RUN_S = 150.0  # one run of the job; its cost is fixed (JVM starts, a few hundred small stages), not per event
# For every Spark process: the master, the worker, the drivers (spark-submit's, and the one `groupcoord analyze`
# starts) and the executors the worker forks, which inherit the worker's environment.
ENV = os.environ | {
    "SPARK_HOME": str(SPARK_HOME),
    # Loopback only: the daemons get --host, but a driver with a non-local master binds the hostname's address.
    "SPARK_LOCAL_IP": LOOPBACK,
    # spark-submit's Python driver: this venv's, which has groupcoord (else `python3` from PATH).
    "PYSPARK_PYTHON": sys.executable,
    # Else the master also serves its REST submission API on the fixed port 6066.
    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    # Short-lived JVMs: without the C2 compiler and with one GC thread the test takes half the CPU time, which
    # decides its duration on a 2-core machine. What Spark computes does not change.
    "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def _until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.25)


@dataclass(frozen=True)
class Standalone:
    """A running standalone cluster: its master's URL, the master UI's port (for its JSON) and the worker's dir."""

    url: str
    ui_port: int
    work_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's view (workers, applications) from its UI's JSON; no proxy, whatever the environment says."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def alive_workers(self) -> int:
        try:
            return self.state()["aliveworkers"]
        except (urllib.error.URLError, ConnectionError):
            return 0  # the master's UI is not up yet

    def completed_apps(self) -> list[dict[str, Any]]:
        return self.state()["completedapps"]


def _spark_class(main: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A Spark daemon in its own process group; spark-class execs the JVM, so the pid is the JVM's."""
    with log.open("wb") as out:
        argv = [str(SPARK_HOME / "bin" / "spark-class"), main, *args]
        return subprocess.Popen(argv, env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the daemon's group (a worker's executors included), SIGKILL if it is still there after 20 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def standalone(root: Path) -> Iterator[Standalone]:
    """A master and a 1-core worker, both started at once (the worker retries until the master is up), torn down
    on the way out. The caller waits for the worker with `alive_workers`, so it can do other work meanwhile."""
    taken: set[int] = set()
    port, ui_port, worker_ui_port = (free_base(LOOPBACK, 1, taken) for _ in range(3))
    cluster = Standalone(f"spark://{LOOPBACK}:{port}", ui_port, root / "work")
    cluster.work_dir.mkdir(parents=True)
    master_args = ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)]
    worker_args = [cluster.url, "--host", LOOPBACK, "--cores", "1", "--memory", "1g", "--webui-port",
                   str(worker_ui_port), "--work-dir", str(cluster.work_dir)]  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_spark_class("org.apache.spark.deploy.master.Master", master_args, root / "master.log"))
        procs.append(_spark_class("org.apache.spark.deploy.worker.Worker", worker_args, root / "worker.log"))
        yield cluster
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _files(out: Path) -> dict[str, str]:
    """OUT's files (the CSVs, summary.json, report.html) by name; the Parquet tables are directories."""
    return {p.name: p.read_text() for p in out.iterdir() if p.is_file()}


def _parquet(spark: SparkSession, out: Path) -> dict[str, tuple[StructType, list[Row]]]:
    """Every Parquet table read back: its schema and its rows in a fixed order (a table's parts have no order)."""
    found = {}
    for name in TABLES:
        df = spark.read.parquet(str(out / name))
        found[name] = (df.schema, df.orderBy(*df.columns).collect())
    return found


# About 130 s alone on a 2-core machine with other work on it (the cold local session's run is the longest part),
# 80 s in the suite; far longer when the machine is saturated.
@pytest.mark.timeout(300)
def test_on_a_standalone_cluster(spark: SparkSession, tmp_path: Path) -> None:
    lines = scenario()
    events = tmp_path / "in"
    write(events / "events.jsonl", [lines[0], NOT_JSON, *lines[1:]])
    write(events / "again.jsonl", lines[:3])  # an overlapping export: duplicates dropped on the cluster too
    embedded, submitted, command = tmp_path / "embedded", tmp_path / "submitted", tmp_path / "command"
    flags = ["--events", str(events), "--out"]
    with standalone(tmp_path / "cluster") as cluster:
        # The reference, by this process's local[2] session, while the cluster's JVMs start.
        assert analyze.main([*flags, str(embedded)]) == 0
        _until(lambda: cluster.alive_workers() == 1, START_S, "a worker registered with the master")
        runs = {
            submitted: [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url, analyze.__file__],
            command: [str(Path(sys.executable).with_name("groupcoord")), "analyze", "--master", cluster.url],
        }
        for out, argv in runs.items():
            done = subprocess.run([*argv, *flags, str(out)], env=ENV, capture_output=True, text=True, timeout=RUN_S)
            assert done.returncode == 0, done.stderr[-4000:]
            assert done.stdout.startswith(f"{len(lines)} events analysed, ") and f" -> {out}\n" in done.stdout
        _until(lambda: len(cluster.completed_apps()) == 2, 10, "both applications completed")
        apps = cluster.completed_apps()
        work = {p.name: p for p in cluster.work_dir.iterdir()}
    # Each run was an application of this master, and its tasks ran in an executor the worker started.
    assert [(app["name"], app["state"]) for app in apps] == [(APP, "FINISHED")] * 2
    assert sorted(work) == sorted(app["id"] for app in apps)
    for app_dir in work.values():
        (stderr,) = app_dir.glob("*/stderr")
        assert "Running task" in stderr.read_text(), f"no task ran in {stderr.parent}"
    expected = _files(embedded)
    assert all(json.loads(expected["summary.json"])["tables"].values()), "every table has rows to compare"
    expected_parquet = _parquet(spark, embedded)
    for out in runs:
        assert _files(out) == expected, f"{out.name} differs from the embedded run"
        assert _parquet(spark, out) == expected_parquet, f"{out.name}'s Parquet differs from the embedded run"
