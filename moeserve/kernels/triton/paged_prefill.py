"""Paged prefill and mixed-step attention (MHA/GQA) over the block tables: FlashAttention-2 in Triton,
with sliding windows and attention sinks.

Shape legend: N query tokens, B sequences, hq / hk query / KV heads (G = hq / hk), D head dim, NB cache
blocks, BS block size, C block-table columns, M rows of a tile.
    q                 [N, hq, D]         sequence b's queries are rows query_start[b] .. query_start[b + 1]
    k_cache, v_cache  [NB, BS, hk, D]    already holding this step's K/V
    block_tables      [B, C] int         block of each sequence's positions c * BS .. c * BS + BS - 1
    seq_lens          [B] int            context length, this step's tokens included
Query token t of a sequence with n new tokens sits at position seq_len - n + t (a cached prefix before
it: chunked prefill; n = 1: a decode row of a mixed step) and sees keys at positions <= its own, and
> its own - sliding_window with a window (HF semantics). sinks: [hq] fp32 attention-sink logits (gpt-oss)
or None: each query head's sink joins its softmax's denominator and adds nothing to the output. An e4m3
cache (--kv-cache-dtype fp8) is read upcast to the queries' dtype as it is loaded.

Program (tile, KV head): a tile is BLOCK_M consecutive (token, query head of the KV head) rows of one
sequence in the flattened [N x G] order, so each key and value a program loads serves the G query heads
that share it (GQA packed into the rows), and a decode row costs G rows, not a whole tile. Keys are read
straight from the cache, BLOCK_N at a time (block id from the table, row from the position). The key
range splits in three loops: the window's edge (masked), the keys every row of the tile sees
(unmasked), the diagonal (masked); keys past the tile's last query and before its first query's window
are never loaded. The online softmax runs in the log2 domain (exp2) with fp32 statistics and
accumulator, and starts from the sink (max = sink, sum = 1). Tiles map to sequences through
launch.tile_table, so no launch waits on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import Kernel, online_softmax_tile, pow2, tile_table, upcast

LOG2E = 1.4426950408889634


def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, query_start_ptr, seq_lens_ptr, tile_seq_ptr, tile_row_ptr, sinks_ptr, out_ptr,
    scale_log2, window, G, BS,
    sq_n, sq_h, sk_nb, sk_bs, sk_h, sv_nb, sv_bs, sv_h, st_b, so_n, so_h,
    UPCAST: tl.constexpr, SOFTMAX_TILE: tl.constexpr, SINKS: tl.constexpr, D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    kvh = tl.program_id(1)
    b = tl.load(tile_seq_ptr + tile)
    if b < 0:
        return
    first = tl.load(tile_row_ptr + tile)  # the tile's first row, token * G + g over the step's N * G rows
    q_begin = tl.load(query_start_ptr + b).to(tl.int32)
    q_end = tl.load(query_start_ptr + b + 1).to(tl.int32)
    past = tl.load(seq_lens_ptr + b).to(tl.int32) - (q_end - q_begin)  # cached tokens before the queries
    j = first + tl.arange(0, BLOCK_M)
    tok = j // G
    head = kvh * G + j % G
    row_ok = tok < q_end
    q_pos = past + tok - q_begin  # [M]
    p_first = past + first // G - q_begin
    p_last = past + tl.minimum((first + BLOCK_M - 1) // G, q_end - 1) - q_begin
    hi = p_last + 1  # keys past the tile's last query: never loaded
    lo = tl.where(window > 0, tl.maximum(p_first - window + 1, 0), 0)  # the first key any row sees
    full_lo = tl.where(window > 0, tl.minimum(tl.maximum(p_last - window + 1, lo), hi), 0)  # ... every row sees
    full_hi = full_lo + tl.maximum(p_first + 1 - full_lo, 0) // BLOCK_N * BLOCK_N  # whole tiles every row sees
    oldest = tl.where(window > 0, q_pos - window, -1)  # [M]: the newest key each row may not see
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D if BLOCK_D != D else tl.full([BLOCK_D], 1, tl.int1)  # D a power of two: loads stay vectorised
    tok64 = tok.to(tl.int64)
    q = tl.load(q_ptr + tok64[:, None] * sq_n + head[:, None] * sq_h + d[None, :], mask=row_ok[:, None] & d_ok[None, :],
                other=0.0)  # fmt: skip
    if UPCAST:
        q = q.to(tl.float32)
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l = tl.full([BLOCK_M], 0.0, tl.float32)
    if SINKS:
        m = tl.load(sinks_ptr + head, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
        l = tl.full([BLOCK_M], 1.0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_D], 0.0, tl.float32)
    table = tables_ptr + b.to(tl.int64) * st_b
    k_head = k_ptr + kvh * sk_h
    v_head = v_ptr + kvh * sv_h
    for phase in tl.static_range(3):  # 0: the window's edge, masked; 1: keys every row sees; 2: the diagonal
        start = lo if phase == 0 else (full_lo if phase == 1 else full_hi)
        stop = full_lo if phase == 0 else (full_hi if phase == 1 else hi)
        for n0 in range(start, stop, BLOCK_N):
            pos = n0 + tl.arange(0, BLOCK_N)
            ok = pos < stop
            block = tl.load(table + pos // BS, mask=ok, other=0).to(tl.int64)
            row = (pos % BS).to(tl.int64)
            kt = tl.load(k_head + block[None, :] * sk_nb + row[None, :] * sk_bs + d[:, None],
                         mask=ok[None, :] & d_ok[:, None], other=0.0).to(q.dtype)  # [D, N]  # fmt: skip
            vv = tl.load(v_head + block[:, None] * sv_nb + row[:, None] * sv_bs + d[None, :],
                         mask=ok[:, None] & d_ok[None, :], other=0.0).to(q.dtype)  # [N, D]  # fmt: skip
            if UPCAST:
                s = tl.dot(q, kt.to(tl.float32), input_precision="ieee")
            else:
                s = tl.dot(q, kt)
            s = s * scale_log2
            if phase != 1:
                seen = ok[None, :] & (pos[None, :] <= q_pos[:, None]) & (pos[None, :] > oldest[:, None])
                s = tl.where(seen, s, float("-inf"))
            m, l, acc = SOFTMAX_TILE(s, vv, m, l, acc, UPCAST)
    out = acc / tl.where(l > 0.0, l, 1.0)[:, None]
    o_rows = tok64 * so_n + head * so_h
    tl.store(out_ptr + o_rows[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])  # fmt: skip


# the block-table width follows the batch: one compiled kernel for every width (launch.Kernel)
prefill_kernel = Kernel(_prefill_kernel, do_not_specialize=("st_b",))


@dataclass(frozen=True)
class PrefillTiles:
    """rows x keys a step, warps, stages (tuning knobs; any values give the same result up to fp32
    summation order). block_m is the most rows a tile takes: a step with fewer rows per sequence
    (verifies, decode rows) takes fewer, at least 16 for the tensor cores."""

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 2

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


# Unmeasured on a GPU: FlashAttention-2's usual Triton tiles for 128-wide heads. At D = 128, bf16, ptxas for
# sm_90 uses 222 registers a thread, no spill, 96 KiB of shared memory (128 x 128: 64 bytes of spill).
DEFAULT_TILES = PrefillTiles()
CANDIDATE_TILES = (PrefillTiles(128, 64, 8, 2), PrefillTiles(128, 64, 8, 3), PrefillTiles(128, 128, 8, 2),
                   PrefillTiles(64, 64, 4, 2), PrefillTiles(64, 64, 4, 3))  # fmt: skip


def _sinks(sinks: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """The kernel's sinks pointer: sinks [hq] fp32 contiguous, or q when there are none (never read)."""
    if sinks is None:
        return q
    assert sinks.shape == (q.shape[1],), f"sinks {tuple(sinks.shape)} for {q.shape[1]} query heads"
    return sinks.float().contiguous()


def paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    tiles: PrefillTiles | None = None,
) -> torch.Tensor:
    """q [N, hq, D]; query_start [B + 1] int (query_start[0] = 0): sequence b's queries are rows
    query_start[b] .. query_start[b + 1], the last of its seq_lens[b] positions; causal, with a sliding
    window; sinks [hq] fp32 or None -> out [N, hq, D] in q's dtype. Any mix of prefills, chunks over a
    cached prefix and decode rows."""
    (N, hq, D), hk, B = q.shape, k_cache.shape[2], block_tables.shape[0]
    assert hq % hk == 0, f"{hq} query heads do not split over {hk} KV heads"
    assert k_cache.stride(-1) == v_cache.stride(-1) == q.stride(-1) == 1, "head dims must be contiguous"
    out = torch.empty_like(q)
    if N == 0:
        return out
    G, t = hq // hk, tiles or DEFAULT_TILES
    block_m = min(t.block_m, pow2(-(-N * G // max(B, 1)), 16))  # from host shapes: rows a sequence, on average
    tile_seq, tile_row = tile_table(query_start[1:] * G, block_m, N * G // block_m + B)
    prefill_kernel[(tile_seq.shape[0], hk)](
        q, k_cache, v_cache, block_tables, query_start, seq_lens, tile_seq, tile_row, _sinks(sinks, q), out,
        scale * LOG2E, sliding_window or 0, G, k_cache.shape[1],
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0), out.stride(0), out.stride(1),
        UPCAST=upcast(q.dtype), SOFTMAX_TILE=online_softmax_tile(), SINKS=sinks is not None, D=D, BLOCK_M=block_m,
        BLOCK_N=t.block_n, BLOCK_D=pow2(D, 16), num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out


def paged_prefill_reference(q, k_cache, v_cache, block_tables, query_start, seq_lens, scale, sliding_window=None,
                            sinks=None):  # fmt: skip
    """`paged_prefill` in plain torch (fp32 math), one sequence at a time."""
    hq, hk, BS = q.shape[1], k_cache.shape[2], k_cache.shape[1]
    out = torch.empty_like(q)
    starts = query_start.tolist()
    for b, L in enumerate(seq_lens.tolist()):
        s, e = starts[b], starts[b + 1]
        if e == s:
            continue
        pos = torch.arange(L, device=q.device)
        blocks = block_tables[b, pos // BS].long()
        k = k_cache[blocks, pos % BS].float().repeat_interleave(hq // hk, dim=1)  # [L, hq, D]
        v = v_cache[blocks, pos % BS].float().repeat_interleave(hq // hk, dim=1)
        scores = torch.einsum("nhd,lhd->hnl", q[s:e].float(), k) * scale
        q_pos = torch.arange(L - (e - s), L, device=q.device)
        seen = pos[None, :] <= q_pos[:, None]
        if sliding_window:
            seen &= pos[None, :] > q_pos[:, None] - sliding_window
        scores = scores.masked_fill(~seen, float("-inf"))
        if sinks is not None:  # one more logit per head in the softmax, its probability dropped
            sink = sinks.float()[:, None, None].expand(-1, e - s, 1)
            probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        out[s:e] = torch.einsum("hnl,lhd->nhd", probs, v).to(q.dtype)
    return out
