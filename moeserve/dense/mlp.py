"""Gated MLP (SwiGLU family) split over tp along the intermediate dimension.

Used for dense MLP layers and shared experts. Returns a partial sum over tp; the caller all-reduces
(the MoE layer folds it into the routed experts' reduction so one collective serves both).
Shape legend: T tokens, H hidden, I intermediate, tp tensor-parallel size.
"""

from __future__ import annotations

import torch
from torch import nn

from moeserve.dense.linear import ColumnParallelLinear, RowParallelLinear, ShardReader
from moeserve.kernels.base import UsesKernels
from moeserve.moe.experts import activation
from moeserve.parallel_state import ParallelContext


class GatedMLP(nn.Module, UsesKernels):
    def __init__(self, hidden: int, intermediate: int, act: str, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        self.gate_up = ColumnParallelLinear(hidden, [intermediate, intermediate], False, ctx, dtype)
        self.down = RowParallelLinear(intermediate, hidden, False, ctx, dtype)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> partial [T, H] (sum over tp ranks is the full output)."""
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(self.kernels.elementwise(self.act, gate) * up)

    def load(
        self, reader: ShardReader, prefix: str, names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    ) -> None:
        """prefix e.g. 'model.layers.0.mlp'; names: the checkpoint's (gate, up, down) sub-names."""
        gate, up, down = names
        self.gate_up.load(reader, [f"{prefix}.{gate}", f"{prefix}.{up}"])
        self.down.load(reader, f"{prefix}.{down}")
