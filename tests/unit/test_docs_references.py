"""The repository is readable on its own: no text in it points at a document outside it.

The behaviour contract is the repository's own docs (docs/PROTOCOL.md and the documents it links). A comment,
docstring or doc that cites a section of an outside specification, or a path beside the checkout, leaves a reader
of the repository with a reference they cannot follow.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Spelled in pieces so that this file does not match itself.
FORBIDDEN = re.compile(
    "|".join(
        (
            "SPEC" + r"\s*§",  # a section of an outside specification
            "SPEC" + r"\.md",
            r"\.\./" + "shared",  # a directory beside the checkout
            r"\bseed" + r" 00\d",  # the outside specification's source documents
        )
    )
)
# A bare section number ("§" and a digit) cites the outside specification too, unless the line names the document
# it belongs to: the Raft paper or thesis, an RFC.
SECTION = re.compile("§" + r"\s*\d")
NAMED_SOURCE = re.compile(r"\bRaft\b|\bthesis\b|\bRFC \d+")


def _repository_files() -> list[Path]:
    """Tracked files, and new ones not yet added that git does not ignore."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    names = sorted({name for name in out.decode().split("\0") if name})
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def test_no_reference_to_documents_outside_the_repository():
    found = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if FORBIDDEN.search(line) or (SECTION.search(line) and not NAMED_SOURCE.search(line)):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "references to documents outside the repository (cite docs/ or Kafka instead):\n" + "\n".join(
        found
    )
