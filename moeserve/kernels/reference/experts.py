"""The routed experts' two GEMMs over an expert-major batch, in plain torch.

Weights in nn.Linear orientation (what `grouped_mm` takes as a transposed view):
    w13 [S, 2 * Il, H]  rows [0, Il) = gate (w1), rows [Il, 2 * Il) = up (w3)
    w2  [S, H, Il]
Shape legend: S local slots, R dispatched rows, H hidden, Il intermediate size on this rank.
out = w2 @ (act(w1 @ x) * (w3 @ x)) per row, with the weights of the row's slot. Optional: `glu`
(gate_up [R, 2Il] -> [R, Il]) in place of act(gate) * up, and biases b13 [S, 2Il], b2 [S, H] added
after each GEMM (gpt-oss).

`torch.nn.functional.grouped_mm` runs both GEMMs for all slots in one call when every row stride is
a multiple of 16 bytes, else (and as the reference the tests compare) a loop over slots. Measured
on CPU at tiny-mixtral's shapes (docs/performance.md, 1 thread): grouped_mm is ~10% faster than the
loop up to ~128 rows per slot (decode), the loop ~30% faster at ~360 rows per slot (a 64-prompt
prefill), so batches averaging more than LOOP_ROWS_PER_SLOT rows per slot take the loop.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

LOOP_ROWS_PER_SLOT = 256


def grouped_mm_supported(hidden: int, intermediate: int, dtype: torch.dtype) -> bool:
    """grouped_mm needs 16-byte aligned strides on every operand and an fp32/bf16 dtype."""
    if not hasattr(F, "grouped_mm") or dtype not in (torch.float32, torch.bfloat16):
        return False
    size = torch.finfo(dtype).bits // 8
    return (hidden * size) % 16 == 0 and (intermediate * size) % 16 == 0


def _gated(gate_up: torch.Tensor, act: Callable, glu: Callable | None) -> torch.Tensor:
    if glu is not None:
        return glu(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return act(gate) * up


def experts_reference(
    x: torch.Tensor,
    counts: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    act: Callable,
    glu: Callable | None = None,
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [R, H] expert-major; counts [S] int64 rows per slot; w13 [S, 2Il, H]; w2 [S, H, Il] -> [R, H].
    glu: gate_up [n, 2Il] -> [n, Il] in place of act(gate) * up; b13 [S, 2Il], b2 [S, H]: biases or None."""
    out = torch.empty(x.shape[0], w2.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for s, n in enumerate(counts.tolist()):
        if n:
            gate_up = F.linear(x[start : start + n], w13[s], None if b13 is None else b13[s])
            out[start : start + n] = F.linear(_gated(gate_up, act, glu), w2[s], None if b2 is None else b2[s])
        start += n
    return out


def experts_grouped(
    x: torch.Tensor,
    offsets: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    act: Callable,
    glu: Callable | None = None,
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same contract as `experts_reference`, offsets [S] int32 cumulative end rows, one call per GEMM."""
    gate_up = F.grouped_mm(x, w13.transpose(-2, -1), offs=offsets)  # [R, 2Il]
    slot = None
    if b13 is not None or b2 is not None:  # each row's slot, found on the device (no host sync)
        rows = torch.arange(x.shape[0], dtype=offsets.dtype, device=x.device)
        slot = torch.searchsorted(offsets, rows, right=True).clamp(max=w13.shape[0] - 1)
    if b13 is not None:
        gate_up = gate_up + b13[slot]
    out = F.grouped_mm(_gated(gate_up, act, glu), w2.transpose(-2, -1), offs=offsets)  # [R, H]
    return out if b2 is None else out + b2[slot]
