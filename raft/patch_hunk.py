"""One hunk of our patch of pysyncobj's `syncobj.py` (raft/syncobj_patch.py), apart from the loader so that each
concern's module of hunks (raft/patch_*.py) can declare its own without importing the patched module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hunk:
    """`old`, found exactly once in the source being patched, is replaced by `new`; `name` says which fix it is."""

    name: str
    old: str
    new: str
