"""Choosing, call by call, between running work on one thread or split over several, by timing both.

Used by the packed expert loop (kernels/cpu/expert_threads.py) and the column-split linears (kernels/cpu/gemm.py).
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any, Callable, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class SplitChooser:
    """Whether to split a call over threads, decided from timings of both ways, per size bucket.

    Why: on an idle machine the expert split is 1.3-1.8x faster; with the other core busy (another
    process, other ranks, a test suite) it gained nothing end to end, or lost up to ~12%
    (docs/performance.md). Only for calls whose two ways give the same bits (the expert loop always;
    a split linear after its start-up check), so the engine may switch at any call: in every PERIOD calls of a
    bucket (calls of similar row counts) it times PROBES calls each way, then uses the way whose
    recent mean (an exponential average) is lower until the next probe. At most 2 * PROBES / PERIOD
    of the calls run the slower way.
    """

    PERIOD = 64
    PROBES = 3
    ALPHA = 0.3  # weight of the newest timing in the average
    # process-wide: False while a step runs on more intra-op threads instead of forks
    # (kernels/cpu/step_threads.py); every call then runs serially and records nothing
    forks_enabled = True

    def __init__(self) -> None:
        # bucket (bit length of the row count) -> [calls, mean seconds serial, mean seconds split]
        self.stats: dict = {}

    def split(self, rows: int) -> bool:
        entry = self.stats.setdefault(rows.bit_length(), [0, None, None])
        phase = entry[0] % self.PERIOD
        entry[0] += 1
        if phase < 2 * self.PROBES:
            return phase >= self.PROBES  # probe: PROBES calls serial, then PROBES split
        serial, split = entry[1], entry[2]
        return serial is None or (split is not None and split <= serial)

    def record(self, rows: int, split: bool, seconds: float) -> None:
        entry = self.stats[rows.bit_length()]
        i = 2 if split else 1
        entry[i] = seconds if entry[i] is None else (1 - self.ALPHA) * entry[i] + self.ALPHA * seconds

    def timed(self, rows: int, serial: Callable[[], T], split: Callable[[], T]) -> T:
        """Run the way `split(rows)` picks and record how long it took."""
        if not SplitChooser.forks_enabled:
            return serial()
        use = self.split(rows)
        start = time.perf_counter()
        out = split() if use else serial()
        self.record(rows, use, time.perf_counter() - start)
        return out


def take(claims, i: int) -> bool:
    """Claims chunk `i` of a forked call for the calling thread, unless a thread already has:
    `claims` is an int8 tensor, one flag a chunk. A forked chunk runs only if its thread takes it
    first; the calling thread, done with its own chunk, takes every chunk no thread has started and
    runs it itself. So a fork whose thread is slow to start (its core busy: the lent helpers of
    kernels/cpu/cpu_binding.py run at idle priority) costs the call nothing but the fork, instead of a wait.
    Without atomics two threads that look at once may both take a chunk; both compute the same bits,
    the caller keeps its own. TorchScript-compatible: the forked loops call it compiled."""
    if int(claims[i]) != 0:
        return False
    claims[i] = 1
    return True


class Scripted:
    """`fn` compiled with TorchScript on its first call, so its `torch.jit.fork`s run on torch's
    inter-op pool without the GIL. torch marks `torch.jit.script` deprecated (2.13 warns) but has no
    other way to do that; should a torch drop or break it, `fn` runs as plain Python, where
    `torch.jit.fork` runs the forked call in place: the same ops, serially, the same bits. That is
    said once, in the log."""

    def __init__(self, fn: Callable, what: str):
        self.fn, self.what = fn, what
        self.compiled: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None:
            self.compiled = self._compile()
        return self.compiled(*args)

    def _compile(self) -> Callable:
        import torch

        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated", category=DeprecationWarning)
                return torch.jit.script(self.fn)
        except Exception as exc:  # noqa: BLE001 - any failure to compile leaves plain Python
            logger.warning("TorchScript unavailable (%s): %s runs serially in eager mode", exc, self.what)
            return self.fn
