"""Fused MoE over the ExpertBatch layout: two grouped GEMMs, the activation fused into the first.

Shape legend: R dispatched rows (expert-major), S local expert slots, H hidden, I intermediate per
slot, T tiles of up to BLOCK_M rows of one slot.
    x       [R, H]      rows grouped by slot; slot s owns rows offsets[s-1]..offsets[s]
    offsets [S] int32   cumulative end row of each slot (ExpertBatch.offsets)
    w13     [S, 2I, H]  rows [0, I) gate, [I, 2I) up (nn.Linear orientation, moe/experts.py)
    w2      [S, H, I]
    b13     [S, 2I], b2 [S, H]   optional biases (gpt-oss), added to the fp32 accumulators
    out     [R, H]      w2[s] @ (act(gate) * up) + b2[s] for each row of slot s (gate, up with b13[s] added)
Activation "swigluoai" is gpt-oss's clamped SwiGLU (moe/experts.py ClampedSwiGLU, `alpha` and `limit`):
(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).

Kernel 1 (`_gate_up_kernel`): program (tile, column block) multiplies the tile's rows by the gate and
up weight columns of its slot, accumulating both in fp32, and writes act(gate) * up [R, I] in x's
dtype. Kernel 2 (`_down_kernel`): the same tiling with w2 writes out. A tile never spans two slots;
`launch.tile_table` maps programs to tiles on the device, so a launch needs no host sync: the grid is
rows // BLOCK_M + S tiles (an upper bound), and tiles past the last exit at once. Consecutive
programs are tiles of the same slot at the same column block, so a slot's weight block is read from
HBM once and from L2 by its other tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton.language as tl

from moeserve.kernels.triton.launch import Kernel, tile_table, upcast

ACTIVATION_IDS = {"silu": 0, "gelu": 1, "gelu_pytorch_tanh": 2, "relu": 3, "swigluoai": 4}  # moe/experts.py


def _gate_up_kernel(
    x_ptr, w_ptr, b_ptr, h_ptr, tile_slot_ptr, tile_row_ptr, ends_ptr,
    H, I, alpha, limit,
    sx_r, sx_k, sw_s, sw_n, sw_k, sb_s, sh_r,
    ACT: tl.constexpr, BIAS: tl.constexpr, UPCAST: tl.constexpr,
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
    col_ok = cols < I
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * sx_r
    w_gate = w_ptr + slot.to(tl.int64) * sw_s + cols[None, :].to(tl.int64) * sw_n
    w_up = w_gate + I * sw_n
    gate = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    up = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < H
        a = tl.load(x_rows + ks[None, :] * sx_k, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & col_ok[None, :]
        bg = tl.load(w_gate + ks[:, None] * sw_k, mask=w_mask, other=0.0)  # [BLOCK_K, BLOCK_N]
        bu = tl.load(w_up + ks[:, None] * sw_k, mask=w_mask, other=0.0)
        if UPCAST:
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
    h_ptr, w_ptr, b_ptr, out_ptr, tile_slot_ptr, tile_row_ptr, ends_ptr,
    I, H,
    sh_r, sw_s, sw_n, sw_k, sb_s, so_r,
    BIAS: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
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
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for k0 in range(0, I, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < I
        a = tl.load(h_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_cols + ks[:, None] * sw_k, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if UPCAST:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    if BIAS:
        acc += tl.load(b_ptr + slot.to(tl.int64) * sb_s + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * so_r + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


gate_up_kernel = Kernel(_gate_up_kernel)
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


def tiles_for(rows: int, slots: int) -> Tiles:
    """Tiles from the average rows per slot (host shapes only, no sync). Decode batches (a few rows
    per slot) are weight-bandwidth bound: 16-row tiles waste least, wide K keeps loads in flight.
    Prefill batches are compute bound: large tiles reuse each weight tile over more rows. Starting
    points from the usual Triton grouped-GEMM configurations, not yet tuned on a GPU (docs/kernels.md)."""
    per_slot = rows / max(slots, 1)
    if per_slot <= 16:
        return Tiles(16, 64, 128, 4, 4)
    if per_slot <= 32:
        return Tiles(32, 64, 128, 4, 4)
    if per_slot <= 128:
        return Tiles(64, 128, 64, 8, 3)
    return Tiles(128, 128, 64, 8, 3)


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
) -> torch.Tensor:
    """x [R, H]; offsets [S] int32 cumulative end rows; w13 [S, 2I, H]; w2 [S, H, I] -> out [R, H] in x's
    dtype (rows past offsets[-1] are not written). tiles: None = `tiles_for` the batch's shape.
    b13 [S, 2I], b2 [S, H]: biases (both or neither); swiglu: (alpha, limit) of "swigluoai"."""
    if activation not in ACTIVATION_IDS:
        raise ValueError(f"activation {activation!r} is not supported; choose one of {', '.join(ACTIVATION_IDS)}")
    (R, H), (S, two_i, _) = x.shape, w13.shape
    I = two_i // 2
    out = torch.empty(R, H, dtype=x.dtype, device=x.device)
    if R == 0:
        return out
    assert w2.shape == (S, H, I) and offsets.shape == (S,), "weights and offsets disagree on slots or sizes"
    t = tiles or tiles_for(R, S)
    tile_slot, tile_row = tile_table(offsets, t.block_m, R // t.block_m + S)
    ends = offsets.to(torch.int32)
    h = torch.empty(R, I, dtype=x.dtype, device=x.device)
    cast = upcast(x.dtype)
    bias = b13 is not None
    assert bias == (b2 is not None), "both biases or neither"
    b13, b2 = (b13.contiguous(), b2.contiguous()) if bias else (w13, w2)  # never read without BIAS
    tuning = dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_warps=t.num_warps,
                  num_stages=t.num_stages)  # fmt: skip
    gate_up_kernel[(tile_slot.shape[0], -(-I // t.block_n))](
        x, w13, b13, h, tile_slot, tile_row, ends, H, I, float(swiglu[0]), float(swiglu[1]),
        x.stride(0), x.stride(1), w13.stride(0), w13.stride(1), w13.stride(2), b13.stride(0), h.stride(0),
        ACT=ACTIVATION_IDS[activation], BIAS=bias, UPCAST=cast, **tuning,
    )  # fmt: skip
    down_kernel[(tile_slot.shape[0], -(-H // t.block_n))](
        h, w2, b2, out, tile_slot, tile_row, ends, I, H,
        h.stride(0), w2.stride(0), w2.stride(1), w2.stride(2), b2.stride(0), out.stride(0),
        BIAS=bias, UPCAST=cast, **tuning,
    )  # fmt: skip
    return out


REFERENCE_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def fused_experts_reference(
    x: torch.Tensor,
    offsets: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "silu",
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    swiglu: tuple[float, float] = (0.0, 0.0),
) -> torch.Tensor:
    """The kernel's arithmetic in plain torch, a loop over slots: products in fp32, the intermediate
    act(gate) * up rounded to x's dtype (the kernel stores it so), out in x's dtype."""
    from moeserve.moe.experts import ClampedSwiGLU

    glu = ClampedSwiGLU(*swiglu) if activation == "swigluoai" else None
    out = torch.empty(x.shape[0], w2.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for s, end in enumerate(offsets.tolist()):
        if end > start:
            gate_up = x[start:end].float() @ w13[s].float().T
            if b13 is not None:
                gate_up = gate_up + b13[s].float()
            gate, up = gate_up.chunk(2, dim=-1)
            h = (glu(gate, up) if glu is not None else REFERENCE_ACTIVATIONS[activation](gate) * up).to(x.dtype)
            y = h.float() @ w2[s].float().T
            out[start:end] = (y if b2 is None else y + b2[s].float()).to(x.dtype)
        start = end
    return out
