"""RMSNorm with Hugging Face semantics: normalise in fp32, cast back, then scale by the weight.

`ShardedRMSNorm` normalises a vector that is split over tp ranks (OLMoE's q/k norm spans all heads):
the sum of squares is all-reduced so every rank divides by the full-width RMS.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from moeserve.dense.linear import ShardReader, copy_param
from moeserve.kernels.base import UsesKernels, rms_norm_reference
from moeserve.parallel_state import ParallelContext


class RMSNorm(nn.Module, UsesKernels):
    def __init__(self, size: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype), requires_grad=False)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x [..., size] -> [..., size] (HF semantics, kernels.rms_norm); with residual [..., size]:
        (norm(x + residual), x + residual), the residual add fused where the kernel set can."""
        return self.kernels.rms_norm(x, self.weight, self.eps, residual)

    def load(self, reader: ShardReader, name: str) -> None:
        copy_param(self.weight, reader.read(name), name)


class ShardedRMSNorm(nn.Module):
    """RMSNorm over a width split over tp ranks; this rank holds columns [start, start + size).

    replicas: how many tp ranks hold each column (replicated KV heads): the all-reduced sum of
    squares is divided by it so every column counts once.
    """

    def __init__(
        self, full_size: int, start: int, size: int, replicas: int, eps: float, ctx: ParallelContext, dtype: torch.dtype
    ):
        super().__init__()
        self.ctx, self.eps, self.full_size, self.start, self.replicas = ctx, eps, full_size, start, replicas
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, size] (this rank's columns) -> [T, size]."""
        if self.ctx.tp_size == 1:
            return rms_norm_reference(x, self.weight, self.eps)
        xf = x.float()
        sq = xf.pow(2).sum(-1, keepdim=True)
        dist.all_reduce(sq, group=self.ctx.tp_group)
        xf = xf * torch.rsqrt(sq / (self.replicas * self.full_size) + self.eps)
        return self.weight * xf.to(x.dtype)

    def load(self, reader: ShardReader, name: str) -> None:
        copy_param(self.weight, reader.read(name, 0, self.start, self.start + self.weight.shape[0]), name)
