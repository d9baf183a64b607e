"""Where the one-sided protocol keeps what, inside every rank's heap region (the same on every rank).

    # W ranks, M rows per (source, destination) and step (the token bound), H hidden, k top-k
    flags   int64 [2 phase (dispatch, combine), 2 parity, W source]   the epoch the source last signalled
    meta    int64 [2 parity, W source, 2]                             [rows sent, bad-routing flag]
    per parity p in (0, 1):
      hidden   [W source, M, H]  payload dtype   rows the source sent here
      slots    [W source, M, k]  int8/16/32      local slot of each top-k position (-1 = elsewhere)
      weights  [W source, M, k]  weight dtype    the sent rows' router weights
      partial  [W source, M, H]  fp32            combine: the expert rank's partial sums for rows we sent it

A source writes only into the destination's blocks indexed by its own rank, so no two writers ever
share a byte. M bounds the rows of one (source, destination) pair in one step: one row per (token,
destination rank), so M = the step's token bound (StepPlan.max_group_tokens) suffices.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.dispatch.heap import align

DISPATCH, COMBINE = 0, 1


@dataclass(frozen=True)
class Layout:
    world: int
    rows: int  # M
    hidden: int  # H
    top_k: int
    dtype: torch.dtype
    slot_dtype: torch.dtype
    weight_dtype: torch.dtype

    def _block_bytes(self) -> list[int]:
        W, M, H, k = self.world, self.rows, self.hidden, self.top_k
        return [
            align(W * M * H * self.dtype.itemsize),
            align(W * M * k * self.slot_dtype.itemsize),
            align(W * M * k * self.weight_dtype.itemsize),
            align(W * M * H * 4),
        ]

    @property
    def meta_offset(self) -> int:
        return align(2 * 2 * self.world * 8)

    @property
    def parity_offset(self) -> int:
        return self.meta_offset + align(2 * self.world * 2 * 8)

    @property
    def parity_bytes(self) -> int:
        return sum(self._block_bytes())

    @property
    def nbytes(self) -> int:
        return self.parity_offset + 2 * self.parity_bytes

    def flag_offset(self, phase: int, parity: int, source: int = 0) -> int:
        return ((phase * 2 + parity) * self.world + source) * 8

    def meta_word(self, parity: int, source: int = 0) -> int:
        return self.meta_offset + (parity * self.world + source) * 16

    def blocks(self, region: torch.Tensor, parity: int) -> "Blocks":
        """Typed views of one region's blocks of one parity, each [W source, M, width]."""
        W, M = self.world, self.rows
        start = self.parity_offset + parity * self.parity_bytes
        views = []
        for size, (dtype, width) in zip(
            self._block_bytes(),
            ((self.dtype, self.hidden), (self.slot_dtype, self.top_k), (self.weight_dtype, self.top_k),
             (torch.float32, self.hidden)),
        ):
            n = W * M * width * dtype.itemsize
            views.append(region[start : start + n].view(dtype).view(W, M, width))
            start += size
        return Blocks(*views)


@dataclass(frozen=True)
class Blocks:
    hidden: torch.Tensor  # [W, M, H]
    slots: torch.Tensor  # [W, M, k]
    weights: torch.Tensor  # [W, M, k]
    partial: torch.Tensor  # [W, M, H] fp32
