"""Fused MoE: two grouped GEMMs, the activation fused into the first; either over an expert-major batch
(`fused_experts`, what a dispatcher hands over) or over the tokens themselves (`fused_moe`: the row
gather and the routing-weight multiply in the kernels too, vLLM's fused_moe).

Shape legend: T tokens, k top-k, R rows (expert-major: dispatched rows; fused: T * k), S local expert
slots, H hidden, I intermediate per slot, M rows of a tile.
    w13     [S, 2I, H]  rows [0, I) gate, [I, 2I) up (nn.Linear orientation, moe/experts.py)
    w2      [S, H, I]
    b13     [S, 2I], b2 [S, H]   optional biases (gpt-oss), added to the fp32 accumulators
Activation "swigluoai" is gpt-oss's clamped SwiGLU (moe/experts.py ClampedSwiGLU, `alpha` and `limit`):
(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).
fused_experts:  x [R, H] grouped by slot, offsets [S] int32 cumulative end rows -> out [R, H]
fused_moe:      x [T, H], slots [T, k] int (-1: dropped), weights [T, k] fp32
                -> out [T, H] = sum_j weights[t, j] * w2[s] @ (act(gate) * up)(x[t]), s = slots[t, j]

Kernel 1 (`_gate_up_kernel`): program (tile, column block) multiplies a tile of up to BLOCK_M rows of
one slot by that slot's gate and up columns (two fp32 accumulators over the same loads of x), applies
the activation in fp32 and writes act(gate) * up [R, I] in x's dtype. With GATHER its rows are read
from x through `order` (moe_align_block_size's sorted token ids: order[r] = t * k + j of the r-th row
in slot order, x's row t), so no gathered copy of x exists. Kernel 2 (`_down_kernel`): the same tiling
over w2; with SCATTER it multiplies each row by its routing weight in fp32 and writes it to row
order[r] of a [T * k, H] buffer, which one sum over k reduces to [T, H] (vLLM's moe_sum). A tile never
spans two slots: `launch.tile_table` maps programs to tiles on the device, so no launch waits on the
GPU (the grid is rows // BLOCK_M + S tiles, an upper bound; tiles past the last exit at once).
Consecutive programs are tiles of the same slot at the same column block, so a slot's weight block is
read from HBM once and from L2 by its other tiles. Tiles come from the tuned table for the card and
shape (tile_configs.py, configs/fused_moe.json), else from `tiles_for`'s heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton.language as tl

from moeserve.kernels.reference import fp8_quant
from moeserve.kernels.triton import tile_configs
from moeserve.kernels.triton.launch import MAX, Kernel, fp8_cast, tile_table, upcast

ACTIVATION_IDS = {"silu": 0, "gelu": 1, "gelu_pytorch_tanh": 2, "relu": 3, "swigluoai": 4}  # moe/experts.py


def _gate_up_kernel(
    x_ptr, w_ptr, b_ptr, h_ptr, tile_slot_ptr, tile_row_ptr, ends_ptr, order_ptr, ws_ptr,
    H, I, top_k, alpha, limit, BN,
    sx_r, sx_k, sw_s, sw_n, sw_k, sb_s, sh_r, sws_s, sws_n,
    ACT: tl.constexpr, BIAS: tl.constexpr, UPCAST: tl.constexpr, GATHER: tl.constexpr, FP8: tl.constexpr, CAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    slot = tl.load(tile_slot_ptr + tile)
    if slot < 0:
        return
    end = tl.load(ends_ptr + slot)
    rows = tl.load(tile_row_ptr + tile) + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    if GATHER:  # the row's token: x is read in place, never gathered into a copy
        src = tl.load(order_ptr + rows, mask=row_ok, other=0) // top_k
    else:
        src = rows
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < I
    x_rows = x_ptr + src.to(tl.int64)[:, None] * sx_r
    w_gate = w_ptr + slot.to(tl.int64) * sw_s + cols[None, :].to(tl.int64) * sw_n
    w_up = w_gate + I * sw_n
    gate_scales = ws_ptr + slot.to(tl.int64) * sws_s + (cols // BN) * sws_n  # FP8: each column's block row
    up_scales = ws_ptr + slot.to(tl.int64) * sws_s + ((cols + I) // BN) * sws_n
    gate = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    up = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < H
        a = tl.load(x_rows + ks[None, :] * sx_k, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & col_ok[None, :]
        bg = tl.load(w_gate + ks[:, None] * sw_k, mask=w_mask, other=0.0)  # [BLOCK_K, BLOCK_N]
        bu = tl.load(w_up + ks[:, None] * sw_k, mask=w_mask, other=0.0)
        if FP8:  # x quantized per token and group (BLOCK_K = the weight's block) on load; block scales after
            a = a.to(tl.float32)
            a_scale = tl.maximum(tl.reduce(tl.abs(a), 1, MAX) / 448.0, 1e-10)
            a_q = CAST(a / a_scale[:, None])
            g_scale = tl.load(gate_scales + k0 // BLOCK_K, mask=col_ok, other=0.0)
            u_scale = tl.load(up_scales + k0 // BLOCK_K, mask=col_ok, other=0.0)
            if UPCAST:  # fp32 products of the e4m3 values (the interpreter; fp32 activations)
                a_q = a_q.to(tl.float32)
                bg = bg.to(tl.float32)
                bu = bu.to(tl.float32)
            precision: tl.constexpr = "ieee" if UPCAST else None
            gate += tl.dot(a_q, bg, input_precision=precision) * a_scale[:, None] * g_scale[None, :]
            up += tl.dot(a_q, bu, input_precision=precision) * a_scale[:, None] * u_scale[None, :]
        elif UPCAST:
            a = a.to(tl.float32)
            gate = tl.dot(a, bg.to(tl.float32), gate, input_precision="ieee")
            up = tl.dot(a, bu.to(tl.float32), up, input_precision="ieee")
        else:
            gate = tl.dot(a, bg, gate)
            up = tl.dot(a, bu, up)
    if BIAS:
        bias = b_ptr + slot.to(tl.int64) * sb_s + cols
        gate += tl.load(bias, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        up += tl.load(bias + I, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if ACT == 4:  # gpt-oss's clamped SwiGLU
        gate = tl.minimum(gate, limit)
        up = tl.minimum(tl.maximum(up, -limit), limit) + 1.0
        gate = gate / (1.0 + tl.exp(-alpha * gate))
    elif ACT == 0:  # silu
        gate = gate / (1.0 + tl.exp(-gate))
    elif ACT == 1:  # gelu (erf)
        gate = 0.5 * gate * (1.0 + tl.math.erf(gate * 0.7071067811865476))
    elif ACT == 2:  # gelu, tanh approximation; tanh(u) = 2 / (1 + exp(-2u)) - 1
        u = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        gate = 0.5 * gate * (2.0 / (1.0 + tl.exp(-2.0 * u)))
    else:  # relu
        gate = tl.maximum(gate, 0.0)
    h = gate * up
    h_ptrs = h_ptr + rows.to(tl.int64)[:, None] * sh_r + cols[None, :]
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _down_kernel(
    h_ptr, w_ptr, b_ptr, out_ptr, tile_slot_ptr, tile_row_ptr, ends_ptr, order_ptr, weights_ptr, ws_ptr,
    I, H, BN,
    sh_r, sw_s, sw_n, sw_k, sb_s, so_r, sws_s, sws_n,
    BIAS: tl.constexpr, UPCAST: tl.constexpr, SCATTER: tl.constexpr, FP8: tl.constexpr, CAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    slot = tl.load(tile_slot_ptr + tile)
    if slot < 0:
        return
    end = tl.load(ends_ptr + slot)
    rows = tl.load(tile_row_ptr + tile) + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < H
    h_rows = h_ptr + rows.to(tl.int64)[:, None] * sh_r
    w_cols = w_ptr + slot.to(tl.int64) * sw_s + cols[None, :].to(tl.int64) * sw_n
    scales = ws_ptr + slot.to(tl.int64) * sws_s + (cols // BN) * sws_n
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for k0 in range(0, I, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < I
        a = tl.load(h_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_cols + ks[:, None] * sw_k, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if FP8:  # the intermediate quantized per row and group on load, as x in the first kernel
            a = a.to(tl.float32)
            a_scale = tl.maximum(tl.reduce(tl.abs(a), 1, MAX) / 448.0, 1e-10)
            b_scale = tl.load(scales + k0 // BLOCK_K, mask=col_ok, other=0.0)
            a_q = CAST(a / a_scale[:, None])
            if UPCAST:
                a_q = a_q.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a_q, b, input_precision="ieee" if UPCAST else None)
            acc += part * a_scale[:, None] * b_scale[None, :]
        elif UPCAST:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    if BIAS:
        acc += tl.load(b_ptr + slot.to(tl.int64) * sb_s + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if SCATTER:  # the routing weight in fp32, the row to its (token, j) place
        dst = tl.load(order_ptr + rows, mask=row_ok, other=0)
        acc = acc * tl.load(weights_ptr + dst, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    else:
        dst = rows
    out_ptrs = out_ptr + dst.to(tl.int64)[:, None] * so_r + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


# the top-k and the row counts change from call to call: top_k 1 must not become a constant
gate_up_kernel = Kernel(_gate_up_kernel, do_not_specialize=("top_k",))
down_kernel = Kernel(_down_kernel)


@dataclass(frozen=True)
class Tiles:
    """One launch configuration of both GEMMs (tuning knobs: any values give the same result up to
    fp32 summation order; block_m >= 16 for the tensor cores)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages}"


CANDIDATE_TILES = (Tiles(16, 64, 128, 4, 4), Tiles(16, 128, 128, 4, 4), Tiles(16, 64, 256, 4, 3),
                   Tiles(32, 64, 128, 4, 4), Tiles(64, 64, 64, 4, 3), Tiles(64, 128, 64, 8, 3),
                   Tiles(64, 128, 64, 4, 4), Tiles(128, 128, 64, 8, 3), Tiles(128, 256, 64, 8, 3))  # fmt: skip


def tiles_for(rows: int, slots: int) -> Tiles:
    """Tiles from the average rows per slot (host shapes only, no sync), where the tuned table has none.
    Decode batches (a few rows per slot) are weight-bandwidth bound: 16-row tiles waste least, wide K
    keeps loads in flight. Prefill batches are compute bound: large tiles reuse each weight tile over
    more rows. The usual Triton grouped-GEMM starting points (docs/kernels.md)."""
    per_slot = rows / max(slots, 1)
    if per_slot <= 16:
        return Tiles(16, 64, 128, 4, 4)
    if per_slot <= 32:
        return Tiles(32, 64, 128, 4, 4)
    if per_slot <= 128:
        return Tiles(64, 128, 64, 8, 3)
    return Tiles(128, 128, 64, 8, 3)


def shape_key(w13: torch.Tensor, w2: torch.Tensor) -> str:
    """The tuned table's key of a layer: slots, hidden, intermediate and the weights' dtype."""
    S, two_i, H = w13.shape
    return f"S={S},H={H},I={two_i // 2},dtype={str(w13.dtype).removeprefix('torch.')}"


def pick_tiles(rows: int, w13: torch.Tensor, w2: torch.Tensor) -> Tiles:
    """The tuned tiles for this card, layer and batch (configs/fused_moe.json), else `tiles_for`'s."""
    S = w13.shape[0]
    tuned = tile_configs.lookup("fused_moe", w13.device, shape_key(w13, w2), rows / max(S, 1))
    return Tiles(*tuned) if tuned else tiles_for(rows, S)


@dataclass(frozen=True)
class Extras:
    """What gpt-oss's experts add (moe/experts.py): biases b13 [S, 2I], b2 [S, H] (both or neither), and
    the clamped SwiGLU's (alpha, limit) for activation "swigluoai"."""

    b13: torch.Tensor | None = None
    b2: torch.Tensor | None = None
    swiglu: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        assert (self.b13 is None) == (self.b2 is None), "both biases or neither"


NO_EXTRAS = Extras()


@dataclass(frozen=True)
class Fp8Weights:
    """FP8 block-scaled expert weights (kernels/reference/fp8_quant.py, DeepSeek's layout): w13 and w2
    float8_e4m3fn as the layer's, with w13_scale_inv [S, ceil(2I / bn), ceil(H / bk)] and w2_scale_inv
    [S, ceil(H / bn), ceil(I / bk)] fp32 and block (bn, bk)."""

    w13_scale_inv: torch.Tensor
    w2_scale_inv: torch.Tensor
    block: tuple[int, int]


def _check(activation: str, w13: torch.Tensor, w2: torch.Tensor, H: int, fp8: Fp8Weights | None) -> tuple[int, int]:
    if activation not in ACTIVATION_IDS:
        raise ValueError(f"activation {activation!r} is not supported; choose one of {', '.join(ACTIVATION_IDS)}")
    S, two_i, _ = w13.shape
    assert w2.shape == (S, H, two_i // 2), "w13 and w2 disagree on slots or sizes"
    assert (fp8 is not None) == (w13.dtype == torch.float8_e4m3fn), "FP8 weights need their scales, and only they"
    return S, two_i // 2


def _launch(x, order, ends, weights, w13, w2, out, R, top_k, activation, t: Tiles, scatter: bool,
            fp8: Fp8Weights | None, extras: Extras) -> None:  # fmt: skip
    """Both GEMMs over R rows in slot order (ends [S] their cumulative end rows); x read through order
    when it is given, out written through it (weighted) when scatter; FP8 weights with their scales;
    biases and SwiGLU's constants."""
    S, I, H = w13.shape[0], w13.shape[1] // 2, w13.shape[2]
    if fp8 is not None:  # a K step is one scale block: the activations' groups are the weight's blocks
        t = Tiles(t.block_m, t.block_n, fp8.block[1], t.num_warps, t.num_stages)
    tile_slot, tile_row = tile_table(ends, t.block_m, R // t.block_m + S)
    h = torch.empty(R, I, dtype=x.dtype, device=x.device)
    cast, gather = upcast(x.dtype), order is not None
    order = order if gather else ends  # never read without GATHER / SCATTER
    bias = extras.b13 is not None
    b13, b2 = (extras.b13.contiguous(), extras.b2.contiguous()) if bias else (w13, w2)  # never read without BIAS
    unused = ends[:1].view(1, 1, 1)  # the scales' pointer without FP8: never read
    s13, s2 = (fp8.w13_scale_inv, fp8.w2_scale_inv) if fp8 is not None else (unused, unused)
    bn = fp8.block[0] if fp8 is not None else 1
    tuning = dict(FP8=fp8 is not None, CAST=fp8_cast(), BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k,
                  num_warps=t.num_warps, num_stages=t.num_stages)  # fmt: skip
    gate_up_kernel[(tile_slot.shape[0], -(-I // t.block_n))](
        x, w13, b13, h, tile_slot, tile_row, ends, order, s13, H, I, top_k, float(extras.swiglu[0]),
        float(extras.swiglu[1]), bn,
        x.stride(0), x.stride(1), w13.stride(0), w13.stride(1), w13.stride(2), b13.stride(0), h.stride(0), s13.stride(0),
        s13.stride(1), ACT=ACTIVATION_IDS[activation], BIAS=bias, UPCAST=cast, GATHER=gather, **tuning,
    )  # fmt: skip
    down_kernel[(tile_slot.shape[0], -(-H // t.block_n))](
        h, w2, b2, out, tile_slot, tile_row, ends, order, weights if scatter else ends, s2, I, H, bn,
        h.stride(0), w2.stride(0), w2.stride(1), w2.stride(2), b2.stride(0), out.stride(0), s2.stride(0), s2.stride(1),
        BIAS=bias, UPCAST=cast, SCATTER=scatter, **tuning,
    )  # fmt: skip


def fused_experts(
    x: torch.Tensor,
    offsets: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "silu",
    tiles: Tiles | None = None,
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    swiglu: tuple[float, float] = (0.0, 0.0),
    fp8: Fp8Weights | None = None,
) -> torch.Tensor:
    """x [R, H]; offsets [S] int32 cumulative end rows; w13 [S, 2I, H]; w2 [S, H, I] (FP8 with `fp8`'s
    scales) -> out [R, H] in x's dtype (rows past offsets[-1] are not written). tiles: None = the tuned
    or heuristic tiles. b13 [S, 2I], b2 [S, H]: biases (both or neither); swiglu: (alpha, limit) of
    "swigluoai"."""
    R, H = x.shape
    _check(activation, w13, w2, H, fp8)
    out = torch.empty(R, H, dtype=x.dtype, device=x.device)
    if R == 0:
        return out
    assert offsets.shape == (w13.shape[0],), "offsets and weights disagree on slots"
    t = tiles or pick_tiles(R, w13, w2)
    _launch(x, None, offsets.to(torch.int32), None, w13, w2, out, R, 1, activation, t, False, fp8,
            Extras(b13, b2, swiglu))  # fmt: skip
    return out


def align(slots: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_align_block_size on the device, no host sync: slots [T, k] int (-1: dropped) -> (order [T * k]
    int64: the (token, j) positions t * k + j in slot order, stable, dropped ones last; ends [S] int32:
    each slot's cumulative end row in that order)."""
    flat = slots.reshape(-1).to(torch.int64)
    keyed = torch.where(flat < 0, num_slots, flat)
    order = torch.argsort(keyed, stable=True)
    bounds = torch.arange(1, num_slots + 1, device=slots.device)
    ends = torch.searchsorted(keyed[order], bounds)  # rows with a key below s + 1
    return order, ends.to(torch.int32)


def fused_moe(
    x: torch.Tensor,
    slots: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "silu",
    tiles: Tiles | None = None,
    may_drop: bool = True,
    fp8: Fp8Weights | None = None,
    extras: Extras = NO_EXTRAS,
) -> torch.Tensor:
    """x [T, H]; slots [T, k] int (this rank's slots; -1 = dropped); weights [T, k] (fp32 for the
    multiply); w13 [S, 2I, H]; w2 [S, H, I] (FP8 with `fp8`'s scales) -> out [T, H] in x's dtype: per
    token the weighted sum over its k rows, the weights applied in fp32 in the down kernel, the sum over
    k in fp32. may_drop: False when no id is -1 (the router's own ids): the [T * k, H] buffer then needs
    no zeros."""
    T, H = x.shape
    S, _ = _check(activation, w13, w2, H, fp8)
    k = slots.shape[1]
    if T == 0:
        return torch.empty(0, H, dtype=x.dtype, device=x.device)
    order, ends = align(slots, S)
    R = T * k
    rows = (torch.zeros if may_drop else torch.empty)(R, H, dtype=x.dtype, device=x.device)
    t = tiles or pick_tiles(R, w13, w2)
    weights = weights.reshape(-1).float().contiguous()
    _launch(x, order, ends, weights, w13, w2, rows, R, k, activation, t, True, fp8, extras)
    return rows.view(T, k, H).sum(dim=1, dtype=torch.float32).to(x.dtype)


REFERENCE_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def _gated(gate_up: torch.Tensor, activation: str, extras: Extras) -> torch.Tensor:
    """gate_up [n, 2I] fp32 (biases added) -> act(gate) * up, or gpt-oss's clamped SwiGLU."""
    from moeserve.moe.experts import ClampedSwiGLU

    gate, up = gate_up.chunk(2, dim=-1)
    if activation == "swigluoai":
        return ClampedSwiGLU(*extras.swiglu)(gate, up)
    return REFERENCE_ACTIVATIONS[activation](gate) * up


def _expert_rows(x: torch.Tensor, s: int, w13, w2, activation: str, extras: Extras,
                 fp8: Fp8Weights | None = None) -> torch.Tensor:  # fmt: skip
    """x [n, H] through slot s's experts -> [n, H] fp32: products in fp32 (FP8: kernels/reference/fp8_quant's
    arithmetic), biases added to them, the intermediate rounded to x's dtype."""
    if fp8 is None:
        gate_up = x.float() @ w13[s].float().T
    else:
        gate_up = fp8_quant.block_fp8_linear(x, w13[s], fp8.w13_scale_inv[s], fp8.block, torch.float32)
    if extras.b13 is not None:
        gate_up = gate_up + extras.b13[s].float()
    h = _gated(gate_up, activation, extras).to(x.dtype)
    if fp8 is None:
        y = h.float() @ w2[s].float().T
    else:
        y = fp8_quant.block_fp8_linear(h, w2[s], fp8.w2_scale_inv[s], fp8.block, torch.float32)
    return y if extras.b2 is None else y + extras.b2[s].float()


def fused_experts_reference(
    x: torch.Tensor,
    offsets: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "silu",
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    swiglu: tuple[float, float] = (0.0, 0.0),
    fp8: Fp8Weights | None = None,
) -> torch.Tensor:
    """The kernel's arithmetic in plain torch, a loop over slots: products in fp32, the intermediate
    act(gate) * up rounded to x's dtype (the kernel stores it so), out in x's dtype."""
    extras = Extras(b13, b2, swiglu)
    out = torch.empty(x.shape[0], w2.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for s, end in enumerate(offsets.tolist()):
        if end > start:
            out[start:end] = _expert_rows(x[start:end], s, w13, w2, activation, extras, fp8).to(x.dtype)
        start = end
    return out


def fused_moe_reference(x, slots, weights, w13, w2, activation="silu", extras: Extras = NO_EXTRAS, fp8: Fp8Weights | None = None):
    """`fused_moe` in plain torch, token by token: each (token, j) row through its slot's experts
    (`_expert_rows`), weighted in fp32, rounded, summed over j."""
    T, k = slots.shape
    out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
    for t in range(T):
        for j in range(k):
            s = int(slots[t, j])
            if s >= 0:
                row = _expert_rows(x[t : t + 1], s, w13, w2, activation, extras, fp8)[0] * weights[t, j].float()
                out[t] += row.to(x.dtype).float()
    return out.to(x.dtype)
