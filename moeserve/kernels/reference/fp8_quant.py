"""FP8 (e4m3) block quantization in plain torch: weights in 128 x 128 blocks with a scale each
(DeepSeek-V3's `weight_scale_inv` layout), activations per token and group of 128 (quantized
dynamically at each call), and the block-scaled product the FP8 kernels compute. The references the
Triton FP8 kernels are tested against, and the online quantization of `--quantization fp8`.

The layout itself, and its dequantization, are kernels/reference/fp8.py's.

Shape legend: T rows, K in features, N out features, (bn, bk) a weight block, g the activation group
(= bk), leading dims (expert slots) allowed on weights.
    weight   W [..., N, K] = data [..., N, K] (float8_e4m3fn) * scale_inv [..., ceil(N / bn), ceil(K / bk)]
    act      x [T, K] = q [T, K] (float8_e4m3fn) * scale [T, ceil(K / g)]
    product  (x @ W.T)[t, n] = sum_G scale[t, G] * scale_inv[n // bn, G] * (q[t, G] . data[n, G])
A block's (or group's) scale is its largest magnitude / 448 (e4m3's largest finite value), at least
1e-10, so the largest element maps to +-448; values are divided by it and cast with round-to-nearest-
even, saturating at +-448 (what the GPU's cvt.rn.satfinite does; torch's own cast would overflow to NaN).
"""

from __future__ import annotations

import torch

from moeserve.kernels.reference.fp8 import FP8_DTYPE

FP8_MAX = 448.0
MIN_SCALE = 1e-10
BLOCK = (128, 128)


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """x (fp32) -> float8_e4m3fn, round-to-nearest-even, saturating at +-448."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def as_cache(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast for a KV cache of `dtype`: e4m3 at scale 1.0 (vLLM's default without calibrated scales),
    saturating at +-448 where a plain cast would make NaN; other dtypes a plain cast."""
    return to_fp8(x.float()) if dtype == FP8_DTYPE else x.to(dtype)


def read_dtype(cache: torch.Tensor, like: torch.Tensor) -> torch.dtype:
    """The dtype to compute attention over `cache` in: the queries' for an e4m3 cache (upcast on read),
    else the cache's own."""
    return like.dtype if cache.dtype == FP8_DTYPE else cache.dtype


def _pad_to(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    extra = -x.shape[dim] % multiple
    if not extra:
        return x
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return torch.nn.functional.pad(x, pad)


def quantize_blocks(w: torch.Tensor, block: tuple[int, int] = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """w [..., N, K] -> (data float8_e4m3fn [..., N, K], scale_inv fp32 [..., ceil(N / bn), ceil(K / bk)]):
    each block divided by its own scale (online quantization of a BF16 checkpoint's weights)."""
    (bn, bk), (N, K) = block, w.shape[-2:]
    padded = _pad_to(_pad_to(w.float(), -2, bn), -1, bk)
    lead, nb, kb = padded.shape[:-2], padded.shape[-2] // bn, padded.shape[-1] // bk
    blocks = padded.reshape(*lead, nb, bn, kb, bk)
    scale = (blocks.abs().amax(dim=(-3, -1)) / FP8_MAX).clamp(min=MIN_SCALE)  # [..., nb, kb]
    data = to_fp8(blocks / scale[..., :, None, :, None]).reshape(padded.shape)[..., :N, :K]
    return data.contiguous(), scale


def quantize_groups(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, K] -> (q float8_e4m3fn [T, K], scale fp32 [T, ceil(K / group)]): per token and group of
    `group` columns, dynamically (DeepSeek's act_quant, vLLM's per_token_group_quant_fp8)."""
    T, K = x.shape
    groups = _pad_to(x.float(), -1, group).view(T, -1, group)
    scale = (groups.abs().amax(dim=-1) / FP8_MAX).clamp(min=MIN_SCALE)  # [T, G]; the kernels' order of ops
    q = to_fp8(groups / scale[..., None]).view(T, -1)[:, :K]
    return q.contiguous(), scale


def block_fp8_linear(x: torch.Tensor, data: torch.Tensor, scale_inv: torch.Tensor,
                     block: tuple[int, int] = BLOCK, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [T, K] (any float dtype); data float8_e4m3fn [N, K], scale_inv [ceil(N / bn), ceil(K / bk)] ->
    x @ W.T [T, N] in out_dtype (x's by default), as the kernels compute it: x quantized per token and
    group of bk, each group's product in fp32, scaled by both scales, the groups summed in order."""
    (bn, bk), (T, K), N = block, x.shape, data.shape[0]
    q, scale = quantize_groups(x, bk)
    out = torch.zeros(T, N, dtype=torch.float32, device=x.device)
    w_scale = scale_inv.float().repeat_interleave(bn, dim=0)[:N]  # [N, G]
    for g in range(scale.shape[1]):
        cols = slice(g * bk, min((g + 1) * bk, K))
        out += (q[:, cols].float() @ data[:, cols].float().T) * scale[:, g, None] * w_scale[None, :, g]
    return out.to(out_dtype or x.dtype)
