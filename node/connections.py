"""Connections per client address (Kafka's `max.connections.per.ip`), which grpc core cannot cap.

grpc core owns the client port's listening socket and accepts every connection up to `max_connections`; it has
no per-address limit and no hook before accept. So the node looks at its own sockets instead: about once a second
it lists the connected TCP sockets on the client port (`/proc/self/fd`), and when an address holds more than
`max_connections_per_ip`, it shuts the newest of them down (`shutdown(2)`; grpc core sees the connection end and
cleans up, the descriptor stays grpc's). An address over the limit keeps its oldest connections, so a client
that was there before a flood from its own address keeps working.

Only Linux has `/proc/self/fd`; elsewhere the limit is not enforced and the node says so once at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Callable

from groupcoord.node.logs import LogBudget, fields

log = logging.getLogger(__name__)

FD_DIR = "/proc/self/fd"
# How often the sockets are looked at: an address over its limit is cut back within about this long.
SCAN_PERIOD_S = 1.0
CUT_LOG_PER_S = 5

OnCut = Callable[[int], None]


@dataclasses.dataclass
class _Seen:
    """A client connection: its address, and the scan that first saw it (older ones are kept first)."""

    address: str
    scan: int


def _peer_address(fd: int, port: int) -> str | None:
    """The client address of `fd` when it is a connected TCP socket on local `port`, else None."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    with sock:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            local, peer = sock.getsockname(), sock.getpeername()
        except OSError:  # the listening socket, or one that is already gone
            return None
        if local[1] != port:
            return None
        address = ipaddress.ip_address(peer[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return str(address)


def _shutdown(fd: int, address: str, port: int) -> bool:
    """Shuts the connection of `fd` down, once the descriptor is checked to still be that connection."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fd))
        with sock:
            if _peer_address(sock.fileno(), port) == address:
                sock.shutdown(socket.SHUT_RDWR)
                return True
    return False


class ConnectionsPerAddress:
    """Holds each client address to `limit` connections on `port` (see the module docstring)."""

    def __init__(self, port: int, limit: int, on_cut: OnCut | None = None) -> None:
        self._port = port
        self._limit = limit
        self._on_cut = on_cut
        self._scan = 0
        self._seen: dict[int, _Seen] = {}  # socket inode -> what was seen of it
        self._log = LogBudget(CUT_LOG_PER_S)

    @staticmethod
    def available() -> bool:
        return os.path.isdir(FD_DIR)

    def scan(self) -> dict[str, int]:
        """One look at every descriptor; cuts addresses over the limit. Returns the connections per address
        after the cut."""
        self._scan += 1
        entries: list[tuple[int, int]] = []  # (fd, inode) of every socket
        with os.scandir(FD_DIR) as listing:
            for entry in listing:
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    entries.append((int(entry.name), int(target[8:-1])))
        if len(entries) <= self._limit:
            self._seen.clear()  # no address can be over the limit: nothing to remember either
            return {}
        current: dict[int, _Seen] = {}
        by_address: dict[str, list[tuple[int, int]]] = {}
        for fd, inode in entries:
            seen = self._seen.get(inode)
            if seen is None:
                address = _peer_address(fd, self._port)
                if address is None:
                    continue
                seen = _Seen(address, self._scan)
            current[inode] = seen
            by_address.setdefault(seen.address, []).append((fd, inode))
        self._seen = current
        counts = {}
        for address, conns in by_address.items():
            excess = len(conns) - self._limit
            if excess > 0:
                # Newest first: seen in the latest scan, then the highest inode (the kernel numbers them in order).
                conns.sort(key=lambda c: (current[c[1]].scan, c[1]), reverse=True)
                cut = sum(_shutdown(fd, address, self._port) for fd, _ in conns[:excess])
                self._report(address, len(conns), cut)
                counts[address] = len(conns) - cut
            else:
                counts[address] = len(conns)
        return counts

    def _report(self, address: str, held: int, cut: int) -> None:
        if self._on_cut is not None:
            self._on_cut(cut)
        skipped = self._log.take(time.monotonic())
        if skipped is not None:
            log.warning(
                "client.connections_per_ip",
                extra=fields(address=address, held=held, closed=cut, limit=self._limit, not_logged_before=skipped),
            )

    async def run(self) -> None:
        """Until cancelled; each scan in a thread, so the event loop never waits for it."""
        while True:
            await asyncio.sleep(SCAN_PERIOD_S)
            await asyncio.to_thread(self.scan)
