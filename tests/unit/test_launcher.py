"""The node launcher (node/launcher.py) without a node: the command line it builds, the ports it picks, and how it
ends processes (SIGTERM, SIGKILL after the grace)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from groupcoord.node import launcher
from groupcoord.node.topology import Peer


def test_the_command_line_has_the_typed_settings_then_the_flags():
    options = launcher.NodeOptions(
        host="127.0.0.2",
        port=5000,
        node_id=2,
        peers=(Peer(1, "127.0.0.1", 5000, 6000), Peer(2, "127.0.0.2", 5000, 6000)),
        partitions=4,
        data_dir=Path("/d"),
        kafka_port=-1,
        flags=("--kafka-port=0",),
        wrap=("ip", "netns", "exec", "n2"),
    )
    assert options.command() == [
        "ip", "netns", "exec", "n2", sys.executable, "-m", "groupcoord", "node", "--node-id=2", "--host=127.0.0.2",
        "--port=5000", "--peers=1=127.0.0.1:5000:6000,2=127.0.0.2:5000:6000", "--partitions=4", "--data-dir=/d",
        "--kafka-port=-1", "--log-format=json", "--kafka-port=0",
    ]  # fmt: skip
    bare = launcher.NodeOptions("127.0.0.1", 0, log_format=None, entry=("x.py",))
    assert bare.command() == [sys.executable, "x.py", "node", "--host=127.0.0.1", "--port=0"]


def test_free_bases_are_below_the_ephemeral_range_and_never_overlap():
    taken: set[int] = set()
    bases = [launcher.free_base("127.0.0.1", 4, taken) for _ in range(20)]
    ports = [p for base in bases for p in range(base, base + 4)]
    assert len(set(ports)) == len(ports) == len(taken)
    assert all(launcher.LOW_PORT <= p < 32_768 for p in ports)


def _child(code: str) -> launcher.Proc:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # the child is ready: its signal handlers are set
    return proc


def test_stop_ends_with_sigterm_and_kills_what_ignores_it():
    polite = _child("import time; print(flush=True); time.sleep(60)")
    stubborn = _child(
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    )
    start = time.monotonic()
    launcher.stop_procs([polite, stubborn], grace_s=0.5)
    assert time.monotonic() - start < 5
    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL


def test_stop_by_pid_says_how_each_ended_and_leaves_what_is_not_running_alone():
    proc = _child("import time; print(flush=True); time.sleep(60)")
    heard: list[tuple[int, bool]] = []
    launcher.stop(
        [proc.pid, 999_999_999], lambda pid: pid == proc.pid and proc.poll() is None, 5, lambda *e: heard.append(e)
    )
    assert heard == [(proc.pid, False)]
    assert proc.returncode == -signal.SIGTERM


def test_kill_returns_once_the_node_is_gone():
    assert launcher.kill(_child("import time; print(flush=True); time.sleep(60)")) == -signal.SIGKILL
