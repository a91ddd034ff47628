"""Fuzz target 4: a hostile HTTP/2 client (tests/fuzz/h2fuzz.py, built on h2) at a real node's ports.

Issue "Hostile clients: no request, byte sequence or flood takes a node down". Malformed frames, headers, paths,
flow-control abuse, floods and resets go to the node's client port, its Raft ports and its metrics port, while a
well-behaved client keeps calling it from a process of its own. That client must get every answer, right, within
its deadline (its latency is recorded, not asserted: speed is for the benchmarks), and the node must come out the
same process, never restarted nor handing over, SERVING, with its acknowledged offsets and Raft leaders and terms
unchanged, no error or traceback in its log (the `node` fixture; `client.malformed` warnings are expected) and no
descriptor left behind.

CI: 20,000 malformed requests at the client port, 300 at each Raft port, 300 at the metrics port, seed
GROUPCOORD_FUZZ_SEED (1). Long run (docs/FUZZING.md): GROUPCOORD_FUZZ=long, 1,000,000 requests at the client port
(GROUPCOORD_FUZZ_REQUESTS; a twentieth of it at each Raft port and at the metrics port) or
GROUPCOORD_FUZZ_SECONDS (3,600) per target, whichever ends first, and slow connections held 12 s (past the node's
handshake timeout); with `-s` each target prints its progress every 10 s and its report at the end.

What the fuzzer found is kept in test_h2_regressions.py; the well-behaved client is good_client.py.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from tests.e2e.support import NodeProcess, health_status
from tests.fuzz import h2fuzz
from tests.fuzz.good_client import GoodClient, Latency, Record
from tests.fuzz.h2conn import Report
from tests.fuzz.h2wire import LOCALHOST
from tests.fuzz.lone_node import lone_node_process, metrics_port
from tests.fuzz.profiles import LONG, time_limit
from tests.fuzz.support import PARTITIONS, FuzzNode, anchor, anchored, failures, raft_view

SEED = int(os.environ.get("GROUPCOORD_FUZZ_SEED", "1"))
SECONDS = float(os.environ.get("GROUPCOORD_FUZZ_SECONDS", "3600")) if LONG else 60.0
CLIENT_REQUESTS = int(os.environ.get("GROUPCOORD_FUZZ_REQUESTS", "1000000")) if LONG else 20_000
RAFT_REQUESTS = CLIENT_REQUESTS // 20 if LONG else 300
METRICS_REQUESTS = CLIENT_REQUESTS // 20 if LONG else 300
# Malformed requests a second at the client port. Well below what makes grpc core shed calls of every client (a
# known finding: test_regression_a_call_burst_cancels_no_other_clients_call), so that a failed call of the good
# client is news.
RATE = 1_000
# How long slow and never-reading connections are held open: in a long run past the node's 10 s handshake timeout.
HOLD_S = 12.0 if LONG else 1.0
# Events of a node that stopped serving, restarted or handed its partitions over.
DOWN = {"node.server_died", "node.stopping", "node.handed_over", "node.started"}


# -- what the node looks like ------------------------------------------------------------------------------


@dataclass
class Usage:
    rss_kb: int
    threads: int
    fds: int


def usage(pid: int) -> Usage:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return Usage(int(status["VmRSS"].split()[0]), int(status["Threads"]), len(os.listdir(f"/proc/{pid}/fd")))


def settles(pid: int, fds: int, timeout_s: float = 15.0) -> Usage:
    """The node's usage once its descriptors are back to `fds` (the fuzzer's connections all closed)."""
    deadline = time.monotonic() + timeout_s
    now = usage(pid)
    while now.fds > fds and time.monotonic() < deadline:
        time.sleep(0.2)
        now = usage(pid)
    return now


class Watch:
    """A run's progress, every 10 s: requests so far and the node's memory and descriptors (peak RSS kept)."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self.peak_rss_kb = usage(pid).rss_kb

    def __call__(self, report: Report) -> None:
        now = usage(self._pid)
        self.peak_rss_kb = max(self.peak_rss_kb, now.rss_kb)
        print(f"{report.seconds:7.0f} s {report.requests:>9} requests  rss {now.rss_kb} kB  fds {now.fds}", flush=True)


def report(record_property: Record, label: str, run: Report) -> None:
    print(run.table())
    record_property(f"{label}_requests", run.requests)
    record_property(f"{label}_seconds", round(run.seconds, 1))
    for name, tally in sorted(run.tallies.items()):
        record_property(f"{label}_{name}", tally.requests)


@pytest.fixture
def steady(node: FuzzNode) -> Iterator[FuzzNode]:
    """The shared node is the same process after the test, never stopped nor restarted, SERVING, with the offsets
    acknowledged before and the same Raft leaders in the same terms."""
    anchor(node.stub, 3_000)
    before = (anchored(node.stub), raft_view(node.stub))
    pid, since = node.process.proc.pid, len(node.process.events())
    yield node
    assert node.process.alive() and node.process.proc.pid == pid
    down = [e for e in node.process.events()[since:] if e.get("event") in DOWN]
    assert not down, down
    assert health_status(node.process.address) == health_pb2.HealthCheckResponse.SERVING
    assert (anchored(node.stub), raft_view(node.stub)) == before


# -- the targets --------------------------------------------------------------------------------------------


@time_limit(120)
def test_h2_fuzz_on_the_client_port(steady: FuzzNode, record_property: Record) -> None:
    process = steady.process
    since, before, watch = len(process.log_lines()), usage(process.proc.pid), Watch(process.proc.pid)
    with GoodClient(process.address, PARTITIONS) as good:
        run = h2fuzz.run(
            process.port, CLIENT_REQUESTS, SEED, seconds=SECONDS, hold_s=HOLD_S, rate=RATE, on_progress=watch
        )
        watch(run)
    report(record_property, "client_port", run)
    good.check(record_property, "client_port")
    after = settles(process.proc.pid, before.fds)
    lines = process.log_lines()[since:]
    core = sum(not line.startswith("{") for line in lines)
    warned = sum('"event": "client.malformed"' in line for line in lines)
    print(f"node rss {before.rss_kb} kB, peak {watch.peak_rss_kb} kB, after {after.rss_kb} kB; fds {after.fds}")
    print(f"node log: {core} lines from grpc core, {warned} client.malformed warnings")
    record_property("client_port_rss_kb", [before.rss_kb, watch.peak_rss_kb, after.rss_kb])
    record_property("client_port_log_lines", [core, warned])
    assert run.requests >= CLIENT_REQUESTS or (LONG and run.seconds >= SECONDS), "the run ran out of time"
    assert after.fds <= before.fds, "the node holds connections the fuzzer closed"


@time_limit(90)
def test_h2_fuzz_on_the_raft_ports(steady: FuzzNode, record_property: Record) -> None:
    """pysyncobj, not HTTP/2, on these ports: the node only has to come out of it unharmed."""
    process = steady.process
    before, watch = usage(process.proc.pid), Watch(process.proc.pid)
    seconds = SECONDS / PARTITIONS
    with GoodClient(process.address, PARTITIONS) as good:
        runs = [
            h2fuzz.run(port, RAFT_REQUESTS, SEED + k, h2fuzz.RAFT_PORT, seconds, hold_s=HOLD_S, on_progress=watch)
            for k, (_, port) in enumerate(steady.raft_addresses)
        ]
    for k, run in enumerate(runs):
        report(record_property, f"raft_port_{k}", run)
    good.check(record_property, "raft_ports")
    after = settles(process.proc.pid, before.fds)
    assert all(run.requests >= RAFT_REQUESTS or (LONG and run.seconds >= seconds) for run in runs)
    assert after.fds <= before.fds, "the node holds connections the fuzzer closed"


@pytest.fixture(scope="module")
def lone_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node of this module's own, with a metrics port: the shared node has none."""
    with lone_node_process(tmp_path_factory) as process:
        yield process


def scrape(process: NodeProcess) -> int:
    with urllib.request.urlopen(f"http://{LOCALHOST}:{metrics_port(process)}/metrics", timeout=10) as answer:
        assert b"groupcoord_" in answer.read()
        status: int = answer.status
        return status


class Scraper(threading.Thread):
    """Prometheus, as it were: scrapes /metrics every half second while the port is fuzzed."""

    def __init__(self, process: NodeProcess) -> None:
        super().__init__()
        self._process = process
        self._done = threading.Event()
        self.seconds: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self._done.wait(0.5):
            start = time.perf_counter()
            try:
                scrape(self._process)
            except OSError as exc:
                self.failures.append(repr(exc))
            else:
                self.seconds.append(time.perf_counter() - start)

    def stop(self) -> Latency:
        self._done.set()
        self.join()
        return Latency.of(self.seconds)


@time_limit(90)
def test_h2_and_http1_fuzz_on_the_metrics_port(lone_node: NodeProcess, record_property: Record) -> None:
    """The metrics port is a plain HTTP/1.1 server (prometheus_client): HTTP/1.1 garbage, and HTTP/2 with prior
    knowledge. One connection at a time: the server takes connections slowly (a thread each, an accept queue of
    5), and past that a connect waits a second for its SYN to be sent again (docs/FUZZING.md)."""
    process = lone_node
    port = metrics_port(process)
    since, before = len(process.log_lines()), usage(process.proc.pid)
    scraper = Scraper(process)
    with GoodClient(process.address, 1) as good:
        scraper.start()
        run = h2fuzz.run(
            port,
            METRICS_REQUESTS,
            SEED,
            kinds=h2fuzz.METRICS_PORT,
            seconds=SECONDS,
            connections=1,
            hold_s=HOLD_S,
            on_progress=Watch(process.proc.pid),
        )
        scraped = scraper.stop()
    report(record_property, "metrics_port", run)
    good.check(record_property, "metrics_port")
    print(f"metrics_port: scrapes during the run: {scraped}")
    record_property("metrics_port_scrapes", str(scraped))
    assert not scraper.failures, scraper.failures
    assert scrape(process) == 200
    after = settles(process.proc.pid, before.fds)
    print(f"node threads {before.threads} -> {after.threads}, fds {before.fds} -> {after.fds}")
    assert process.alive()
    assert not [e for e in process.events() if e.get("event") in DOWN - {"node.started"}]
    assert not failures(process, since), failures(process, since)
    assert run.requests >= METRICS_REQUESTS or (LONG and run.seconds >= SECONDS), "the run ran out of time"
    assert after.fds <= before.fds, "the metrics server holds connections the fuzzer closed"
