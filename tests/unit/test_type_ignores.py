"""Every `# type: ignore` in the package says which error it silences and why, on its own line:

    x = thing.attr  # type: ignore[attr-defined]  # pysyncobj has no type hints

mypy (`make lint`, strict) refuses a bare ignore (`ignore-without-code`) and one that silences nothing
(`warn_unused_ignores`); the reason is this test's. Read with `tokenize`, so only comments count. The generated
stubs in protocol/v1 (protocol/generate.py) are left out: they are never edited by hand.
"""

from __future__ import annotations

import io
import re
import tokenize
import tomllib
from pathlib import Path

from groupcoord.protocol import generate

ROOT = Path(__file__).resolve().parents[2]
IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<codes>\[[^\]]*\])?(?P<rest>.*)")
REASON = re.compile(r"\s+#\s*\S")
GENERATED = {generate.PROTO_DIR / name for name in generate.GENERATED}


def unexplained(source: str) -> list[tuple[int, str]]:
    """(line, comment) of each `type: ignore` comment without an error code or without a reason after it."""
    bad = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        match = IGNORE.search(token.string)
        if match is None:
            continue
        codes, rest = match["codes"], match["rest"]
        if codes is None or codes == "[]" or not REASON.match(rest):
            bad.append((token.start[0], token.string))
    return bad


def package_folders() -> list[Path]:
    """The folders installed as `groupcoord` and its sub-packages (pyproject.toml's package-dir)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return sorted({ROOT / folder for folder in setuptools["package-dir"].values()})


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    found = []
    for folder in package_folders():
        for path in sorted([*folder.rglob("*.py"), *folder.rglob("*.pyi")]):
            if path.resolve() in GENERATED:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}: {text}" for line, text in unexplained(path.read_text())]
    assert not found, "a `type: ignore` needs [its-code] and `  # why` on its line:\n" + "\n".join(found)


def test_the_scanner_catches_a_bare_or_unexplained_ignore() -> None:
    source = (
        "a = f()  # type: ignore\n"
        "b = f()  # type: ignore[attr-defined]\n"
        "c = f()  # type: ignore[attr-defined]  #\n"
        "d = f()  # type: ignore[]  # no code\n"
        "e = f()  # type: ignore[attr-defined]  # pysyncobj has no type hints\n"
        "g = f()  # type:ignore[misc, arg-type]  # two codes, one reason\n"
        "h = '# type: ignore'  # a string is not a comment\n"
        "i = f()  # noqa: E501\n"
    )
    assert [line for line, _ in unexplained(source)] == [1, 2, 3, 4]


def test_mypy_checks_every_sub_package() -> None:
    """A new folder in package-dir is type-checked too: [tool.mypy]'s packages name each one."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    installed = set(pyproject["tool"]["setuptools"]["package-dir"])
    assert installed <= set(pyproject["tool"]["mypy"]["packages"])
