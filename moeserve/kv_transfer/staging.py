"""Staged reads: when a source rank's head range differs from ours, read its whole blocks (one range
per block and tensor) into a registered staging buffer, then copy the heads we hold into our cache.

Why: a head slice of a [block, slot, head, dim] cache is one range per slot (head_slices.py), and on
UCX each range costs a fixed ~10 us, far more than its bytes (benchmarks/kv_layout_reads.py: a
strided half-block read ran at a tenth of a whole-block read's rate). tp2 -> tp1 stages exactly the
bytes needed (each source block is all heads we need from it); tp1 -> tp2 stages the source's whole
blocks, source heads / our heads times the bytes we keep. Same head ranges need no staging: whole
blocks land in place (pull_rows). `pull_rows` stays the exact-bytes reference the tests compare with.

The staging buffer is laid out [tensor][block i of the chunk][the source's block of that tensor].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from moeserve.kv_transfer.cache_layout import CacheLayout, checked_runs
from moeserve.kv_transfer.head_slices import SourceRun


def staged_block_bytes(src: CacheLayout) -> int:
    """Staging bytes one block of `src` takes, all tensors."""
    return sum(src.block_bytes)


def staged_rows(src: CacheLayout, staging_base: int, remote_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(staging rows, remote rows), each [T * B, 2] int64 (address, bytes): src's whole blocks
    remote_ids, tensor-major, into the staging buffer at staging_base."""
    # T tensors, B blocks
    ids = np.asarray(remote_ids, dtype=np.int64)
    n = len(ids)
    local, remote, offset = [], [], 0
    for base, size in zip(src.base_addrs, src.block_bytes):
        sizes = np.full(n, size, dtype=np.int64)
        local.append(np.stack([staging_base + offset + np.arange(n, dtype=np.int64) * size, sizes], axis=1))
        remote.append(np.stack([base + ids * size, sizes], axis=1))
        offset += n * size
    return np.concatenate(local), np.concatenate(remote)


def scatter_staged(staging: torch.Tensor, caches: list[torch.Tensor], src: CacheLayout, mine: CacheLayout,
                   runs: list[SourceRun], local_ids: list[int]) -> None:
    """Copy heads `runs` (all from `src`) of the B staged blocks into our cache blocks local_ids.
    staging: uint8, as staged_rows filled it; caches[t]: [num_blocks, block_size, mine.num_heads, ...]."""
    # B blocks, S slots, h heads, D elements per head
    n = len(local_ids)
    idx = torch.as_tensor(local_ids, dtype=torch.long)
    offset = 0
    for cache, size in zip(caches, src.block_bytes):
        block = staging[offset: offset + n * size].view(cache.dtype).view(n, src.block_size, src.num_heads, -1)
        mine_view = cache.view(cache.shape[0], cache.shape[1], mine.num_heads, -1)
        for run in runs:
            s0, d0 = run.start - src.head_start, run.start - mine.head_start
            mine_view[idx, :, d0: d0 + run.count] = block[:, :, s0: s0 + run.count]
        offset += n * size


@dataclass(frozen=True)
class SourceReads:
    """What one decode rank reads from one source rank: heads `runs`; staged when the two ranks hold
    different head ranges (whole source blocks through the staging buffer), else in place."""

    src: CacheLayout
    runs: list[SourceRun]

    def staged(self, mine: CacheLayout) -> bool:
        return self.src.heads != mine.heads


def plan_sources(mine: CacheLayout, sources: list[CacheLayout], remote_ids: list[int]) -> list[SourceReads]:
    """The sources `mine` reads from, with their runs (LayoutMismatch when the caches cannot pair, a
    head has no holder, or a block id is out of the source's pool)."""
    runs = checked_runs(mine, sources, remote_ids)
    return [SourceReads(src, [r for r in runs if r.rank == i]) for i, src in enumerate(sources)
            if any(r.rank == i for r in runs)]


def chunks(local_ids: list[int], remote_ids: list[int], size: int):
    """(local, remote) id lists of at most `size` blocks each, in order."""
    for i in range(0, len(local_ids), size):
        yield local_ids[i: i + size], remote_ids[i: i + size]
