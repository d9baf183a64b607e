"""The head-slice mapping of a prefill/decode split whose sides have different --tp, without NIXL: the
descriptor rows pull_rows makes are applied as plain byte copies between numpy caches and must give
each decode rank exactly the heads it holds, as slicing the full cache would."""
from __future__ import annotations

import numpy as np
import pytest

from moeserve.kv_transfer.cache_layout import CacheLayout, LayoutMismatch, group_ranks, pull_rows
from moeserve.kv_transfer.head_slices import HeadRange, SourceRun, coalesce, source_runs

# NB blocks, BS slots, H KV heads of D float32 each, T cache tensors (layers x K/V)
NB, BS, D, T = 6, 4, 3, 4
SPAN = 1 << 32  # synthetic address space of one tensor: address // SPAN names the buffer


def heads_of(tp_rank: int, tp: int, total: int) -> HeadRange:
    """As linear.QKVParallelLinear shards KV heads: split, or replicated when fewer than tp."""
    if total >= tp:
        return HeadRange(tp_rank * total // tp, total // tp, total)
    return HeadRange(tp_rank * total // tp, 1, total)


def full_cache(total: int, seed: int) -> np.ndarray:
    """[T, NB, BS, total, D] float32: the model's whole KV cache, every value distinct."""
    return np.random.default_rng(seed).standard_normal((T, NB, BS, total, D)).astype(np.float32)


def rank(buffers: list[np.ndarray], heads: HeadRange, tp_rank: int, group: int = 0) -> CacheLayout:
    first = len(buffers)
    return CacheLayout(f"agent-{group}-{tp_rank}-{first}", "", [(first + t) * SPAN for t in range(T)], [D * 4] * T,
                       NB, BS, "float32", group, tp_rank, heads.start, heads.count, heads.total)


def shard(full: np.ndarray, heads: HeadRange, buffers: list[np.ndarray]) -> None:
    for t in range(T):
        buffers.append(np.ascontiguousarray(full[t, :, :, heads.start:heads.start + heads.count]).reshape(-1).view(np.uint8))


def apply(rows: tuple[np.ndarray, np.ndarray], buffers: list[np.ndarray]) -> None:
    for (la, n), (ra, _) in zip(*rows):
        dst, src = buffers[la // SPAN], buffers[ra // SPAN]
        dst[la % SPAN: la % SPAN + n] = src[ra % SPAN: ra % SPAN + n]


@pytest.mark.parametrize("prefill_tp, decode_tp, total", [
    (1, 2, 4), (2, 1, 4), (1, 1, 4), (2, 2, 4), (4, 2, 4), (2, 4, 4), (1, 4, 2), (4, 1, 2), (2, 4, 1), (4, 2, 1),
])
def test_every_decode_rank_gets_exactly_its_heads(prefill_tp, decode_tp, total):
    full = full_cache(total, seed=prefill_tp * 10 + decode_tp)
    buffers: list[np.ndarray] = []
    sources = []
    for r in range(prefill_tp):
        heads = heads_of(r, prefill_tp, total)
        sources.append(rank(buffers, heads, r))
        shard(full, heads, buffers)
    remote_ids, local_ids = [4, 0, 1, 5], [1, 2, 3, 0]
    for r in range(decode_tp):
        heads = heads_of(r, decode_tp, total)
        local = rank(buffers, heads, r)
        shard(np.zeros_like(full), heads, buffers)
        reads = pull_rows(local, sources, local_ids, remote_ids)
        for rows in reads.values():
            apply(rows, buffers)
        got = [buffers[local.base_addrs[t] // SPAN].view(np.float32).reshape(NB, BS, heads.count, D) for t in range(T)]
        for t in range(T):
            for lb, rb in zip(local_ids, remote_ids):
                np.testing.assert_array_equal(got[t][lb], full[t, rb, :, heads.start:heads.start + heads.count])
        assert sum(int(rows[0][:, 1].sum()) for rows in reads.values()) == len(local_ids) * T * BS * heads.count * D * 4


def test_descriptors_are_whole_block_runs_when_head_ranges_match_and_slots_when_they_do_not():
    full = full_cache(4, seed=1)
    buffers: list[np.ndarray] = []
    same = rank(buffers, heads_of(0, 1, 4), 0)
    shard(full, same.heads, buffers)
    mine = rank(buffers, heads_of(0, 1, 4), 0)
    shard(full, mine.heads, buffers)
    (rows,) = pull_rows(mine, [same], [0, 1, 2, 4], [3, 4, 5, 0]).values()
    assert len(rows[0]) == T * 2  # blocks 3-5 -> 0-2 merge into one range per tensor, 0 -> 4 is another
    half = rank(buffers, heads_of(1, 2, 4), 1)
    shard(full, half.heads, buffers)
    (rows,) = pull_rows(half, [same], [0, 1], [3, 4]).values()
    assert len(rows[0]) == T * 2 * BS  # a head slice of each slot: one range per (tensor, block, slot)


def test_replicated_heads_spread_over_their_holders_and_mla_reads_one_rank():
    assert source_runs(HeadRange(0, 4, 4), [HeadRange(0, 2, 4), HeadRange(2, 2, 4)], pick=0) == [
        SourceRun(0, 0, 2), SourceRun(1, 2, 2)]
    mla = HeadRange(0, 1, 1)  # every rank caches the whole latent
    assert source_runs(mla, [mla, mla], pick=1) == [SourceRun(1, 0, 1)]
    assert source_runs(mla, [mla, mla], pick=0) == [SourceRun(0, 0, 1)]
    assert source_runs(HeadRange(1, 1, 2), [HeadRange(0, 1, 2)] * 2 + [HeadRange(1, 1, 2)] * 2, pick=3) == [
        SourceRun(3, 1, 1)]


def test_layouts_that_cannot_pair_are_refused_in_one_line():
    a = CacheLayout("a", "", [0], [12], NB, BS, "float32", head_start=0, num_heads=4, total_heads=4)
    with pytest.raises(LayoutMismatch, match="same model"):
        pull_rows(a, [CacheLayout("b", "", [0], [12], NB, BS, "float32", head_start=0, num_heads=2, total_heads=2)],
                  [0], [0])
    with pytest.raises(LayoutMismatch, match="--block-size and --dtype"):
        pull_rows(a, [CacheLayout("b", "", [0], [6], NB, BS, "bfloat16", head_start=0, num_heads=4, total_heads=4)],
                  [0], [0])
    with pytest.raises(LayoutMismatch, match="out of range"):
        pull_rows(a, [a], [0], [NB])
    with pytest.raises(LayoutMismatch, match="no attention group 1"):
        group_ranks([a], 1)


def test_coalesce_merges_only_rows_contiguous_on_both_sides():
    local = np.array([[0, 8], [8, 8], [16, 8], [40, 8]], dtype=np.int64)
    remote = np.array([[100, 8], [108, 8], [200, 8], [208, 8]], dtype=np.int64)
    lo, re = coalesce(local, remote)
    assert lo.tolist() == [[0, 16], [16, 8], [40, 8]] and re.tolist() == [[100, 16], [200, 8], [208, 8]]


def test_a_layout_survives_json():
    a = CacheLayout("a", "bWV0YQ==", [1, 2], [64, 64], NB, BS, "bfloat16", 1, 1, 2, 2, 4)
    assert CacheLayout.from_json(a.to_json()) == a
    assert a.to_json()["block_bytes"] == [BS * 2 * 64] * 2
