"""The blocking clients (`SyncGroupMember`, client/sync.py; `SyncAdmin`, client/sync_admin.py) and the async
member's `async with` against a real node.

Each scenario runs in a fresh interpreter with `-W error -X dev`: what a client leaves behind at exit — a task
destroyed while pending, an unclosed channel, socket or loop — is only reported there, on stderr, after the
script's last line. The script prints its findings as one JSON line; the test checks them and the node's view.
"""

from __future__ import annotations

import inspect
import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.client.admin import Admin
from groupcoord.client.sync_admin import SyncAdmin
from groupcoord.protocol.errors import Errors
from tests.e2e.support import NodeProcess

SCENARIO_TIMEOUT_S = 20
# What must never show on a scenario's stderr: asyncio's and the interpreter's reports of something left behind.
LEFT_BEHIND = (
    "Task was destroyed",
    "Task exception was never retrieved",
    "was never awaited",
    "Unclosed",
    "unclosed",
    "ResourceWarning",
    "Exception ignored",
    "Traceback",
)
PRELUDE = """\
import json
import sys

ADDRESS = sys.argv[1]


def report(**found):
    print(json.dumps(found))


def pairs(offsets):
    return sorted([[topic, partition], value] for (topic, partition), value in offsets.items())

"""
ALL_OF_T = [["t", 0], ["t", 1], ["t", 2], ["t", 3]]

pytestmark = pytest.mark.timeout(40)


def run_scenario(tmp_path: Path, body: str, address: str) -> dict[str, Any]:
    """Runs `body` (after PRELUDE) as a script; its report, once its exit was clean."""
    script = tmp_path / "scenario.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-X", "dev", str(script), address],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    found = [marker for marker in LEFT_BEHIND if marker in proc.stderr]
    assert not found, f"{found} on stderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def admin(node: NodeProcess) -> Iterator[SyncAdmin]:
    with SyncAdmin([node.address]) as admin:
        yield admin


def test_sync_member_with_block_commits_leaves_and_exits_cleanly(node: NodeProcess, tmp_path: Path, admin: SyncAdmin):
    # Several short lives, each closed right after a commit and heartbeating fast: the batch streams are open
    # at every close, and gRPC's tasks of a cancelled stream used to be destroyed pending at some of them.
    found = run_scenario(
        tmp_path,
        """
        from groupcoord.client.sync import SyncGroupMember

        lives = []
        for i in range(5):
            with SyncGroupMember([ADDRESS], f"sync-with-{i}", {"t": 4}, heartbeat_interval_ms=20) as m:
                partitions = m.wait_stable(10).partitions
                codes = m.commit({("t", 0): i + 1})
                stats = m.stats()
                lives.append({"partitions": partitions, "codes": pairs(codes), "committed": pairs(m.committed()),
                              "stats": [stats.state, stats.rebalances, stats.calls["OffsetCommit"].count]})
        report(lives=lives)
        """,
        node.address,
    )
    assert found["lives"] == [
        {
            "partitions": ALL_OF_T,
            "codes": [[["t", 0], Errors.NONE]],
            "committed": [[["t", 0], i + 1]],
            "stats": ["stable", 1, 1],
        }
        for i in range(5)
    ]
    groups = admin.describe_groups([f"sync-with-{i}" for i in range(5)])
    # Each member left on close: the groups are Empty now, not Stable until a session timeout.
    assert [(g.error_code, g.state, g.members) for g in groups] == [(Errors.NONE, "Empty", ())] * 5
    assert admin.list_offsets("sync-with-4") == {("t", 0): (5, "")}


def test_sync_clients_never_closed_are_closed_at_exit(node: NodeProcess, tmp_path: Path, admin: SyncAdmin):
    found = run_scenario(
        tmp_path,
        """
        from groupcoord.client.sync import SyncGroupMember
        from groupcoord.client.sync_admin import SyncAdmin

        member = SyncGroupMember([ADDRESS], "sync-never-closed", {"t": 4}, heartbeat_interval_ms=20).start()
        partitions = member.wait_stable(10).partitions
        codes = member.commit({("t", 3): 11})
        listed = [g.group_id for g in SyncAdmin([ADDRESS]).list_groups()]
        report(partitions=partitions, codes=pairs(codes), listed="sync-never-closed" in listed)
        """,
        node.address,
    )
    assert found == {"partitions": ALL_OF_T, "codes": [[["t", 3], Errors.NONE]], "listed": True}
    # The exit closed the member, which left: without that it would stay Stable for its 10 s session.
    (group,) = admin.describe_groups(["sync-never-closed"])
    assert (group.state, group.members) == ("Empty", ())
    assert admin.list_offsets("sync-never-closed") == {("t", 3): (11, "")}


def test_sync_member_that_failed_raises_the_sdk_error_and_exits_cleanly(node: NodeProcess, tmp_path: Path):
    # A group id longer than the node's 255 characters is refused by FindCoordinator; an empty one (which
    # FindCoordinator allows, for the group-less calls) by JoinGroup.
    found = run_scenario(
        tmp_path,
        """
        from groupcoord.client.errors import CommitFailed, FatalError, GroupcoordError
        from groupcoord.client.sync import SyncGroupMember

        failures = []
        for group_id in ("g" * 300, ""):
            with SyncGroupMember([ADDRESS], group_id, {"t": 4}) as m:
                try:
                    m.wait_stable(10)
                except GroupcoordError as exc:
                    failure = {"error": type(exc).__name__, "code": exc.code, "fatal": isinstance(exc, FatalError)}
                try:
                    m.commit({("t", 0): 1})
                except CommitFailed:
                    failure["commit"] = "CommitFailed"
                failures.append(failure)
        report(failures=failures)
        """,
        node.address,
    )
    expected = {"error": "InvalidGroupId", "code": Errors.INVALID_GROUP_ID, "fatal": True, "commit": "CommitFailed"}
    assert found["failures"] == [expected, expected]


def test_async_member_context_manager_under_asyncio_run(node: NodeProcess, tmp_path: Path, admin: SyncAdmin):
    found = run_scenario(
        tmp_path,
        """
        import asyncio

        from groupcoord.client.member import GroupMember


        async def main():
            async with GroupMember([ADDRESS], "async-with", {"t": 4}, heartbeat_interval_ms=20) as m:
                partitions = (await m.wait_stable(10)).partitions
                codes = await m.commit({("t", 2): 21})
            return {"partitions": partitions, "codes": pairs(codes)}


        report(**asyncio.run(main()))
        """,
        node.address,
    )
    assert found == {"partitions": ALL_OF_T, "codes": [[["t", 2], Errors.NONE]]}
    (group,) = admin.describe_groups(["async-with"])
    assert (group.state, group.members) == ("Empty", ())


def test_sync_admin_sees_what_a_sync_member_committed(node: NodeProcess, tmp_path: Path):
    found = run_scenario(
        tmp_path,
        """
        from groupcoord.client.sync import SyncGroupMember
        from groupcoord.client.sync_admin import SyncAdmin

        with SyncAdmin([ADDRESS]) as admin:
            with SyncGroupMember([ADDRESS], "sync-admin", {"t": 4}, client_id="sync-script") as m:
                m.wait_stable(10)
                m.commit({("t", 0): 7, ("t", 1): 9})
                listed = {g.group_id: [g.protocol_type, g.state] for g in admin.list_groups()}
                (group,) = admin.describe_groups(["sync-admin"])
                offsets = admin.list_offsets("sync-admin")
            (after,) = admin.describe_groups(["sync-admin"])
            events = admin.read_events(ADDRESS)
        report(
            listed=listed["sync-admin"],
            described=[group.error_code, group.state, group.protocol, len(group.members)],
            member=[group.members[0].client_id, group.members[0].partitions],
            offsets=pairs({tp: list(value) for tp, value in offsets.items()}),
            after=after.state,
            events=[len(events) > 0, sorted({e.error_code for e in events}), sorted({e.node_id for e in events})],
        )
        """,
        node.address,
    )
    assert found == {
        "listed": ["consumer", "Stable"],
        "described": [Errors.NONE, "Stable", "range", 1],
        "member": ["sync-script", ALL_OF_T],
        "offsets": [[["t", 0], [7, ""]], [["t", 1], [9, ""]]],
        "after": "Empty",
        "events": [True, [Errors.NONE], [1]],
    }


def test_sync_admin_at_a_wrong_address_raises_bootstrap_unreachable(tmp_path: Path):
    with socket.socket() as s:  # a port nothing listens on (it was free a moment ago)
        s.bind(("127.0.0.1", 0))
        wrong = f"127.0.0.1:{s.getsockname()[1]}"
    found = run_scenario(
        tmp_path,
        """
        import time

        from groupcoord.client.errors import BootstrapUnreachable, GroupcoordError
        from groupcoord.client.sync_admin import SyncAdmin

        with SyncAdmin([ADDRESS], connect_timeout_s=1) as admin:
            began = time.monotonic()
            try:
                admin.describe_groups(["any"])
            except BootstrapUnreachable as exc:
                failure = {
                    "sdk_error": isinstance(exc, GroupcoordError),
                    "retriable": exc.retriable,
                    "tried": list(exc.tried),
                    "fast": time.monotonic() - began < 5,
                }
        report(**failure)
        """,
        wrong,
    )
    assert found == {"sdk_error": True, "retriable": True, "tried": [wrong], "fast": True}


def test_sync_admin_has_a_blocking_method_for_each_admin_method():
    def public_async(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(fn)
            for name, fn in vars(cls).items()
            if not name.startswith("_") and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
        }

    def parameters(signature: inspect.Signature) -> list[tuple[str, Any, Any, Any]]:
        return [(p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()]

    wanted = public_async(Admin)
    assert "describe_groups" in wanted and "read_events" in wanted
    for name, signature in wanted.items():
        blocking = getattr(SyncAdmin, name, None)
        assert blocking is not None, f"SyncAdmin has no {name}"
        assert not inspect.iscoroutinefunction(blocking) and not inspect.isasyncgenfunction(blocking), name
        assert parameters(inspect.signature(blocking)) == parameters(signature), name
    assert inspect.signature(SyncAdmin.__init__) == inspect.signature(Admin.__init__)
