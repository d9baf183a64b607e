"""MLA (DeepSeek-V2/V3) prefill in the expanded form: per-head keys and values from kv_b_proj, for long
prompts, where the latent-space form (mla_decode.mla_prefill) costs more FLOPs.

Shape legend: N query tokens, B sequences, L keys per sequence (padded), h local heads, dn
qk_nope_head_dim, r qk_rope_head_dim, dv v_head_dim, M query rows of a tile.
    q_nope  [N, h, dn]      q_rope [N, h, r]     (rotated)
    k_nope  [B, L, h, dn]   k_rope [B, L, r]     (rotated, shared by all heads)   v [B, L, h, dv]
    out     [N, h, dv]      softmax((q_nope . k_nope + q_rope . k_rope) * scale) @ v
Sequence b's queries are rows query_start[b] .. query_start[b + 1], the last of its seq_lens[b]
positions (a cached prefix before them); query t sees keys at positions <= its own. k / v may be any
strided views (kv_b_proj's output split into k_nope and v is one): only the last dim must be contiguous.

FlashAttention-2 in Triton: program (tile of BLOCK_M query tokens of one sequence, head) keeps its
queries in registers and walks key tiles with an online softmax (exp2, fp32 statistics and
accumulator). Keys past the tile's last query are never loaded (causal tile skipping), and key
tiles every row of the tile sees run without a mask; only the tiles that cross the diagonal are
masked. Tiles map to sequences through launch.tile_table, so no launch waits on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import Kernel, online_softmax_tile, pow2, tile_table, upcast

LOG2E = 1.4426950408889634


def _mla_expanded_kernel(
    qn_ptr, qr_ptr, kn_ptr, kr_ptr, v_ptr, query_start_ptr, seq_lens_ptr, tile_seq_ptr, tile_row_ptr, out_ptr,
    scale_log2,
    sqn_n, sqn_h, sqr_n, sqr_h, skn_b, skn_l, skn_h, skr_b, skr_l, sv_b, sv_l, sv_h, so_n, so_h,
    UPCAST: tl.constexpr, SOFTMAX_TILE: tl.constexpr, DN: tl.constexpr, RR: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DN: tl.constexpr, BLOCK_RR: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.load(tile_seq_ptr + tile)
    if b < 0:
        return
    first = tl.load(tile_row_ptr + tile)
    q_begin = tl.load(query_start_ptr + b).to(tl.int32)
    q_end = tl.load(query_start_ptr + b + 1).to(tl.int32)
    past = tl.load(seq_lens_ptr + b).to(tl.int32) - (q_end - q_begin)
    tok = first + tl.arange(0, BLOCK_M)
    row_ok = tok < q_end
    q_pos = past + tok - q_begin  # [M]
    hi = past + tl.minimum(first + BLOCK_M, q_end) - q_begin  # keys up to the tile's last query
    full = (past + first - q_begin + 1) // BLOCK_N * BLOCK_N  # key tiles below it every row sees
    dn = tl.arange(0, BLOCK_DN)
    dr = tl.arange(0, BLOCK_RR)
    dv = tl.arange(0, BLOCK_DV)
    # head dims are the model's (128, 64, 128 in DeepSeek-V3): at powers of two no feature mask, so loads vectorise
    dn_ok = dn < DN if BLOCK_DN != DN else tl.full([BLOCK_DN], 1, tl.int1)
    dr_ok = dr < RR if BLOCK_RR != RR else tl.full([BLOCK_RR], 1, tl.int1)
    dv_ok = dv < DV if BLOCK_DV != DV else tl.full([BLOCK_DV], 1, tl.int1)
    tok64 = tok.to(tl.int64)
    qn = tl.load(qn_ptr + tok64[:, None] * sqn_n + head * sqn_h + dn[None, :], mask=row_ok[:, None] & dn_ok[None, :],
                 other=0.0)  # fmt: skip
    qr = tl.load(qr_ptr + tok64[:, None] * sqr_n + head * sqr_h + dr[None, :], mask=row_ok[:, None] & dr_ok[None, :],
                 other=0.0)  # fmt: skip
    if UPCAST:
        qn = qn.to(tl.float32)
        qr = qr.to(tl.float32)
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_DV], 0.0, tl.float32)
    b64 = b.to(tl.int64)
    kn_base = kn_ptr + b64 * skn_b + head * skn_h
    kr_base = kr_ptr + b64 * skr_b
    v_base = v_ptr + b64 * sv_b + head * sv_h
    for phase in tl.static_range(2):  # 0: key tiles every row sees, unmasked; 1: the diagonal, masked
        lo_n = 0 if phase == 0 else full
        hi_n = full if phase == 0 else hi
        for n0 in range(lo_n, hi_n, BLOCK_N):
            pos = n0 + tl.arange(0, BLOCK_N)
            pos64 = pos.to(tl.int64)
            ok = pos < hi_n
            knt = tl.load(kn_base + pos64[None, :] * skn_l + dn[:, None], mask=ok[None, :] & dn_ok[:, None],
                          other=0.0)  # [DN, N]  # fmt: skip
            krt = tl.load(kr_base + pos64[None, :] * skr_l + dr[:, None], mask=ok[None, :] & dr_ok[:, None],
                          other=0.0)  # [r, N]  # fmt: skip
            vv = tl.load(v_base + pos64[:, None] * sv_l + dv[None, :], mask=ok[:, None] & dv_ok[None, :],
                         other=0.0)  # [N, DV]  # fmt: skip
            if UPCAST:
                s = tl.dot(qn, knt.to(tl.float32), input_precision="ieee")
                s = tl.dot(qr, krt.to(tl.float32), s, input_precision="ieee")
            else:
                s = tl.dot(qn, knt)
                s = tl.dot(qr, krt, s)
            s = s * scale_log2
            if phase == 1:
                s = tl.where(ok[None, :] & (pos[None, :] <= q_pos[:, None]), s, float("-inf"))
            m, l, acc = SOFTMAX_TILE(s, vv, m, l, acc, UPCAST)
    out = acc / tl.where(l > 0.0, l, 1.0)[:, None]
    o_rows = tok64 * so_n + head * so_h
    tl.store(out_ptr + o_rows[:, None] + dv[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & dv_ok[None, :])  # fmt: skip


# the strides that follow the batch (padded context length) change from step to step
mla_expanded_kernel = Kernel(_mla_expanded_kernel, do_not_specialize=("skn_b", "skr_b", "sv_b"))


@dataclass(frozen=True)
class PrefillTiles:
    """query rows x keys a step, warps, stages (tuning knobs; any values give the same result up to fp32
    summation order; block_m >= 16 for the tensor cores)."""

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 2

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


# Unmeasured on a GPU: FlashAttention-2's usual Triton tiles for 128-wide heads. At DeepSeek-V3's head dims
# (192 for scores, 128 for values, bf16) ptxas for sm_90 uses 202 registers a thread, no spill, and 88 KiB
# of shared memory (64 x 64 with 4 warps: 255 registers; 128 x 64 with 4 warps spills 196 bytes).
DEFAULT_TILES = PrefillTiles()
CANDIDATE_TILES = (PrefillTiles(64, 64, 4, 2), PrefillTiles(128, 64, 8, 2), PrefillTiles(128, 32, 8, 3),
                   PrefillTiles(64, 32, 4, 3), PrefillTiles(128, 64, 4, 2))  # fmt: skip


def mla_prefill_expanded(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    k_nope: torch.Tensor,
    k_rope: torch.Tensor,
    v: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    tiles: PrefillTiles | None = None,
) -> torch.Tensor:
    """q_nope [N, h, dn]; q_rope [N, h, r]; k_nope [B, L, h, dn]; k_rope [B, L, r]; v [B, L, h, dv]; query_start
    [B + 1] int (query_start[0] = 0); seq_lens [B] int (<= L) -> out [N, h, dv] in q_nope's dtype."""
    (N, h, dn), r, dv, B = q_nope.shape, q_rope.shape[-1], v.shape[-1], k_nope.shape[0]
    for t in (q_nope, q_rope, k_nope, k_rope, v):
        assert t.stride(-1) == 1, "head dims must be contiguous"
    out = torch.empty(N, h, dv, dtype=q_nope.dtype, device=q_nope.device)
    if N == 0:
        return out
    t = tiles or DEFAULT_TILES
    tile_seq, tile_row = tile_table(query_start[1:], t.block_m, N // t.block_m + B)
    mla_expanded_kernel[(tile_seq.shape[0], h)](
        q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, tile_seq, tile_row, out, scale * LOG2E,
        q_nope.stride(0), q_nope.stride(1), q_rope.stride(0), q_rope.stride(1),
        k_nope.stride(0), k_nope.stride(1), k_nope.stride(2), k_rope.stride(0), k_rope.stride(1),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1),
        UPCAST=upcast(q_nope.dtype), SOFTMAX_TILE=online_softmax_tile(), DN=dn, RR=r, DV=dv, BLOCK_M=t.block_m,
        BLOCK_N=t.block_n, BLOCK_DN=pow2(dn, 16), BLOCK_RR=pow2(r, 16), BLOCK_DV=pow2(dv, 16),
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out


def mla_prefill_expanded_reference(q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, scale):
    """`mla_prefill_expanded` in plain torch (fp32 math), one sequence at a time."""
    out = torch.empty(q_nope.shape[0], q_nope.shape[1], v.shape[-1], dtype=q_nope.dtype, device=q_nope.device)
    starts = query_start.tolist()
    for b, L in enumerate(seq_lens.tolist()):
        s, e = starts[b], starts[b + 1]
        if e == s:
            continue
        scores = torch.einsum("nhd,lhd->hnl", q_nope[s:e].float(), k_nope[b, :L].float())
        scores += torch.einsum("nhd,ld->hnl", q_rope[s:e].float(), k_rope[b, :L].float())
        q_pos = torch.arange(L - (e - s), L, device=q_nope.device)
        hidden = torch.arange(L, device=q_nope.device)[None, :] > q_pos[:, None]
        probs = torch.softmax((scores * scale).masked_fill(hidden, float("-inf")), dim=-1)
        out[s:e] = torch.einsum("hnl,lhd->nhd", probs, v[b, :L].float()).to(q_nope.dtype)
    return out
