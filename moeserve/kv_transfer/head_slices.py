"""Which bytes of which prefill rank's blocks a decode rank reads, when the two sides shard KV heads
differently (--tp differs): a pure mapping from two layouts to NIXL descriptor rows.

A cache tensor is [num_blocks, block_size, heads, head_dim] (MLA: [num_blocks, block_size, latent],
one "head" every rank replicates). With --tp N a rank holds KV heads [start, start + count) of the
model's heads (linear.QKVParallelLinear; fewer KV heads than N: each head on N / heads ranks). A
decode rank's heads may sit on one prefill rank (tp2 -> tp1 reads from both, tp1 -> tp2 reads half
of one), so the read is per contiguous run of heads held by one source rank (`source_runs`).

Within a block a head slice is not contiguous: slot s of the block holds all heads of token s. A
run that covers a whole slot on both sides (same head range) is one range per block, and adjacent
blocks merge further; a strict slice is one range per (block, slot). `coalesce` merges every pair
of rows contiguous on both sides, so the descriptor count is the fewest byte ranges this cache
layout allows without a staging copy. The engine reads strict slices through staging.py instead
(whole blocks, fewer ranges); these exact rows are the reference it is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeadRange:
    """KV heads [start, start + count) of the model's `total` that a rank's cache holds."""

    start: int
    count: int
    total: int

    def holds(self, head: int) -> bool:
        return self.start <= head < self.start + self.count


@dataclass(frozen=True)
class SourceRun:
    """Global KV heads [start, start + count) read from source rank `rank` (index into its group)."""

    rank: int
    start: int
    count: int


@dataclass(frozen=True)
class TensorSide:
    """One cache tensor on one side: its base address, the bytes of one head of one token, and the
    rank's head range (its slot holds heads.count heads, its block block_size slots)."""

    base: int
    head_bytes: int
    heads: HeadRange
    block_size: int

    @property
    def slot_bytes(self) -> int:
        return self.heads.count * self.head_bytes

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.slot_bytes


def source_runs(local: HeadRange, sources: list[HeadRange], pick: int) -> list[SourceRun]:
    """The runs of `local`'s heads and which of `sources` (one attention group's ranks, tp order) each
    is read from. A head several sources hold (replicated KV heads, MLA's latent) is read from
    holders[pick % len(holders)], so decode ranks spread over the replicas. ValueError when the two
    sides do not serve the same heads."""
    if any(s.total != local.total for s in sources):
        raise ValueError(f"the prefill ranks hold {sources[0].total if sources else 0} KV heads in all, this rank "
                         f"{local.total}: prefill and decode must serve the same model")
    runs: list[SourceRun] = []
    for head in range(local.start, local.start + local.count):
        holders = [i for i, s in enumerate(sources) if s.holds(head)]
        if not holders:
            raise ValueError(f"no prefill rank holds KV head {head}")
        rank = holders[pick % len(holders)]
        last = runs[-1] if runs else None
        if last is not None and last.rank == rank and last.start + last.count == head:
            runs[-1] = SourceRun(rank, last.start, last.count + 1)
        else:
            runs.append(SourceRun(rank, head, 1))
    return runs


def run_rows(local: TensorSide, remote: TensorSide, run: SourceRun, local_ids: list[int],
             remote_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(local rows, remote rows), each [B * S, 2] int64 (address, bytes), block-major then slot: the
    bytes of heads `run` of every slot of each block pair, remote_ids[i] -> local_ids[i]."""
    # B blocks, S slots per block
    assert local.head_bytes == remote.head_bytes and local.block_size == remote.block_size
    size = run.count * local.head_bytes
    slots = np.arange(local.block_size, dtype=np.int64)

    def rows(side: TensorSide, ids: list[int]) -> np.ndarray:
        offset = (run.start - side.heads.start) * side.head_bytes
        b = np.asarray(ids, dtype=np.int64)[:, None]
        addr = side.base + b * side.block_bytes + slots[None, :] * side.slot_bytes + offset  # [B, S]
        return np.stack([addr.ravel(), np.full(addr.size, size, dtype=np.int64)], axis=1)

    return rows(local, local_ids), rows(remote, remote_ids)


def coalesce(local: np.ndarray, remote: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge each row into the one before it when both sides continue exactly where it ended:
    [N, 2] (address, bytes) pairs in, fewer pairs out, the same bytes moved."""
    if len(local) < 2:
        return local, remote
    ends_l = local[:-1, 0] + local[:-1, 1]
    ends_r = remote[:-1, 0] + remote[:-1, 1]
    starts = np.concatenate([[True], (local[1:, 0] != ends_l) | (remote[1:, 0] != ends_r)])
    first = np.flatnonzero(starts)
    sizes = np.add.reduceat(local[:, 1], first)
    return (np.stack([local[first, 0], sizes], axis=1), np.stack([remote[first, 0], sizes], axis=1))
