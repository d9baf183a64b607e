"""Paged decode attention (MHA/GQA) reading the block tables in place (prefill and mixed steps:
paged_prefill.py).

Shape legend: N query tokens, B sequences, hq / hk query / KV heads (G = hq / hk), D head dim, NB cache
blocks, BS block size, C block-table columns, P context splits.
    k_cache, v_cache  [NB, BS, hk, D]   already holding this step's K/V
    block_tables      [B, C] int        block of each sequence's positions c * BS .. c * BS + BS - 1
    seq_lens          [B] int           context length, this step's tokens included
sliding_window: a query at position p sees keys at positions > p - sliding_window (HF semantics).
An e4m3 cache (--kv-cache-dtype fp8) is read upcast to the queries' dtype as it is loaded.
sinks: [hq] fp32 attention-sink logits (gpt-oss) or None: each query head's sink joins its softmax's
denominator and adds nothing to the output. The online softmax starts from it (running max = the sink,
sum = 1, accumulator 0), in the first split only when the context is split.

Decode (`_decode_kernel`): program (sequence, KV head, split) takes the G query heads sharing the KV
head as the rows of one tile (padded to 16 for the tensor cores), so each key is read once for all
of them, and runs an online softmax over its part of the context, BLOCK_N keys at a time: a key's
block comes from the table (positions // BS), its row from positions % BS. With P > 1 splits (long
contexts, few sequences) each part writes an unnormalised partial and split_combine.py merges them.
Softmax runs in the log2 domain (exp2) with fp32 statistics and accumulator.
"""

from __future__ import annotations

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import Kernel, online_softmax_tile, pow2, upcast
from moeserve.kernels.triton.split_combine import EMPTY, combine, num_splits

LOG2E = 1.4426950408889634


def _decode_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, seq_lens_ptr, sinks_ptr, out_ptr, acc_ptr, ml_ptr,
    scale_log2, window, G, D, BS,
    sq_b, sq_h, sk_nb, sk_bs, sk_h, sv_nb, sv_bs, sv_h, st_b, so_b, so_h, sa_b, sa_h, sa_p, sm_b, sm_h, sm_p, P,
    SPLIT: tl.constexpr, UPCAST: tl.constexpr, SOFTMAX_TILE: tl.constexpr, SINKS: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    part = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    lo = tl.where(window > 0, tl.maximum(seq_len - window, 0), 0)
    chunk = ((seq_len - lo + P - 1) // P + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    start = lo + part * chunk
    stop = tl.minimum(start + chunk, seq_len)
    g = tl.arange(0, BLOCK_G)
    g_ok = g < G
    heads = kvh * G + g
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(q_ptr + b * sq_b + heads[:, None] * sq_h + d[None, :], mask=g_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m = tl.full([BLOCK_G], EMPTY, tl.float32)
    l = tl.full([BLOCK_G], 0.0, tl.float32)
    if SINKS:  # the sink counts once: in the first split
        sink = tl.load(sinks_ptr + heads, mask=g_ok, other=0.0).to(tl.float32) * 1.4426950408889634
        m = tl.where(part == 0, sink, m)
        l = tl.where(part == 0, 1.0, l)
    acc = tl.full([BLOCK_G, BLOCK_D], 0.0, tl.float32)
    table = tables_ptr + b.to(tl.int64) * st_b
    for n0 in range(start, stop, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        ok = pos < stop
        block = tl.load(table + pos // BS, mask=ok, other=0).to(tl.int64)
        row = (pos % BS).to(tl.int64)
        kt = tl.load(k_ptr + block[None, :] * sk_nb + row[None, :] * sk_bs + kvh * sk_h + d[:, None],
                     mask=ok[None, :] & d_ok[:, None], other=0.0).to(q.dtype)  # [BLOCK_D, BLOCK_N]  # fmt: skip
        v = tl.load(v_ptr + block[:, None] * sv_nb + row[:, None] * sv_bs + kvh * sv_h + d[None, :],
                    mask=ok[:, None] & d_ok[None, :], other=0.0).to(q.dtype)  # [BLOCK_N, BLOCK_D]  # fmt: skip
        if UPCAST:
            s = tl.dot(q, kt.to(tl.float32), input_precision="ieee")
        else:
            s = tl.dot(q, kt)
        s = tl.where(ok[None, :], s * scale_log2, float("-inf"))
        m, l, acc = SOFTMAX_TILE(s, v, m, l, acc, UPCAST)
    if not SPLIT:
        out = acc / tl.where(l > 0.0, l, 1.0)[:, None]
        tl.store(out_ptr + b * so_b + heads[:, None] * so_h + d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=g_ok[:, None] & d_ok[None, :])  # fmt: skip
    else:
        tl.store(acc_ptr + b * sa_b + heads[:, None] * sa_h + part * sa_p + d[None, :], acc,
                 mask=g_ok[:, None] & d_ok[None, :])  # fmt: skip
        ml = ml_ptr + b * sm_b + heads * sm_h + part * sm_p
        tl.store(ml, m, mask=g_ok)
        tl.store(ml + 1, l, mask=g_ok)


# the split count and the strides that follow it or the batch's block-table width change from step to
# step: one compiled kernel for all of them (launch.Kernel)
decode_kernel = Kernel(_decode_kernel, do_not_specialize=("P", "st_b", "sa_b", "sa_h", "sm_b", "sm_h"))


def _sinks(sinks: torch.Tensor | None, q: torch.Tensor, hq: int) -> torch.Tensor:
    """The kernels' sinks pointer: sinks [hq] fp32 contiguous, or q when there are none (never read)."""
    if sinks is None:
        return q
    assert sinks.shape == (hq,), f"sinks {tuple(sinks.shape)} for {hq} query heads"
    return sinks.float().contiguous()


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int]:
    hq, hk = q.shape[1], k_cache.shape[2]
    assert hq % hk == 0, f"{hq} query heads do not split over {hk} KV heads"
    assert k_cache.stride(-1) == v_cache.stride(-1) == q.stride(-1) == 1, "head dims must be contiguous"
    return hq // hk, hk


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    splits: int | None = None,
    block_n: int = 64,
    num_warps: int = 4,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [B, hq, D], one query per sequence at position seq_lens[b] - 1; sinks [hq] fp32 or None
    -> out [B, hq, D] in q's dtype.
    splits: parts of the context per sequence (None: from the shapes, split_combine.num_splits)."""
    (B, hq, D), BS = q.shape, k_cache.shape[1]
    out = torch.empty_like(q)
    if B == 0:
        return out
    G, hk = _check(q, k_cache, v_cache)
    window = sliding_window or 0
    longest = block_tables.shape[1] * BS if not window else min(window, block_tables.shape[1] * BS)
    P = num_splits(B * hk, longest, splits)
    acc = torch.empty(B, hq, P, D, dtype=torch.float32, device=q.device) if P > 1 else out
    ml = torch.empty(B, hq, P, 2, dtype=torch.float32, device=q.device) if P > 1 else out
    decode_kernel[(B, hk, P)](
        q, k_cache, v_cache, block_tables, seq_lens, _sinks(sinks, q, hq), out, acc, ml,
        scale * LOG2E, window, G, D, BS,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0), out.stride(0), out.stride(1),
        acc.stride(0), acc.stride(1), acc.stride(2), ml.stride(0), ml.stride(1), ml.stride(2), P,
        SPLIT=P > 1, UPCAST=upcast(q.dtype), SOFTMAX_TILE=online_softmax_tile(), SINKS=sinks is not None,
        BLOCK_G=pow2(G, 16), BLOCK_N=block_n, BLOCK_D=pow2(D, 16),
        num_warps=num_warps,
    )  # fmt: skip
    return combine(acc, ml, out) if P > 1 else out


def _context(cache: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    """cache [NB, BS, ...]; table [C] -> the first `length` positions [length, ...]."""
    pos = torch.arange(length, device=cache.device)
    return cache[table[pos // cache.shape[1]].long(), pos % cache.shape[1]]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, scale: float, window: int | None,
            sinks: torch.Tensor | None = None):
    """q [n, hq, D] at positions q_pos [n]; k, v [L, hk, D] at 0..L-1; sinks [hq] or None -> [n, hq, D]
    (fp32 math)."""
    G = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(G, dim=1), v.float().repeat_interleave(G, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q.float(), k) * scale
    k_pos = torch.arange(k.shape[0], device=q.device)
    seen = k_pos[None, :] <= q_pos[:, None]
    if window:
        seen &= k_pos[None, :] > q_pos[:, None] - window
    scores = scores.masked_fill(~seen, float("-inf"))
    if sinks is not None:  # one more logit per head in the softmax, its probability dropped
        sink = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hnl,lhd->nhd", probs, v).to(q.dtype)


def paged_decode_reference(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window=None, sinks=None):
    """`paged_decode` in plain torch, one sequence at a time."""
    out = torch.empty_like(q)
    for b, L in enumerate(seq_lens.tolist()):
        k, v = _context(k_cache, block_tables[b], L), _context(v_cache, block_tables[b], L)
        out[b] = _attend(q[b : b + 1], k, v, torch.tensor([L - 1], device=q.device), scale, sliding_window, sinks)[0]
    return out
