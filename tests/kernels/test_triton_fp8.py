"""The FP8 block-scaled kernels equal their torch references under TRITON_INTERPRET=1: the dense W8A8
linear (activations quantized per token and group of 128 on load) and the fused MoE with FP8 experts.
The interpreter loads FP8 exactly but casts fp32 -> FP8 wrongly at the top of each binade, so the
kernels' activation cast is emulated in fp32 there (launch.e4m3_emulated, checked here bit for bit
against torch's cast); on a GPU they cast with the hardware. The references equal the dequantized
weights' plain product within FP8's error."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.reference import fp8_quant  # noqa: E402
from moeserve.kernels.triton import launch  # noqa: E402
from moeserve.kernels.triton.fp8_linear import fp8_linear  # noqa: E402


def test_the_emulated_cast_equals_torchs_bit_for_bit():
    import triton.language as tl

    def _cast(x_ptr, o_ptr, N, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o_ptr + i, launch.e4m3_emulated(tl.load(x_ptr + i, mask=i < N)), mask=i < N)

    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4000, generator=g) * s for s in (1e-3, 1, 40, 400)]
                  + [torch.tensor([0.0, 448.0, 470.0, -900.0, 2**-10, 3 * 2**-10, 1.0625, 1.1875, 1.9943])])
    out = torch.empty_like(x)
    launch.Kernel(_cast)[(-(-x.numel() // 1024),)](x, out, x.numel(), BLOCK=1024)
    assert torch.equal(out, fp8_quant.to_fp8(x).float())


def weight(N: int, K: int, seed: int = 0, lead: tuple[int, ...] = ()):
    w = torch.randn(*lead, N, K, generator=torch.Generator().manual_seed(seed)) * K**-0.5
    data, scale_inv = fp8_quant.quantize_blocks(w, (128, 128))
    return w, data, scale_inv


@pytest.mark.parametrize("T, N, K", [(1, 200, 300), (37, 130, 256), (70, 64, 128)])
def test_fp8_linear_equals_the_reference(T, N, K):
    # N, K not multiples of the 128 blocks (a partial last block both ways), one row, several row tiles
    _, data, scale_inv = weight(N, K)
    x = torch.randn(T, K, generator=torch.Generator().manual_seed(1)) * 3
    bias = torch.randn(N)
    out = fp8_linear(x, data, scale_inv, (128, 128), bias)
    ref = fp8_quant.block_fp8_linear(x, data, scale_inv, (128, 128)) + bias
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def test_the_reference_is_the_dequantized_product_within_fp8s_error():
    w, data, scale_inv = weight(96, 384)
    assert data.dtype == torch.float8_e4m3fn and scale_inv.shape == (1, 3)
    from moeserve.kernels.reference.fp8 import dequantize

    dense = dequantize(data, scale_inv, (128, 128))
    assert (dense - w).abs().max() <= w.abs().max() / 16  # e4m3: 3 mantissa bits
    x = torch.randn(5, 384, generator=torch.Generator().manual_seed(2))
    exact = x @ w.T
    got = fp8_quant.block_fp8_linear(x, data, scale_inv, (128, 128))
    assert (got - exact).norm() / exact.norm() < 0.06


def fp8_experts(S: int, H: int, I: int, seed: int = 0):
    """-> w13, w2 float8_e4m3fn and their Fp8Weights (128 x 128 blocks, partial at the edges)."""
    from moeserve.kernels.triton.fused_moe import Fp8Weights

    _, w13, s13 = weight(2 * I, H, seed, (S,))
    _, w2, s2 = weight(H, I, seed + 1, (S,))
    return w13, w2, Fp8Weights(s13, s2, (128, 128))


@pytest.mark.parametrize("T, k", [(1, 1), (9, 3)])
def test_fused_moe_with_fp8_experts(T, k):
    """I = 200: the intermediate's quantization groups end in a partial one; slot 3 unused, a dropped id."""
    from moeserve.kernels.triton.fused_moe import Tiles, fused_moe, fused_moe_reference

    S, H, I = 5, 256, 200
    w13, w2, fp8 = fp8_experts(S, H, I)
    g = torch.Generator().manual_seed(3)
    slots = torch.stack([torch.tensor([0, 1, 2, 4])[torch.randperm(4, generator=g)[:k]] for _ in range(T)])
    slots.view(-1)[-1] = -1 if T > 1 else slots.view(-1)[-1]
    weights, x = torch.rand(T, k, generator=g), torch.randn(T, H, generator=g)
    for tiles in (None, Tiles(16, 64, 32, 4, 1)):  # 32-wide K steps are widened to the 128 blocks
        out = fused_moe(x, slots, weights, w13, w2, tiles=tiles, fp8=fp8)
        ref = fused_moe_reference(x, slots, weights, w13, w2, fp8=fp8)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def test_fused_experts_with_fp8_experts():
    from moeserve.kernels.triton.fused_moe import fused_experts, fused_experts_reference

    w13, w2, fp8 = fp8_experts(3, 128, 136)
    x = torch.randn(21, 128, generator=torch.Generator().manual_seed(4))
    offsets = torch.tensor([5, 5, 21], dtype=torch.int32)
    out = fused_experts(x, offsets, w13, w2, fp8=fp8)
    torch.testing.assert_close(out, fused_experts_reference(x, offsets, w13, w2, fp8=fp8), atol=1e-4, rtol=1e-5)


def test_paged_attention_over_an_fp8_cache():
    """--kv-cache-dtype fp8: the kernels read e4m3 K/V upcast to the queries' dtype; the same as over the
    cache's values in fp32 (holes and NaN rows as in the bf16 tests)."""
    from test_triton_paged_attention import SCALE, paged_cache, queries

    from moeserve.kernels.triton.paged_attention import paged_decode
    from moeserve.kernels.triton.paged_prefill import paged_prefill, paged_prefill_reference

    k_cache, v_cache, tables, seq_lens, _ = paged_cache([9, 40, 23], BS=8, hk=2, D=16, dtype=torch.float32)
    k8, v8 = fp8_quant.as_cache(k_cache, fp8_quant.FP8_DTYPE), fp8_quant.as_cache(v_cache, fp8_quant.FP8_DTYPE)
    q = queries(3, 4, 16, torch.float32)
    decode = paged_decode(q, k8, v8, tables, seq_lens, SCALE, 7, splits=2, block_n=16)
    prefill_rows = paged_prefill(q, k8, v8, tables, torch.arange(4), seq_lens, SCALE, 7)
    ref = paged_prefill_reference(q, k8.float(), v8.float(), tables, torch.arange(4), seq_lens, SCALE, 7)
    torch.testing.assert_close(decode, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(prefill_rows, ref, atol=1e-5, rtol=1e-5)


def test_mla_over_an_fp8_latent_cache():
    from test_triton_mla_decode import SCALE, case

    from moeserve.kernels.reference import mla as torch_mla
    from moeserve.kernels.triton.mla_decode import mla_decode, mla_decode_reference, mla_prefill, mla_reference

    q_latent, q_rope, cache, tables, seq_lens, _ = case([7, 30], BS=4, h=3, R=20, r=12, dtype=torch.float32,
                                                        q_shape=(2, 2))  # fmt: skip
    c8 = fp8_quant.as_cache(cache, fp8_quant.FP8_DTYPE)
    ref = mla_decode_reference(q_latent, q_rope, c8.float(), tables, seq_lens, SCALE)
    torch.testing.assert_close(mla_decode(q_latent, q_rope, c8, tables, seq_lens, SCALE, splits=2), ref)
    flat_l, flat_r, starts = q_latent.reshape(4, 3, 20), q_rope.reshape(4, 3, 12), torch.tensor([0, 2, 4])
    torch.testing.assert_close(mla_prefill(flat_l, flat_r, c8, tables, starts, seq_lens, SCALE), ref.reshape(4, 3, 20))
    again = mla_reference(flat_l, flat_r, c8.float(), tables, starts, seq_lens, SCALE)
    assert torch.equal(again, ref.reshape(4, 3, 20))
    finite = fp8_quant.as_cache(cache.nan_to_num(3.0), fp8_quant.FP8_DTYPE)  # the torch set gathers whole blocks
    torch.testing.assert_close(torch_mla.mla_decode(q_latent, q_rope, finite, tables, seq_lens, SCALE),
                               mla_decode_reference(q_latent, q_rope, finite.float(), tables, seq_lens, SCALE))
