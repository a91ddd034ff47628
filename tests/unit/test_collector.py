"""The node's collector settings: import-time objects frozen, its own thresholds, cycles still collected."""

from __future__ import annotations

import gc
import weakref

from groupcoord.coordinator import GroupCoordinator
from groupcoord.node.server import GC_THRESHOLDS, _freeze_survivors, settle_collector
from tests.support import SeqIds
from tests.unit.harness import Harness


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settling_freezes_what_exists_and_still_collects_later_cycles():
    threshold = gc.get_threshold()
    try:
        settle_collector()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 1000, "the imported modules' functions and classes are frozen"
        assert gc.isenabled()
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None, "a cycle made after settling is collected"
    finally:
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_a_full_collection_freezes_its_survivors():
    """What survives a full collection is frozen: the next one walks only newer objects (the group state is most)."""
    threshold = gc.get_threshold()
    try:
        settle_collector()
        survivor = [_Node() for _ in range(1000)]
        before = gc.get_freeze_count()
        gc.collect()
        assert gc.get_freeze_count() >= before + len(survivor)
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None, "a cycle made after a freeze is still collected"
    finally:
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_an_unloaded_core_is_freed_without_the_collector():
    """A frozen cycle is never collected: a core a new leader dropped must go by reference counting alone, parked
    calls, session timers and all (PartitionHost.step_down unloads it first)."""
    h = Harness()
    a, _b = h.form("a", "b")
    a.join()  # parked: the group waits for b
    assert h.parked_joins()
    core, h.core = h.core, GroupCoordinator(h.config, h.clock, new_uuid=SeqIds())
    store, dropped = weakref.ref(core.store), weakref.ref(core)
    h.absorb(core.unload())
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        del core
        assert dropped() is None and store() is None
    finally:
        if was_enabled:
            gc.enable()
