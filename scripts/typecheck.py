"""mypy, strict, over the `groupcoord` package as it is installed (`make lint`, pyproject.toml's [tool.mypy]).

    python scripts/typecheck.py [MYPY ARGS...]

The package's sub-packages live in top-level folders (node/ is `groupcoord.node`: pyproject.toml's package-dir),
and the editable install maps them with an import hook, which mypy does not run. So this lays a tree of symbolic
links, build/typecheck/groupcoord/<sub-package> → ../../../<folder>, one per package-dir entry, which [tool.mypy]'s
`mypy_path` names: `groupcoord` itself is found in the work tree, `groupcoord.node` through the link. mypy then
names files by the link (build/typecheck/groupcoord/node/server.py); its report is rewritten to the folder's path
(node/server.py) before it is printed. Exits with mypy's status.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tomllib
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent
TREE = Path("build") / "typecheck"


def link_tree(root: Path = ROOT) -> dict[str, str]:
    """Lays the links under root/build/typecheck/groupcoord; returns each link's path prefix → the folder's."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    top = root / TREE / "groupcoord"
    top.mkdir(parents=True, exist_ok=True)
    prefixes = {}
    for package, folder in package_dir.items():
        parts = package.split(".")
        if parts[0] != "groupcoord" or len(parts) != 2:
            continue  # `groupcoord` itself is found in the work tree
        link = top / parts[1]
        target = os.path.relpath(root / folder, top)
        if not link.is_symlink() or os.readlink(link) != target:
            if link.is_symlink():
                link.unlink(missing_ok=True)
            with contextlib.suppress(FileExistsError):  # another check laying the same link at the same moment
                link.symlink_to(target, target_is_directory=True)
        prefixes[f"{TREE}/groupcoord/{parts[1]}/"] = f"{folder}/"
    for stale in top.iterdir():
        if stale.is_symlink() and f"{TREE}/groupcoord/{stale.name}/" not in prefixes:
            stale.unlink(missing_ok=True)
    return prefixes


def main(argv: list[str]) -> int:
    os.chdir(ROOT)
    prefixes = link_tree()
    stdout, stderr, status = api.run(argv)
    for prefix, folder in prefixes.items():
        stdout = stdout.replace(prefix, folder)
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
