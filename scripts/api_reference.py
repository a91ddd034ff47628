"""Writes the SDK's API reference (HTML, from the docstrings) with pdoc: `make api` → build/api/index.html.

    python scripts/api_reference.py OUTDIR

Every module of client/ is either documented (PUBLIC: what an application imports) or named INTERNAL (the
plumbing under `GroupMember` and `Admin`); tests/unit/test_api_reference.py fails for a module that is neither.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pdoc

PUBLIC = (
    "groupcoord.client",
    "groupcoord.client.member",
    "groupcoord.client.sync",
    "groupcoord.client.admin",
    "groupcoord.client.admin_types",
    "groupcoord.client.sync_admin",
    "groupcoord.client.errors",
    "groupcoord.client.stats",
    "groupcoord.client.assignors",
    "groupcoord.client.protocol",
    "groupcoord.client.security",
)
INTERNAL = (
    "groupcoord.client.batching",
    "groupcoord.client.calls",
    "groupcoord.client.cli_flags",
    "groupcoord.client.discovery",
    "groupcoord.client.rebalance",
    "groupcoord.client.session",
)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    pdoc.render.configure(docformat="markdown")
    pdoc.pdoc(*PUBLIC, output_directory=Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
