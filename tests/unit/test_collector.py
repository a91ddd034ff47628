"""The node's collector settings: import-time objects frozen, young collections rarer, cycles still collected."""

from __future__ import annotations

import gc
import weakref

from groupcoord.node.server import GC_YOUNG_THRESHOLD, settle_collector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settling_freezes_what_exists_and_still_collects_later_cycles():
    threshold = gc.get_threshold()
    try:
        settle_collector()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *threshold[1:])
        assert gc.get_freeze_count() > 1000, "the imported modules' functions and classes are frozen"
        assert gc.isenabled()
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None, "a cycle made after settling is collected"
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
