"""The server's processes freeze their start-up objects out of the garbage collector's walks
(engine/gc_heap.py): garbage made before the freeze is still collected, objects from before are
frozen, objects made after are not."""
from __future__ import annotations

import gc
import weakref

from moeserve.engine.gc_heap import freeze_startup_objects


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_freezing_collects_start_up_garbage_first_and_leaves_later_objects_to_the_collector():
    gc.unfreeze()  # a test before this one in the process may have frozen its heap (the server's in-process tests)
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    dead = weakref.ref(a)
    del a, b
    kept = [_Node()]
    try:
        frozen = freeze_startup_objects()
        assert dead() is None  # collected, not frozen for good
        assert frozen == gc.get_freeze_count() > 0
        after = [_Node()]
        tracked = {id(o) for o in gc.get_objects()}  # the permanent (frozen) generation is not listed
        assert id(kept) not in tracked and id(after) in tracked
    finally:
        gc.unfreeze()
