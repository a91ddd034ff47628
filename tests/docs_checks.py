"""The checks tests/unit/test_docs_snippets.py runs on the docs' code blocks (its docstring says what each checks):
each returns the problems it found, every one naming the doc's file:line, so that a test can also feed them made-up
drift."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import io
import re
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from groupcoord.base.errors import UserError
from groupcoord.cli import build_parser
from groupcoord.node import config as node_config
from groupcoord.node.auth import load_acl
from groupcoord.node.topology import parse_peers
from tests.docs_snippets import (
    ROOT,
    Block,
    Command,
    blocks,
    commands,
    groupcoord_argv,
    parse_blocks,
)

SHELL = frozenset({"sh", "console"})
# Where a `GROUPCOORD_*` name a doc sets must be read: code, tests, manifests, the image.
ENV_SOURCES = ("base", "bench", "chaos", "client", "coordinator", "deploy", "examples", "groupcoord", "node",
               "pipeline", "protocol", "raft", "scripts", "tests")  # fmt: skip
ENV_NAME = re.compile(r"\bGROUPCOORD_[A-Z0-9_]+\b")
FLAG = re.compile(r"(?<![\w=-])--[a-z][a-z0-9-]*")  # not the node flag in `--node-flag=--x`
INLINE_COMMAND = re.compile(r"`((?:\.venv/bin/)?groupcoord [^`]+)`")
MAKE_IN_TEXT = re.compile(r"(?<![\w./-])make ([a-z][\w-]*)")
# Scripts and files a command names by their path in the repository.
PATH_LIKE = re.compile(r"^(?:bench|chaos|deploy|examples|pipeline|scripts|tests|docs)/[\w./-]+$")
# Files a doc's commands create before they use them, so not in the repository.
CREATED = ("deploy/certs",)
CONFIG_LOADERS = ("node.toml", "acl.toml")


@cache
def _all_blocks() -> tuple[Block, ...]:
    return tuple(blocks())


@cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _kind(lang: str) -> list[Block]:
    return [b for b in _all_blocks() if b.lang == lang]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser a command line ends up in, and the command words that lead there."""
    parser, words = _parser(), []
    for word in argv:
        sub = _subparsers(parser)
        if word not in sub:
            break
        parser, words = sub[word], [*words, word]
    return parser, words


def _parse(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """parse_args without running anything: the namespace, or argparse's error message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return _parser().parse_args(argv), ""
    except SystemExit as exc:
        if exc.code == 0:
            return None, ""
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"


def _setting_values(values: dict[str, Any], source: str) -> list[str]:
    """Each given node setting's value through that setting's own check (what `node_config.load` does)."""
    problems = []
    by_name = {s.name: s for s in node_config.SETTINGS}
    for name, value in values.items():
        if name == "peers" and value:  # each entry its own: `1=a:1:2,2=b:1:2,...` lists some and elides the rest
            try:
                parse_peers(",".join(item for item in str(value).split(",") if item.strip() != "..."))
            except UserError as exc:
                problems.append(str(exc))
            continue
        setting = by_name.get(name)
        if setting is None or value is None or "$" in str(value) or "..." in str(value):
            continue
        try:
            setting.parse(value, source, text=True)
        except node_config.ConfigError as exc:
            problems.append(str(exc))
    return problems


def _node_flags(flags: list[str]) -> list[str]:
    """Flags given on to every node: `groupcoord node` must accept them, with values its settings accept."""
    args, error = _parse(["node", *flags])
    if args is None:
        return [f"node flags {' '.join(flags)}: {error}"]
    return _setting_values(vars(args), "node flag")


def check_groupcoord(command: Command, argv: list[str]) -> list[str]:
    """Problems with one `groupcoord` command line of a doc, each prefixed with its file:line."""
    problems: list[str] = []
    argv = [w.removeprefix("[").removesuffix("]") for w in argv]  # `[--node-flag=...]`: an optional extra
    shown = shlex.join(["groupcoord", *argv])
    args, error = _parse(argv)
    if args is None and error:
        return [f"{command.where}: `{shown}`: {error}"]
    if args is not None:
        node_args = list(getattr(args, "node_args", None) or []) + list(getattr(args, "node_flag", None) or [])
        if node_args:
            problems += _node_flags(node_args)
        if argv[:1] == ["node"]:
            problems += _setting_values(vars(args), "flag")
    parser, words = _command_parser(argv)
    known = set(parser._option_string_actions)
    problems += [f"comment names {flag}, which `groupcoord {' '.join(words)}` does not have"
                 for flag in FLAG.findall(command.comment) if flag not in known]  # fmt: skip
    return [p if p.startswith(command.where) else f"{command.where}: `{shown}`: {p}" for p in problems]


def _usage_commands(words: list[str]) -> tuple[list[list[str]], str]:
    """The commands a usage line names: its leading command words, `a|b` for either, a metavar (SCENARIO) for
    every subcommand there. Also the first word that should be a command and is none, or ''."""
    paths: list[list[str]] = [[]]
    for word in words:
        subs = [_subparsers(_command_parser(path)[0]) for path in paths]
        if not all(subs):
            break  # the command is complete: the rest are its arguments
        if re.fullmatch(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*", word):
            if any(alt not in sub for alt in word.split("|") for sub in subs):
                return paths, word
            paths = [[*path, alt] for path in paths for alt in word.split("|")]
        elif re.fullmatch(r"[A-Z][A-Z_]*", word):
            paths = [[*path, name] for path, sub in zip(paths, subs, strict=True) for name in sub]
        else:
            break
    return paths, ""


def check_usage(where: str, paths: list[list[str]], text: str) -> list[str]:
    """Every `--flag` of `text` exists for each of the commands (not those after `--`: they go on to the nodes)."""
    flags = FLAG.findall(text.split(" -- ")[0].split("[-- ")[0])
    problems = []
    for path in paths:
        known = _command_parser(path)[0]._option_string_actions
        problems += [f"{where}: `groupcoord {' '.join(path)}` has no {flag}" for flag in flags if flag not in known]
    return problems


def check_synopsis(block: Block) -> list[str]:
    """A usage synopsis (`groupcoord cluster up [--nodes 3] [--tls | --tls-dir CERTS]`, `a|b`): every command word
    leads somewhere and every flag exists there."""
    problems = []
    paths: list[list[str]] = []  # a line that does not start with `groupcoord` continues the last one
    for offset, line in enumerate(block.lines):
        words = line.split()
        if words and Path(words[0]).name == "groupcoord":
            paths, wrong = _usage_commands(words[1:])
            if wrong:
                problems.append(f"{block.where(offset)}: `{line.strip()}`: {wrong!r} is no command")
                paths = []
        problems += check_usage(block.where(offset), paths, line)
    return problems


def check_inline(path: Path) -> list[str]:
    """`groupcoord ...` in the text's inline code: its command words name commands, its flags exist for them."""
    problems = []
    fenced = {(b.line + k) for b in parse_blocks(path.read_text(), "") for k in range(-1, len(b.lines) + 1)}
    name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if number in fenced:
            continue
        for span in INLINE_COMMAND.findall(line):
            paths, wrong = _usage_commands(span.split()[1:])
            if wrong:
                problems.append(f"{name}:{number}: `{span}`: {wrong!r} is no command")
            else:
                problems += check_usage(f"{name}:{number}: `{span}`", paths, span)
    return problems


@cache
def _makefile() -> tuple[frozenset[str], frozenset[str]]:
    text = (ROOT / "Makefile").read_text()
    targets = frozenset(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))
    variables = frozenset(re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", text))
    return targets, variables


def check_make(where: str, args: list[str]) -> list[str]:
    targets, variables = _makefile()
    problems = []
    for arg in args:
        name, equals, _ = arg.partition("=")
        if equals and name not in variables:
            problems.append(f"{where}: `make {shlex.join(args)}`: the Makefile reads no variable {name}")
        elif not equals and not arg.startswith("-") and arg not in targets:
            problems.append(f"{where}: `make {shlex.join(args)}`: no Makefile target {arg!r}")
    return problems


@cache
def _known_env() -> frozenset[str]:
    names = {s.env for s in node_config.SETTINGS} | {node_config.CONFIG_ENV}
    files = [ROOT / "docker-compose.yml", ROOT / "Makefile"]
    for top in ENV_SOURCES:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".yml", ".yaml", ".sh", "") and p.is_file()]
    # Not the checks' own files: their made-up names (test_the_checker_catches_drift's) would count as known.
    own = {
        (ROOT / "tests" / name).resolve()
        for name in ("docs_checks.py", "docs_snippets.py", "unit/test_docs_snippets.py")
    }
    for path in files:
        if path.resolve() in own or "node_modules" in path.parts:
            continue
        with contextlib.suppress(UnicodeDecodeError, OSError):
            names |= set(ENV_NAME.findall(path.read_text()))
    return frozenset(names)


def check_env(command: Command) -> list[str]:
    problems = []
    for name in command.env:
        if name.startswith("GROUPCOORD_") and name not in _known_env():
            problems.append(f"{command.where}: {name} is neither a node setting's variable nor read anywhere")
    settings = {s.env: s.name for s in node_config.SETTINGS}
    given = {settings[name]: value for name, value in command.env.items() if name in settings}
    problems += [f"{command.where}: {p}" for p in _setting_values(given, "environment")]
    return problems


def check_paths(command: Command) -> list[str]:
    """A script or file of the repository that the command runs or reads exists."""
    problems = []
    for k, word in enumerate(command.argv):
        path = word.split("=", 1)[-1] if word.startswith("--") else word
        if not PATH_LIKE.match(path) or path.startswith(CREATED):
            continue
        is_program = k == 0 or Path(command.argv[k - 1]).name in ("python", "python3", "pytest", "spark-submit")
        is_file_arg = (k > 0 and command.argv[k - 1] in ("-f", "-k")) or path.endswith((".py", ".yml", ".yaml"))
        if (is_program or is_file_arg) and not (ROOT / path.split("::")[0]).exists():
            problems.append(f"{command.where}: {path} does not exist")
    return problems


# `docker compose` subcommands whose positional words are services (`exec`/`run`: the first one, then its command).
COMPOSE_SERVICES = {"up": 0, "stop": 0, "start": 0, "restart": 0, "rm": 0, "logs": 0, "kill": 0, "pull": 0,
                    "exec": 1, "run": 1}  # fmt: skip
COMPOSE_VALUE_OPTIONS = frozenset({"--entrypoint", "-e", "--env", "-u", "--user", "-w", "--workdir", "--name",
                                   "-p", "--publish", "-t", "--timeout", "--index", "--tail", "--since", "--until",
                                   "--scale", "--wait-timeout", "-v", "--volume"})  # fmt: skip


def check_compose(command: Command) -> list[str]:
    """`docker compose [-f FILE]... SUB ... SERVICE`: the service is one of those files' (docker-compose.yml by
    default); `cp SERVICE:PATH` too. Values given by shell variables (`$n`) are not checked."""
    argv = command.argv
    if argv[:2] != ["docker", "compose"]:
        return []
    files, rest, k = [], [], 2
    while k < len(argv):
        if argv[k] in ("-f", "--file") and k + 1 < len(argv):
            files.append(argv[k + 1])
            k += 2
        else:
            rest.append(argv[k])
            k += 1
    services: set[str] = set()
    for name in files or ["docker-compose.yml"]:
        path = ROOT / name
        if not path.is_file():
            return []  # check_paths reports a missing file
        services |= set((yaml.safe_load(path.read_text()) or {}).get("services", {}))
    if not rest:
        return []
    sub, words, named, k = rest[0], rest[1:], [], 0
    if sub == "cp":
        named = [w.split(":", 1)[0] for w in words if ":" in w and not w.startswith(("/", "."))]
    elif sub in COMPOSE_SERVICES:
        positional = []
        while k < len(words):
            if words[k] in COMPOSE_VALUE_OPTIONS and (words[k] != "-v" or sub == "run"):
                k += 2
                continue
            if not words[k].startswith("-"):
                positional.append(words[k])
            k += 1
            if COMPOSE_SERVICES[sub] and positional:
                break
        named = positional
    where = ", ".join(files or ["docker-compose.yml"])
    return [f"{command.where}: `docker compose {sub}`: no service {name!r} in {where}"
            for name in named if "$" not in name and name not in services]  # fmt: skip


def check_shell_block(block: Block) -> list[str]:
    if block.marker == "synopsis":
        return check_synopsis(block)
    problems = []
    for command in commands(block):
        argv = groupcoord_argv(command)
        if argv is not None:
            problems += check_groupcoord(command, argv)
        if command.program == "make":
            problems += check_make(command.where, command.argv[1:])
        for target in MAKE_IN_TEXT.findall(command.comment):
            problems += check_make(command.where, [target])
        problems += check_env(command)
        problems += check_paths(command)
        problems += check_compose(command)
    return problems


def check_toml(block: Block, tmp_path: Path) -> list[str]:
    first = block.lines[0].removeprefix("#").strip() if block.lines else ""
    if first not in CONFIG_LOADERS:
        return [f"{block.where()}: a toml block starts with a comment naming its file, one of {CONFIG_LOADERS}"]
    path = tmp_path / first
    path.write_text(block.text)
    try:
        if first == "acl.toml":
            load_acl(path)
        else:
            node_config.load(_parser().parse_args(["node", "--config", str(path)]), {})
    except node_config.ConfigError as exc:
        return [f"{block.where()}: {str(exc).replace(str(path), first)}"]
    return []


class _Names:
    """What the names of a Python block stand for, as far as the imports and the constructors of imported classes
    tell: enough to check the API a doc shows without running it."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.instances: dict[str, type] = {}


def _import(module: str, name: str | None) -> Any:
    imported = importlib.import_module(module)
    if name is None:
        return imported
    if hasattr(imported, name):
        return getattr(imported, name)
    return importlib.import_module(f"{module}.{name}")


def _resolve(node: ast.expr, names: _Names) -> tuple[Any, str] | None:
    """The object an expression made of names and attributes stands for, with its dotted text; None if unknown.
    Raises AttributeError for an attribute the object does not have."""
    if isinstance(node, ast.Name):
        if node.id in names.objects:
            return names.objects[node.id], node.id
        return None
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, names)
        if base is None:
            return None
        obj, text = base
        if not hasattr(obj, node.attr):
            raise AttributeError(f"{text}.{node.attr} does not exist")
        return getattr(obj, node.attr), f"{text}.{node.attr}"
    return None


def _bind(func: Any, call: ast.Call, skip_self: bool = False) -> str:
    """Whether the call's arguments fit `func`'s signature: '' or the mismatch."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return ""
    descriptor = getattr(func, "DESCRIPTOR", None)
    if descriptor is not None and hasattr(descriptor, "fields_by_name"):  # a protobuf message
        unknown = [k.arg for k in call.keywords if k.arg not in descriptor.fields_by_name]
        return f"no field(s) {', '.join(map(str, unknown))}" if unknown else ""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return ""
    positional = [None] * (len(call.args) + (1 if skip_self else 0))
    try:
        signature.bind(*positional, **{str(k.arg): None for k in call.keywords})
    except TypeError as exc:
        return str(exc)
    return ""


def _sdk_class(obj: Any) -> bool:
    return isinstance(obj, type) and obj.__module__.startswith("groupcoord.client")


def check_python(block: Block) -> list[str]:
    try:
        tree = ast.parse(block.text, filename=block.path)
    except SyntaxError as exc:
        return [f"{block.where((exc.lineno or 1) - 1)}: does not compile: {exc.msg}"]
    names = _Names()
    problems: list[str] = []

    def where(node: ast.AST) -> str:
        return block.where(getattr(node, "lineno", 1) - 1)

    for node in ast.walk(tree):
        try:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    module = _import(alias.name, None)
                    names.objects[alias.asname or alias.name.split(".")[0]] = (
                        module if alias.asname else importlib.import_module(alias.name.split(".")[0])
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    names.objects[alias.asname or alias.name] = _import(node.module, alias.name)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{where(node)}: {ast.unparse(node)}: {exc}")
    # The objects a block makes from an SDK class: `with SyncAdmin(...) as admin`, `member = GroupMember(...)`.
    for node in ast.walk(tree):
        made: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.With | ast.AsyncWith):
            made = [(item.optional_vars, item.context_expr) for item in node.items if item.optional_vars]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            made = [(node.targets[0], node.value)]
        for target, value in made:
            if isinstance(target, ast.Name) and isinstance(value, ast.Call):
                with contextlib.suppress(AttributeError):
                    resolved = _resolve(value.func, names)
                    if resolved and _sdk_class(resolved[0]):
                        names.instances[target.id] = resolved[0]
    for node in ast.walk(tree):
        try:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                _resolve(node, names)
                base = node.value
                if isinstance(base, ast.Name) and base.id in names.instances:
                    cls = names.instances[base.id]
                    fields = {n for c in cls.__mro__ for n in getattr(c, "__annotations__", {})}
                    if not hasattr(cls, node.attr) and node.attr not in fields:
                        problems.append(f"{where(node)}: {cls.__name__} has no {node.attr!r}")
            elif isinstance(node, ast.Call):
                func = node.func
                resolved = _resolve(func, names)
                if resolved is not None and callable(resolved[0]):
                    mismatch = _bind(resolved[0], node)
                    if mismatch:
                        problems.append(f"{where(node)}: {ast.unparse(func)}(...): {mismatch}")
                elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    cls = names.instances.get(func.value.id)
                    method = getattr(cls, func.attr, None) if cls else None
                    if method is not None and callable(method):
                        mismatch = _bind(method, node, skip_self=True)
                        if mismatch:
                            problems.append(f"{where(node)}: {cls.__name__}.{func.attr}(...): {mismatch}")
        except AttributeError as exc:
            problems.append(f"{where(node)}: {exc}")
    return sorted(set(problems))


def _report(problems: list[str]) -> str:
    return "docs drifted from the code:\n" + "\n".join(problems)
