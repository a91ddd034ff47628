"""The `groupcoord` console script and `python -m groupcoord`: the command line (groupcoord/cli.py), with gRPC's fork
support off.

Our commands fork only to exec a child (nodes, bench workers, flood processes, etcd). On uvloop a child is spawned
with a plain fork(), which runs gRPC's atfork handlers, and in the child, between fork and exec, those handlers are
a known cause of crashes with channels open (grpc/grpc#43055; BuildStream turned them off for the same reason,
apache/buildstream#1679). A flood child of `bench flood` died of SIGSEGV twice in CI, the second time without the
dump its faulthandler prints, so before its own code ran. gRPC reads GRPC_ENABLE_FORK_SUPPORT once, as its extension
loads: it is set here, before anything imports grpc, unless the environment already says otherwise.
"""

from __future__ import annotations

import os


def fork_handlers_off() -> None:
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")


def main() -> int:
    fork_handlers_off()
    from groupcoord.cli import main as cli_main  # loads grpc

    return cli_main()
