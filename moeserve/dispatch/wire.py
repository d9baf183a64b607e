"""Row packing for the wire: several per-row tensors of mixed dtypes travel as one uint8 tensor.

One collective per direction instead of one per dtype, and dtypes a backend may not reduce or
move natively (bf16 on some gloo builds) travel as raw bytes. Packing never reinterprets values:
unpack(pack(parts)) returns the parts bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Column:
    dtype: torch.dtype
    width: int  # elements per row

    @property
    def nbytes(self) -> int:
        return self.width * self.dtype.itemsize


def row_bytes(columns: list[Column]) -> int:
    return sum(c.nbytes for c in columns)


def pack_rows(parts: list[torch.Tensor], index: list[torch.Tensor | None] | None = None) -> torch.Tensor:
    """parts: tensors [T_i, w_i] of any dtype -> uint8 [N, sum_i w_i * itemsize_i], columns in order.

    index: per part, None (the part already has the N rows) or int64 [N] rows of the part to take;
    gathering straight into the packed buffer saves a copy of the hidden rows.
    """
    index = index or [None] * len(parts)
    n = next((int(i.shape[0]) for i in index if i is not None), None)
    n = parts[0].shape[0] if n is None else n
    widths = [p.shape[1] * p.dtype.itemsize for p in parts]
    packed = torch.empty(n, sum(widths), dtype=torch.uint8, device=parts[0].device)
    if n == 0:  # empty tensors may carry strides that refuse a dtype view
        return packed
    start = 0
    for part, rows, width in zip(parts, index, widths):
        assert part.dim() == 2 and (rows is not None or part.shape[0] == n), (tuple(part.shape), n)
        raw = part.contiguous().view(torch.uint8).reshape(part.shape[0], width)
        dst = packed[:, start : start + width]
        if rows is None:
            dst.copy_(raw)
        else:
            torch.index_select(raw, 0, rows, out=dst)
        start += width
    return packed


def unpack_rows(packed: torch.Tensor, columns: list[Column]) -> list[torch.Tensor]:
    """packed: uint8 [N, row_bytes(columns)] -> one [N, width] tensor per column, in its dtype."""
    assert packed.dtype == torch.uint8 and packed.shape[1] == row_bytes(columns), (packed.shape, columns)
    if packed.shape[0] == 0:
        return [torch.empty(0, c.width, dtype=c.dtype, device=packed.device) for c in columns]
    out, start = [], 0
    for c in columns:
        # a fresh 1-D copy: a column slice may keep odd strides or offsets that refuse a dtype view
        raw = packed[:, start : start + c.nbytes].flatten().clone()
        out.append(raw.view(c.dtype).reshape(packed.shape[0], c.width))
        start += c.nbytes
    return out


def slot_dtype(num_local_slots: int) -> torch.dtype:
    """Smallest signed int that holds local slot ids and -1: metadata rides on every row."""
    if num_local_slots <= torch.iinfo(torch.int8).max:
        return torch.int8
    if num_local_slots <= torch.iinfo(torch.int16).max:
        return torch.int16
    return torch.int32


def weight_dtype(topk_weights: torch.Tensor) -> torch.dtype:
    """Router weights travel in their own dtype when that is bf16/fp16/fp32 (combine upcasts them to
    fp32 exactly as local does), else as fp32."""
    if topk_weights.dtype in (torch.float32, torch.bfloat16, torch.float16):
        return topk_weights.dtype
    return torch.float32

