"""The package layers stay layered: each folder imports only the folders below it (docs/ARCHITECTURE.md, Layers).

Read from the source with `ast`, every import counted, also those inside functions and under TYPE_CHECKING: a lazy
import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER_OF = {
    "base": "base",
    "protocol": "protocol",
    "coordinator": "coordinator",
    "raft": "raft",
    "client": "client",
    "node": "node",
    "pipeline": "pipeline",
    "chaos": "chaos",
    "bench": "bench",
}
# What each folder may import of ours besides itself. `cli` is the command line in groupcoord/: only the top.
ALLOWED = {
    "base": set(),
    "protocol": {"base"},
    "coordinator": {"base", "protocol"},
    "raft": {"base", "protocol", "coordinator"},
    "client": {"base", "protocol"},
    "node": {"base", "protocol", "coordinator", "raft", "client"},
    "pipeline": {"base", "protocol"},
    "chaos": {"base", "protocol", "client", "node", "raft"},
    "bench": {"base", "protocol", "client", "node", "raft", "coordinator", "pipeline"},
}


def _layer(module: str) -> str | None:
    """`groupcoord.node.server` → node; a module of groupcoord/ itself (the command line) → cli."""
    parts = module.split(".")
    if parts[0] != "groupcoord":
        return None
    if len(parts) == 1:
        return "cli"
    return parts[1] if parts[1] in FOLDER_OF else "cli"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "groupcoord":
                found.update(f"groupcoord.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_a_folder_imports_only_the_layers_below_it(folder: str) -> None:
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in sorted(_imports(path)):
            layer = _layer(module)
            if layer is not None and layer != folder and layer not in ALLOWED[folder]:
                wrong.append(f"{path.relative_to(ROOT)} imports {module} ({layer})")
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_a_wrong_import() -> None:
    assert _layer("groupcoord.admin_cli") == "cli"
    assert _layer("groupcoord.node.server") == "node"
    assert _layer("grpc") is None
