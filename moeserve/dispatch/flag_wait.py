"""Waiting for peers' flags: poll, yield the core, then sleep in the kernel until the peer's flag
store wakes us; fail, never hang.

Ranks often share cores (2 ranks on 2 cores, with other processes), so a waiter must not keep its
core from the peer that has to write the flag. The default (STRATEGY "yield-futex"):
1. busy-poll for SPIN_S, which is 0: a busy poll holds the core a peer sharing it needs to write the
   flag (a 50 us poll made calls 10-35% slower at ep 4 and 8 on two cores, and gained nothing at ep 2:
   docs/dispatch.md, Waiting), and on a core of its own a yield with nothing else runnable returns at
   once, so step 2 polls about as often;
2. sched_yield between polls until YIELD_FUTEX_S: whatever else is runnable on this core (the peer
   itself when they share it) runs, and the flag is seen on the first poll after it lands (steps 1
   and 2 in the C++ `poll` on the shm heap where the dispatch kernels are built: native.py);
3. sleep on the row of flags (`heap.sleep_on`; each writer calls `heap.notify` after its store, and
   the one whose store completes the row makes the wake-up: shm_heap.py, futex.py): a long wait (the
   peers' expert compute, an idle attention group) costs no CPU and ends within one wake-up, not a
   sleep quantum, and not one wake-up per peer.
Measured side by side (docs/dispatch.md, "Waiting"), on a VM whose cross-core wake-ups are slow,
yielding first beat sleeping at once, and both beat a busy spin (which starves a peer sharing the
core). Heaps without futex words (NVSHMEM: flags in GPU memory) yield until YIELD_S, then sleep
20 us doubling up to 1 ms.

A peer whose process is gone raises at once (checked every CHECK_S); a wait past the step timeout
raises PeerTimeout naming the ranks that never signalled, which the engine turns into the watchdog's
error (a rank exits, rank 0 fails the step, /health answers 503).
"""
from __future__ import annotations

import os
import time

import torch

from moeserve.dispatch import futex, native
from moeserve.dispatch.heap import SymmetricHeap

SPIN_S = 0.0
YIELD_S = 0.002
CHECK_S = 0.05
MAX_SLEEP_S = 0.001
YIELD_FUTEX_S = 0.002
# "futex" (sleep on the flag where the heap can), "yield-futex" (sched_yield for YIELD_FUTEX_S, then
# sleep on the flag), "yield" (sched_yield, then sleep with backoff), "spin" (poll only):
# benchmarks/dispatch_latency.py --wait compares them
STRATEGY = "yield-futex"


class PeerTimeout(RuntimeError):
    """A peer never raised its flag within the step timeout, or its process is gone."""


def wait_for_flags(heap: SymmetricHeap, offset: int, epoch: int, timeout_s: float, what: str,
                   yield_s: float | None = None) -> None:
    """Until the W int64 flags at `offset` of this rank's region all equal `epoch`.

    what: the phase, for the error ("expert counts", "dispatch rows", "combine rows"). yield_s: how long
    the yield-futex strategy yields before it sleeps (None: YIELD_FUTEX_S; 0: sleep at once, what
    hierarchical dispatch does on a host with more ranks than cores: hierarchical.py)."""
    words = heap.load_words(offset, heap.world)
    pending = [s for s, v in enumerate(words) if v != epoch]
    if not pending:
        return
    sleep_on = getattr(heap, "sleep_on", None) if "futex" in STRATEGY and futex.available() else None
    yield_s = (YIELD_FUTEX_S if yield_s is None else yield_s) if STRATEGY == "yield-futex" else 0.0
    start = time.monotonic()
    native_words = getattr(heap, "native_words", None)
    if sleep_on is not None and native_words is not None and native.load():  # spin and yield in C++
        base, stride, header, _ = native_words()
        address = base + heap.rank * stride + header + offset
        if torch.ops.moeserve_dispatch.poll(address, heap.world, epoch, SPIN_S, yield_s):
            return
    next_check, sleep = start + CHECK_S, 0.0
    while True:
        words = heap.load_words(offset, heap.world)
        pending = [s for s in pending if words[s] != epoch]
        if not pending:
            return
        now = time.monotonic()
        if now >= next_check:
            next_check = now + CHECK_S
            _raise_if_gone(heap, pending, epoch, what)
            if now - start > timeout_s:
                raise PeerTimeout(
                    f"ep rank(s) {pending} never signalled their {what} for step epoch {epoch} within the "
                    f"step timeout of {timeout_s:g} s (this is ep rank {heap.rank}); a stuck or stopped rank?"
                )
        if now - start < SPIN_S or STRATEGY == "spin":
            continue
        if sleep_on is not None and now - start < yield_s:
            os.sched_yield()
        elif sleep_on is not None:  # until the last flag lands (its writer wakes us) or the next check
            sleep_on(offset, heap.world, epoch, max(next_check - now, 1e-4))
        elif now - start < YIELD_S:
            os.sched_yield()
        else:
            sleep = min(MAX_SLEEP_S, max(2e-5, sleep * 2))
            time.sleep(sleep)


def _raise_if_gone(heap: SymmetricHeap, pending: list[int], epoch: int, what: str) -> None:
    gone = [r for r in heap.dead_peers() if r in pending]
    if gone:
        raise PeerTimeout(
            f"ep rank(s) {gone} exited before sending their {what} for step epoch {epoch} "
            f"(this is ep rank {heap.rank})"
        )
