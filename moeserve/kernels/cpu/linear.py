"""The CPU set's dense linear: a layer's weight packed for oneDNN, as panels for few-row calls, and
optionally split by output columns over threads.

Which kernel runs depends on the row count T only (the panels up to panel_gemm.small_rows() rows,
above that oneDNN, split or not: the same bits), never on timings. Shape legend: T rows, I in
features, O out features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.kernels.cpu import gemm, panel_gemm
from moeserve.kernels.cpu.split_linear import SplitLinear


@dataclass
class PackedLinear:
    """The CPU set's copy of one weight [O, I] (a snapshot: dropped when the weight is written)."""

    packed: torch.Tensor  # oneDNN's blocked layout (gemm.pack_weight)
    panels: torch.Tensor | None  # panel_gemm.pack, or None where the panel kernel is not built
    split: SplitLinear | None = None  # column blocks over threads (`enable_split`), or None


def prepare(weight: torch.Tensor) -> PackedLinear | None:
    """weight [O, I] -> its packed copies, or None where packing does not apply (gemm.pack_weight)."""
    packed = gemm.pack_weight(weight)
    if packed is None:
        return None
    return PackedLinear(packed, panel_gemm.pack(weight))


def enable_split(state: PackedLinear, weight: torch.Tensor, bias: torch.Tensor | None, threads: int) -> bool:
    """Add column blocks over `threads` where they give the same bits as the whole packed GEMM."""
    state.split = SplitLinear.create(weight, bias, state.packed, threads) if threads > 1 else None
    return state.split is not None


def run(state: PackedLinear | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [T, I] -> x @ weight.T + bias [T, O]; F.linear without a packed copy or for non-fp32 x."""
    if state is None or x.dtype != torch.float32:
        return gemm.linear(x, weight, bias)
    if state.panels is not None and x.dim() == 2 and x.shape[0] <= panel_gemm.small_rows():
        out = torch.ops.moeserve.panel_linear(x, state.panels, weight.shape[0])
        return out if bias is None else out.add_(bias)
    split = state.split
    if split is None or x.dim() != 2 or not 0 < x.shape[0] <= split.max_rows:
        return gemm.linear(x, weight, bias, state.packed)
    return split.chooser.timed(
        x.shape[0], lambda: gemm.linear(x, weight, bias, state.packed), lambda: split.run(x, bias)
    )
