"""Dense linear layers with FP8 block-scaled weights (DeepSeek-V3's format) on FP8 tensor cores, the
activations quantized per token and group of 128 as they are loaded (W8A8, DeepSeek's and vLLM's
block-FP8 GEMM).

Shape legend: T rows, K in features, N out features, (bn, bk) a weight block (128 x 128 in every release).
    x          [T, K]                  bf16 / fp16 (fp32 under the interpreter)
    data       [N, K]                  float8_e4m3fn
    scale_inv  [ceil(N / bn), ceil(K / bk)] fp32: W = data * scale_inv, block by block
    out        [T, N] = x @ W.T in x's dtype (kernels/reference/fp8_quant.block_fp8_linear)
Program (row block, column block) walks K in steps of bk: it loads x's [BLOCK_M, bk] tile, takes each
row's largest magnitude over the step (the token's group), divides by it / 448 and casts to e4m3 (the
dynamic per-token-group quantization, done on load: no separate quantization launch and no FP8 copy of
x), multiplies with the weight's [bk, BLOCK_N] FP8 tile on the tensor cores (fp32 accumulation), and
adds the product times the group's scale and each column's block scale to an fp32 accumulator. Under
the interpreter the cast is emulated in fp32 (launch.fp8_cast) and the weights are loaded as FP8
and upcast: the same numbers as the GPU's, up to fp32 summation order.
"""

from __future__ import annotations

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import MAX, Kernel, fp8_cast, pow2, upcast

FP8_MAX = tl.constexpr(448.0)


def _fp8_linear_kernel(
    x_ptr, w_ptr, ws_ptr, out_ptr,
    T, N, K, BN,
    sx_t, sw_n, sws_n, so_t,
    UPCAST: tl.constexpr, CAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < T
    col_ok = cols < N
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * sx_t
    w_cols = w_ptr + cols.to(tl.int64)[None, :] * sw_n
    ws_cols = ws_ptr + (cols // BN) * sws_n  # each column's block row of scales
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for g in range(0, (K + BLOCK_K - 1) // BLOCK_K):
        ks = g * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = tl.load(x_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        a_scale = tl.maximum(tl.reduce(tl.abs(a), 1, MAX) / FP8_MAX, 1e-10)  # the token's group
        b = tl.load(w_cols + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)  # [BLOCK_K, BLOCK_N]
        b_scale = tl.load(ws_cols + g, mask=col_ok, other=0.0)
        a_q = CAST(a / a_scale[:, None])  # e4m3 (fp32 holding e4m3 values under the interpreter)
        if UPCAST:  # fp32 products of the e4m3 values (the interpreter; fp32 activations)
            part = tl.dot(a_q.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            part = tl.dot(a_q, b)
        acc += part * a_scale[:, None] * b_scale[None, :]
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * so_t + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])  # fmt: skip


# the row count changes from call to call
fp8_linear_kernel = Kernel(_fp8_linear_kernel, do_not_specialize=("T",))


def fp8_linear(x: torch.Tensor, data: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int],
               bias: torch.Tensor | None = None, tiles: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """x [T, K]; data float8_e4m3fn [N, K]; scale_inv fp32 [ceil(N / bn), ceil(K / bk)]; block (bn, bk);
    bias [N] or None -> x @ W.T + bias [T, N] in x's dtype. tiles: (rows, columns, warps, stages) of a
    program; None = from T alone (host shapes, no sync): decode rows take 64 columns a program, so a
    7168-wide layer spreads over 112 programs; prefill 128."""
    (T, K), N, (bn, bk) = x.shape, data.shape[0], block
    assert data.shape[1] == K and x.stride(-1) == 1 and data.stride(-1) == 1, "x [T, K], data [N, K] contiguous in K"
    assert bk == pow2(bk) and bk >= 16, f"the weight's block of {bk} columns is not a power of two >= 16"
    out = torch.empty(T, N, dtype=x.dtype, device=x.device)
    if T == 0:
        return out
    block_m, block_n, warps, stages = tiles or ((16, 64, 4, 4) if T <= 16 else (32, 64, 4, 4) if T <= 64 else
                                                (64, 128, 4, 3) if T <= 256 else (128, 128, 8, 3))  # fmt: skip
    fp8_linear_kernel[(-(-T // block_m), -(-N // block_n))](
        x, data, scale_inv.float().contiguous(), out, T, N, K, bn,
        x.stride(0), data.stride(0), scale_inv.shape[1], out.stride(0),
        UPCAST=upcast(x.dtype), CAST=fp8_cast(), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=bk, num_warps=warps,
        num_stages=stages,
    )  # fmt: skip
    return out if bias is None else out + bias
