"""The code blocks of README.md, docs/*.md, deploy/README.md and packaging/client/README.md cannot drift from the
code: each is checked against the real thing, without a network.

- every fence names its kind (tests/docs_snippets.py's LANGUAGES), so no block escapes the checks below;
- shell (`sh`, and the `$ ` lines of `console`): every `groupcoord ...` command line, also one run in a container
  or after `NAME=value` assignments, is parsed by the CLI's own argparse parser (`groupcoord.cli.build_parser`),
  without running it; node flags given on to nodes (`cluster up -- FLAG`, `bench --node-flag=FLAG`) are parsed by
  `groupcoord node`'s, and every value given to a node setting, as flag or as `GROUPCOORD_<NAME>`, passes that
  setting's own check; `--flags` named in the line's comment exist for that command; a `<!-- snippet: synopsis -->`
  block (`[--flag]`, `a|b`) has only its flags checked; `make X` names a Makefile target, `make VAR=...` a variable
  the Makefile reads; a `GROUPCOORD_*` variable is a setting's or one that code or a manifest reads (a `peers` value
  parses, entry by entry); a script run by path (`python bench/x.py`, `deploy/build-image`, `pytest tests/...`,
  `-f deploy/...`) exists; a `docker compose` service is one of its compose file's;
- inline code in the text, `groupcoord ...`: its command words name commands (`a|b` each, a metavar such as
  SCENARIO every subcommand there) and its flags exist for them;
- `toml`: a block whose first line is `# node.toml` loads with the node's config loader, `# acl.toml` with the ACL
  loader;
- `yaml`, `json`: parse;
- `python`: compiles; every import resolves; an attribute of an imported name exists; a call to an imported
  callable binds to its signature (a protobuf message: its keywords are fields); a method called on an SDK object the
  block made (`with SyncAdmin(...) as admin: admin.list_offsets(...)`) exists and binds. tests/cluster runs the
  blocks not marked `<!-- snippet: fragment -->`.

Every failure names the doc's file:line. test_the_checker_catches_... feeds the checks made-up drift.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.docs_checks import (
    INLINE_COMMAND,
    SHELL,
    _all_blocks,
    _kind,
    _report,
    check_inline,
    check_python,
    check_shell_block,
    check_toml,
)
from tests.docs_snippets import (
    LANGUAGES,
    MARKERS,
    commands,
    doc_files,
    groupcoord_argv,
    parse_blocks,
)


def test_every_block_says_what_it_holds():
    found = _all_blocks()
    assert len(found) > 40, "the docs' code blocks were not found"
    problems = [f"{b.where(-1)}: fence language {b.lang!r}, expected one of {sorted(LANGUAGES)}"
                for b in found if b.lang not in LANGUAGES]  # fmt: skip
    problems += [f"{b.where(-2)}: unknown marker {b.marker!r}, expected one of {sorted(MARKERS)}"
                 for b in found if b.marker and b.marker not in MARKERS]  # fmt: skip
    problems += [f"{b.where(-2)}: a {b.marker} marker on a {b.lang} block"
                 for b in found if (b.marker == "fragment" and b.lang != "python")
                 or (b.marker == "synopsis" and b.lang not in SHELL)]  # fmt: skip
    assert not problems, _report(problems)


def test_shell_blocks_name_real_commands_flags_and_targets():
    checked = [b for b in _all_blocks() if b.lang in SHELL]
    groupcoord_lines = sum(groupcoord_argv(c) is not None for b in checked for c in commands(b))
    assert groupcoord_lines > 50, f"only {groupcoord_lines} groupcoord command lines found"
    problems = [p for b in checked for p in check_shell_block(b)]
    assert not problems, _report(problems)


def test_inline_commands_name_real_commands_and_flags():
    """`groupcoord groups describe --all-groups` in a sentence drifts as easily as in a block; a span is often a
    usage (`groupcoord bench SCENARIO [--json]`), so its commands and flags are checked, not its arguments."""
    spans = sum(len(INLINE_COMMAND.findall(path.read_text())) for path in doc_files())
    assert spans > 50, f"only {spans} inline `groupcoord ...` spans found"
    problems = [p for path in doc_files() for p in check_inline(path)]
    assert not problems, _report(problems)


def test_config_blocks_load_with_the_real_loaders(tmp_path: Path):
    toml = _kind("toml")
    assert {b.lines[0] for b in toml} >= {"# node.toml", "# acl.toml"}
    problems = [p for b in toml for p in check_toml(b, tmp_path)]
    for block in _kind("yaml") + _kind("json"):
        try:
            yaml.safe_load(block.text) if block.lang == "yaml" else json.loads(block.text)
        except (yaml.YAMLError, ValueError) as exc:
            problems.append(f"{block.where()}: not valid {block.lang}: {exc}")
    assert not problems, _report(problems)


def test_python_blocks_compile_and_use_the_real_api():
    python = _kind("python")
    assert len(python) >= 4
    problems = [p for b in python for p in check_python(b)]
    assert not problems, _report(problems)


def _problems_of(markdown: str) -> list[str]:
    problems: list[str] = []
    for block in parse_blocks(markdown, "BAD.md"):
        if block.lang in SHELL:
            problems += check_shell_block(block)
        elif block.lang == "python":
            problems += check_python(block)
    return problems


BAD = {
    "a made-up flag": ("```sh\ngroupcoord groups list --colour\n```\n", "BAD.md:2", "unrecognized arguments"),
    "a made-up command": ("```sh\n$ groupcoord groups purge g\n```\n", "BAD.md:2", "invalid choice"),
    "a value a setting refuses": (
        "```sh\nGROUPCOORD_LOG_LEVEL=loud groupcoord node \\\n  --port 1\n```\n",
        "BAD.md:2",
        "expected one of",
    ),
    "a bad node flag on": (
        "```sh\n\ngroupcoord cluster up -- --log-levl=debug\n```\n",
        "BAD.md:3",
        "unrecognized arguments",
    ),
    "a flag in the comment": ("```sh\ngroupcoord topics list   # or --everything\n```\n", "BAD.md:2", "--everything"),
    "a synopsis flag": (
        "<!-- snippet: synopsis -->\n```sh\ngroupcoord cluster down [--dir ...] [--wipe]\n```\n",
        "BAD.md:3",
        "has no --wipe",
    ),
    "a peers entry": ('```sh\nGROUPCOORD_PEERS="1=a:1:2@kafa=b:3,..."\n```\n', "BAD.md:2", "peers: expected"),
    "a compose service": ("```sh\ndocker compose exec node9 groupcoord health\n```\n", "BAD.md:2", "'node9'"),
    "a synopsis flag, continued": (
        "<!-- snippet: synopsis -->\n```sh\ngroupcoord cluster up [--nodes 3]\n"
        "    [--json] [--colour] [-- NODE_FLAG]\n```\n",
        "BAD.md:4",
        "`groupcoord cluster up` has no --colour",
    ),
    "a make target": ("```sh\nmake tset\n```\n", "BAD.md:2", "no Makefile target"),
    "an unknown variable": ("```sh\nexport GROUPCOORD_COLOUR=1\n```\n", "BAD.md:2", "GROUPCOORD_COLOUR"),
    "a missing script": ("```sh\n.venv/bin/python bench/nothing.py\n```\n", "BAD.md:2", "does not exist"),
    "an import": ("```python\nfrom groupcoord.client import GroupMembr\n```\n", "BAD.md:2", "GroupMembr"),
    "a keyword": (
        "```python\nfrom groupcoord.client import GroupMember\n\nGroupMember(['h:1'], 'g', {}, instance='a')\n```\n",
        "BAD.md:4",
        "instance",
    ),
    "a method": (
        "```python\nfrom groupcoord.client import SyncAdmin\nwith SyncAdmin(['h:1']) as a:\n"
        "    a.list_offset('g')\n```\n",
        "BAD.md:4",
        "no 'list_offset'",
    ),
    "a message field": (
        "```python\nfrom groupcoord.protocol.v1 import groupcoord_pb2 as pb\npb.JoinGroupRequest(group='g')\n```\n",
        "BAD.md:3",
        "no field(s) group",
    ),
    "a syntax error": ("```python\nprint('a'\n```\n", "BAD.md:2", "does not compile"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_the_checker_catches_drift(case: str):
    """Each check fails on a made-up mistake, naming the line: a check that passes everything proves nothing."""
    markdown, where, message = BAD[case]
    problems = _problems_of(markdown)
    assert any(p.startswith(where + ":") and message in p for p in problems), problems


def test_the_checker_catches_a_bad_inline_command(tmp_path: Path):
    path = tmp_path / "BAD.md"
    path.write_text(
        "Run `groupcoord groups describe --all-group` or\n`groupcoord group list`, `groupcoord bench X [--jsn]`.\n"
    )
    problems = check_inline(path)
    assert any(p.startswith("BAD.md:1: ") and "has no --all-group" in p for p in problems), problems
    assert any(p.startswith("BAD.md:2: ") and "'group' is no command" in p for p in problems), problems
    assert any(p.startswith("BAD.md:2: ") and "`groupcoord bench kafka` has no --jsn" in p for p in problems), problems


def test_the_checker_catches_bad_config(tmp_path: Path):
    node = parse_blocks("```toml\n# node.toml\nlog_format = 'json'\nsesion_timeout_ms = 1\n```\n", "BAD.md")
    assert any("unknown setting 'sesion_timeout_ms'" in p for p in check_toml(node[0], tmp_path))
    acl = parse_blocks("```toml\n# acl.toml\n[[tokens]]\nidentity = 'a'\n```\n", "BAD.md")
    assert check_toml(acl[0], tmp_path)[0].startswith("BAD.md:2: ")
