"""The decode step's small ops as single C++ calls (csrc/rms_norm.cpp, csrc/rotary.cpp, csrc/moe_routing.cpp):
RMSNorm with its residual add, the attention's rotary, the router's softmax + top-k, and the gather and
weighted combine around the experts.

Why: at decode a step of tiny-mixtral at 8 sequences is ~4 ms on one thread, and about a third of it
was torch ops on [8, 256] tensors that take a few microseconds each, nearly all of it dispatch
(docs/performance.md, "Serving and offline on a 2-core Intel Xeon VM"). Each function here replaces a
chain of them with one op.

Bits: `softmax_topk` picks the same experts as torch.softmax + torch.topk (torch's own softmax, and
torch.topk for any row with ties); `combine` adds the same products in the same order as the local
dispatcher (dispatch/base.py), and `rotary` the reference's products and sums; `gather` gives the
local dispatcher's row order. `rms_norm` differs from torch's by fp32 rounding of the sum of squares (its AVX2 and AVX-512 paths agree bit for bit).
Not loaded (kernels/cpu/cpu_kernels.py): `available()` is False and the callers run torch.

Shape legend: T tokens, H hidden, E experts, S local slots, k top-k, R = T * k rows.
"""

from __future__ import annotations

import torch

from moeserve.kernels.cpu import cpu_kernels


def available() -> bool:
    return cpu_kernels.load()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """x [..., H] fp32, weight [H] fp32 -> norm(x) [..., H]; with residual [..., H]: (norm(x + residual), x + residual)."""
    if x.dim() == 2:  # the decoder's [T, H]: no reshapes (each a torch call of its own)
        if residual is None:
            return torch.ops.moeserve.rms_norm(x, weight, eps)
        return torch.ops.moeserve.add_rms_norm(x, residual, weight, eps)
    rows = x.reshape(-1, x.shape[-1])
    if residual is None:
        return torch.ops.moeserve.rms_norm(rows, weight, eps).view(x.shape)
    out, h = torch.ops.moeserve.add_rms_norm(rows, residual.reshape(rows.shape), weight, eps)
    return out.view(x.shape), h.view(x.shape)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, h, D] fp32 (unit stride in D); cos, sin [N, D] fp32 -> rotated [N, h, D] contiguous, the bits of
    kernels/base.py's apply_rotary_reference."""
    return torch.ops.moeserve.rotary(x, cos, sin)


def softmax_topk(logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (ids [T, k] int64, weights [T, k] fp32), as KernelSet.softmax_topk."""
    return torch.ops.moeserve.softmax_topk(logits, top_k, renormalize)


def gather(hidden: torch.Tensor, slots: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """hidden [T, H]; slots [T, k] int64 in [0, S) -> (rows [R, H] slot-major, row_pos [R] int64 (t * k + j of
    each row), counts [S] int64), as dispatch/local.py's sorted_by_slot + expert_batch."""
    return torch.ops.moeserve.moe_gather(hidden, slots, num_slots)


def combine(rows: torch.Tensor, row_pos: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """rows [R, H] in gather's order; row_pos [R]; topk_weights [T, k] -> [T, H] fp32 = sum_j w[t, j] * row(t, j)
    in j order, as dispatch/base.py's weighted_sum_fixed_order."""
    return torch.ops.moeserve.moe_combine(rows, row_pos, topk_weights)
