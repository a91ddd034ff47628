"""A command whose stdout reader has gone away (`groupcoord ... | head`) stops quietly, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from groupcoord.cli import SIGPIPE_EXIT


def test_a_closed_stdout_ends_the_command_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the command's first write to stdout fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "groupcoord", "token", "hash"],
            input=b"a-token\n",
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == SIGPIPE_EXIT, done.stderr.decode()
    assert done.stderr == b"", done.stderr.decode()
