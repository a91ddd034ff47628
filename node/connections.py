"""Connections per client address (Kafka's `max.connections.per.ip`), which grpc core cannot cap.

grpc core owns the client port's listening socket and accepts every connection up to `max_connections`; it has
no per-address limit and no hook before accept. So the node looks at its own sockets instead: about once a second
it lists the connected TCP sockets on the client port (`/proc/self/fd`), and when an address holds more than
`max_connections_per_ip`, it shuts the newest of them down (`shutdown(2)`; grpc core sees the connection end and
cleans up, the descriptor stays grpc's). An address over the limit keeps its oldest connections, so a client
that was there before a flood from its own address (seen by an earlier scan) keeps working.

Only Linux has `/proc/self/fd`; elsewhere the limit is not enforced and the node says so once at start.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._first_scan: dict[int, int] = {}  # socket inode -> the scan that first saw it (older ones are kept)
        self._addresses: dict[int, str | None] = {}  # socket inode -> its client address on the port, if one
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
        # When each socket was first seen is kept on every scan (it is what decides which are the newest); which
        # address it belongs to is looked up only once some address could be over the limit.
        first = {inode: self._first_scan.get(inode, self._scan) for _, inode in entries}
        self._first_scan = first
        if len(entries) <= self._limit:
            self._addresses.clear()
            return {}
        addresses: dict[int, str | None] = {}
        by_address: dict[str, list[tuple[int, int]]] = {}
        for fd, inode in entries:
            address = self._addresses[inode] if inode in self._addresses else _peer_address(fd, self._port)
            addresses[inode] = address
            if address is not None:
                by_address.setdefault(address, []).append((fd, inode))
        self._addresses = addresses
        counts = {}
        for address, conns in by_address.items():
            excess = len(conns) - self._limit
            if excess > 0:
                # Newest first: first seen in the latest scan (within one scan the order is arbitrary).
                conns.sort(key=lambda c: (first[c[1]], c[1]), reverse=True)
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
