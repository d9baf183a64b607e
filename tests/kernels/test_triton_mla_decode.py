"""The MLA decode Triton kernel equals its torch reference under TRITON_INTERPRET=1, and the reference
equals MQA by SDPA over the dense latent context. Block tables have holes and every cache row no
sequence owns is NaN (see test_triton_paged_attention.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.triton.mla_decode import mla_decode, mla_decode_reference  # noqa: E402

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}
SCALE = 0.2


def latent_cache(lens: list[int], BS: int, width: int, dtype: torch.dtype, seed: int = 0):
    """-> cache [NB, BS, width], tables [B, C] int64, seq_lens [B], dense [[L, width]]."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-L // BS) for L in lens]
    NB, C = sum(need) + 3, max(need + [0]) + 1
    cache = torch.full((NB, BS, width), float("nan"), dtype=dtype)
    blocks = iter(torch.randperm(NB, generator=g).tolist())
    tables = torch.full((len(lens), C), -1, dtype=torch.int64)
    dense = []
    for b, L in enumerate(lens):
        tables[b, : need[b]] = torch.tensor([next(blocks) for _ in range(need[b])])
        rows = torch.randn(L, width, generator=g).to(dtype)
        pos = torch.arange(L)
        cache[tables[b, pos // BS], pos % BS] = rows
        dense.append(rows)
    return cache, tables, torch.tensor(lens), dense


def case(lens, BS, h, R, r, dtype):
    cache, tables, seq_lens, dense = latent_cache(lens, BS, R + r, dtype)
    g = torch.Generator().manual_seed(1)
    q_latent = torch.randn(len(lens), h, R, generator=g).to(dtype)
    q_rope = torch.randn(len(lens), h, r, generator=g).to(dtype)
    return q_latent, q_rope, cache, tables, seq_lens, dense


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_mla_decode_with_and_without_splits(dtype):
    # R = 40, r = 8, 20 heads: none a multiple of the 16-wide blocks; 20 heads take two head blocks
    q_latent, q_rope, cache, tables, seq_lens, _ = case([1, 29, 45], BS=8, h=20, R=40, r=8, dtype=dtype)
    ref = mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    for splits in (1, 3):
        out = mla_decode(q_latent, q_rope, cache, tables, seq_lens, SCALE, splits=splits, block_n=16)
        torch.testing.assert_close(out, ref, **TOL[dtype])


def test_mla_decode_long_context_at_deepseek_widths():
    # R = 512, r = 64 as DeepSeek-V3; 300 keys over 19 blocks of 16 split by the shapes
    q_latent, q_rope, cache, tables, seq_lens, _ = case([300], BS=16, h=4, R=512, r=64, dtype=torch.float16)
    out = mla_decode(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    ref = mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    torch.testing.assert_close(out, ref, **TOL[torch.float16])


def test_mla_decode_empty_batch():
    q_latent, q_rope, cache, tables, seq_lens, _ = case([3], BS=4, h=2, R=8, r=4, dtype=torch.float32)
    out = mla_decode(q_latent[:0], q_rope[:0], cache, tables[:0], seq_lens[:0], SCALE)
    assert out.shape == (0, 2, 8)


def test_reference_equals_mqa_sdpa_on_the_dense_context():
    """Independent formulation: keys [latent | rope] and values latent as one shared KV head, SDPA."""
    R, r = 12, 4
    q_latent, q_rope, cache, tables, seq_lens, dense = case([5, 17], BS=4, h=3, R=R, r=r, dtype=torch.float32)
    for b, rows in enumerate(dense):
        q = torch.cat([q_latent[b], q_rope[b]], dim=-1)[None, :, None, :]  # [1, h, 1, R + r]
        k, v = rows[None, None], rows[None, None, :, :R]  # one KV head
        expected = F.scaled_dot_product_attention(q, k.expand(1, 3, -1, -1), v.expand(1, 3, -1, -1), scale=SCALE)
        one = slice(b, b + 1)
        got = mla_decode_reference(q_latent[one], q_rope[one], cache, tables[one], seq_lens[one], SCALE)
        torch.testing.assert_close(got[0], expected[0, :, 0])
