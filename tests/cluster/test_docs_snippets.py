"""The docs' runnable snippets, run against a real 3-node cluster: an example a reader copies must work.

Convention: a snippet addresses the local cluster that `make cluster` / `groupcoord cluster up` starts, by its
default addresses `127.0.0.N:50051` (also the SDK's and the CLI's default bootstrap). This test starts its own
cluster on free ports (`groupcoord cluster up`, node N on 127.0.0.N, default settings) and then

- runs every `python` block of the docs (tests/docs_snippets.py finds them) not marked `<!-- snippet: fragment -->`
  as a program, once each in the docs' order, with `127.0.0.N:50051` replaced by node N's address; any other
  address in a runnable block is an error, since the test could not point it at its cluster. An `except` clause in
  a run block re-raises first: a block's error handling (`except GroupcoordError: print(...)`) must not turn its
  example failing into a pass;
- runs the read-only `groupcoord` command lines of the shell blocks (READ_ONLY below) that give no `--bootstrap`,
  with the cluster's addresses in GROUPCOORD_BOOTSTRAP, which the CLI reads when `--bootstrap` is absent; they
  read what the blocks above and the docs' own SETUP lines (`offsets set idle-group ...`) made, which must succeed
  too;
- checks that every metric a `promql` block or a `grep '^groupcoord_...'` names is one a node exports.

tests/unit/test_docs_snippets.py checks every block without a network (parsing, imports, signatures).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.test_cli_cluster import HOSTS, PARTITIONS, _free_on_every_host
from tests.deploy.test_monitoring import exported_names, metric_names
from tests.docs_snippets import Block, Command, blocks, commands, groupcoord_argv

DEFAULT_ADDRESS = re.compile(r"\b127\.0\.0\.([1-3]):50051\b")
# Any other host:port in a run block would reach past the test's cluster (or nowhere).
OTHER_ADDRESS = re.compile(r"\b(?:\d{1,3}(?:\.\d{1,3}){3}|localhost):\d{2,5}\b")
# Commands that only read, so their order and the cluster's contents do not matter.
READ_ONLY = {("groups", "list"), ("groups", "describe"), ("topics", "list"), ("cluster", "describe"),
             ("offsets", "get"), ("settings",)}  # fmt: skip
# Commands that make what the read-only ones read (`offsets set idle-group ...` before `offsets get idle-group`): run
# once, in the docs' order, before those, and required to succeed too.
SETUP = {("offsets", "set"), ("topics", "create")}
SNIPPET_TIMEOUT_S = 90
# Runs a block as a program: its own file:line in tracebacks, every `except` clause re-raising first.
RUNNER = """
import ast, sys
name, source = sys.argv[1], sys.stdin.read()
tree = ast.parse(source, name)
for node in ast.walk(tree):
    if isinstance(node, ast.ExceptHandler):
        node.body.insert(0, ast.Raise())
ast.fix_missing_locations(tree)
exec(compile(tree, name, "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class DocCluster:
    addresses: list[str]  # node N's client address is addresses[N - 1]
    metrics: str  # node 1's Prometheus endpoint


def _runnable() -> list[Block]:
    return [b for b in blocks() if b.lang == "python" and b.marker != "fragment"]


def _runnable_commands(kinds: set[tuple[str, ...]]) -> list[tuple[Command, list[str]]]:
    """The `groupcoord` command lines of `kinds` that the test can point at its cluster."""
    found = []
    for block in blocks():
        if block.lang not in ("sh", "console") or block.marker == "synopsis":
            continue
        for command in commands(block):
            argv = groupcoord_argv(command)
            if argv is None or Path(command.program).name != "groupcoord" or command.env:
                continue  # not groupcoord, or run in a container, or with its own settings
            if any("$" in word or word.startswith("--bootstrap") for word in argv):
                continue
            if tuple(argv[:2]) in kinds or tuple(argv[:1]) in kinds:
                found.append((command, argv))
    return found


def _groupcoord(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "groupcoord", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)  # fmt: skip


def _clean_env() -> dict[str, str]:
    """The caller's environment without GROUPCOORD_* settings, which would change what a snippet does."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GROUPCOORD_")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocCluster]:
    """A 3-node cluster with default settings, metrics on (Kafka listener off: these snippets do not use it)."""
    cluster_dir = tmp_path_factory.mktemp("docs") / "cluster"
    base = _free_on_every_host(1)
    raft_base = _free_on_every_host(PARTITIONS, avoid=range(base, base + 1))
    metrics = _free_on_every_host(1, avoid=[base, *range(raft_base, raft_base + PARTITIONS)])
    up = _groupcoord(
        "cluster", "up", "--dir", str(cluster_dir), "--nodes", "3", "--partitions", str(PARTITIONS),
        "--base-port", str(base), "--raft-base-port", str(raft_base), "--kafka-base-port", "-1",
        "--metrics-port", str(metrics), "--timeout", "60",
        timeout=90,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        yield DocCluster([f"{host}:{base}" for host in HOSTS], f"{HOSTS[0]}:{metrics}")
    finally:
        _groupcoord("cluster", "down", "--dir", str(cluster_dir))


@pytest.fixture(scope="module")
def addresses(cluster: DocCluster) -> list[str]:
    return cluster.addresses


def test_some_snippets_run():
    """The lists below are not empty by accident: the docs' quick starts are among them."""
    assert {b.path for b in _runnable()} >= {"README.md", "docs/CLIENT.md", "packaging/client/README.md"}
    assert len(_runnable_commands(READ_ONLY)) >= 5


def _run_snippet(block: Block, addresses: list[str], cwd: Path) -> str:
    """The block run as a program against the cluster: '' when it succeeded, else what went wrong."""
    source = DEFAULT_ADDRESS.sub(lambda m: addresses[int(m[1]) - 1], block.text)
    stray = sorted(set(OTHER_ADDRESS.findall(source)) - set(addresses))
    if stray:
        return (f"a runnable snippet addresses {stray}; use the local cluster's 127.0.0.N:50051, or mark the block "
                "<!-- snippet: fragment -->")  # fmt: skip
    # Offset the snippet so that a traceback's line numbers are the doc's.
    padded = "\n" * (block.line - 1) + source
    try:
        result = subprocess.run(
            [sys.executable, "-c", RUNNER, block.path], input=padded, capture_output=True, text=True, cwd=cwd,
            timeout=SNIPPET_TIMEOUT_S, env=_clean_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"still running after {SNIPPET_TIMEOUT_S} s"
    return "" if result.returncode == 0 else f"the snippet failed:\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def snippet_runs(addresses: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every runnable block run once, in the docs' order (the commands' examples read what they made, the README's
    group `demo`), by file:line."""
    return {b.where(): _run_snippet(b, addresses, tmp_path_factory.mktemp("snippet")) for b in _runnable()}


@pytest.mark.timeout(len(_runnable()) * SNIPPET_TIMEOUT_S + 120)
@pytest.mark.parametrize("block", _runnable(), ids=lambda b: b.where())
def test_python_snippet_runs(block: Block, snippet_runs: dict[str, str]):
    problem = snippet_runs[block.where()]
    assert not problem, f"{block.where()}: {problem}"


def _run_command(command: Command, argv: list[str], addresses: list[str]) -> str:
    env = {**_clean_env(), "GROUPCOORD_BOOTSTRAP": ",".join(addresses)}
    result = _groupcoord(*argv, env=env)
    shown = f"{command.where}: `groupcoord {' '.join(argv)}`"
    assert result.returncode == 0, f"{shown} exit {result.returncode}:\n{result.stderr[-2000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def seeded(addresses: list[str], snippet_runs: dict[str, str]) -> list[str]:
    """The cluster after the runnable snippets and the docs' own SETUP commands."""
    for command, argv in _runnable_commands(SETUP):
        _run_command(command, argv, addresses)
    return addresses


@pytest.mark.timeout(len(_runnable()) * SNIPPET_TIMEOUT_S + 120)
@pytest.mark.parametrize("case", _runnable_commands(READ_ONLY), ids=lambda c: f"{c[0].where} {' '.join(c[1][:2])}")
def test_read_only_command_runs(case: tuple[Command, list[str]], seeded: list[str]):
    command, argv = case
    assert _run_command(command, argv, seeded).strip(), (
        f"{command.where}: `groupcoord {' '.join(argv)}` printed nothing"
    )


def _promql_expressions(block: Block) -> list[tuple[int, str]]:
    """(offset, expression): a `# comment` line titles the next one, an indented line continues the last one."""
    found: list[tuple[int, str]] = []
    for offset, line in enumerate(block.lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and found:
            found[-1] = (found[-1][0], f"{found[-1][1]} {line.strip()}")
        else:
            found.append((offset, line.strip()))
    return found


def test_metric_names_in_the_docs_are_exported(cluster: DocCluster):
    """A PromQL example or a `grep '^groupcoord_...'` of /metrics names series a node exports (their families are
    declared with or without samples, tests/deploy/test_monitoring.py)."""
    with urllib.request.urlopen(f"http://{cluster.metrics}/metrics", timeout=10) as reply:
        exported = exported_names(reply.read().decode())
    problems, checked = [], 0
    for block in blocks():
        if block.lang == "promql":
            for offset, expr in _promql_expressions(block):
                for name in sorted(metric_names(expr)):
                    checked += 1
                    if name not in exported:
                        problems.append(f"{block.where(offset)}: {name} is not a metric a node exports")
        elif block.lang in ("sh", "console"):
            for command in commands(block):
                if command.program != "grep":
                    continue
                for word in command.argv[1:]:
                    prefix = re.fullmatch(r"\^?(groupcoord_\w*[a-z0-9])", word)
                    if prefix:
                        checked += 1
                        if not any(name.startswith(prefix[1]) for name in exported):
                            problems.append(f"{command.where}: no exported metric starts with {prefix[1]}")
    assert checked >= 10, f"only {checked} metric names found in the docs"
    assert not problems, "docs name metrics that do not exist:\n" + "\n".join(problems)
