"""The MLA Triton kernel (latent space, absorbed weights) equals its torch reference under
TRITON_INTERPRET=1: decode with one and several query tokens per sequence (MTP verify), prefill over a
cached prefix, many heads per tile, tiles that cross token boundaries, split contexts. The reference
equals MQA by SDPA over the dense latent context. Block tables have holes and every cache row no
sequence owns is NaN (see test_triton_paged_attention.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.triton.mla_decode import (  # noqa: E402
    MlaTiles,
    mla_decode,
    mla_decode_reference,
    mla_prefill,
    mla_reference,
)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}
SCALE = 0.2
SMALL = MlaTiles(block_m=16, block_n=16, num_warps=4, num_stages=1)


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


def case(lens, BS, h, R, r, dtype, q_shape=None):
    cache, tables, seq_lens, dense = latent_cache(lens, BS, R + r, dtype)
    g = torch.Generator().manual_seed(1)
    lead = q_shape or (len(lens),)
    q_latent = torch.randn(*lead, h, R, generator=g).to(dtype)
    q_rope = torch.randn(*lead, h, r, generator=g).to(dtype)
    return q_latent, q_rope, cache, tables, seq_lens, dense


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_with_and_without_splits(dtype):
    # R = 40, r = 8, 20 heads: none a multiple of the 16-wide blocks; 20 heads take two row tiles
    q_latent, q_rope, cache, tables, seq_lens, _ = case([1, 29, 45], BS=8, h=20, R=40, r=8, dtype=dtype)
    ref = mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    for splits in (1, 3):
        out = mla_decode(q_latent, q_rope, cache, tables, seq_lens, SCALE, splits=splits, tiles=SMALL)
        torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_of_several_tokens_per_sequence(dtype):
    """MTP verify: Q = 3 tokens a sequence, causal among themselves; 5 heads, so a 16-row tile holds
    three tokens and a head of the next, and the last tile of a sequence is partial."""
    q_latent, q_rope, cache, tables, seq_lens, _ = case([3, 20, 37], BS=4, h=5, R=24, r=8, dtype=dtype,
                                                        q_shape=(3, 3))  # fmt: skip
    ref = mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    assert ref.shape == (3, 3, 5, 24)
    for splits in (1, 2):
        out = mla_decode(q_latent, q_rope, cache, tables, seq_lens, SCALE, splits=splits, tiles=SMALL)
        torch.testing.assert_close(out, ref, **TOL[dtype])
    # each token is the decode of its own prefix: token t of Q sees seq_len - Q + t + 1 keys
    one = mla_decode(q_latent[:, 1].contiguous(), q_rope[:, 1].contiguous(), cache, tables, seq_lens - 1, SCALE,
                     tiles=SMALL)  # fmt: skip
    torch.testing.assert_close(one, ref[:, 1], **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_prefill_over_a_cached_prefix(dtype):
    """Chunked prefill, a decode row, a sequence without queries this step and a whole prompt in one
    call; 3 heads, so tiles of 16 rows hold 5 tokens and a head of a sixth."""
    qlens, lens = [5, 1, 0, 12], [5, 30, 7, 40]
    q_latent, q_rope, cache, tables, seq_lens, _ = case(lens, BS=4, h=3, R=20, r=12, dtype=dtype,
                                                        q_shape=(sum(qlens),))  # fmt: skip
    query_start = torch.tensor([0] + qlens).cumsum(0)
    ref = mla_reference(q_latent, q_rope, cache, tables, query_start, seq_lens, SCALE)
    for splits in (None, 2):
        out = mla_prefill(q_latent, q_rope, cache, tables, query_start, seq_lens, SCALE, splits=splits, tiles=SMALL)
        torch.testing.assert_close(out, ref, **TOL[dtype])


def test_long_context_at_deepseek_widths_with_64_head_tiles():
    # R = 512, r = 64 as DeepSeek-V3; 300 keys over 19 blocks of 16 split by the shapes; 64 heads, one tile
    q_latent, q_rope, cache, tables, seq_lens, _ = case([300], BS=16, h=64, R=512, r=64, dtype=torch.float16)
    out = mla_decode(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    ref = mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    torch.testing.assert_close(out, ref, **TOL[torch.float16])


def test_empty_batches():
    q_latent, q_rope, cache, tables, seq_lens, _ = case([3], BS=4, h=2, R=8, r=4, dtype=torch.float32)
    assert mla_decode(q_latent[:0], q_rope[:0], cache, tables[:0], seq_lens[:0], SCALE).shape == (0, 2, 8)
    out = mla_prefill(q_latent[:0], q_rope[:0], cache, tables, torch.tensor([0, 0]), seq_lens, SCALE)
    assert out.shape == (0, 2, 8)


def test_reference_equals_mqa_sdpa_on_the_dense_context():
    """Independent formulation: keys [latent | rope] and values latent as one shared KV head, SDPA with
    a bottom-right causal mask over the dense context."""
    R, r, qlens, lens = 12, 4, [2, 5], [5, 17]
    q_latent, q_rope, cache, tables, seq_lens, dense = case(lens, BS=4, h=3, R=R, r=r, dtype=torch.float32,
                                                            q_shape=(sum(qlens),))  # fmt: skip
    query_start = torch.tensor([0] + qlens).cumsum(0)
    got = mla_reference(q_latent, q_rope, cache, tables, query_start, seq_lens, SCALE)
    for b, rows in enumerate(dense):
        s, e, L = query_start[b], query_start[b + 1], lens[b]
        q = torch.cat([q_latent[s:e], q_rope[s:e]], dim=-1).transpose(0, 1)[None]  # [1, h, n, R + r]
        k, v = rows[None, None].expand(1, 3, -1, -1), rows[None, None, :, :R].expand(1, 3, -1, -1)
        mask = torch.arange(L)[None, :] <= torch.arange(L - (e - s), L)[:, None]
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=SCALE)
        torch.testing.assert_close(got[s:e], expected[0].transpose(0, 1))


def test_the_torch_sets_mla_equals_the_reference():
    """kernels/reference/mla.py (the torch set: padded on the device, one batched product) against the
    per-sequence reference, for decode with several tokens a sequence and a mixed prefill. It gathers
    whole blocks, so rows no sequence owns must be finite (a served cache's are: zeros or stale rows)."""
    from moeserve.kernels.reference import mla as torch_mla

    qlens, lens = [5, 1, 0, 12], [5, 30, 7, 40]
    q_latent, q_rope, cache, tables, seq_lens, _ = case(lens, BS=4, h=3, R=20, r=12, dtype=torch.float32,
                                                        q_shape=(sum(qlens),))  # fmt: skip
    query_start = torch.tensor([0] + qlens).cumsum(0)
    cache = cache.nan_to_num(7.0)
    got = torch_mla.mla_prefill(q_latent, q_rope, cache, tables, query_start, seq_lens, SCALE, max(qlens))
    torch.testing.assert_close(got, mla_reference(q_latent, q_rope, cache, tables, query_start, seq_lens, SCALE))
    q_latent, q_rope, cache, tables, seq_lens, _ = case([3, 20, 37], BS=4, h=5, R=24, r=8, dtype=torch.float32,
                                                        q_shape=(3, 3))  # fmt: skip
    cache = cache.nan_to_num(7.0)
    got = torch_mla.mla_decode(q_latent, q_rope, cache, tables, seq_lens, SCALE)
    torch.testing.assert_close(got, mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, SCALE))
