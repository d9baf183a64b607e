"""How the kernels of this package are launched, and the host-side helpers they share.

Interpreted or compiled is decided at each launch (`Kernel`), not at import. triton 3.9 reads
TRITON_INTERPRET twice: when `@triton.jit` decorates a function and when `import triton` decorates its
own library (`tl.sum`, `tl.max`, `tl.zeros`, `tl.sigmoid`, `tl.cdiv` are jit functions that only run
in the mode triton was imported in). So kernels here are plain functions wrapped in `Kernel`, built as
an interpreted or compiled function when launched, and they call only triton builtins: reductions are
`tl.reduce(x, axis, SUM)` / `tl.reduce(x, axis, MAX)` (the interpreter maps those two combine
functions to numpy without calling them), zeros are `tl.full`. Then a test can set TRITON_INTERPRET=1
for itself alone, whatever imported triton first, and a GPU run in the same process still compiles.

Shape legend: S groups (expert slots, sequences), E [S] cumulative end rows, T tiles.
"""

from __future__ import annotations

import triton
import triton.language as tl
import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

SUM = tl.standard._sum_combine
MAX = tl.standard._elementwise_max


def interpreting() -> bool:
    """TRITON_INTERPRET as triton reads it, now."""
    return bool(triton.knobs.runtime.interpret)


class Kernel:
    """A kernel function launched as `kernel[grid](*args, **constexprs)`, interpreted when
    TRITON_INTERPRET=1 at launch time, compiled otherwise (one compiled object per mode, kept).

    do_not_specialize: the integer arguments that change from launch to launch (a split count, a
    stride that follows the batch's width). Triton compiles a kernel anew for an integer argument
    equal to 1 and for one divisible by 16; named here, such an argument costs no compile mid-serving."""

    def __init__(self, fn, do_not_specialize: tuple[str, ...] = ()):
        self.fn = fn
        self.do_not_specialize = do_not_specialize
        self.built: dict[bool, object] = {}

    def __getitem__(self, grid):
        mode = interpreting()
        if mode not in self.built:
            kind = InterpretedFunction if mode else JITFunction
            self.built[mode] = kind(self.fn, do_not_specialize=list(self.do_not_specialize))
        return self.built[mode][grid]


def upcast(dtype: torch.dtype) -> bool:
    """Whether a kernel casts its tiles to fp32 before `tl.dot`: always under the interpreter (its
    fp16 / bf16 products are numpy's, not fp32-accumulated) and for fp32 inputs (then the products
    are exact fp32, not tf32); fp16 / bf16 on a GPU go to the tensor cores as they are."""
    return interpreting() or dtype == torch.float32


def pow2(n: int, least: int = 1) -> int:
    """The smallest power of two >= max(n, least): a block size that covers n."""
    return max(triton.next_power_of_2(max(n, 1)), least)


def tile_table(ends: torch.Tensor, block: int, max_tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split groups of rows into tiles of at most `block` rows, on the device, without a host sync.

    ends [S] int cumulative end row of each group (group s owns rows ends[s-1]..ends[s]); max_tiles an
    upper bound on the number of tiles known on the host (rows // block + S covers any split) ->
    (group [T] int32, first row [T] int32) for T = max_tiles; tiles past the last are group -1.
    A launch over max_tiles programs reads its tile here; empty groups own no tile.
    """
    ends = ends.to(torch.int64)
    if ends.numel() == 0:
        none = torch.full((max_tiles,), -1, dtype=torch.int32, device=ends.device)
        return none, torch.zeros_like(none)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    per_group = (ends - starts + block - 1) // block  # [S]
    tile_ends = torch.cumsum(per_group, 0)  # [S]
    tiles = torch.arange(max_tiles, device=ends.device)
    group = torch.searchsorted(tile_ends, tiles, right=True)  # [T]: first group whose tiles end past t
    valid = group < ends.shape[0]
    g = group.clamp(max=ends.shape[0] - 1)
    first_tile = tile_ends[g] - per_group[g]
    row = starts[g] + (tiles - first_tile) * block
    group = torch.where(valid, group, -1)
    return group.to(torch.int32), torch.where(valid, row, 0).to(torch.int32)


def e4m3_emulated(v):
    """v fp32 -> the fp32 value float8_e4m3fn holds for it (round-to-nearest-even, saturating at +-448),
    in arithmetic the interpreter runs exactly. Triton's interpreter casts fp32 -> fp8 wrongly at the top
    of each binade (1.99 -> 1.0), so under it the FP8 kernels round with this and keep fp32 (their FP8
    loads are exact); compiled, they cast with the hardware (cvt.rn.satfinite). Kernels take the cast as
    a constexpr function argument (`fp8_cast()`): a compiled kernel may only reference jit functions,
    and a jit function cannot be called under the interpreter."""
    a = tl.minimum(tl.abs(v), 448.0)
    biased = (a.to(tl.int32, bitcast=True) >> 23) & 0xFF
    biased = tl.maximum(biased, 121)  # below 2^-6 the spacing is the subnormals': 2^-9
    quantum = ((biased - 3) << 23).to(tl.float32, bitcast=True)  # 2^(e - 3): e4m3 keeps 3 mantissa bits
    y = a / quantum
    r = tl.floor(y + 0.5)
    r = tl.where((r - y == 0.5) & (r - 2.0 * tl.floor(r * 0.5) == 1.0), r - 1.0, r)  # ties to even
    return tl.where(v < 0, -r * quantum, r * quantum)


def _e4m3_cast(v):
    return v.to(tl.float8e4nv)


E4M3_CAST = JITFunction(_e4m3_cast)


def fp8_cast():
    """The FP8 kernels' `CAST` constexpr: fp32 -> e4m3 by the hardware when compiled (a jit function, the
    values FP8), by `e4m3_emulated` under the interpreter (the values fp32, rounded as e4m3)."""
    return e4m3_emulated if interpreting() else E4M3_CAST


def _online_softmax_tile(s, v, m, l, acc, UPCAST: tl.constexpr):
    """One key tile of FlashAttention's online softmax: scores s [M, N] fp32 in the log2 domain (-inf
    where masked), values v [N, D]; the running max m [M], sum l [M] and accumulator acc [M, D], fp32
    -> (m, l, acc) with the tile taken in. UPCAST: the product in fp32 (`upcast`)."""
    m_new = tl.maximum(m, tl.reduce(s, 1, MAX))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    l = l * alpha + tl.reduce(p, 1, SUM)
    if UPCAST:
        acc = tl.dot(p, v.to(tl.float32), acc * alpha[:, None], input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l, acc


ONLINE_SOFTMAX_TILE = JITFunction(_online_softmax_tile)


def online_softmax_tile():
    """The attention kernels' `SOFTMAX_TILE` constexpr: `_online_softmax_tile`, a jit function when compiled
    and the plain function under the interpreter (the reason is fp8_cast's)."""
    return _online_softmax_tile if interpreting() else ONLINE_SOFTMAX_TILE
