"""MXFP4 weights (OCP microscaling FP4, as the gpt-oss releases store their experts), dequantized.

A weight [R, C] (R output rows, C input columns, C a multiple of 32) is stored as
    blocks [R, C / 32, 16] uint8   two FP4 (e2m1) values a byte: column 2j in the low nibble, 2j + 1 in the high
    scales [R, C / 32] uint8       one power-of-two scale per 32 columns: e8m0, value 2 ** (scale - 127)
(with any leading dims, e.g. experts, in front of both). Every product of an e2m1 value and a power of
two in range is exact in fp32 and bf16, so dequantizing gives the same numbers as transformers'
`convert_moe_packed_tensors`, in either dtype.

moeserve has no MXFP4 kernel: the loaders dequantize at load time (and say so in the log), and the
experts run in the model's dtype. A rank reads only the rows and the 32-column groups it needs
(`read_rows_columns`), so a tensor-parallel cut through the middle of a group reads the whole group
and drops the columns outside its slice.
"""

from __future__ import annotations

import torch

from moeserve.models.checkpoint import CheckpointError, CheckpointReader

GROUP = 32  # columns per scale
# e2m1: sign bit, 2 exponent bits, 1 mantissa bit, in nibble order 0..15
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """blocks [..., G, 16] uint8; scales [..., G] uint8 -> [..., G * 32] fp32."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != GROUP // 2:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} do not match scales {tuple(scales.shape)}")
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    low, high = lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]
    values = torch.stack((low, high), dim=-1).reshape(*scales.shape, GROUP)  # [..., G, 32]
    exponents = scales.to(torch.int32) - 127
    return torch.ldexp(values, exponents.unsqueeze(-1)).reshape(*scales.shape[:-1], -1)


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [..., C] (C a multiple of 32) -> (blocks [..., C / 32, 16] uint8, scales [..., C / 32] uint8):
    each group's scale is the power of two that brings its largest magnitude to at most 6 (e2m1's
    largest), each value rounded to the nearest e2m1 value. For tests and tools that make MXFP4
    checkpoints; `dequantize(quantize(w))` is w rounded to MXFP4."""
    *lead, C = weight.shape
    if C % GROUP:
        raise ValueError(f"MXFP4 needs the input dimension ({C}) to be a multiple of {GROUP}")
    w = weight.float().reshape(*lead, C // GROUP, GROUP)
    top = w.abs().amax(dim=-1).clamp(min=2.0**-126)
    exponents = torch.ceil(torch.log2(top / 6.0)).clamp(-127, 127)
    scaled = w / torch.ldexp(torch.ones_like(top), exponents.to(torch.int32)).unsqueeze(-1)
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    codes = (scaled.unsqueeze(-1) - lut).abs().argmin(dim=-1).to(torch.uint8)  # [..., G, 32], nearest value
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.contiguous(), (exponents.to(torch.int32) + 127).to(torch.uint8)


def check_shapes(reader: CheckpointReader, name: str, leading: tuple[int, ...], rows: int, columns: int) -> None:
    """`{name}_blocks` is [*leading, rows, columns / 32, 16] and `{name}_scales` [*leading, rows, columns / 32]."""
    groups = -(-columns // GROUP)
    want_blocks, want_scales = (*leading, rows, groups, GROUP // 2), (*leading, rows, groups)
    got_blocks, got_scales = reader.shape(f"{name}_blocks"), reader.shape(f"{name}_scales")
    if columns % GROUP or got_blocks != want_blocks or got_scales != want_scales:
        raise CheckpointError(
            f"{name}_blocks {got_blocks} / {name}_scales {got_scales} are not MXFP4 of a [{rows}, {columns}] weight "
            f"per leading index {leading}: expected {want_blocks} / {want_scales}")


def read_rows_columns(
    reader: CheckpointReader, name: str, index: tuple, rows: slice, columns: tuple[int, int]
) -> torch.Tensor:
    """The dequantized weight `name` (stored as `{name}_blocks` / `{name}_scales`) at leading `index`
    (e.g. (expert,)), rows `rows`, columns [start, end) -> [rows, end - start] fp32, reading only the
    32-column groups that hold those columns."""
    start, end = columns
    first, last = start // GROUP, -(-end // GROUP)
    blocks = reader.read_index(f"{name}_blocks", (*index, rows, slice(first, last)))
    scales = reader.read_index(f"{name}_scales", (*index, rows, slice(first, last)))
    values = dequantize(blocks, scales)  # [rows, (last - first) * 32]
    return values[:, start - first * GROUP : end - first * GROUP]
