"""`groupcoord offsets reset` and `groups describe --offsets | --all-groups` against a real 3-node cluster, as an
operator who knows kafka-consumer-groups runs them: the plan first, --execute to commit, a live group refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.test_admin_cli import _admin, _groupcoord, bootstrap, loop, static_group

__all__ = ["bootstrap", "loop", "static_group"]  # the module's fixtures: a cluster, a loop, a Stable static group


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


def _offsets(bootstrap: str, group: str) -> dict[str, int]:
    got = _ok(_admin(bootstrap, "offsets", "get", group, "--json"))
    return {f"{o['topic']}:{o['partition']}": o["offset"] for o in json.loads(got.stdout)}


def _set(bootstrap: str, group: str, *offsets: str) -> None:
    _ok(_admin(bootstrap, "offsets", "set", group, *offsets))


@pytest.fixture(scope="module")
def orders(bootstrap: str) -> str:
    """Topic "orders" in the registry, with 4 partitions: what `--topic orders` covers."""
    _ok(_admin(bootstrap, "topics", "create", "orders", "--partitions", "4"))
    return "orders"


def test_a_reset_prints_its_plan_and_commits_only_with_execute(bootstrap: str, orders: str):
    _set(bootstrap, "reset-a", "orders:0=40", "orders:1=10", "orders:3=7", "clicks:0=5")
    before = _offsets(bootstrap, "reset-a")

    dry = _admin(bootstrap, "offsets", "reset", "--group", "reset-a", "--topic", orders, "--shift-by", "-8")
    assert dry.returncode == 1  # orders:2 has no committed offset to shift: named, the rest planned
    header, *rows = dry.stdout.splitlines()
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "RESULT"]
    assert [r.split()[:6] for r in rows] == [
        ["reset-a", "orders", "0", "40", "32", "planned"],
        ["reset-a", "orders", "1", "10", "2", "planned"],
        ["reset-a", "orders", "2", "-", "-", "no"],
        ["reset-a", "orders", "3", "7", "0", "planned"],
    ]
    assert "reset-a orders:2: no committed offset to shift" in dry.stderr
    assert "dry run, nothing committed" in dry.stderr
    assert _offsets(bootstrap, "reset-a") == before

    done = _ok(_admin(bootstrap, "offsets", "reset", "--group", "reset-a", "--topic", "orders:0,3", "--shift-by",
                      "-8", "--execute", "--json"))  # fmt: skip
    assert [(r["partition"], r["new_offset"], r["result"]) for r in json.loads(done.stdout)] == [
        (0, 32, "committed"),
        (3, 0, "committed"),
    ]
    assert "dry run" not in done.stderr
    assert _offsets(bootstrap, "reset-a") == {**before, "orders:0": 32, "orders:3": 0}

    _ok(_admin(bootstrap, "offsets", "reset", "--group", "reset-a", "--all-topics", "--to-earliest", "--execute"))
    assert _offsets(bootstrap, "reset-a") == dict.fromkeys(before, 0)
    _ok(_admin(bootstrap, "offsets", "reset", "--group", "reset-a", "--topic", "clicks", "--to-offset", "9",
               "--execute"))  # fmt: skip
    assert _offsets(bootstrap, "reset-a") == {**dict.fromkeys(before, 0), "clicks:0": 9}


def test_export_then_from_file_restores_several_groups(bootstrap: str, tmp_path: Path):
    _set(bootstrap, "export-a", "orders:0=11", "orders:1=12")
    _set(bootstrap, "export-b", "orders:2=13")
    exported = _ok(_admin(bootstrap, "offsets", "reset", "--group", "export-a", "--group", "export-b",
                          "--all-topics", "--to-current", "--export"))  # fmt: skip
    assert exported.stdout == "export-a,orders,0,11\nexport-a,orders,1,12\nexport-b,orders,2,13\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(exported.stdout)

    for group in ("export-a", "export-b"):
        _ok(_admin(bootstrap, "offsets", "reset", "--group", group, "--all-topics", "--to-earliest", "--execute"))
    restored = _ok(_admin(bootstrap, "offsets", "reset", "--group", "export-a", "--group", "export-b",
                          "--from-file", str(plan), "--execute"))  # fmt: skip
    assert restored.stdout.count("committed") == 3
    assert _offsets(bootstrap, "export-a") == {"orders:0": 11, "orders:1": 12}
    assert _offsets(bootstrap, "export-b") == {"orders:2": 13}

    # One group: three columns, read from stdin as well.
    one = _ok(_admin(bootstrap, "offsets", "reset", "--group", "export-b", "--all-topics", "--shift-by", "2",
                     "--export"))  # fmt: skip
    assert one.stdout == "orders,2,15\n"
    piped = subprocess.run(
        [sys.executable, "-m", "groupcoord", "offsets", "reset", "--group", "export-b", "--from-file", "-",
         "--execute", "--bootstrap", bootstrap],
        input=one.stdout, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert _offsets(bootstrap, "export-b") == {"orders:2": 15}


def test_a_live_group_is_refused_with_its_state_and_members(bootstrap: str, static_group: str):
    _ = static_group
    refused = _admin(bootstrap, "offsets", "reset", "--group", "static", "--topic", "orders", "--to-earliest",
                     "--execute")  # fmt: skip
    assert refused.returncode == 1
    (line,) = [ln for ln in refused.stderr.splitlines() if "group 'static'" in ln]
    assert "the group is Stable with 2 member(s)" in line and "worker-a" in line and "worker-b" in line
    assert "offsets change only while it is Empty" in line

    # A simple commit to a live group says the same, not a bare UNKNOWN_MEMBER_ID.
    set_ = _admin(bootstrap, "offsets", "set", "static", "orders:0=1")
    assert set_.returncode == 1 and "UNKNOWN_MEMBER_ID (the group is Stable with 2 member(s)" in set_.stderr

    # --all-groups: the live group refused, the Empty ones reset.
    _set(bootstrap, "all-a", "orders:0=5")
    every = _admin(bootstrap, "offsets", "reset", "--all-groups", "--all-topics", "--to-offset", "1", "--json")
    assert every.returncode == 1
    planned = {(r["group"], r["topic"], r["partition"]): r["result"] for r in json.loads(every.stdout)}
    assert planned[("all-a", "orders", 0)] == "planned" and not any(g == "static" for g, _, _ in planned)
    assert "group 'static': the group is Stable" in every.stderr


def test_describe_offsets_and_all_groups(bootstrap: str, static_group: str):
    _set(bootstrap, "described-empty", "orders:1=4")
    shown = _ok(_admin(bootstrap, "groups", "describe", static_group, "described-empty", "--offsets", "--json"))
    rows = json.loads(shown.stdout)
    static_rows = [r for r in rows if r["group"] == static_group]
    assert sorted(r["partition"] for r in static_rows) == [0, 1, 2, 3]  # every owned partition, committed or not
    assert {r["client_id"] for r in static_rows} == {"worker-a", "worker-b"}
    assert all(r["host"] and r["member_id"] for r in static_rows)
    assert [r for r in rows if r["group"] == "described-empty"] == [
        {"group": "described-empty", "topic": "orders", "partition": 1, "current_offset": 4, "member_id": None,
         "host": None, "client_id": None},
    ]  # fmt: skip
    human = _ok(_admin(bootstrap, "groups", "describe", "described-empty", "--offsets"))
    assert human.stdout.splitlines()[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "MEMBER-ID", "HOST", "CLIENT-ID",
    ]  # fmt: skip
    assert human.stdout.splitlines()[1].split() == ["described-empty", "orders", "1", "4", "-", "-", "-"]

    everything = _ok(_admin(bootstrap, "groups", "describe", "--all-groups", "--json"))
    described = {d["group_id"]: d for d in json.loads(everything.stdout)}
    assert {static_group, "described-empty"} <= described.keys()
    # One partition spelling in every output: TOPIC:PARTITION.
    owned = sorted(p for m in described[static_group]["members"] for p in m["partitions"])
    assert owned == ["orders:0", "orders:1", "orders:2", "orders:3"]
    both = _admin(bootstrap, "groups", "describe", static_group, "--all-groups")
    assert both.returncode == 2 and "--all-groups" in both.stderr


def test_bad_reset_arguments_are_usage_errors(bootstrap: str, tmp_path: Path):
    bad_file = tmp_path / "bad.csv"
    bad_file.write_text("orders,0,1\norders,zero,1\n")
    cases = [
        (("--group", "g", "--to-earliest"), "name the partitions to reset"),
        (("--group", "g", "--topic", "orders:x", "--to-earliest"), "is not TOPIC or TOPIC:PARTITION"),
        (("--group", "g", "--from-file", str(bad_file)), "bad.csv:2: 'zero' is not a partition number"),
        (("--group", "g", "--all-topics", "--from-file", str(bad_file)), "--from-file names its own partitions"),
        (("--group", "g", "--all-topics", "--to-offset", "-1"), "--to-offset must be >= 0"),
        (("--group", "g", "--all-topics"), "one of the arguments"),
        (("--group", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"), "not allowed with"),
    ]
    for args, message in cases:
        result = _admin(bootstrap, "offsets", "reset", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)


def test_connection_refused_is_reported_at_once():
    started = time.monotonic()
    result = _groupcoord("groups", "list", "--bootstrap", "127.0.0.1:1,127.0.0.2:1")
    took = time.monotonic() - started
    assert result.returncode == 3 and "Connection refused" in result.stderr, result.stderr
    # Before: 5 s of retries (connect_timeout_s) and more; now the first round, whatever the interpreter's start.
    assert took < 4, took
