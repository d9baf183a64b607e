"""Staged reads without NIXL: the rows staged_rows and pull_rows give are applied as memmoves between
real torch caches (what a one-sided READ does), the staged blocks scattered into each decode rank's
head slice; every rank must end with the heads the exact-bytes reference (pull_rows) gives it."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from moeserve.kv_transfer.cache_layout import CacheLayout, pull_rows
from moeserve.kv_transfer.head_slices import HeadRange
from moeserve.kv_transfer.staging import chunks, plan_sources, scatter_staged, staged_block_bytes, staged_rows

# NB blocks, BS slots, D elements per head, T cache tensors
NB, BS, D, T = 7, 4, 3, 4


def heads_of(tp_rank: int, tp: int, total: int) -> HeadRange:
    if total >= tp:
        return HeadRange(tp_rank * total // tp, total // tp, total)
    return HeadRange(tp_rank * total // tp, 1, total)


def rank_cache(full: torch.Tensor | None, heads: HeadRange, tp_rank: int, name: str):
    """(caches, layout): T tensors [NB, BS, heads.count, D] (the full cache's slice, or zeros)."""
    caches = [full[t, :, :, heads.start:heads.start + heads.count].contiguous() if full is not None
              else torch.zeros(NB, BS, heads.count, D, dtype=torch.float32) for t in range(T)]
    layout = CacheLayout(name, "", [c.data_ptr() for c in caches], [D * 4] * T, NB, BS, "float32", 0, tp_rank,
                         heads.start, heads.count, heads.total)
    return caches, layout


def move(rows: tuple[np.ndarray, np.ndarray]) -> None:
    for (la, n), (ra, _) in zip(*rows):
        ctypes.memmove(int(la), int(ra), int(n))


@pytest.mark.parametrize("prefill_tp, decode_tp, total", [(1, 2, 4), (2, 1, 4), (2, 2, 4), (4, 2, 4), (2, 4, 4),
                                                           (1, 4, 2), (4, 1, 2), (1, 1, 1), (2, 1, 1)])
@pytest.mark.parametrize("chunk", [1, 2, 100])
def test_staged_reads_give_each_rank_exactly_its_heads(prefill_tp, decode_tp, total, chunk):
    full = torch.randn(T, NB, BS, total, D, generator=torch.Generator().manual_seed(prefill_tp * 7 + decode_tp))
    prefill = [rank_cache(full, heads_of(r, prefill_tp, total), r, f"p{r}") for r in range(prefill_tp)]
    keep = [c for c, _ in prefill]  # the tensors the layouts' addresses point into
    sources = [layout for _, layout in prefill]
    remote_ids, local_ids = [5, 0, 3, 6, 1], [1, 2, 6, 0, 4]
    for r in range(decode_tp):
        caches, mine = rank_cache(None, heads_of(r, decode_tp, total), r, f"d{r}")
        staged_any = False
        for reads in plan_sources(mine, sources, remote_ids):
            if not reads.staged(mine):
                move(pull_rows(mine, [reads.src], local_ids, remote_ids)[reads.src.agent_name])
                continue
            staged_any = True
            for local, remote in chunks(local_ids, remote_ids, chunk):
                staging = torch.empty(len(remote) * staged_block_bytes(reads.src), dtype=torch.uint8)
                move(staged_rows(reads.src, staging.data_ptr(), remote))
                scatter_staged(staging, caches, reads.src, mine, reads.runs, local)
        h = mine.heads
        for t in range(T):
            for lb, rb in zip(local_ids, remote_ids):
                torch.testing.assert_close(caches[t][lb], full[t, rb, :, h.start:h.start + h.count], rtol=0, atol=0)
        assert staged_any == (heads_of(0, prefill_tp, total).count != h.count)  # same heads: whole blocks in place
        reference, _ = rank_cache(None, h, r, "ref")  # the exact-bytes path lands the same values
        ref_layout = CacheLayout("ref", "", [c.data_ptr() for c in reference], [D * 4] * T, NB, BS, "float32", 0, r,
                                 h.start, h.count, h.total)
        for rows in pull_rows(ref_layout, sources, local_ids, remote_ids).values():
            move(rows)
        assert all(torch.equal(a[local_ids], b[local_ids]) for a, b in zip(caches, reference))
    del keep


def test_a_staged_block_is_one_row_per_tensor():
    _, src = rank_cache(torch.zeros(T, NB, BS, 4, D), HeadRange(0, 4, 4), 0, "p")
    lo, re = staged_rows(src, 1 << 20, [3, 1])
    assert len(lo) == T * 2 and (lo[:, 1] == BS * 4 * D * 4).all()
    assert lo[1, 0] == (1 << 20) + BS * 4 * D * 4  # tensor 0's second block follows its first
