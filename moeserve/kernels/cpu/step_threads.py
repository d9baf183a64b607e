"""How many intra-op threads run a step's forward: one (with the expert and column forks) or all of
the rank's cores (forks off), chosen per step size by timing both.

Why: on the 2-core machines a step of a small model is hundreds of ops of tens of microseconds.
With a second OpenMP thread each op forks and joins the pool; on a quiet machine that is the
faster way (tiny-mixtral offline: 1,300-1,630 tok/s against 1,000-1,280 with one thread and the
expert forks, side by side, docs/performance.md), but when the other core is busy (a front end, a
load generator, a test suite) a join waits for a descheduled thread and a step can take 10x as
long. Neither way wins everywhere, so the runner measures, like `SplitChooser` does per layer:
per bucket of step sizes (bit length of the token count) it times PROBES steps each way in every
`period` steps and runs the way that was faster in between (a probe round counts each way's
fastest step: one step slowed by another process must not decide for 64 steps or more; the way in
use keeps timing itself, and a slowdown of it hands the steps to the other way). A probe that loses by more
than BACKOFF x doubles the bucket's period (up to MAX_PERIOD), so a collapsing way is retried
rarely; a close race keeps the short period.

Both ways must give the same bits, or switching between steps could change a token. GEMMs (oneDNN
splits over rows and columns, each output's dot product on one thread), attention (over sequences
and heads) and row-wise kernels (norms, softmax, top-k) do at any thread count. Elementwise ops do
not: above torch's grain (32768 elements; GELU's threshold is 16384) OpenMP threads take contiguous
ranges, and the elements at the end of each range take the scalar path, where exp-, erf- and
cos-based functions can differ from the vector path in the last bit (seen: 2 of 100,100 SiLU
outputs with 3 threads; GELU on 32,700 elements with 2). Every such op of a forward (activations of
experts and dense MLPs, rotary cos/sin, sigmoid routers) therefore runs in row blocks below the
threshold (kernels/cpu/blocked.py), which makes it thread-count-invariant. `verify` then checks at
start-up, on random inputs, that both ways give the same bits: forwards of a few sequences
(prefill, decode) and of one prefill of `max_tokens` tokens (the largest step the wide way may
run), and every packed GEMM at each row count 1..128 and a spread of larger ones up to
`max_tokens`; on any difference, or error, the runner stays narrow. The sampler and prompt logprobs
run outside the chosen region, so seeded sampling never depends on the choice.

Only for a single-rank engine: ranks time their own steps, and the start-up check runs a forward,
which in a multi-rank world would have to line up with the other ranks' collectives.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from moeserve.kernels.cpu.split_chooser import SplitChooser

logger = logging.getLogger(__name__)

MAX_WIDE_TOKENS = 2048  # bounds the start-up check's largest forward and GEMM rows


def sweep_rows(max_tokens: int) -> list[int]:
    """Row counts the start-up GEMM check runs: every one up to 128 (decode steps, rows per expert),
    then powers of two and their odd neighbours up to max_tokens (prefill chunks)."""
    rows = set(range(1, min(128, max_tokens) + 1))
    size = 256
    while size // 2 < max_tokens:
        rows.update(r for r in (size // 2 + size // 4 - 1, size - 1, size) if r <= max_tokens)
        size *= 2
    rows.add(max_tokens)
    return sorted(rows)


@dataclass
class _Bucket:
    steps: int = 0
    # seconds of a step run each way: the fastest of this probe round's steps, then (for the way in
    # use) an exponential average of the steps run since
    narrow: float | None = None
    wide: float | None = None
    runs: list = field(default_factory=lambda: [0, 0])  # steps timed each way since this round began
    using: bool | None = None  # the way chosen at the last step outside a probe round (True: wide)
    period: int = 0  # steps from one probe round to the next
    next_probe: int = 0  # the step index at which the next probe round starts


class StepThreads:
    """Chooses, step by step, between `narrow` intra-op threads with forks and `wide` without."""

    PERIOD = 64
    PROBES = 2
    ALPHA = 0.3  # weight of the newest timing in the running way's mean
    BACKOFF = 1.5  # a probe round one way loses by more than this doubles the bucket's period
    MAX_PERIOD = 1024

    def __init__(self, narrow: int, wide: int, max_tokens: int = MAX_WIDE_TOKENS):
        if not 1 <= narrow < wide:
            raise ValueError(f"StepThreads needs 1 <= narrow < wide, got {narrow}, {wide}")
        self.narrow, self.wide = narrow, wide
        self.max_tokens = max_tokens  # larger steps always run narrow (module docstring)
        self.enabled = True  # False after a failed bit check: every step runs narrow
        self.buckets: dict[int, _Bucket] = {}  # bit length of a step's token count -> its timings

    def use_wide(self, tokens: int) -> bool:
        if not self.enabled or tokens > self.max_tokens:
            return False
        b = self._bucket(tokens)
        i = b.steps
        b.steps += 1
        phase = i - b.next_probe
        known = b.narrow is not None and b.wide is not None  # a step that raised records nothing
        if phase < 0 and known and (b.wide < b.narrow) != b.using:
            # between rounds, the way in use got slower than the other way's last probe: time both
            # afresh before switching (one slow step must not hand the bucket to the slower way until
            # the next scheduled round)
            b.next_probe, phase = i, 0
        if phase == 0:  # a probe round starts: both ways are timed afresh, in the same minute
            b.narrow = b.wide = None
            b.runs = [0, 0]
        if 0 <= phase < 2 * self.PROBES:  # PROBES steps narrow, then PROBES wide
            return phase >= self.PROBES
        choice = known and b.wide < b.narrow
        if phase == 2 * self.PROBES:  # the round just ended: when is the next one
            lopsided = known and max(b.narrow, b.wide) > self.BACKOFF * min(b.narrow, b.wide)
            b.period = min(2 * b.period, self.MAX_PERIOD) if lopsided else self.PERIOD
            b.next_probe = b.next_probe + b.period
        b.using = choice
        return choice

    def _bucket(self, tokens: int) -> _Bucket:
        b = self.buckets.get(tokens.bit_length())
        if b is None:
            b = self.buckets[tokens.bit_length()] = _Bucket(period=self.PERIOD)
        return b

    def record(self, tokens: int, wide: bool, seconds: float) -> None:
        b = self._bucket(tokens)
        b.runs[wide] += 1
        old, n = (b.wide, b.runs[1]) if wide else (b.narrow, b.runs[0])
        if old is None:
            mean = seconds
        elif n <= self.PROBES:  # a probe: the way's best step of the round (noise only slows a step down)
            mean = min(old, seconds)
        else:
            mean = (1 - self.ALPHA) * old + self.ALPHA * seconds
        if wide:
            b.wide = mean
        else:
            b.narrow = mean

    @contextlib.contextmanager
    def step(self, tokens: int) -> Iterator[None]:
        """Run the body with the threads chosen for a step of `tokens` tokens, and time it."""
        if tokens == 0 or tokens > self.max_tokens or not self.enabled:
            yield
            return
        wide = self.use_wide(tokens)
        start = time.perf_counter()
        with self.setting(wide):
            yield
        self.record(tokens, wide, time.perf_counter() - start)

    @contextlib.contextmanager
    def setting(self, wide: bool) -> Iterator[None]:
        """`wide` intra-op threads and no forks inside the body; the previous count and fork switch after it."""
        if not wide:
            yield
            return
        threads, forks = torch.get_num_threads(), SplitChooser.forks_enabled
        torch.set_num_threads(self.wide)
        SplitChooser.forks_enabled = False
        try:
            yield
        finally:
            SplitChooser.forks_enabled = forks
            torch.set_num_threads(threads)

    def verify(self, checks: list[Callable[[], torch.Tensor]] | Callable[[], list[Callable[[], torch.Tensor]]]) -> bool:
        """Run every check (or every check a callable builds) narrow and wide, one at a time; keep
        choosing only if each pair of outputs matches bit for bit (compared as integers, so NaNs
        compare too). An error in building or running a check also leaves the runner narrow: this
        is an optimisation, never a reason not to start."""
        try:
            for check in checks() if callable(checks) else checks:
                with torch.inference_mode():
                    narrow = check()
                    with self.setting(True):
                        wide = check()
                if not same_bits(narrow, wide):
                    return self._disable("change the bits of a forward")
        except Exception as exc:  # noqa: BLE001 - see above
            return self._disable(f"could not be checked ({type(exc).__name__}: {exc})")
        return True

    def _disable(self, why: str) -> bool:
        self.enabled = False
        logger.warning("%d intra-op threads %s on this machine: steps stay on %d", self.wide, why, self.narrow)
        return False


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() and a.element_size() in (2, 4, 8):
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
    return torch.equal(a, b)
