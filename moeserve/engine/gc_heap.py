"""Keep the objects made at start-up out of the cyclic garbage collector's later passes.

    freeze_startup_objects()   # once loading is done, before the first request

Why: a server process holds a million or so objects from start-up (torch, transformers, the model's
modules, FastAPI's routes), and CPython's full collection walks all of them: 100-140 ms in the
engine process and in the front end on the 2-core machines (measured: docs/performance.md). Full
collections come when enough objects have survived the younger ones: every few seconds during
start-up, rarely while serving (none fired inside the measured rounds of the instrumented
runs), but when one does, every running request's next token waits that long. `gc.freeze()` moves
every tracked object to a permanent generation that collections skip (vLLM's engine core and API
server do the same after start-up); a full collection then walks only what serving made. The collect
before it frees start-up's garbage cycles first, since frozen objects are never collected. Objects
freed by reference counting (nearly all) are freed as before.

Only for processes this package owns (a server's front end, its engine, its rank workers), never in
the Python API: freezing a user's process would keep the user's own garbage cycles alive.
"""
from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Collects, then freezes every object tracked so far; -> how many are frozen now."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
