"""The paged decode Triton kernel equals its torch reference under TRITON_INTERPRET=1, and the reference
equals SDPA over a dense context (prefill: test_triton_paged_prefill.py).

Caches are built with block tables that have holes: blocks are taken in a shuffled order from a pool
larger than needed, table entries past a sequence's blocks are out of range, and every cache row no
sequence owns is NaN, so a kernel that reads outside a sequence's context fails."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.triton.paged_attention import paged_decode, paged_decode_reference  # noqa: E402

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),  # the interpreter's fp32 -> bf16 store may land one ulp off
}
SCALE = 0.3


def paged_cache(lens: list[int], BS: int, hk: int, D: int, dtype: torch.dtype, seed: int = 0):
    """-> k_cache, v_cache [NB, BS, hk, D], tables [B, C] int32, seq_lens [B], dense [(k, v) [L, hk, D]]."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-L // BS) for L in lens]
    NB, C = sum(need) + 5, max(need + [0]) + 2
    k_cache = torch.full((NB, BS, hk, D), float("nan"), dtype=dtype)
    v_cache = torch.full((NB, BS, hk, D), float("nan"), dtype=dtype)
    blocks = iter(torch.randperm(NB, generator=g).tolist())
    tables = torch.full((len(lens), C), 10**6, dtype=torch.int32)  # past a sequence's blocks: never read
    dense = []
    for b, L in enumerate(lens):
        tables[b, : need[b]] = torch.tensor([next(blocks) for _ in range(need[b])], dtype=torch.int32)
        k, v = torch.randn(2, L, hk, D, generator=g).to(dtype)
        pos = torch.arange(L)
        k_cache[tables[b, pos // BS].long(), pos % BS] = k
        v_cache[tables[b, pos // BS].long(), pos % BS] = v
        dense.append((k, v))
    return k_cache, v_cache, tables, torch.tensor(lens), dense


def queries(n: int, hq: int, D: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, hq, D, generator=torch.Generator().manual_seed(seed)).to(dtype)


def check_decode(lens, BS, hq, hk, D, dtype, window=None, sinks=None, **kw):
    k_cache, v_cache, tables, seq_lens, _ = paged_cache(lens, BS, hk, D, dtype)
    q = queries(len(lens), hq, D, dtype)
    out = paged_decode(q, k_cache, v_cache, tables, seq_lens, SCALE, window, sinks=sinks, **kw)
    ref = paged_decode_reference(q, k_cache, v_cache, tables, seq_lens, SCALE, window, sinks)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hk", [4, 2, 1], ids=["gqa1", "gqa2", "gqa4"])
def test_decode_gqa_with_and_without_splits(dtype, hk):
    for splits in (1, 3):  # one pass, and three parts merged by the second pass
        check_decode([1, 37, 70], BS=8, hq=4, hk=hk, D=24, dtype=dtype, splits=splits, block_n=16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_sliding_window(dtype):
    for window, splits in ((5, 1), (5, 4), (19, 3), (500, 2)):  # inside a block, across blocks, past the context
        check_decode([3, 41, 64], BS=8, hq=6, hk=3, D=20, dtype=dtype, window=window, splits=splits, block_n=16)


def test_decode_sinks_with_windows_and_splits():
    """gpt-oss: one sink logit per query head in the softmax's denominator; a split context counts it in
    the first split only. Large sinks take most of the probability, so an output not scaled down fails."""
    sinks = torch.tensor([2.5, -1.0, 0.3, 4.0, -3.0, 1.5])
    for window, splits in ((None, 1), (None, 3), (5, 2)):
        check_decode([3, 41, 64], BS=8, hq=6, hk=3, D=20, dtype=torch.float32, window=window, sinks=sinks,
                     splits=splits, block_n=16)  # fmt: skip


def test_bf16_is_upcast_on_load_under_the_interpreter():
    check_decode([9, 33], BS=8, hq=4, hk=2, D=16, dtype=torch.bfloat16, splits=2, block_n=16)


def test_decode_long_context_splits_by_itself():
    # 600 keys over 38 blocks of 16 and one sequence: the shapes ask for several parts
    check_decode([600], BS=16, hq=2, hk=1, D=32, dtype=torch.float16)


def test_decode_empty_batch():
    k_cache, v_cache, tables, _, _ = paged_cache([4], BS=4, hk=1, D=8, dtype=torch.float32)
    q = queries(0, 2, 8, torch.float32)
    assert paged_decode(q, k_cache, v_cache, tables[:0], torch.zeros(0, dtype=torch.int64), SCALE).shape == (0, 2, 8)


@pytest.mark.parametrize("window", [None, 5])
def test_reference_equals_sdpa_on_the_dense_context(window):
    """Independent formulation: SDPA over each sequence's dense K/V (never paged) with an explicit mask."""
    lens, hq, hk, D = [6, 13, 20], 4, 2, 8
    k_cache, v_cache, tables, seq_lens, dense = paged_cache(lens, BS=4, hk=hk, D=D, dtype=torch.float32)
    q = queries(len(lens), hq, D, torch.float32)
    for b, ((k, v), L) in enumerate(zip(dense, lens)):
        q_pos, k_pos = L - 1, torch.arange(L)[None, :]
        mask = (k_pos <= q_pos) & ((k_pos > q_pos - window) if window else True)
        expected = F.scaled_dot_product_attention(q[b : b + 1].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                  attn_mask=mask, scale=SCALE, enable_gqa=True)  # fmt: skip
        got = paged_decode_reference(q[b : b + 1], k_cache, v_cache, tables[b : b + 1], seq_lens[b : b + 1], SCALE,
                                     window)  # fmt: skip
        torch.testing.assert_close(got, expected.transpose(0, 1))
