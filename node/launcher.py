"""Running `groupcoord node` processes on this machine: the one launcher of the local cluster (`groupcoord cluster`),
the chaos harness, the benchmarks and the tests.

It builds a node's command line from typed options, picks free ports, starts a node with its output in a log file,
waits until nodes serve (gRPC health), and ends them by pid: SIGTERM, then SIGKILL after a grace. What a caller
keeps of its own (a state file, network namespaces, a fault history) stays with the caller.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from groupcoord.client.security import PLAINTEXT, ClientSecurity, sync_channel
from groupcoord.node.config import ENV_PREFIX
from groupcoord.node.topology import Peer, format_peer

# The health service name whose status is the cluster's readiness ("" answers the same).
SERVICE = "groupcoord.v1.GroupCoordinator"
# The cluster secret goes to a node through its environment: a flag would show in `ps`.
SECRET_ENV = ENV_PREFIX + "CLUSTER_SECRET"
STOP_GRACE_S = 10.0
POLL_S = 0.05
LOW_PORT = 10_000  # free ports are looked for from here up to the ephemeral range
# Loopback addresses other than 127.0.0.1 are not guaranteed to exist, and an HTTP proxy must not see them.
CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)

Proc = subprocess.Popen[bytes]


@dataclass(frozen=True)
class NodeOptions:
    """A node's command line. None (or empty) leaves a setting to the node's own default; `flags` come last, so
    they override the typed settings (a test turns the Kafka listener back on with `--kafka-port=0`)."""

    host: str
    port: int
    node_id: int | None = None
    peers: tuple[Peer, ...] = ()
    partitions: int | None = None
    data_dir: Path | None = None
    metrics_port: int | None = None
    kafka_port: int | None = None
    log_format: str | None = "json"
    flags: tuple[str, ...] = ()
    # What the interpreter runs under (`ip netns exec NAME` for a node in a network namespace).
    wrap: tuple[str, ...] = ()
    # What runs `groupcoord` in the interpreter (a test may put a script of its own first).
    entry: tuple[str, ...] = ("-m", "groupcoord")

    def command(self) -> list[str]:
        typed = {
            "node-id": self.node_id,
            "host": self.host,
            "port": self.port,
            "peers": ",".join(format_peer(p) for p in self.peers) or None,
            "partitions": self.partitions,
            "data-dir": self.data_dir,
            "metrics-port": self.metrics_port,
            "kafka-port": self.kafka_port,
            "log-format": self.log_format,
        }
        settings = [f"--{flag}={value}" for flag, value in typed.items() if value is not None]
        return [*self.wrap, sys.executable, *self.entry, "node", *settings, *self.flags]


def start(
    options: NodeOptions, log: Path, secret: str | None = None, truncate: bool = False, own_session: bool = True
) -> Proc:
    """Starts the node with stdout and stderr into `log` (appended to, so a restart keeps what the node said before,
    unless `truncate`). `own_session`: a Ctrl-C in the terminal does not reach the node; whoever started it stops
    it. Without `secret` the node inherits this process's environment as it is."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = None if secret is None else {**os.environ, SECRET_ENV: secret}
    with log.open("wb" if truncate else "ab") as out:
        return subprocess.Popen(
            options.command(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=own_session,
        )  # fmt: skip


# -- ports ----------------------------------------------------------------------------------------


def _ephemeral_first() -> int:
    """The first port of the kernel's ephemeral range, from which outgoing connections take their ports."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_base(host: str, count: int, taken: set[int]) -> int:
    """A base port with `count` free ports on `host` after it, none already handed out, all below the ephemeral
    range: a port from that range could be taken by an outgoing connection (another node's Raft link) between
    this check and the node's bind, and pysyncobj would then retry its bind for as long as that link lives."""
    ceiling = min(_ephemeral_first(), 32_768) - count
    while True:
        base = random.randrange(LOW_PORT, ceiling)
        ports = set(range(base, base + count))
        if ports & taken:
            continue
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        taken.update(ports)
        return base


# -- health ---------------------------------------------------------------------------------------


def health_status(channel: grpc.Channel, service: str = SERVICE, timeout_s: float = 1.0) -> int | None:
    """The node's `ServingStatus` for `service` on an open channel, None when it does not answer."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = stub.Check(  # type: ignore[attr-defined]  # the stub package's HealthStub lists no methods
            health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
        )
    except grpc.RpcError:
        return None
    return int(reply.status)


def health(address: str, timeout_s: float = 1.0, security: ClientSecurity = PLAINTEXT, service: str = SERVICE) -> str:
    """The node's gRPC health status name (SERVING, NOT_SERVING, ...) or UNREACHABLE; `service` as the health
    service names it (the cluster's by default, or "groupcoord.readiness" / "groupcoord.liveness")."""
    with sync_channel(address, security, CHANNEL_OPTIONS) as channel:
        status = health_status(channel, service, timeout_s)
    return "UNREACHABLE" if status is None else health_pb2.HealthCheckResponse.ServingStatus.Name(status)


@dataclass(frozen=True)
class NotServing:
    """Why a node at `address` is not serving: it exited with `returncode`, or it runs and said `status`."""

    address: str
    returncode: int | None = None
    status: str = "UNREACHABLE"


def first_exited(procs: Mapping[str, Proc]) -> NotServing | None:
    """The first of the nodes (address → process) that has exited."""
    for address, proc in procs.items():
        code = proc.poll()
        if code is not None:
            return NotServing(address, code, "DOWN")
    return None


def first_not_serving(
    addresses: Iterable[str], security: ClientSecurity = PLAINTEXT, service: str = SERVICE
) -> NotServing | None:
    """None when every node reports SERVING in this one round, else the first that does not."""
    for address in addresses:
        status = health(address, security=security, service=service)
        if status != "SERVING":
            return NotServing(address, status=status)
    return None


def wait_serving(
    procs: Mapping[str, Proc], timeout_s: float, security: ClientSecurity = PLAINTEXT, service: str = SERVICE
) -> NotServing | None:
    """None once every node (address → process) reports SERVING in the same round; else the first that exited or,
    after `timeout_s`, the first that did not serve. One round for all: a node is briefly NOT_SERVING while
    leadership moves between nodes at startup."""
    deadline = time.monotonic() + timeout_s
    while True:
        failed = first_exited(procs) or first_not_serving(procs, security, service)
        if failed is None or failed.returncode is not None or time.monotonic() > deadline:
            return failed
        time.sleep(POLL_S)


# -- ending nodes ---------------------------------------------------------------------------------


def cmdline(pid: int) -> list[str] | None:
    """The pid's argv, or None when there is no such (live) process. A zombie's argv is empty."""
    proc = Path("/proc")
    if proc.is_dir():
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return None
        return raw.decode(errors="replace").split("\0")[:-1] or None
    # No /proc (macOS): ps shows argv joined by spaces, enough for the substring checks in `is_node`.
    out = subprocess.run(["ps", "-ww", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
    return out.stdout.split() or None


def is_node(pid: int, data_dir: str) -> bool:
    """Whether pid is still the `groupcoord node` of `data_dir` (a pid read from a file can be reused by any
    process)."""
    argv = cmdline(pid)
    return (
        argv is not None
        and "node" in argv
        and any("groupcoord" in a for a in argv)
        and f"--data-dir={data_dir}" in argv
    )


def stop(
    pids: Sequence[int],
    running: Callable[[int], bool],
    grace_s: float = STOP_GRACE_S,
    exited: Callable[[int, bool], None] | None = None,
) -> None:
    """SIGTERM to every pid, up to `grace_s` for them to exit, then SIGKILL to those left (and up to `grace_s`
    more for each). `running(pid)`: whether pid is still the node meant (a child is reaped by it, see
    `stop_procs`); `exited(pid, killed)` hears of each exit. A SIGCONT follows the SIGTERM, so that a node
    paused by SIGSTOP acts on it."""
    left = [pid for pid in pids if running(pid)]
    for pid in left:
        with suppress(ProcessLookupError):  # it may exit (and be reaped by its parent) meanwhile
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S / 2)
        for pid in [p for p in left if not running(p)]:
            left.remove(pid)
            if exited is not None:
                exited(pid, False)
    for pid in left:
        if running(pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + grace_s
            while running(pid) and time.monotonic() < deadline:
                time.sleep(POLL_S / 2)
        if exited is not None:
            exited(pid, True)


def stop_procs(procs: Iterable[Proc], grace_s: float = STOP_GRACE_S) -> None:
    """`stop` for nodes this process started (and so reaps)."""
    live = {proc.pid: proc for proc in procs if proc.poll() is None}
    stop(list(live), lambda pid: live[pid].poll() is None, grace_s)


def kill(proc: Proc) -> int:
    """kill -9 of a node this process started (a crash, for a fault or a failover), once it is gone: its exit code."""
    proc.send_signal(signal.SIGKILL)
    return proc.wait()
