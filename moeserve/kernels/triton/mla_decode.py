"""MLA decode (DeepSeek-V2/V3) on the latent cache with absorbed weights.

Shape legend: B sequences (one new token each), h local heads, R kv_lora_rank, r qk_rope_head_dim,
NB cache blocks, BS block size, C block-table columns, P context splits.
    q_latent  [B, h, R]       q_nope already multiplied by W_uk
    q_rope    [B, h, r]
    cache     [NB, BS, R + r] per token [latent | rope key], shared by all heads
    out       [B, h, R]       softmax((q_latent . latent + q_rope . rope_key) * scale) @ latent
                              (the caller applies W_uv)
Attention is MQA in the latent space: program (sequence, block of BLOCK_H heads, split) loads each
key's latent once, uses it as the key (scores) and as the value (output), for all BLOCK_H heads. At
DeepSeek-V3's R = 512 the latent tile is the whole row, so a key costs one read of R + r values for
every head of the block. Long contexts split as in paged decode (split_combine.py).
"""

from __future__ import annotations

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import MAX, SUM, Kernel, pow2, upcast
from moeserve.kernels.triton.split_combine import EMPTY, combine, num_splits

LOG2E = 1.4426950408889634


def _mla_decode_kernel(
    ql_ptr, qr_ptr, cache_ptr, tables_ptr, seq_lens_ptr, out_ptr, acc_ptr, ml_ptr,
    scale_log2, H, R, RR, BS,
    sl_b, sl_h, sr_b, sr_h, sc_nb, sc_bs, st_b, so_b, so_h, sa_b, sa_h, sa_p, sm_b, sm_h, sm_p, P,
    SPLIT: tl.constexpr, UPCAST: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_RR: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    part = tl.program_id(2)
    h_ok = heads < H
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    chunk = ((seq_len + P - 1) // P + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    start = part * chunk
    stop = tl.minimum(start + chunk, seq_len)
    c = tl.arange(0, BLOCK_R)
    c_ok = c < R
    cr = tl.arange(0, BLOCK_RR)
    cr_ok = cr < RR
    ql = tl.load(ql_ptr + b * sl_b + heads[:, None] * sl_h + c[None, :], mask=h_ok[:, None] & c_ok[None, :],
                 other=0.0)  # fmt: skip
    qr = tl.load(qr_ptr + b * sr_b + heads[:, None] * sr_h + cr[None, :], mask=h_ok[:, None] & cr_ok[None, :],
                 other=0.0)  # fmt: skip
    if UPCAST:
        ql = ql.to(tl.float32)
        qr = qr.to(tl.float32)
    m = tl.full([BLOCK_H], EMPTY, tl.float32)
    l = tl.full([BLOCK_H], 0.0, tl.float32)
    acc = tl.full([BLOCK_H, BLOCK_R], 0.0, tl.float32)
    table = tables_ptr + b.to(tl.int64) * st_b
    for n0 in range(start, stop, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        ok = pos < stop
        block = tl.load(table + pos // BS, mask=ok, other=0).to(tl.int64)
        rows = cache_ptr + block * sc_nb + (pos % BS).to(tl.int64) * sc_bs  # [BLOCK_N]
        kv = tl.load(rows[:, None] + c[None, :], mask=ok[:, None] & c_ok[None, :], other=0.0)  # [N, R]
        kr = tl.load(rows[None, :] + R + cr[:, None], mask=ok[None, :] & cr_ok[:, None], other=0.0)  # [r, N]
        if UPCAST:
            kv = kv.to(tl.float32)
            s = tl.dot(ql, tl.trans(kv), input_precision="ieee")
            s = tl.dot(qr, kr.to(tl.float32), s, input_precision="ieee")
        else:
            s = tl.dot(ql, tl.trans(kv))
            s = tl.dot(qr, kr, s)
        s = tl.where(ok[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.reduce(s, 1, MAX))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.reduce(p, 1, SUM)
        if UPCAST:
            acc = tl.dot(p, kv, acc * alpha[:, None], input_precision="ieee")
        else:
            acc = tl.dot(p.to(kv.dtype), kv, acc * alpha[:, None])
        m = m_new
    mask = h_ok[:, None] & c_ok[None, :]
    if not SPLIT:
        out = acc / tl.where(l > 0.0, l, 1.0)[:, None]
        tl.store(out_ptr + b * so_b + heads[:, None] * so_h + c[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(acc_ptr + b * sa_b + heads[:, None] * sa_h + part * sa_p + c[None, :], acc, mask=mask)
        ml = ml_ptr + b * sm_b + heads * sm_h + part * sm_p
        tl.store(ml, m, mask=h_ok)
        tl.store(ml + 1, l, mask=h_ok)


# as paged_attention.decode_kernel: the split count and the strides that follow it or the block-table
# width are not specialized
mla_decode_kernel = Kernel(_mla_decode_kernel, do_not_specialize=("P", "st_b", "sa_b", "sa_h", "sm_b", "sm_h"))


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    splits: int | None = None,
    block_h: int = 16,
    block_n: int = 32,
    num_warps: int = 8,
) -> torch.Tensor:
    """q_latent [B, h, R]; q_rope [B, h, r]; cache [NB, BS, R + r]; block_tables [B, C] int; seq_lens
    [B] int (the query at position seq_lens - 1) -> out [B, h, R] in q_latent's dtype.
    splits: parts of the context per sequence (None: from the shapes, split_combine.num_splits)."""
    (B, h, R), r, BS = q_latent.shape, q_rope.shape[-1], cache.shape[1]
    assert cache.shape[-1] == R + r, f"cache rows of {cache.shape[-1]} are not latent {R} + rope {r}"
    assert q_latent.stride(-1) == q_rope.stride(-1) == cache.stride(-1) == 1, "feature dims must be contiguous"
    out = torch.empty_like(q_latent)
    if B == 0:
        return out
    block_h = pow2(min(block_h, h), 16)
    head_blocks = -(-h // block_h)
    P = num_splits(B * head_blocks, block_tables.shape[1] * BS, splits)
    acc = torch.empty(B, h, P, R, dtype=torch.float32, device=cache.device) if P > 1 else out
    ml = torch.empty(B, h, P, 2, dtype=torch.float32, device=cache.device) if P > 1 else out
    mla_decode_kernel[(B, head_blocks, P)](
        q_latent, q_rope, cache, block_tables, seq_lens, out, acc, ml,
        scale * LOG2E, h, R, r, BS,
        q_latent.stride(0), q_latent.stride(1), q_rope.stride(0), q_rope.stride(1), cache.stride(0), cache.stride(1),
        block_tables.stride(0), out.stride(0), out.stride(1),
        acc.stride(0), acc.stride(1), acc.stride(2), ml.stride(0), ml.stride(1), ml.stride(2), P,
        SPLIT=P > 1, UPCAST=upcast(cache.dtype) or q_latent.dtype != cache.dtype, BLOCK_H=block_h, BLOCK_N=block_n,
        BLOCK_R=pow2(R, 16), BLOCK_RR=pow2(r, 16), num_warps=num_warps,
    )  # fmt: skip
    return combine(acc, ml, out) if P > 1 else out


def mla_decode_reference(q_latent, q_rope, cache, block_tables, seq_lens, scale):
    """`mla_decode` in plain torch (fp32 math), one sequence at a time."""
    R, BS = q_latent.shape[-1], cache.shape[1]
    out = torch.empty_like(q_latent)
    for b, L in enumerate(seq_lens.tolist()):
        pos = torch.arange(L, device=cache.device)
        keys = cache[block_tables[b, pos // BS].long(), pos % BS].float()  # [L, R + r]
        q = torch.cat([q_latent[b], q_rope[b]], dim=-1).float()  # [h, R + r]
        probs = torch.softmax(q @ keys.T * scale, dim=-1)
        out[b] = (probs @ keys[:, :R]).to(q_latent.dtype)
    return out
