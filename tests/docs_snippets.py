"""The fenced code blocks of the repository's Markdown, and the command lines in their shell blocks.

Shared by tests/unit/test_docs_snippets.py (every block checked without a network) and
tests/cluster/test_docs_snippets.py (the runnable ones run against a real cluster), so that both read the docs
the same way. A block's kind is its fence's language; an HTML comment on the line before the fence,
`<!-- snippet: fragment -->` or `<!-- snippet: synopsis -->`, says a block is not runnable as it stands.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The Markdown a reader is pointed at; a symlink to one of them (packaging/server/README.md) is read once.
DOC_GLOBS = ("README.md", "docs/*.md", "deploy/**/*.md", "examples/**/*.md", "packaging/*/README.md")
# Every fence says what it holds; `text` is output, a diagram or anything else no checker reads.
LANGUAGES = frozenset({"python", "sh", "console", "toml", "yaml", "json", "promql", "proto", "text"})
MARKERS = frozenset({"fragment", "synopsis"})
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<marker>[\w-]+)\s*-->\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Separators between the commands of one line; a redirection's target is not an argument.
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")"})
_REDIRECTIONS = frozenset({">", ">>", "<", "2>", ">&", "2>&1", "&>"})
_KEYWORDS = frozenset({"do", "then", "else", "until", "while", "if", "!", "time", "exec", "sudo", "done", "fi"})
# `<run>`: a placeholder the reader fills in, not a redirection.
_PLACEHOLDER = re.compile(r"<([A-Za-z][\w-]*)>")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository
    line: int  # of the first line inside the fence
    lang: str
    lines: tuple[str, ...]
    marker: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def where(self, offset: int = 0) -> str:
        return f"{self.path}:{self.line + offset}"


@dataclass
class Command:
    """One simple command of a shell block: `NAME=value ... program args`, with its comment."""

    block: Block
    offset: int  # of its first line within the block
    env: dict[str, str]
    argv: list[str]
    comment: str = ""
    source: str = field(default="", repr=False)

    @property
    def where(self) -> str:
        return self.block.where(self.offset)

    @property
    def program(self) -> str:
        return self.argv[0] if self.argv else ""


def doc_files() -> list[Path]:
    seen: dict[Path, Path] = {}
    for pattern in DOC_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            seen.setdefault(path.resolve(), path)
    return sorted(seen.values())


def blocks(paths: list[Path] | None = None) -> list[Block]:
    found: list[Block] = []
    for path in doc_files() if paths is None else paths:
        found.extend(parse_blocks(path.read_text(), str(path.relative_to(ROOT) if path.is_absolute() else path)))
    return found


def parse_blocks(text: str, name: str) -> list[Block]:
    """The fenced blocks of one Markdown text, each with the marker on the line before its fence."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        previous = lines[i - 1] if i else ""
        marker = _MARKER.match(previous)
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            same = closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence)
            if same and not closing["lang"]:
                break
            body.append(lines[j][indent:] if not lines[j][:indent].strip() else lines[j].lstrip())
            j += 1
        found.append(Block(name, i + 2, opening["lang"], tuple(body), marker["marker"] if marker else ""))
        i = j + 1
    return found


def split_comment(line: str) -> tuple[str, str]:
    """The code of a shell line and its comment: a `#` outside quotes that starts a word."""
    quote = ""
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k], line[k + 1 :].strip()
    return line, ""


def _substitutions_to_words(code: str) -> str:
    """`$(...)` (nested or quoted parentheses included) becomes one opaque word, `$CMD`."""
    out: list[str] = []
    k = 0
    while k < len(code):
        if code.startswith("$(", k):
            depth, k = 1, k + 2
            while k < len(code) and depth:
                depth += {"(": 1, ")": -1}.get(code[k], 0)
                k += 1
            out.append("$CMD")
        else:
            out.append(code[k])
            k += 1
    return "".join(out)


def logical_lines(block: Block) -> Iterator[tuple[int, str, str]]:
    """(offset, code, comment) of each command line: `\\` continuations joined, `$ ` prompts removed; in a
    `console` block only the prompted lines (the rest is output)."""
    pending: list[str] = []
    comments: list[str] = []
    start = 0
    for offset, raw in enumerate(block.lines):
        line = raw
        if not pending:
            start = offset
            if line.startswith("$ "):
                line = line[2:]
            elif block.lang == "console":
                continue
        code, comment = split_comment(line)
        if comment:
            comments.append(comment)
        if code.rstrip().endswith("\\"):
            pending.append(code.rstrip()[:-1])
            continue
        pending.append(code)
        joined = " ".join(part.strip() for part in pending).strip()
        if joined or comments:
            yield start, joined, " ".join(comments)
        pending, comments = [], []
    if pending:
        yield start, " ".join(p.strip() for p in pending).strip(), " ".join(comments)


def tokens(code: str) -> list[str]:
    code = _PLACEHOLDER.sub(r"\1", _substitutions_to_words(code))
    lexer = shlex.shlex(code, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def commands(block: Block) -> Iterator[Command]:
    """The simple commands of a shell block, split at `;`, `&&`, `|`..., redirections and shell keywords
    dropped, leading `NAME=value` assignments kept apart."""
    for offset, code, comment in logical_lines(block):
        segment: list[str] = []
        words = tokens(code) if code else []
        for word in [*words, ";"]:
            if word not in _SEPARATORS:
                segment.append(word)
                continue
            if segment or comment:
                command = _command(block, offset, segment, comment, code)
                if command is not None:
                    yield command
                comment = ""  # the comment belongs to the line's first command
            segment = []


def _command(block: Block, offset: int, words: list[str], comment: str, code: str) -> Command | None:
    kept: list[str] = []
    skip = False
    for k, word in enumerate(words):
        redirects = word in _REDIRECTIONS or re.fullmatch(r"\d?>>?|<", word)
        if skip:
            skip = False
        elif redirects:
            skip = True
        elif not (word in ("1", "2") and words[k + 1 : k + 2] == [">&"]):  # the 2 of `2>&1`
            kept.append(word)
    while kept and kept[0] in _KEYWORDS:
        kept.pop(0)
    if kept and kept[0] == "for":
        return None  # `for x in ...`: a loop header, not a command
    env: dict[str, str] = {}
    while kept and _ASSIGNMENT.match(kept[0]):
        name, _, value = kept.pop(0).partition("=")
        env[name] = value
    if kept and kept[0] == "export":
        for word in kept[1:]:
            name, _, value = word.partition("=")
            env[name] = value
        kept = ["export"]
    if not kept and not env and not comment:
        return None
    return Command(block, offset, env, kept, comment, code)


def groupcoord_argv(command: Command) -> list[str] | None:
    """The arguments of a `groupcoord` run by the command: directly (`groupcoord`, `.venv/bin/groupcoord`), or in a
    container (`docker compose exec node1 groupcoord ...`, `kubectl exec pod -- groupcoord ...`)."""
    argv = command.argv
    if argv and Path(argv[0]).name == "groupcoord":
        return argv[1:]
    if "exec" in argv:
        for k in range(argv.index("exec") + 1, len(argv)):
            if argv[k] == "groupcoord":
                return argv[k + 1 :]
    return None
