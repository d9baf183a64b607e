"""Where the one-sided protocol keeps what, inside every rank's heap region (the same on every rank).

    # W ranks, M rows per (source, destination) and step (the token bound), H hidden, k top-k
    flags   int64 [3 phase (dispatch, combine, counts), 2 parity, W source + 1]   the epoch the source
            last signalled; word W of each row is its bell: the epoch whose flags were all up when the
            last source to raise one found this rank asleep (the futex the rank sleeps on: shm_heap.py)
    meta    int64 [2 parity, W source, 4]         [rows sent, bad-routing flag, slot ids sent (the
            nvshmem kernels: the receiver sizes its ExpertBatch from them), unused]
    counts  int64 [2 parity, W source, W * S]     placed calls (onesided.py): the source's top-k
            positions per (destination, local slot), every source's on every rank (-1s: bad routing)
    per parity p in (0, 1):
      hidden   [W source, M, H]  payload dtype   rows the source sent here
      slots    [W source, M, k]  int8/16/32      local slot of each top-k position (-1 = elsewhere)
      weights  [W source, M, k]  weight dtype    the sent rows' router weights
      partial  [W source, M, H]  fp32            combine: the expert rank's partial sums for rows we sent it
               + 1 row of H fp32 zeros that nobody writes (combine gathers it where a position has no term)
      with in_place (shm's C++ path: onesided.py, "Reading in place"):
      rows     [W * M, H]        payload dtype   this rank's own: an unplaced call's ExpertBatch, or the
                                                 experts' output where the ExpertBatch is the hidden block
      terms    [W source, 1 + M * k] int64       written by the expert rank d at combine into its sources'
               regions, at [p][d]: word 0 the byte offset in d's region of d's expert output (-1: d sent
               partial rows instead), then for each row r the source sent d, the row of that output at
               each top-k position j (d's ExpertBatch order; positions not on d hold junk)

A source writes only into the destination's blocks indexed by its own rank, so no two writers ever
share a byte. M bounds the rows of one (source, destination) pair in one step: one row per (token,
destination rank), so M = the step's token bound (StepPlan.max_group_tokens) suffices.

A placed call (onesided.py) uses a destination's whole hidden block of its parity as its ExpertBatch,
[W * M, H]: every source writes its rows at their final row there, which the counts give it, so no two
sources share a row either. It holds any call whose ExpertBatch has at most W * M rows (every rank
checks every destination's total from the counts before any row is written; a call with more goes
through the blocks as usual).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.dispatch.heap import align

DISPATCH, COMBINE, COUNTS = 0, 1, 2
PHASES = 3
META_WORDS = 4  # per source and parity


@dataclass(frozen=True)
class Layout:
    world: int
    rows: int  # M
    hidden: int  # H
    top_k: int
    dtype: torch.dtype
    slot_dtype: torch.dtype
    weight_dtype: torch.dtype
    local_slots: int = 1  # S: the counts' width per destination
    in_place: bool = False  # the rows and terms blocks (combine reads expert output in place)

    def _block_bytes(self) -> list[int]:
        W, M, H, k = self.world, self.rows, self.hidden, self.top_k
        return [
            align(W * M * H * self.dtype.itemsize),
            align(W * M * k * self.slot_dtype.itemsize),
            align(W * M * k * self.weight_dtype.itemsize),
            align((W * M + 1) * H * 4),  # + one row nobody writes: zeros (the heap starts zeroed)
        ] + ([align(W * M * H * self.dtype.itemsize), align(W * (1 + M * k) * 8)] if self.in_place else [])

    @property
    def meta_offset(self) -> int:
        return align(PHASES * 2 * (self.world + 1) * 8)

    @property
    def counts_offset(self) -> int:
        return self.meta_offset + align(2 * self.world * META_WORDS * 8)

    @property
    def parity_offset(self) -> int:
        return self.counts_offset + align(2 * self.world * self.world * self.local_slots * 8)

    @property
    def parity_bytes(self) -> int:
        return sum(self._block_bytes())

    @property
    def nbytes(self) -> int:
        return self.parity_offset + 2 * self.parity_bytes

    def flag_row(self, phase: int, parity: int) -> int:
        """Byte offset of the row of flags (phase, parity): source s's flag is the row's word s."""
        return (phase * 2 + parity) * (self.world + 1) * 8

    def meta_word(self, parity: int, source: int = 0) -> int:
        return self.meta_offset + (parity * self.world + source) * META_WORDS * 8

    def counts(self, region: torch.Tensor, parity: int) -> torch.Tensor:
        """[W source, W destination, S] int64 view of one region's counts of one parity."""
        W, S = self.world, self.local_slots
        start = self.counts_offset + parity * W * W * S * 8
        return region[start : start + W * W * S * 8].view(torch.int64).view(W, W, S)

    def counts_fanout(self, heap, parity: int, source: int) -> torch.Tensor | None:
        """[W destination, W * S] view of source's counts of one parity in every rank's region at once."""
        make = getattr(heap, "fanout", None)
        W, S = self.world, self.local_slots
        start = self.counts_offset + (parity * W + source) * W * S * 8
        return None if make is None else make(start, torch.int64, (W * S,))

    def placed_fanout(self, heap, parity: int) -> torch.Tensor | None:
        """[W destination, W * M, H] view of every rank's whole hidden block of one parity (a placed
        call's ExpertBatches)."""
        make = getattr(heap, "fanout", None)
        shape = (self.world * self.rows, self.hidden)
        return None if make is None else make(self.block_offsets(parity)[0], self.dtype, shape)

    def columns(self) -> list[tuple[torch.dtype, int]]:
        """(dtype, width) of the blocks hidden, slots, weights, partial, in that order."""
        return [(self.dtype, self.hidden), (self.slot_dtype, self.top_k), (self.weight_dtype, self.top_k),
                (torch.float32, self.hidden)]

    def block_offsets(self, parity: int) -> list[int]:
        """Byte offset of each block of one parity inside a region (order of `columns`, then rows and
        terms where in_place)."""
        start = self.parity_offset + parity * self.parity_bytes
        offsets = []
        for size in self._block_bytes():
            offsets.append(start)
            start += size
        return offsets

    def source_offsets(self, parity: int, source: int) -> list[int]:
        """Byte offset of source's [M, width] part of each block of one parity (order of `columns`)."""
        return [start + source * self.rows * width * dtype.itemsize
                for start, (dtype, width) in zip(self.block_offsets(parity), self.columns())]

    def blocks(self, region: torch.Tensor, parity: int) -> "Blocks":
        """Typed views of one region's blocks of one parity, each [W source, M, width]."""
        W, M = self.world, self.rows
        views = []
        for start, (dtype, width) in zip(self.block_offsets(parity), self.columns()):
            n = W * M * width * dtype.itemsize
            views.append(region[start : start + n].view(dtype).view(W, M, width))
        return Blocks(*views)

    def partial_rows(self, region: torch.Tensor, parity: int) -> torch.Tensor:
        """[W * M + 1, H] fp32 view of one region's partial block, source-major; the last row is zeros."""
        start = self.block_offsets(parity)[3]
        n = (self.world * self.rows + 1) * self.hidden * 4
        return region[start : start + n].view(torch.float32).view(-1, self.hidden)

    def rows_block(self, region: torch.Tensor, parity: int) -> torch.Tensor:
        """[W * M, H] payload-dtype view of one region's rows block (in_place)."""
        start, n = self.block_offsets(parity)[4], self.world * self.rows * self.hidden * self.dtype.itemsize
        return region[start : start + n].view(self.dtype).view(-1, self.hidden)

    def terms(self, region: torch.Tensor, parity: int) -> torch.Tensor:
        """[W source, 1 + M * k] int64 view of one region's terms block (in_place)."""
        start, width = self.block_offsets(parity)[5], 1 + self.rows * self.top_k
        return region[start : start + self.world * width * 8].view(torch.int64).view(self.world, width)

    def terms_fanout(self, heap, parity: int, source: int) -> torch.Tensor | None:
        """[W destination, 1 + M * k] view of source's row of the terms block in every rank's region."""
        make = getattr(heap, "fanout", None)
        width = 1 + self.rows * self.top_k
        start = self.block_offsets(parity)[5] + source * width * 8
        return None if make is None else make(start, torch.int64, (width,))

    def fanout(self, heap, parity: int, source: int) -> "Blocks | None":
        """Views of source's blocks of one parity in every rank's region at once, each [W destination, M,
        width] (one torch op writes all destinations), or None where the heap cannot make them."""
        make = getattr(heap, "fanout", None)
        if make is None:
            return None
        views = []
        for start, (dtype, width) in zip(self.source_offsets(parity, source), self.columns()):
            view = make(start, dtype, (self.rows, width))
            if view is None:
                return None
            views.append(view)
        return Blocks(*views)


@dataclass(frozen=True)
class Blocks:
    hidden: torch.Tensor  # [W, M, H]
    slots: torch.Tensor  # [W, M, k]
    weights: torch.Tensor  # [W, M, k]
    partial: torch.Tensor  # [W, M, H] fp32
