"""How the one-sided protocol writes into peers' regions: rows, then counts and flags.

`TorchPuts` (the `shm` backend) are torch copies into views of the peers' regions (`scatter` writes
every destination in one op through a fan-out view); onesided.py plans the rows (or its C++ kernels
do) and signals after them. `TritonPuts` (put_kernels.py, the `nvshmem` backend; `FusedPuts` here)
instead take a whole phase each, planning, rows and flags in one launch. Both keep the protocol's
one ordering rule: every row and count store of a step lands before any flag store of that step.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from moeserve.dispatch import futex
from moeserve.dispatch.heap import SymmetricHeap


class Signal(NamedTuple):
    """One flag for one destination: its meta words (if any) at byte `meta` of its region, then the
    epoch into this rank's flag of the row of W flags (one per source) at byte `row` (`flag_at`).
    (A tuple: a step builds 2 W of them, and a frozen dataclass costs a few microseconds each to build.)"""

    dest: int
    meta: int | None
    values: tuple[int, ...]
    row: int
    epoch: int

    def flag_at(self, source: int) -> int:
        """Byte offset of `source`'s flag (the signalling rank's) in the destination's region."""
        return self.row + 8 * source


class Puts(Protocol):
    def rows(self, dsts: list[list[torch.Tensor]], srcs: list[torch.Tensor], indexed: list[bool],
             index: torch.Tensor | None, starts: list[int], counts: list[int]) -> None:
        """For every destination i and column group g: dsts[i][g][r] = srcs[g][index[starts[i] + r]]
        where indexed[g], else srcs[g][starts[i] + r], for r < counts[i]. dsts[i][g] [M, w_g] views of
        destination i's region; srcs[g] [*, w_g] of the same dtype."""
        ...

    def signal(self, heap: SymmetricHeap, signals: list[Signal]) -> None:
        """Meta words, then (after every earlier store of this step) the flags."""
        ...


class FusedPuts(Protocol):
    """A side of a phase in one call each, flags included (put_kernels.TritonPuts: one launch each)."""

    fused: bool  # True: onesided.py calls these instead of planning and calling rows / signal

    def tables(self, heap: SymmetricHeap, layout, me: int) -> list:
        """Per parity, whatever the calls below need of this heap (device-side addresses), built once."""
        ...

    def send(self, heap: SymmetricHeap, tables, layout, hidden: torch.Tensor, topk_ids: torch.Tensor,
             weights: torch.Tensor, num_local_slots: int, slot_like: torch.Tensor, epoch: int, row: int,
             bad: bool) -> torch.Tensor:
        """Rows, meta words (rows, bad, slot ids sent) and dispatch flags for every destination ->
        back_index [T, k]."""
        ...

    def expand(self, tables, blocks, num_local_slots: int, n: int, R: int) -> tuple[torch.Tensor, ...]:
        """-> ExpertBatch rows, counts, offsets, term_index, row weights of the received rows."""
        ...

    def partial(self, heap: SymmetricHeap, tables, expert_out: torch.Tensor, row_weights: torch.Tensor,
                term_index: torch.Tensor, n: int, epoch: int, row: int) -> None:
        """Partial rows into every source's block, then its combine flag."""
        ...

    def total(self, partials: torch.Tensor, back_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Each token's partials summed in top-k order -> [T, H] in dtype."""
        ...


class TorchPuts:
    """Plain torch copies (CPU ranks; the destination views are the peers' shared memory)."""

    def rows(self, dsts: list[list[torch.Tensor]], srcs: list[torch.Tensor], indexed: list[bool],
             index: torch.Tensor | None, starts: list[int], counts: list[int]) -> None:
        for dst, a, n in zip(dsts, starts, counts):
            if n:
                for out, src, on in zip(dst, srcs, indexed):
                    if on:
                        torch.index_select(src, 0, index[a : a + n], out=out[:n])
                    else:
                        out[:n].copy_(src[a : a + n])

    def scatter(self, dst: torch.Tensor, dest: torch.Tensor, row: torch.Tensor, src: torch.Tensor,
                index: torch.Tensor | None) -> None:
        """dst[dest[i], row[i]] = src[index[i]] (index None: src[i]) for every i, all destinations in one
        op. dst [W, M, w] a fan-out view of every rank's block (heap_layout.Layout.fanout); src [*, w]."""
        dst.index_put_((dest, row), src if index is None else src.index_select(0, index))

    def signal(self, heap: SymmetricHeap, signals: list[Signal]) -> None:
        for s in signals:
            if s.meta is not None:
                for i, v in enumerate(s.values):
                    heap.store_word(s.dest, s.meta + 8 * i, v)
        # x86-64 keeps plain stores in program order; the fence also orders non-temporal stores (a
        # large memcpy) and stores made by torch's worker threads (joined before this line) before
        # the flags
        heap.fence()
        for s in signals:
            heap.store_word(s.dest, s.flag_at(heap.rank), s.epoch)
        wake_sleepers(heap, signals)


def wake_sleepers(heap: SymmetricHeap, signals: list[Signal]) -> None:
    """After the flag stores: wake the destinations that sleep on their rows of flags and whose rows
    these stores completed (flag_wait.py), where the heap can (`notify`); this rank never sleeps while
    it signals, so it skips itself."""
    notify = getattr(heap, "notify", None)
    if notify is not None and futex.available():
        for s in signals:
            if s.dest != heap.rank:
                notify(s.dest, s.row, heap.world, s.epoch)
