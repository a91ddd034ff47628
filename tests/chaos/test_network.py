"""The chaos network is real: a partition stops node-to-node traffic both ways while the host still reaches
both nodes, and healing restores it; closing removes every namespace and link the run created."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from groupcoord.chaos.network import Namespaces

PORT = 7000
SERVER = f"""
import socket
s = socket.socket(); s.bind((__import__("sys").argv[1], {PORT})); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"hi"); c.close()
"""
CLIENT = f"""
import socket, sys
try:
    print(socket.create_connection((sys.argv[1], {PORT}), timeout=1.0).recv(2).decode())
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.fixture
def network() -> Iterator[Namespaces]:
    assert Namespaces.available(), "network namespaces need root and iproute2"
    net = Namespaces(2)
    servers = [
        subprocess.Popen([*net.wrap(n), sys.executable, "-c", SERVER, net.host(n)], stderr=subprocess.DEVNULL)
        for n in (1, 2)
    ]
    try:
        yield net
    finally:
        for server in servers:
            server.kill()
            server.wait()
        net.close()


def _connect(prefix: list[str], host: str) -> str:
    out = subprocess.run([*prefix, sys.executable, "-c", CLIENT, host], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def _eventually(prefix: list[str], host: str, want: str, timeout_s: float = 10.0) -> str:
    """Until the connection gives `want` (servers start, a healed neighbour entry is retried)."""
    deadline = time.monotonic() + timeout_s
    while (got := _connect(prefix, host)) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_a_partition_cuts_nodes_apart_but_not_the_clients(network: Namespaces) -> None:
    one, two = network.host(1), network.host(2)
    assert _eventually(network.wrap(1), two, "hi") == "hi"
    assert _eventually(network.wrap(2), one, "hi") == "hi"

    network.partition(1, [2])
    assert _connect(network.wrap(1), two) == "TimeoutError"  # dropped silently, no RST
    assert _connect(network.wrap(2), one) == "TimeoutError"
    assert _connect([], one) == "hi" and _connect([], two) == "hi"

    network.heal()
    assert _eventually(network.wrap(1), two, "hi") == "hi"
    assert _eventually(network.wrap(2), one, "hi") == "hi"


def test_close_removes_everything_it_created() -> None:
    assert Namespaces.available(), "network namespaces need root and iproute2"
    net = Namespaces(3)
    net.close()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in namespaces.splitlines() if line.strip()}
    names |= {line.split(": ")[1].split("@")[0] for line in links.splitlines()}
    ours = {net.switch, f"{net.prefix}h0"} | {f"{net.prefix}n{n}" for n in (1, 2, 3)}
    assert not names & ours, names & ours
