"""Each Triton kernel on the GPU against its torch reference, at bf16 and fp16 (mark gpu: skipped
without CUDA; `python benchmarks/gpu_check.py` runs these first). Shapes are DeepSeek-V3 / Mixtral
widths with few rows, so the whole file takes seconds once the kernels are compiled."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu

from moeserve.kernels.triton.fused_moe import (  # noqa: E402
    fused_experts,
    fused_experts_reference,
    fused_moe,
    fused_moe_reference,
)
from moeserve.kernels.triton.mla_decode import (  # noqa: E402
    mla_decode,
    mla_decode_reference,
    mla_prefill,
    mla_reference,
)
from moeserve.kernels.triton.mla_prefill import mla_prefill_expanded, mla_prefill_expanded_reference  # noqa: E402
from moeserve.kernels.triton.norm import rms_norm, rms_norm_reference  # noqa: E402
from moeserve.kernels.triton.paged_attention import paged_decode, paged_decode_reference  # noqa: E402
from moeserve.kernels.triton.paged_prefill import paged_prefill, paged_prefill_reference  # noqa: E402

DTYPES = [torch.bfloat16, torch.float16]
# bf16 keeps 8 bits of mantissa: the kernels round p to bf16 before P @ V and the intermediate to bf16
TOL = {torch.bfloat16: dict(atol=2e-2, rtol=2e-2), torch.float16: dict(atol=5e-3, rtol=5e-3)}
DEV = "cuda"


def randn(*shape, dtype, scale=1.0, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(*shape, generator=g, device=DEV) * scale).to(dtype)


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("counts", [[0, 1, 3, 0, 60, 2, 0, 9], [200, 0, 513, 77, 1, 0, 130, 64]],
                         ids=["decode", "prefill"])  # fmt: skip
def test_fused_moe_on_gpu(dtype, counts):
    S, H, I = len(counts), 1024, 352  # I not a multiple of 64
    x = randn(sum(counts), H, dtype=dtype)
    w13 = randn(S, 2 * I, H, dtype=dtype, scale=H**-0.5, seed=1)
    w2 = randn(S, H, I, dtype=dtype, scale=I**-0.5, seed=2)
    offsets = torch.tensor(counts, device=DEV).cumsum(0).to(torch.int32)
    out = fused_experts(x, offsets, w13, w2)
    torch.testing.assert_close(out, fused_experts_reference(x, offsets, w13, w2), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T", [5, 300], ids=["decode", "prefill"])
def test_fused_moe_gather_and_weights_on_gpu(dtype, T):
    S, k, H, I = 8, 3, 1024, 352
    g = torch.Generator(device=DEV).manual_seed(3)
    slots = torch.stack([torch.randperm(S - 1, generator=g, device=DEV)[:k] for _ in range(T)])  # slot 7 unused
    slots[0, 1] = -1  # a dropped id
    weights = torch.rand(T, k, generator=g, device=DEV)
    x = randn(T, H, dtype=dtype)
    w13 = randn(S, 2 * I, H, dtype=dtype, scale=H**-0.5, seed=1)
    w2 = randn(S, H, I, dtype=dtype, scale=I**-0.5, seed=2)
    out = fused_moe(x, slots, weights, w13, w2)
    torch.testing.assert_close(out, fused_moe_reference(x, slots, weights, w13, w2), **TOL[dtype])


def paged(lens, BS, hk, D, dtype):
    need = [-(-L // BS) for L in lens]
    NB = sum(need) + 7
    k_cache, v_cache = randn(2, NB, BS, hk, D, dtype=dtype, seed=3)
    perm = torch.randperm(NB, device=DEV)
    tables = torch.zeros(len(lens), max(need), dtype=torch.int32, device=DEV)
    used = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[used : used + n].to(torch.int32)
        used += n
    return k_cache, v_cache, tables, torch.tensor(lens, device=DEV)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window", [None, 1000])
def test_paged_decode_on_gpu(dtype, window):
    k_cache, v_cache, tables, seq_lens = paged([4096, 1, 700, 2049], BS=16, hk=8, D=128, dtype=dtype)
    q = randn(4, 32, 128, dtype=dtype, scale=4.0, seed=4)  # peaked attention: outputs O(1), not a flat average
    ref = paged_decode_reference(q, k_cache, v_cache, tables, seq_lens, 128**-0.5, window)
    for splits in (None, 1):
        out = paged_decode(q, k_cache, v_cache, tables, seq_lens, 128**-0.5, window, splits=splits)
        torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window, sinks", [(None, False), (300, False), (128, True)], ids=["causal", "window", "sinks"])
def test_paged_prefill_on_gpu(dtype, window, sinks):
    qlens, lens = [700, 1, 300], [700, 900, 1333]
    k_cache, v_cache, tables, seq_lens = paged(lens, BS=16, hk=8, D=128, dtype=dtype)
    q = randn(sum(qlens), 32, 128, dtype=dtype, scale=4.0, seed=5)
    query_start = torch.tensor([0] + qlens, device=DEV).cumsum(0)
    sink = randn(32, dtype=torch.float32, scale=2.0, seed=6) if sinks else None
    out = paged_prefill(q, k_cache, v_cache, tables, query_start, seq_lens, 128**-0.5, window, sink)
    ref = paged_prefill_reference(q, k_cache, v_cache, tables, query_start, seq_lens, 128**-0.5, window, sink)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpt_oss_sinks_and_windows_on_gpu(dtype):
    """gpt-oss's shapes: 64 query heads over 8 KV heads, head dim 64, a window of 128, attention sinks."""
    k_cache, v_cache, tables, seq_lens = paged([4096, 1, 700, 129], BS=16, hk=8, D=64, dtype=dtype)
    sinks = randn(64, dtype=torch.float32, scale=2.0, seed=11)
    q = randn(4, 64, 64, dtype=dtype, scale=4.0, seed=12)
    for window in (None, 128):
        ref = paged_decode_reference(q, k_cache, v_cache, tables, seq_lens, 0.125, window, sinks)
        for splits in (None, 1):
            out = paged_decode(q, k_cache, v_cache, tables, seq_lens, 0.125, window, splits=splits, sinks=sinks)
            torch.testing.assert_close(out, ref, **TOL[dtype])
    qlens = [700, 1, 129, 3]
    q = randn(sum(qlens), 64, 64, dtype=dtype, scale=4.0, seed=13)
    query_start = torch.tensor([0] + qlens, device=DEV).cumsum(0)
    out = paged_prefill(q, k_cache, v_cache, tables, query_start, seq_lens, 0.125, 128, sinks=sinks)
    ref = paged_prefill_reference(q, k_cache, v_cache, tables, query_start, seq_lens, 0.125, 128, sinks)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_moe_gpt_oss_experts_on_gpu(dtype):
    """Biases and the clamped SwiGLU in the fused MoE at gpt-oss-20b's widths (H = I = 2880)."""
    counts = [0, 3, 17, 1, 40, 0, 5, 2]
    S, H, I = len(counts), 2880, 2880
    x = randn(sum(counts), H, dtype=dtype)
    w13 = randn(S, 2 * I, H, dtype=dtype, scale=H**-0.5, seed=1)
    w2 = randn(S, H, I, dtype=dtype, scale=I**-0.5, seed=2)
    b13, b2 = randn(S, 2 * I, dtype=dtype, seed=3), randn(S, H, dtype=dtype, seed=4)
    offsets = torch.tensor(counts, device=DEV).cumsum(0).to(torch.int32)
    out = fused_experts(x, offsets, w13, w2, "swigluoai", None, b13, b2, (1.702, 7.0))
    ref = fused_experts_reference(x, offsets, w13, w2, "swigluoai", b13, b2, (1.702, 7.0))
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads, Q", [(128, 1), (16, 1), (128, 2)], ids=["dp", "tp8", "mtp"])
def test_mla_decode_on_gpu(dtype, heads, Q):
    lens = [4096, 3, 1500]
    cache = randn(3 * 64 + 5, 64, 576, dtype=dtype, seed=6)  # 64 blocks of 64 hold 4096 tokens
    tables = torch.randperm(cache.shape[0], device=DEV)[: 3 * 64].view(3, 64)
    q_latent = randn(3, Q, heads, 512, dtype=dtype, scale=1.5, seed=7)  # score std ~2.6: peaked, outputs O(1)
    q_rope = randn(3, Q, heads, 64, dtype=dtype, scale=1.5, seed=8)
    if Q == 1:
        q_latent, q_rope = q_latent[:, 0], q_rope[:, 0]
    seq_lens = torch.tensor(lens, device=DEV)
    out = mla_decode(q_latent, q_rope, cache, tables, seq_lens, 192**-0.5)
    ref = mla_decode_reference(q_latent, q_rope, cache, tables, seq_lens, 192**-0.5)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_mla_prefill_on_gpu(dtype):
    qlens, lens = [700, 1, 300], [700, 900, 1333]
    cache = randn(3 * 21 + 5, 64, 576, dtype=dtype, seed=6)
    tables = torch.randperm(cache.shape[0], device=DEV)[: 3 * 21].view(3, 21)
    q_latent = randn(sum(qlens), 16, 512, dtype=dtype, scale=1.5, seed=7)
    q_rope = randn(sum(qlens), 16, 64, dtype=dtype, scale=1.5, seed=8)
    query_start = torch.tensor([0] + qlens, device=DEV).cumsum(0)
    seq_lens = torch.tensor(lens, device=DEV)
    out = mla_prefill(q_latent, q_rope, cache, tables, query_start, seq_lens, 192**-0.5)
    ref = mla_reference(q_latent, q_rope, cache, tables, query_start, seq_lens, 192**-0.5)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_mla_prefill_expanded_on_gpu(dtype):
    qlens, lens = [700, 1, 300], [700, 900, 1333]
    kv = randn(3, 1340, 16, 256, dtype=dtype, seed=9)  # kv_b_proj's output: k_nope and v are views of it
    k_nope, v = kv.split([128, 128], dim=-1)
    k_rope = randn(3, 1340, 64, dtype=dtype, seed=10)
    q_nope = randn(sum(qlens), 16, 128, dtype=dtype, scale=1.5, seed=11)
    q_rope = randn(sum(qlens), 16, 64, dtype=dtype, scale=1.5, seed=12)
    query_start = torch.tensor([0] + qlens, device=DEV).cumsum(0)
    seq_lens = torch.tensor(lens, device=DEV)
    args = (q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, 192**-0.5)
    torch.testing.assert_close(mla_prefill_expanded(*args), mla_prefill_expanded_reference(*args), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_on_gpu(dtype):
    x, residual = randn(2, 33, 7168, dtype=dtype, seed=9)
    weight = randn(7168, dtype=dtype, seed=10)
    out, new_residual = rms_norm(x, weight, 1e-6, residual)
    ref, ref_residual = rms_norm_reference(x, weight, 1e-6, residual)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    torch.testing.assert_close(new_residual, ref_residual, atol=0, rtol=0)


@pytest.mark.parametrize("T", [5, 300], ids=["decode", "prefill"])
def test_fp8_linear_on_gpu(T):
    """FP8 block-scaled weights on the FP8 tensor cores, the activations cast by the hardware: the same
    e4m3 values as torch's cast, so only the fp32 summation order and the bf16 output differ."""
    from moeserve.kernels.reference.fp8_quant import block_fp8_linear, quantize_blocks
    from moeserve.kernels.triton.fp8_linear import fp8_linear

    data, scale_inv = quantize_blocks(randn(1000, 7168, dtype=torch.float32, scale=7168**-0.5, seed=11))
    x = randn(T, 7168, dtype=torch.bfloat16, seed=12)
    out = fp8_linear(x, data, scale_inv, (128, 128))
    torch.testing.assert_close(out, block_fp8_linear(x, data, scale_inv, (128, 128)), **TOL[torch.bfloat16])


@pytest.mark.parametrize("T", [5, 300], ids=["decode", "prefill"])
def test_fused_moe_with_fp8_experts_on_gpu(T):
    from moeserve.kernels.reference.fp8_quant import quantize_blocks
    from moeserve.kernels.triton.fused_moe import Fp8Weights

    S, k, H, I = 8, 3, 1024, 384
    (w13, s13), (w2, s2) = (quantize_blocks(randn(*shape, dtype=torch.float32, scale=shape[-1] ** -0.5, seed=seed))
                            for shape, seed in (((S, 2 * I, H), 13), ((S, H, I), 14)))  # fmt: skip
    fp8 = Fp8Weights(s13, s2, (128, 128))
    g = torch.Generator(device=DEV).manual_seed(15)
    slots = torch.stack([torch.randperm(S, generator=g, device=DEV)[:k] for _ in range(T)])
    weights, x = torch.rand(T, k, generator=g, device=DEV), randn(T, H, dtype=torch.bfloat16, seed=16)
    out = fused_moe(x, slots, weights, w13, w2, fp8=fp8)
    torch.testing.assert_close(out, fused_moe_reference(x, slots, weights, w13, w2, fp8=fp8), **TOL[torch.bfloat16])


def test_attention_over_fp8_caches_on_gpu():
    """--kv-cache-dtype fp8: paged decode and prefill and MLA read e4m3 upcast to bf16 as they load."""
    from moeserve.kernels.reference.fp8_quant import FP8_DTYPE, as_cache

    k_cache, v_cache, tables, seq_lens = paged([4096, 1, 700], BS=16, hk=8, D=128, dtype=torch.float32)
    k8, v8 = as_cache(k_cache, FP8_DTYPE), as_cache(v_cache, FP8_DTYPE)
    q = randn(3, 32, 128, dtype=torch.bfloat16, scale=4.0, seed=17)
    ref = paged_decode_reference(q, k8.float(), v8.float(), tables, seq_lens, 128**-0.5)
    torch.testing.assert_close(paged_decode(q, k8, v8, tables, seq_lens, 128**-0.5), ref, **TOL[torch.bfloat16])
    starts = torch.arange(4, device=DEV)
    got = paged_prefill(q, k8, v8, tables, starts, seq_lens, 128**-0.5)
    torch.testing.assert_close(got, ref, **TOL[torch.bfloat16])
    cache = as_cache(randn(3 * 64 + 5, 64, 576, dtype=torch.float32, seed=18), FP8_DTYPE)
    mla_tables = torch.randperm(cache.shape[0], device=DEV)[: 3 * 64].view(3, 64)
    ql = randn(3, 128, 512, dtype=torch.bfloat16, scale=1.5, seed=19)
    qr = randn(3, 128, 64, dtype=torch.bfloat16, seed=20)
    out = mla_decode(ql, qr, cache, mla_tables, seq_lens, 192**-0.5)
    ref = mla_decode_reference(ql.float(), qr.float(), cache.float(), mla_tables, seq_lens, 192**-0.5)
    torch.testing.assert_close(out, ref.to(torch.bfloat16), **TOL[torch.bfloat16])
