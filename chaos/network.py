"""Where the chaos cluster's nodes live, and how a node is cut off from the others.

`Namespaces` (root only) gives each node its own network namespace, linked by a veth pair to a bridge that
lives in a "switch" namespace of its own, which one more veth pair joins to the host: workers and the harness
talk from the host end. The bridge is kept out of the host namespace because a host firewall must not see
its frames (Docker's engine, for one, sets the host's FORWARD policy to DROP and makes bridges pass through
it). A partition is real kernel routing: in each namespace of the pair, a policy rule ahead of the local
table blackholes packets *from* the other side, so they are dropped silently on arrival (no RST, no ICMP)
exactly like a cut link, while the host (clients) still reaches every node — the interesting case of a
deposed leader that clients can still talk to. `Loopback` puts node i on 127.0.0.i and cannot partition.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess

FIRST_NODE_OCTET = 11
# Policy-rule priorities in a node's namespace: partition rules, then the local table moved behind them.
PARTITION_PREF, LOCAL_PREF = 10, 100


class NetworkError(Exception):
    pass


class Loopback:
    name = "loopback"
    can_partition = False

    def host(self, node_id: int) -> str:
        return f"127.0.0.{node_id}"

    def wrap(self, node_id: int) -> list[str]:
        return []

    def partition(self, node_id: int, others: list[int], inbound: bool = True, outbound: bool = True) -> None:
        raise NetworkError("loopback nodes cannot be partitioned; run as root for network namespaces")

    def heal(self) -> None:
        return None

    def close(self) -> None:
        return None


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _taken_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=False).stdout
    nets = [ipaddress.IPv4Interface(word).network for line in out.splitlines() for word in line.split()[3:4]]
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=False).stdout
    for line in routes.splitlines():
        first = line.split()[0] if line.split() else ""
        if first[:1].isdigit():
            nets.append(ipaddress.IPv4Network(first, strict=False))
    return nets


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0/13 that no interface or route of this machine uses."""
    taken = _taken_networks()
    for step in range(2048):
        index = (seed + step) % 2048
        net = ipaddress.IPv4Network(f"10.{200 + index // 256}.{index % 256}.0/24")
        if not any(net.overlaps(other) for other in taken):
            return net
    raise NetworkError("no free 10.200.0.0/13 subnet for the chaos network")


class Namespaces:
    name = "netns"
    can_partition = True

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and shutil.which("ip") is not None

    def __init__(self, size: int) -> None:
        self.size = size
        self.prefix = f"gc{os.getpid() % 100_000}"
        self.switch = f"{self.prefix}sw"
        self.subnet = _free_subnet(os.getpid())
        self._partitioned: list[tuple[int, str]] = []
        self._created: list[tuple[str, str]] = []  # ("link" | "netns", name), deleted in reverse
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _address(self, octet: int) -> str:
        return str(self.subnet.network_address + octet)

    def _ns(self, node_id: int) -> str:
        return f"{self.prefix}n{node_id}"

    def _create(self) -> None:
        switch, bridge = self.switch, f"{self.prefix}br"
        _ip("netns", "add", switch)
        self._created.append(("netns", switch))
        _ip("-n", switch, "link", "add", bridge, "type", "bridge")
        _ip("-n", switch, "link", "set", bridge, "up")
        outside = f"{self.prefix}h0"
        self._veth(outside, None, f"{self.prefix}s0", bridge)
        _ip("addr", "add", f"{self._address(1)}/24", "dev", outside)
        _ip("link", "set", outside, "up")
        for node_id in range(1, self.size + 1):
            ns, inside = self._ns(node_id), f"{self.prefix}c{node_id}"
            _ip("netns", "add", ns)
            self._created.append(("netns", ns))
            self._veth(inside, ns, f"{self.prefix}s{node_id}", bridge)
            _ip("-n", ns, "addr", "add", f"{self.host(node_id)}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # Partition rules must be consulted before local delivery: move the local table behind them.
            _ip("-n", ns, "rule", "add", "pref", str(LOCAL_PREF), "lookup", "local")
            _ip("-n", ns, "rule", "del", "pref", "0")

    def _veth(self, name: str, netns: str | None, port: str, bridge: str) -> None:
        """A veth pair from `name` (in `netns`, None: the host) to `port` on the switch's bridge."""
        _ip("link", "add", name, "type", "veth", "peer", "name", port, "netns", self.switch)
        if netns is None:
            self._created.append(("link", name))
        else:
            _ip("link", "set", name, "netns", netns)
        _ip("-n", self.switch, "link", "set", port, "master", bridge, "up")

    def host(self, node_id: int) -> str:
        return self._address(FIRST_NODE_OCTET + node_id - 1)

    def wrap(self, node_id: int) -> list[str]:
        return ["ip", "netns", "exec", self._ns(node_id)]

    def partition(self, node_id: int, others: list[int], inbound: bool = True, outbound: bool = True) -> None:
        """Drops what `node_id` receives from `others` (inbound) and what they receive from it (outbound); one
        direction alone is a one-way partition."""
        for other in others:
            pairs = [(node_id, other)] if inbound else []
            pairs += [(other, node_id)] if outbound else []
            for here, there in pairs:
                _ip("-n", self._ns(here), "rule", "add", "from", self.host(there), "blackhole",
                    "pref", str(PARTITION_PREF))  # fmt: skip
                self._partitioned.append((here, self.host(there)))

    def heal(self) -> None:
        while self._partitioned:
            here, source = self._partitioned.pop()
            _ip("-n", self._ns(here), "rule", "del", "from", source, "blackhole", "pref", str(PARTITION_PREF))

    def close(self) -> None:
        """Removes what this run created; the host end of the veth pair is deleted explicitly, since the pair
        outlives the switch namespace while a process still holds it."""
        for kind, name in reversed(self._created):
            command = ["ip", "link", "del", name] if kind == "link" else ["ip", "netns", "del", name]
            subprocess.run(command, capture_output=True, check=False)
        self._created.clear()
