"""Pin a single-rank engine process to the cores its front end does not use.

`moeserve serve` leaves `--reserved-cores` (default 1) to the HTTP front end and its clients. Left
unpinned, the kernel's scheduler now and then runs the engine on the same core as a busy front end
or client while the other core idles: a prefill step that takes 36 ms alone took a median 44-72 ms
next to one busy process (docs/performance.md, session 11). Pinned, the engine keeps its cores and
the scheduler moves the others away. vLLM's CPU backend binds its worker the same way
(`VLLM_CPU_OMP_THREADS_BIND`).

Only the engine process of a one-rank-per-node world is pinned, before torch starts any thread
(threads inherit the mask). Ranks a multi-rank engine spawns would inherit the engine's mask, so
those worlds stay unpinned. MOESERVE_CPU_BIND=0 turns it off. How many cores are reserved is the
config's (--reserved-cores); this module gives the front end the first ones and the engine the rest.
"""
from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def engine_cores(available: list[int], reserved: int, ranks_per_node: int, threads: int = 1) -> list[int] | None:
    """The cores a single-rank engine keeps: all but the first `reserved` of `available` (core 0
    also takes most interrupts), or None when there is nothing to pin: no reservation, more than one
    rank per node, nothing left, or fewer cores left than the `threads` the user asked for
    (--num-threads / --expert-threads are honoured as given: pinned, they would share a core)."""
    if reserved < 1 or ranks_per_node != 1 or len(available) - reserved < max(1, threads):
        return None
    return sorted(available)[reserved:]


def bind_engine_process(reserved: int, ranks_per_node: int, threads: int = 1) -> list[int] | None:
    """Pins the calling process (its threads to come) to `engine_cores`; returns them, or None when
    it did not pin. Call before torch creates its thread pools."""
    if os.environ.get("MOESERVE_CPU_BIND", "1").lower() in ("0", "false", "off", "no"):
        return None
    try:
        available = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    cores = engine_cores(available, reserved, ranks_per_node, threads)
    if cores is None:
        return None
    try:
        os.sched_setaffinity(0, cores)
    except OSError as e:
        logger.warning("could not pin the engine to cores %s (%s); it runs unpinned", cores, e)
        return None
    logger.info("engine pinned to cores %s; %d core(s) left to the front end (MOESERVE_CPU_BIND=0 turns this off)",
                cores, reserved)
    return cores
