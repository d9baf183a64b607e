"""The C++ decode-attention kernel (kernels/cpu/paged_decode.py, through the CPU set's paged attention) against the per-head reference and torch's path."""

from __future__ import annotations

import pytest
import torch

from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.dense.attention import write_kv
from moeserve.kernels.cpu import paged_decode
from moeserve.kernels.cpu.attention import paged_attention
from moeserve.kernels.reference.attention import paged_attention as torch_paged_attention
from moeserve.kernels.reference.attention import paged_attention_reference
from moeserve.dense.attention_metadata import build_attention_metadata

needs_kernel = pytest.mark.skipif(not paged_decode.available(), reason="C++ CPU kernels not available here")


def decode_step(lengths, hq, hk, D, BS, seed):
    """Caches filled for sequences of the given context lengths (prefill), then one decode step's
    metadata and queries; block ids shuffled so tables are not in cache order."""
    torch.manual_seed(seed)
    blocks_per = [-(-(n + 1) // BS) for n in lengths]
    NB = sum(blocks_per) + 3
    order = torch.randperm(NB).tolist()
    tables, at = [], 0
    for b in blocks_per:
        tables.append(order[at : at + b])
        at += b
    k_cache, v_cache = torch.randn(NB, BS, hk, D), torch.randn(NB, BS, hk, D)
    seqs = [ScheduledSeq(str(i), [1], n, tables[i], True) for i, n in enumerate(lengths)]
    meta = build_attention_metadata(GroupBatch(0, seqs), BS)
    return torch.randn(len(lengths), hq, D), k_cache, v_cache, meta


@needs_kernel
@pytest.mark.parametrize("hq,hk,D,BS", [(8, 4, 32, 16), (6, 2, 12, 4), (3, 3, 40, 8), (4, 1, 5, 2), (16, 16, 64, 16)])
@pytest.mark.parametrize("window", [None, 1, 7])
def test_matches_the_reference(hq, hk, D, BS, window):
    q, k_cache, v_cache, meta = decode_step([0, 5, 40, 17, 3, 64], hq, hk, D, BS, seed=hq + D + BS)
    got = paged_attention(q, k_cache, v_cache, meta, D**-0.5, window)
    torch_path = torch_paged_attention(q, k_cache, v_cache, meta, D**-0.5, window)
    want = paged_attention_reference(q, k_cache, v_cache, meta, D**-0.5, window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, torch_path, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_sequences_bits_depend_neither_on_the_others_nor_on_threads():
    lengths = [30, 2, 100, 61, 9, 47, 1, 88]
    q, k_cache, v_cache, meta = decode_step(lengths, 8, 2, 32, 16, seed=7)
    tables, positions = meta.block_tables, meta.positions
    alone = torch.cat([
        paged_decode.decode(q[i : i + 1], k_cache, v_cache, tables[i : i + 1], positions[i : i + 1], 0.2, None)
        for i in range(len(lengths))
    ])
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            assert torch.equal(paged_decode.decode(q, k_cache, v_cache, tables, positions, 0.2, None), alone)
    finally:
        torch.set_num_threads(before)


@needs_kernel
def test_bad_tables_and_positions_are_errors_not_reads_out_of_bounds():
    q, k_cache, v_cache, meta = decode_step([5, 9], 4, 2, 8, 4, seed=1)
    tables, positions = meta.block_tables.clone(), meta.positions
    tables[1, 0] = k_cache.shape[0]
    with pytest.raises(RuntimeError, match="outside the cache"):
        paged_decode.decode(q, k_cache, v_cache, tables, positions, 1.0, None)
    with pytest.raises(RuntimeError, match="outside the block table"):
        paged_decode.decode(q, k_cache, v_cache, meta.block_tables, positions + 100, 1.0, None)


@needs_kernel
@pytest.mark.parametrize("D", [32, 12])
def test_bf16_caches_are_widened_and_summed_in_fp32(D):
    q, k_cache, v_cache, meta = decode_step([0, 5, 40, 17, 3], 8, 2, D, 8, seed=D)
    q, k_cache, v_cache = q.bfloat16(), k_cache.bfloat16(), v_cache.bfloat16()
    assert paged_decode.applies(q, k_cache)
    got = paged_attention(q, k_cache, v_cache, meta, D**-0.5, None)
    assert got.dtype == torch.bfloat16
    # the same inputs widened to fp32: the kernel only rounds its output to bf16
    want = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), meta, D**-0.5, None)
    torch.testing.assert_close(got.float(), want, rtol=8e-3, atol=8e-3)
    torch_path = torch_paged_attention(q, k_cache, v_cache, meta, D**-0.5, None)
    torch.testing.assert_close(got.float(), torch_path.float(), rtol=2e-2, atol=2e-2)


def test_other_dtypes_take_torchs_path():
    q, k_cache, v_cache, meta = decode_step([4, 11], 4, 2, 8, 4, seed=2)
    assert not paged_decode.applies(q.double(), k_cache.double())
    got = paged_attention(q.double(), k_cache.double(), v_cache.double(), meta, 0.3)
    want = paged_attention_reference(q.double(), k_cache.double(), v_cache.double(), meta, 0.3)
    torch.testing.assert_close(got, want)


def test_a_written_step_then_decoding_matches_through_the_cache_writes():
    # write_kv then attend, as Attention.forward does, for a decode step after a prefill
    torch.manual_seed(3)
    BS, hq, hk, D = 4, 4, 2, 8
    k_cache, v_cache = torch.zeros(8, BS, hk, D), torch.zeros(8, BS, hk, D)
    prefill = GroupBatch(0, [ScheduledSeq("a", list(range(6)), 0, [5, 1], True), ScheduledSeq("b", [1, 2], 0, [3], True)])
    meta = build_attention_metadata(prefill, BS)
    write_kv(k_cache, v_cache, torch.randn(8, hk, D), torch.randn(8, hk, D), meta.slot_mapping)
    decode = GroupBatch(0, [ScheduledSeq("a", [7], 6, [5, 1], True), ScheduledSeq("b", [7], 2, [3], True)])
    meta = build_attention_metadata(decode, BS)
    write_kv(k_cache, v_cache, torch.randn(2, hk, D), torch.randn(2, hk, D), meta.slot_mapping)
    q = torch.randn(2, hq, D)
    torch.testing.assert_close(
        paged_attention(q, k_cache, v_cache, meta, 0.35), paged_attention_reference(q, k_cache, v_cache, meta, 0.35),
        rtol=1e-5, atol=1e-5,
    )


@needs_kernel
@pytest.mark.parametrize("window", [None, 5])
def test_a_mixed_steps_decoding_rows_take_the_kernel_with_the_bits_of_a_decode_step(window):
    torch.manual_seed(4)
    BS, hq, hk, D = 4, 6, 2, 16
    k_cache, v_cache = torch.randn(24, BS, hk, D), torch.randn(24, BS, hk, D)
    tables = {"a": [3, 7, 1], "b": [2, 9, 11], "c": [5, 4, 6, 8], "d": [10]}
    # a decodes, b prefills a 5-token chunk, c decodes, d's prompt is one token (a 1-query "prefill")
    mixed = GroupBatch(0, [ScheduledSeq("a", [1], 9, tables["a"], True), ScheduledSeq("b", [1] * 5, 3, tables["b"], True),
                           ScheduledSeq("c", [1], 13, tables["c"], True), ScheduledSeq("d", [1], 0, tables["d"], True)])
    meta = build_attention_metadata(mixed, BS)
    q = torch.randn(meta.num_tokens, hq, D)
    got = paged_attention(q, k_cache, v_cache, meta, 0.25, window)
    want = paged_attention_reference(q, k_cache, v_cache, meta, 0.25, window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, torch_paged_attention(q, k_cache, v_cache, meta, 0.25, window),
                               rtol=1e-5, atol=1e-5)
    for name, token in (("a", 0), ("c", 6), ("d", 7)):
        seq = next(s for s in mixed.seqs if s.request_id == name)
        alone = build_attention_metadata(GroupBatch(0, [seq]), BS)
        assert torch.equal(paged_attention(q[token : token + 1], k_cache, v_cache, alone, 0.25, window), got[token : token + 1])


@needs_kernel
def test_a_nan_or_inf_query_gives_nan_as_torchs_path_does_not_zeros():
    q, k_cache, v_cache, meta = decode_step([6, 9], 4, 2, 8, 4, seed=5)
    q[0, 0, 3] = float("nan")  # heads 0 of sequence 0 (its KV head 0 serves query heads 0 and 1)
    q[1, 3] = float("inf")
    got = paged_attention(q, k_cache, v_cache, meta, 0.3)
    want = torch_paged_attention(q, k_cache, v_cache, meta, 0.3)
    assert torch.equal(got.isnan(), want.isnan()) and got[0, 0].isnan().all() and got[1, 3].isnan().all()
    torch.testing.assert_close(got[0, 1:], want[0, 1:], rtol=1e-5, atol=1e-5)  # the other heads are untouched
    with pytest.raises(RuntimeError, match="integer"):
        paged_decode.decode(q, k_cache, v_cache, meta.block_tables, meta.positions.float(), 0.3, None)


@needs_kernel
@pytest.mark.parametrize("window", [None, 3])
def test_sinks_in_decode_and_mixed_steps_match_the_reference(window):
    """gpt-oss's attention sinks: each query head's sink logit joins the kernel's softmax denominator,
    as in the reference and torch's gather path (decode steps and the decoding rows of mixed steps)."""
    hq, hk, D, BS = 6, 2, 16, 4
    sinks = torch.tensor([3.0, -2.0, 0.5, 1.0, 6.0, -0.5])
    q, k_cache, v_cache, meta = decode_step([0, 5, 40, 17], hq, hk, D, BS, seed=11)
    got = paged_attention(q, k_cache, v_cache, meta, D**-0.5, window, sinks)
    want = paged_attention_reference(q, k_cache, v_cache, meta, D**-0.5, window, sinks)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch_paged_attention(q, k_cache, v_cache, meta, D**-0.5, window, sinks), want,
                               rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, paged_attention(q, k_cache, v_cache, meta, D**-0.5, window), atol=1e-3)
    mixed = GroupBatch(0, [ScheduledSeq("a", [1], 9, [3, 7, 1], True), ScheduledSeq("b", [1] * 5, 3, [2, 9], True)])
    meta = build_attention_metadata(mixed, BS)
    q = torch.randn(meta.num_tokens, hq, D)
    torch.testing.assert_close(paged_attention(q, k_cache, v_cache, meta, 0.25, window, sinks),
                               paged_attention_reference(q, k_cache, v_cache, meta, 0.25, window, sinks),
                               rtol=1e-5, atol=1e-5)
