"""Waiting for peers' flags: spin (yielding the core), then sleep with backoff; fail, never hang.

Ranks often share cores (2 ranks on 2 cores, with other processes): a rank that busy-waits on a flag
would take the core the peer needs to write it. So every spin yields (sched_yield), and after
SPIN_S of spinning the waiter sleeps, 20 us doubling up to 1 ms. A peer whose process is gone raises
at once (checked every CHECK_S); a wait past the step timeout raises PeerTimeout naming the ranks
that never signalled, which the engine turns into the watchdog's error (a rank exits, rank 0 fails
the step, /health answers 503).
"""
from __future__ import annotations

import os
import time

from moeserve.dispatch.heap import SymmetricHeap

SPIN_S = 0.002
CHECK_S = 0.05
MAX_SLEEP_S = 0.001


class PeerTimeout(RuntimeError):
    """A peer never raised its flag within the step timeout, or its process is gone."""


def wait_for_flags(heap: SymmetricHeap, offset: int, epoch: int, timeout_s: float, what: str) -> None:
    """Until the W int64 flags at `offset` of this rank's region all equal `epoch`.

    what: the phase, for the error ("dispatch rows", "combine rows")."""
    pending = [s for s, v in enumerate(heap.load_words(offset, heap.world)) if v != epoch]
    if not pending:
        return
    start = time.monotonic()
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
        if now - start < SPIN_S:
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
