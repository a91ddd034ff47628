"""groupcoord/console.py: a process started through the console script spawns its children without gRPC's fork
handlers, which run in a child between fork and exec on uvloop and are a known cause of crashes there."""

from __future__ import annotations

import subprocess
import sys

# A process with an open aio channel spawns three children on uvloop, as `bench flood` does its flood processes.
SPAWN = """
import asyncio, sys
{setup}
import grpc, uvloop

async def main():
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        await asyncio.wait_for(channel.channel_ready(), 0.2)
    except asyncio.TimeoutError:
        pass
    codes = []
    for _ in range(3):
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        codes.append(await child.wait())
    await channel.close()
    print(codes)

uvloop.run(main())
"""
FORK_HANDLER_LOG = "fork_posix.cc"


def spawn(setup: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}  # no GRPC_ENABLE_FORK_SUPPORT from the test's own environment
    return subprocess.run(
        [sys.executable, "-c", SPAWN.format(setup=setup)], capture_output=True, text=True, timeout=60, env=env
    )


def test_children_are_spawned_without_grpcs_fork_handlers():
    out = spawn("from groupcoord.console import fork_handlers_off; fork_handlers_off()")
    assert out.returncode == 0 and out.stdout.strip() == "[0, 0, 0]", out.stderr
    assert FORK_HANDLER_LOG not in out.stderr


def test_without_it_grpcs_fork_handlers_run_at_each_spawn():
    """What the first test would see if the console script did not turn them off (the check can fail)."""
    out = spawn("")
    assert out.returncode == 0, out.stderr
    assert FORK_HANDLER_LOG in out.stderr, out.stderr


def test_the_console_script_and_python_dash_m_enter_through_it():
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="groupcoord")
    assert script.value == "groupcoord.console:main"
    main = subprocess.run([sys.executable, "-m", "groupcoord", "--help"], capture_output=True, text=True, timeout=60)
    assert main.returncode == 0 and "bench" in main.stdout
