"""MLA (DeepSeek-V2/V3) attention in the latent space with absorbed weights, on the paged latent cache:
decode (one or several query tokens per sequence) and prefill over a cached prefix.

Shape legend: N query tokens, B sequences, Q query tokens per sequence (decode; MTP verify: Q > 1),
h local heads, R kv_lora_rank, r qk_rope_head_dim, NB cache blocks, BS block size, C block-table
columns, P context splits, M rows of a tile.
    q_latent  [N, h, R]       q_nope already multiplied by W_uk (decode: [B, h, R] or [B, Q, h, R])
    q_rope    [N, h, r]
    cache     [NB, BS, R + r] per token [latent | rope key], shared by all heads
    out       [N, h, R]       softmax((q_latent . latent + q_rope . rope_key) * scale) @ latent
                              (the caller applies W_uv)
Query token i of sequence b sits at position seq_lens[b] - n_b + (i - first token of b) and sees keys at
positions <= its own (causal, the cached prefix included): decode, MTP verify, chunked prefill alike.

An e4m3 cache (--kv-cache-dtype fp8) is read upcast to the queries' dtype as it is loaded.

Attention is MQA in the latent space, so every (query token, head) pair of a sequence reads the same
keys. A tile is BLOCK_M such pairs of one sequence, consecutive in the flattened [N * h] order (64
heads of one token; or 16 heads x 4 tokens where h = 16): the program reads each key's latent row
once, [BLOCK_N, R] from the cache through the block table, and uses it twice with tensor-core dots,
as the key (scores = q_latent @ latent^T + q_rope @ rope^T, [M, BLOCK_N]) and as the value (acc +=
p @ latent, [M, R] fp32): FlashMLA's layout (64 heads over one latent row) in Triton. Decode programs
are (sequence, row tile, split); prefill tiles come from launch.tile_table over the query starts, so
no launch waits on the device. Long contexts split into P parts per tile (split_combine.num_splits)
and split_combine.combine merges the parts. A tile walks keys up to its last row's position, so
keys past every row of the tile (the causal upper triangle) are never loaded.
Softmax in the log2 domain (exp2) with fp32 statistics and accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import Kernel, online_softmax_tile, pow2, tile_table, upcast
from moeserve.kernels.triton.split_combine import EMPTY, combine, num_splits

LOG2E = 1.4426950408889634


def _mla_kernel(
    ql_ptr, qr_ptr, cache_ptr, tables_ptr, seq_lens_ptr, query_start_ptr, tile_seq_ptr, tile_row_ptr,
    out_ptr, acc_ptr, ml_ptr,
    scale_log2, h, BS, Q, tiles_per_seq,
    sl_n, sl_h, sr_n, sr_h, sc_nb, sc_bs, st_b, so_n, so_h, sa_n, sa_h, sa_p, sm_n, sm_h, sm_p, P,
    UNIFORM: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr, SOFTMAX_TILE: tl.constexpr, R: tl.constexpr,
    RR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_RR: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    part = tl.program_id(1)
    if UNIFORM:  # Q tokens per sequence: sequence b's rows are b * Q * h .. (b + 1) * Q * h
        b = tile // tiles_per_seq
        q_begin = b * Q
        n_q = Q
        first = q_begin * h + (tile % tiles_per_seq) * BLOCK_M
    else:
        b = tl.load(tile_seq_ptr + tile)
        if b < 0:
            return
        first = tl.load(tile_row_ptr + tile)
        q_begin = tl.load(query_start_ptr + b).to(tl.int32)
        n_q = tl.load(query_start_ptr + b + 1).to(tl.int32) - q_begin
    j = first + tl.arange(0, BLOCK_M)  # flattened (token, head) rows
    tok = j // h
    head = j % h
    row_ok = tok < q_begin + n_q
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    past = seq_len - n_q  # cached tokens before the sequence's first query
    q_pos = past + tok - q_begin  # [M]
    last_tok = tl.minimum((first + BLOCK_M - 1) // h, q_begin + n_q - 1)
    hi = past + last_tok - q_begin + 1  # keys the tile's rows see, together
    chunk = ((hi + P - 1) // P + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    start = part * chunk
    stop = tl.minimum(start + chunk, hi)
    c = tl.arange(0, BLOCK_R)
    cr = tl.arange(0, BLOCK_RR)
    # R, r are the model's (512, 64 in DeepSeek-V3): powers of two need no feature masks, which keeps
    # the loads vectorised (a mask against a runtime width would split them into single elements)
    c_ok = c < R if BLOCK_R != R else tl.full([BLOCK_R], 1, tl.int1)
    cr_ok = cr < RR if BLOCK_RR != RR else tl.full([BLOCK_RR], 1, tl.int1)
    tok64 = tok.to(tl.int64)
    ql = tl.load(ql_ptr + tok64[:, None] * sl_n + head[:, None] * sl_h + c[None, :],
                 mask=row_ok[:, None] & c_ok[None, :], other=0.0)  # fmt: skip
    qr = tl.load(qr_ptr + tok64[:, None] * sr_n + head[:, None] * sr_h + cr[None, :],
                 mask=row_ok[:, None] & cr_ok[None, :], other=0.0)  # fmt: skip
    if UPCAST:
        ql = ql.to(tl.float32)
        qr = qr.to(tl.float32)
    m = tl.full([BLOCK_M], EMPTY, tl.float32)
    l = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_R], 0.0, tl.float32)
    table = tables_ptr + b.to(tl.int64) * st_b
    for n0 in range(start, stop, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        ok = pos < stop
        block = tl.load(table + pos // BS, mask=ok, other=0).to(tl.int64)
        rows = cache_ptr + block * sc_nb + (pos % BS).to(tl.int64) * sc_bs  # [BLOCK_N]
        kv = tl.load(rows[:, None] + c[None, :], mask=ok[:, None] & c_ok[None, :], other=0.0).to(ql.dtype)  # [N, R]
        kr = tl.load(rows[None, :] + R + cr[:, None], mask=ok[None, :] & cr_ok[:, None], other=0.0).to(qr.dtype)
        if UPCAST:
            kv = kv.to(tl.float32)
            s = tl.dot(ql, tl.trans(kv), input_precision="ieee")
            s = tl.dot(qr, kr.to(tl.float32), s, input_precision="ieee")
        else:
            s = tl.dot(ql, tl.trans(kv))
            s = tl.dot(qr, kr, s)
        seen = ok[None, :] & (pos[None, :] <= q_pos[:, None])
        s = tl.where(seen, s * scale_log2, float("-inf"))
        m, l, acc = SOFTMAX_TILE(s, kv, m, l, acc, UPCAST)
    mask = row_ok[:, None] & c_ok[None, :]
    if not SPLIT:
        out = acc / tl.where(l > 0.0, l, 1.0)[:, None]
        o_rows = tok64 * so_n + head * so_h
        tl.store(out_ptr + o_rows[:, None] + c[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        a_rows = tok64 * sa_n + head * sa_h + part * sa_p
        tl.store(acc_ptr + a_rows[:, None] + c[None, :], acc, mask=mask)
        ml = ml_ptr + tok64 * sm_n + head * sm_h + part * sm_p
        tl.store(ml, m, mask=row_ok)
        tl.store(ml + 1, l, mask=row_ok)


# the split count, the tiles per sequence and the strides that follow the batch (token count, split
# count, block-table width) change from step to step: one compiled kernel for all of them (launch.Kernel)
mla_kernel = Kernel(_mla_kernel, do_not_specialize=("Q", "tiles_per_seq", "st_b", "sa_n", "sa_h", "sm_n", "sm_h",
                                                    "P"))  # fmt: skip


@dataclass(frozen=True)
class MlaTiles:
    """One launch configuration (tuning knobs: any values give the same result up to fp32 summation
    order). block_m: (token, head) rows per program, a multiple of 16 for the tensor cores, capped at
    the rows of one sequence; block_n: keys per step of the loop."""

    block_m: int = 64
    block_n: int = 16
    num_warps: int = 8
    num_stages: int = 2

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


# Unmeasured on a GPU. At DeepSeek-V3's widths (R 512, r 64, bf16) ptxas for sm_90 holds the 64 x 512 fp32
# accumulator in two warp groups' registers (255 a thread) and spills 4-96 bytes a thread by variant at 16
# keys a step (32 keys: 64-92 bytes, 64 keys: ~260), in 108 KiB of shared memory (docs/kernels.md);
# gpu_check.py --tune times the candidates.
DEFAULT_TILES = MlaTiles()
CANDIDATE_TILES = (MlaTiles(64, 16, 8, 2), MlaTiles(64, 32, 8, 2), MlaTiles(64, 32, 8, 1), MlaTiles(64, 64, 8, 2),
                   MlaTiles(32, 32, 4, 2), MlaTiles(32, 64, 4, 2), MlaTiles(16, 64, 4, 2))  # fmt: skip


def _launch(ql, qr, cache, tables, seq_lens, query_start, tile_seq, tile_row, out, grid_tiles, Q, tiles_per_seq,
            P, scale, uniform, t: MlaTiles, block_m: int):  # fmt: skip
    """ql [N, h, R], qr [N, h, r] (feature dims contiguous) -> out [N, h, R] written (parts merged)."""
    (N, h, R), r = ql.shape, qr.shape[-1]
    acc = torch.empty(N, h, P, R, dtype=torch.float32, device=ql.device) if P > 1 else out
    ml = torch.empty(N, h, P, 2, dtype=torch.float32, device=ql.device) if P > 1 else out
    mla_kernel[(grid_tiles, P)](
        ql, qr, cache, tables, seq_lens, query_start, tile_seq, tile_row, out, acc, ml,
        scale * LOG2E, h, cache.shape[1], Q, tiles_per_seq,
        ql.stride(0), ql.stride(1), qr.stride(0), qr.stride(1), cache.stride(0), cache.stride(1), tables.stride(0),
        out.stride(0), out.stride(1), acc.stride(0), acc.stride(1), acc.stride(2), ml.stride(0), ml.stride(1),
        ml.stride(2), P,
        UNIFORM=uniform, SPLIT=P > 1, UPCAST=upcast(ql.dtype) or cache.dtype == torch.float32,
        SOFTMAX_TILE=online_softmax_tile(), R=R, RR=r, BLOCK_M=block_m, BLOCK_N=t.block_n, BLOCK_R=pow2(R, 16),
        BLOCK_RR=pow2(r, 16), num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return combine(acc, ml, out) if P > 1 else out


def _check(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor) -> None:
    R, r = q_latent.shape[-1], q_rope.shape[-1]
    assert cache.shape[-1] == R + r, f"cache rows of {cache.shape[-1]} are not latent {R} + rope {r}"
    assert q_latent.stride(-1) == q_rope.stride(-1) == cache.stride(-1) == 1, "feature dims must be contiguous"


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    splits: int | None = None,
    tiles: MlaTiles | None = None,
) -> torch.Tensor:
    """q_latent [B, h, R] or [B, Q, h, R] (Q query tokens per sequence, at positions seq_lens - Q ..
    seq_lens - 1: MTP verify); q_rope [B, h, r] or [B, Q, h, r]; cache [NB, BS, R + r]; block_tables
    [B, C] int; seq_lens [B] int -> out shaped as q_latent, in its dtype.
    splits: parts of the context per sequence (None: from the shapes, split_combine.num_splits)."""
    _check(q_latent, q_rope, cache)
    shape = q_latent.shape
    B, h, R = shape[0], shape[-2], shape[-1]
    Q = shape[1] if q_latent.dim() == 4 else 1
    out = torch.empty(shape, dtype=q_latent.dtype, device=q_latent.device)
    if B == 0 or Q == 0:
        return out
    ql, qr = q_latent.reshape(B * Q, h, R), q_rope.reshape(B * Q, h, q_rope.shape[-1])
    t = tiles or DEFAULT_TILES
    block_m = min(t.block_m, pow2(Q * h, 16))
    tiles_per_seq = -(-Q * h // block_m)
    P = num_splits(B * tiles_per_seq, block_tables.shape[1] * cache.shape[1], splits)
    flat = out.view(B * Q, h, R)
    _launch(ql, qr, cache, block_tables, seq_lens, seq_lens, seq_lens, seq_lens, flat, B * tiles_per_seq, Q,
            tiles_per_seq, P, scale, True, t, block_m)  # fmt: skip
    return out


def mla_prefill(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    splits: int | None = None,
    tiles: MlaTiles | None = None,
) -> torch.Tensor:
    """Any mix of prefills over a cached prefix (chunked prefill), decodes and MTP verifies, in the
    latent space. q_latent [N, h, R]; q_rope [N, h, r]; query_start [B + 1] int (query_start[0] = 0):
    sequence b's queries are rows query_start[b] .. query_start[b + 1], the last of its seq_lens[b]
    positions; block_tables [B, C] -> out [N, h, R] in q_latent's dtype. No mask is built: each row's
    causal limit is its position. splits: None = 1 (prefill tiles fill the device), else that many."""
    _check(q_latent, q_rope, cache)
    (N, h, R), B = q_latent.shape, block_tables.shape[0]
    out = torch.empty_like(q_latent)
    if N == 0:
        return out
    t = tiles or DEFAULT_TILES
    block_m = t.block_m
    tile_seq, tile_row = tile_table(query_start[1:] * h, block_m, N * h // block_m + B)
    P = max(1, splits or 1)
    return _launch(q_latent, q_rope, cache, block_tables, seq_lens, query_start, tile_seq, tile_row, out,
                   tile_seq.shape[0], 1, 1, P, scale, False, t, block_m)  # fmt: skip


def mla_reference(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """`mla_prefill` in plain torch (fp32 math), one sequence at a time: the oracle of both kernels."""
    R, BS = q_latent.shape[-1], cache.shape[1]
    out = torch.empty_like(q_latent)
    starts = query_start.tolist()
    for b, L in enumerate(seq_lens.tolist()):
        s, e = starts[b], starts[b + 1]
        if e == s:
            continue
        pos = torch.arange(L, device=cache.device)
        keys = cache[block_tables[b, pos // BS].long(), pos % BS].float()  # [L, R + r]
        q = torch.cat([q_latent[s:e], q_rope[s:e]], dim=-1).float()  # [n, h, R + r]
        scores = torch.einsum("nhc,lc->nhl", q, keys) * scale
        q_pos = torch.arange(L - (e - s), L, device=cache.device)
        scores = scores.masked_fill(pos[None, None, :] > q_pos[:, None, None], float("-inf"))
        out[s:e] = torch.einsum("nhl,lr->nhr", torch.softmax(scores, dim=-1), keys[:, :R]).to(q_latent.dtype)
    return out


def mla_decode_reference(q_latent, q_rope, cache, block_tables, seq_lens, scale):
    """`mla_decode` in plain torch (fp32 math): [B, h, R] or [B, Q, h, R] queries."""
    B, h, R = q_latent.shape[0], q_latent.shape[-2], q_latent.shape[-1]
    Q = q_latent.shape[1] if q_latent.dim() == 4 else 1
    query_start = torch.arange(B + 1, device=seq_lens.device) * Q
    out = mla_reference(q_latent.reshape(B * Q, h, R), q_rope.reshape(B * Q, h, -1), cache, block_tables,
                        query_start, seq_lens, scale)  # fmt: skip
    return out.view(q_latent.shape)
