"""Elementwise functions applied in row blocks small enough to run on one thread at any intra-op
thread count, so their bits do not depend on it.

The cpu set's `elementwise` (kernels/cpu/kernel_set.py): layers call `kernels.elementwise(fn, x)`
for their activations, rotary cos/sin and sigmoid routers; the other sets apply fn at once (on a GPU a
block is a kernel launch, and a GPU op's bits do not depend on a thread count).

Why: torch runs an elementwise op over more elements than its grain (32768; GELU's own threshold is
16384) as contiguous ranges on OpenMP threads, and the elements at the end of each range take the
scalar path instead of the vector one. For exp/erf/tanh/cos-based functions the two paths can
differ in the last bit (seen: SiLU at 3 threads, GELU at 2), so a forward whose thread count changes
between steps (kernels/cpu/step_threads.py) could change a token. Each row block under the threshold runs
on one thread whatever the count, so the result has the same bits at any thread count. (Not
necessarily the bits of the unblocked op: a block's last few elements may take the scalar path where
the whole tensor took the vector one; the difference is fp32 rounding.) The blocks cost one `cat`
per op, and only above the threshold.
"""

from __future__ import annotations

from typing import Callable

import torch

# elementwise ops over fewer elements run on the calling thread alone (GELU's threshold, the lowest);
# kernels/cpu/expert_threads.py writes the number inline (TorchScript reads no globals), a test ties the two
ELEMENTWISE_GRAIN = 16384


def by_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn(x) for an elementwise fn, computed over blocks of x [R, ...] below ELEMENTWISE_GRAIN: whole
    rows where a row is below it, else consecutive runs of the flattened elements."""
    rows = x.shape[0]
    per_row = x[0].numel() if rows else 1
    if per_row >= ELEMENTWISE_GRAIN:
        flat = x.reshape(-1)
        step = ELEMENTWISE_GRAIN - 1
        return torch.cat([fn(flat[i : i + step]) for i in range(0, flat.numel(), step)]).view(x.shape)
    step = (ELEMENTWISE_GRAIN - 1) // max(1, per_row)
    if rows <= step:
        return fn(x)
    return torch.cat([fn(x[r : r + step]) for r in range(0, rows, step)])
