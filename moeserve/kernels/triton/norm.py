"""RMSNorm, optionally fused with the residual add, with Hugging Face's rounding order.

Shape legend: T rows, H hidden.
    out = weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype)       normalised in fp32, cast back, scaled
    with residual: new_residual = x + residual (in x's dtype), out = rms_norm(new_residual)
One program per row holds the whole row (BLOCK_H = next power of two >= H), so a row is read once and
written once (twice with the residual): memory bound, 2-3 passes over T x H.
"""

from __future__ import annotations

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import SUM, Kernel, pow2


def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, new_res_ptr,
    H, eps, sx, sr, so, sn,
    RESIDUAL: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_H)
    ok = c < H
    x = tl.load(x_ptr + t * sx + c, mask=ok, other=0.0)
    if RESIDUAL:
        x = (x.to(tl.float32) + tl.load(res_ptr + t * sr + c, mask=ok, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(new_res_ptr + t * sn + c, x, mask=ok)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.reduce(xf * xf, 0, SUM) / H + eps)
    normed = (xf * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + c, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * so + c, (normed * w).to(out_ptr.dtype.element_ty), mask=ok)


rms_norm_kernel = Kernel(_rms_norm_kernel)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None, num_warps: int = 8
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """x [..., H]; weight [H]; residual [..., H] or None -> out [..., H] in the promoted dtype of x and
    weight (as torch's `weight * x`), or (out, new_residual = x + residual) when residual is given."""
    H = x.shape[-1]
    rows = x.reshape(-1, H)
    assert rows.stride(-1) == 1 and weight.stride(-1) == 1, "the hidden dim must be contiguous"
    out = torch.empty(rows.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    res = residual.reshape(-1, H) if residual is not None else rows
    new_res = torch.empty_like(rows) if residual is not None else rows
    if rows.shape[0]:
        rms_norm_kernel[(rows.shape[0],)](
            rows, res, weight, out, new_res, H, eps, rows.stride(0), res.stride(0), out.stride(0), new_res.stride(0),
            RESIDUAL=residual is not None, BLOCK_H=pow2(H), num_warps=num_warps,
        )  # fmt: skip
    out = out.view(*x.shape[:-1], H)
    return out if residual is None else (out, new_res.view(x.shape))


def rms_norm_reference(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`rms_norm` in plain torch (dense/norm.py's arithmetic)."""
    if residual is not None:
        x = x + residual
    xf = x.float()
    out = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return out if residual is None else (out, x)
