"""The expanded-form MLA prefill kernel equals its torch reference under TRITON_INTERPRET=1 (fp32, fp16):
chunked prefill over a cached prefix, whole prompts, a decode row and a sequence without queries in one
call, tiles that cross the diagonal and tiles that do not, K/V as strided views of one kv_b_proj output,
padded rows past each sequence's length NaN (never read). The torch set's batched reference equals the
per-sequence one, and both equal SDPA with a bottom-right causal mask."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.reference import mla as torch_mla  # noqa: E402
from moeserve.kernels.triton.mla_prefill import (  # noqa: E402
    PrefillTiles,
    mla_prefill_expanded,
    mla_prefill_expanded_reference,
)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}
SCALE = 0.3


def case(qlens, lens, h, dn, r, dv, dtype, seed=0):
    """-> q_nope, q_rope, k_nope, k_rope, v (views of one [B, L, h, dn + dv] tensor), query_start, seq_lens."""
    g = torch.Generator().manual_seed(seed)
    B, L = len(lens), max(lens) + 3
    kv = torch.randn(B, L, h, dn + dv, generator=g).to(dtype)
    k_rope = torch.randn(B, L, r, generator=g).to(dtype)
    for b, n in enumerate(lens):  # rows past a sequence's length are padding nobody may read
        kv[b, n:] = float("nan")
        k_rope[b, n:] = float("nan")
    k_nope, v = kv.split([dn, dv], dim=-1)
    N = sum(qlens)
    q_nope = torch.randn(N, h, dn, generator=g).to(dtype)
    q_rope = torch.randn(N, h, r, generator=g).to(dtype)
    return q_nope, q_rope, k_nope, k_rope, v, torch.tensor([0] + qlens).cumsum(0), torch.tensor(lens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_expanded_prefill_over_a_cached_prefix(dtype):
    # dn = 24, r = 8, dv = 20: not powers of two; a 40-token chunk after 30 cached, a decode row, nothing,
    # a whole 19-token prompt
    args = case([40, 1, 0, 19], [70, 9, 5, 19], h=3, dn=24, r=8, dv=20, dtype=dtype)
    ref = mla_prefill_expanded_reference(*args, SCALE)
    for tiles in (PrefillTiles(16, 16, 4, 1), PrefillTiles(32, 16, 4, 2)):
        out = mla_prefill_expanded(*args, SCALE, tiles=tiles)
        torch.testing.assert_close(out, ref, **TOL[dtype])


def test_expanded_prefill_at_deepseek_head_dims():
    args = case([33, 20], [33, 50], h=2, dn=128, r=64, dv=128, dtype=torch.float16, seed=1)
    torch.testing.assert_close(mla_prefill_expanded(*args, SCALE), mla_prefill_expanded_reference(*args, SCALE),
                               **TOL[torch.float16])  # fmt: skip


def test_empty():
    q_nope, q_rope, k_nope, k_rope, v, _, seq_lens = case([2], [4], h=2, dn=8, r=4, dv=8, dtype=torch.float32)
    out = mla_prefill_expanded(q_nope[:0], q_rope[:0], k_nope, k_rope, v, torch.tensor([0, 0]), seq_lens, SCALE)
    assert out.shape == (0, 2, 8)


def test_torch_set_and_reference_equal_sdpa():
    """The torch set's batched form (padded on the device) and the per-sequence reference against SDPA
    with a bottom-right causal mask on each sequence's keys, rope keys broadcast to every head."""
    q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens = case([5, 1, 7], [9, 4, 7], h=3, dn=6, r=4, dv=5,
                                                                    dtype=torch.float32)  # fmt: skip
    k_nope, k_rope, v = (t.nan_to_num(3.0) for t in (k_nope, k_rope, v))  # the batched form reads padded rows
    batched = torch_mla.mla_prefill_expanded(q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, SCALE, 7)
    reference = mla_prefill_expanded_reference(q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, SCALE)
    for b, L in enumerate(seq_lens.tolist()):
        s, e = query_start[b], query_start[b + 1]
        q = torch.cat([q_nope[s:e], q_rope[s:e]], dim=-1).transpose(0, 1)[None]  # [1, h, n, dn + r]
        k = torch.cat([k_nope[b, :L], k_rope[b, :L, None].expand(L, 3, 4)], dim=-1).transpose(0, 1)[None]
        mask = torch.arange(L)[None, :] <= torch.arange(L - (e - s), L)[:, None]
        expected = F.scaled_dot_product_attention(q, k, v[b, :L].transpose(0, 1)[None], attn_mask=mask, scale=SCALE)
        torch.testing.assert_close(batched[s:e], expected[0].transpose(0, 1))
        torch.testing.assert_close(reference[s:e], expected[0].transpose(0, 1))


@pytest.mark.parametrize("switch, device, kernels", [("", "cpu", True), ("", "cuda", False), ("1", "cuda", True),
                                                     ("0", "cpu", False)])  # fmt: skip
def test_the_switch_sends_mla_prefill_to_the_kernels_or_the_torch_set(monkeypatch, switch, device, kernels):
    """MOESERVE_TRITON_MLA_PREFILL: unset, the Triton set's MLA prefill stays the torch set's on a GPU
    (the kernels are unmeasured there) and runs the kernels elsewhere (the interpreter, so CI checks
    them); 1 / 0 force either."""
    from moeserve.kernels.base import KernelSet
    from moeserve.kernels.triton import mla_decode, mla_prefill
    from moeserve.kernels.triton_set import TritonKernels

    monkeypatch.setenv("MOESERVE_TRITON_MLA_PREFILL", switch)
    calls = []
    monkeypatch.setattr(KernelSet, "mla_prefill", lambda self, *a: calls.append("torch"))
    monkeypatch.setattr(KernelSet, "mla_prefill_expanded", lambda self, *a: calls.append("torch"))
    monkeypatch.setattr(mla_decode, "mla_prefill", lambda *a, **k: calls.append("kernel"))
    monkeypatch.setattr(mla_prefill, "mla_prefill_expanded", lambda *a, **k: calls.append("kernel"))
    x = torch.zeros(1, 1, 1)
    kernel_set = TritonKernels(device)
    kernel_set.mla_prefill(x, x, x, x, x, x, 0.1, 1)
    kernel_set.mla_prefill_expanded(x, x, x, x, x, x, x, 0.1, 1)
    assert calls == ["kernel" if kernels else "torch"] * 2
