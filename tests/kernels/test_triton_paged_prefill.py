"""The paged prefill Triton kernel (FlashAttention-2 over the block tables) equals its torch reference
under TRITON_INTERPRET=1, fp32 and fp16: whole prompts, chunks over a cached prefix, decode rows mixed
in, GQA 1 / 2 / 4 packed into the tiles, sliding windows whose edge falls inside, across and past the
tiles (each of the three key loops taken alone and together), attention sinks with and without
windows, odd head dims. Caches have holes and NaN in every row no sequence owns
(test_triton_paged_attention.paged_cache). The reference equals SDPA over each dense context."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from test_triton_paged_attention import SCALE, TOL, paged_cache, queries  # noqa: E402

from moeserve.kernels.triton.paged_attention import paged_decode  # noqa: E402
from moeserve.kernels.triton.paged_prefill import PrefillTiles, paged_prefill, paged_prefill_reference  # noqa: E402

SMALL = PrefillTiles(block_m=16, block_n=8, num_warps=4, num_stages=1)
SINKS = torch.tensor([2.5, -1.0, 0.3, 4.0, -3.0, 1.5])


def check(qlens, lens, BS, hq, hk, D, dtype, window=None, sinks=None, tiles=SMALL):
    k_cache, v_cache, tables, seq_lens, _ = paged_cache(lens, BS, hk, D, dtype)
    query_start = torch.tensor([0] + qlens).cumsum(0)
    q = queries(sum(qlens), hq, D, dtype)
    out = paged_prefill(q, k_cache, v_cache, tables, query_start, seq_lens, SCALE, window, sinks, tiles)
    ref = paged_prefill_reference(q, k_cache, v_cache, tables, query_start, seq_lens, SCALE, window, sinks)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hk", [4, 2, 1], ids=["gqa1", "gqa2", "gqa4"])
def test_chunks_over_a_cached_prefix_and_decode_rows(dtype, hk):
    # a whole prompt, a chunk after 25 cached tokens, a decode row, nothing, a chunk after 3 cached tokens
    check([18, 9, 1, 0, 6], [18, 34, 12, 5, 9], BS=8, hq=4, hk=hk, D=24, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sliding_windows(dtype):
    # a 40-token chunk after 30 cached, 2 heads a KV head: 8 tokens a tile; windows inside a key step, across
    # steps, longer than the tile (all three loops), past the context
    for window in (1, 6, 13, 30, 100):
        check([40, 7], [70, 30], BS=4, hq=4, hk=2, D=16, dtype=dtype, window=window)


def test_sinks_with_and_without_windows():
    """gpt-oss: one sink logit per query head; large sinks take most of the probability, so an output
    not scaled down by them fails."""
    for window in (None, 6, 25):
        check([20, 1, 7], [20, 33, 30], BS=4, hq=6, hk=2, D=16, dtype=torch.float32, window=window, sinks=SINKS)


def test_default_tiles_one_token_and_no_tokens():
    check([33, 1], [40, 1], BS=16, hq=8, hk=2, D=40, dtype=torch.float16, tiles=None)
    check([130], [200], BS=16, hq=2, hk=2, D=64, dtype=torch.float32, window=70, tiles=None)
    k_cache, v_cache, tables, seq_lens, _ = paged_cache([4], BS=4, hk=1, D=8, dtype=torch.float32)
    q = queries(0, 1, 8, torch.float32)
    assert paged_prefill(q, k_cache, v_cache, tables, torch.tensor([0, 0]), seq_lens, SCALE).shape == (0, 1, 8)


def test_bf16_is_upcast_on_load_under_the_interpreter():
    check([9, 4], [9, 33], BS=8, hq=4, hk=2, D=16, dtype=torch.bfloat16)


def test_decode_equals_prefill_of_one_token():
    k_cache, v_cache, tables, seq_lens, _ = paged_cache([9, 30], BS=4, hk=2, D=16, dtype=torch.float32)
    q = queries(2, 4, 16, torch.float32)
    decode = paged_decode(q, k_cache, v_cache, tables, seq_lens, SCALE, 11, splits=2, block_n=16)
    prefill = paged_prefill(q, k_cache, v_cache, tables, torch.tensor([0, 1, 2]), seq_lens, SCALE, 11, tiles=SMALL)
    torch.testing.assert_close(decode, prefill, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 5])
def test_reference_equals_sdpa_on_the_dense_context(window):
    """Independent formulation: SDPA over each sequence's dense K/V (never paged) with an explicit mask;
    a sink as one more key that scores the sink and carries a zero value."""
    qlens, lens, hq, hk, D = [6, 1, 4], [6, 13, 20], 4, 2, 8
    k_cache, v_cache, tables, seq_lens, dense = paged_cache(lens, BS=4, hk=hk, D=D, dtype=torch.float32)
    query_start = torch.tensor([0] + qlens).cumsum(0)
    q = queries(sum(qlens), hq, D, torch.float32)
    sinks = SINKS[:hq]
    for with_sinks in (False, True):
        expected = []
        for (k, v), n, L, s in zip(dense, qlens, lens, query_start.tolist()):
            q_pos, k_pos = torch.arange(L - n, L)[:, None], torch.arange(L)[None, :]
            mask = (k_pos <= q_pos) & ((k_pos > q_pos - window) if window else True)
            k, v = k.repeat_interleave(hq // hk, 1).transpose(0, 1), v.repeat_interleave(hq // hk, 1).transpose(0, 1)
            bias = torch.zeros(hq, n, L).masked_fill(~mask, float("-inf"))
            if with_sinks:  # a zero key scores 0: its bias is the head's sink; a zero value adds nothing
                k, v = F.pad(k, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1))
                bias = torch.cat([bias, sinks[:, None, None].expand(hq, n, 1)], dim=-1)
            out = F.scaled_dot_product_attention(q[s : s + n].transpose(0, 1), k, v, attn_mask=bias, scale=SCALE)
            expected.append(out.transpose(0, 1))
        got = paged_prefill_reference(q, k_cache, v_cache, tables, query_start, seq_lens, SCALE, window,
                                      sinks if with_sinks else None)  # fmt: skip
        torch.testing.assert_close(got, torch.cat(expected))
