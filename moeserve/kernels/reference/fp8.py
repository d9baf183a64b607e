"""FP8 block-scaled weights (DeepSeek-V3's format): the representation a layer carries, and the
reference dequantization every FP8 kernel is tested against.

A weight W [..., N, K] (N output rows, K input columns; leading dims e.g. expert slots) is held as

    data       float8_e4m3fn [..., N, K]
    scale_inv  float32       [..., ceil(N / bn), ceil(K / bk)]
    W[..., n, k] = data[..., n, k] * scale_inv[..., n // bn, k // bk]

with (bn, bk) the checkpoint's `weight_block_size` (128 x 128 in every release). The last block of
a row or column may be partial (N or K not a multiple of the block). A shard of a weight keeps this
form only when it starts on a block boundary (models/quant_fp8.py decides; otherwise it is
dequantized at load).

A layer that holds its weight this way has `weight` float8_e4m3fn, a `weight_scale_inv` parameter
and `weight_block` (bn, bk); GroupedExperts has `w13_scale_inv`, `w2_scale_inv` and `weight_block`.
Only a kernel set with `fp8_block_weights = True` (kernels/base.py) is handed such layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_DTYPE = torch.float8_e4m3fn


def blocks(size: int, block: int) -> int:
    """Scale blocks covering `size` elements (the last may be partial)."""
    return -(-size // block)


def expand_scale(scale_inv: torch.Tensor, block: tuple[int, int], shape: tuple[int, int]) -> torch.Tensor:
    """scale_inv [..., ceil(N / bn), ceil(K / bk)] -> [..., N, K]: each block's scale on each element."""
    (bn, bk), (n, k) = block, shape
    return scale_inv.repeat_interleave(bn, dim=-2)[..., :n, :].repeat_interleave(bk, dim=-1)[..., :k]


def dequantize(
    data: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """data float8 [..., N, K], scale_inv float32 [..., ceil(N / bn), ceil(K / bk)] -> W [..., N, K] in
    `dtype` (the product is taken in fp32, as DeepSeek's `weight_dequant`, then cast)."""
    n, k = data.shape[-2:]
    expected = (*data.shape[:-2], blocks(n, block[0]), blocks(k, block[1]))
    if tuple(scale_inv.shape) != expected:
        raise ValueError(f"scale_inv {tuple(scale_inv.shape)} does not cover data {tuple(data.shape)} in "
                         f"{block[0]}x{block[1]} blocks: expected {expected}")
    return (data.float() * expand_scale(scale_inv.float(), block, (n, k))).to(dtype)


@dataclass(frozen=True)
class Fp8Block:
    """One FP8 block-scaled weight (or a block-aligned shard of one): data float8_e4m3fn [..., N, K],
    scale_inv float32 [..., ceil(N / bn), ceil(K / bk)], block (bn, bk)."""

    data: torch.Tensor
    scale_inv: torch.Tensor
    block: tuple[int, int]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self.data, self.scale_inv, self.block, dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


def concat_rows(parts: list[Fp8Block]) -> Fp8Block | None:
    """The parts stacked along N (fused q|k|v or gate|up), or None when the result would not be in
    block form: every part but the last must hold whole row blocks, and all share K and the block."""
    block = parts[0].block
    if any(p.block != block or p.data.shape[-1] != parts[0].data.shape[-1] for p in parts):
        return None
    if any(p.data.shape[-2] % block[0] for p in parts[:-1]):
        return None
    if len(parts) == 1:
        return parts[0]
    return Fp8Block(torch.cat([p.data for p in parts], dim=-2), torch.cat([p.scale_inv for p in parts], dim=-2), block)


def layer_weight(layer: object, name: str, dtype: torch.dtype) -> torch.Tensor:
    """The layer's weight `name` ("weight", "w13", "w2") as a plain tensor: itself, or, when it is
    FP8, dequantized to `dtype` with the layer's `{name}_scale_inv` and `weight_block`."""
    weight = getattr(layer, name)
    if weight.dtype != FP8_DTYPE:
        return weight
    return dequantize(weight, getattr(layer, f"{name}_scale_inv"), layer.weight_block, dtype)
