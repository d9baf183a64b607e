"""Triton kernels for the `nvshmem` backend's puts and flags (the protocol is onesided.py's).

_put_rows: one program per block of BLOCK_R rows per destination (grid = cdiv(n, BLOCK_R), one
    launch per destination), copying up to three column groups (hidden, slots, weights) of the same
    rows from this rank's tensors into the destination's region: dst[r] = src[index[r]].
    Values are moved as same-width integers, so every dtype (bf16 included) travels bit for bit.
_signal: the destination's meta words, then the epoch into its flag with a release atomic at system
    scope, so the rows (written by earlier kernels in stream order) are visible before the flag.

On GPUs the destination views are NVSHMEM peer tensors (NVLink peer memory; nvshmem_heap.py). With
TRITON_INTERPRET=1 (set before this module is imported) the same kernels run on the CPU over the
shared-memory heap, which is how CI runs them across real processes (MOESERVE_NVSHMEM_EMULATE=1).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from moeserve.dispatch.heap import SymmetricHeap
from moeserve.dispatch.puts import Signal, wake_sleepers

BLOCK_R = 16
BLOCK_C = 256
_AS_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@triton.jit
def _copy_rows(src, dst, width, rows, src_rows, rmask, BLOCK_C: tl.constexpr):
    for c0 in range(0, width, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = rmask[:, None] & (cols[None, :] < width)
        v = tl.load(src + src_rows[:, None] * width + cols[None, :], mask=mask)
        tl.store(dst + rows[:, None] * width + cols[None, :], v, mask=mask)


@triton.jit
def _put_rows(index, n, src0, dst0, w0, src1, dst1, w1, src2, dst2, w2, INDEXED: tl.constexpr,
              GROUPS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """INDEXED: bit g set = group g reads src rows index[r], else src rows r."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n
    rows = rows.to(tl.int64)
    if INDEXED != 0:
        picked = tl.load(index + rows, mask=rmask, other=0).to(tl.int64)
    else:
        picked = rows
    _copy_rows(src0, dst0, w0, rows, picked if INDEXED & 1 else rows, rmask, BLOCK_C)
    if GROUPS > 1:
        _copy_rows(src1, dst1, w1, rows, picked if INDEXED & 2 else rows, rmask, BLOCK_C)
    if GROUPS > 2:
        _copy_rows(src2, dst2, w2, rows, picked if INDEXED & 4 else rows, rmask, BLOCK_C)


# compiled (not interpreted), Triton turns an int argument equal to 1 into a constant, which has no .to:
# the meta words and the epoch stay run-time scalars
@triton.jit(do_not_specialize=["v0", "v1", "epoch"])
def _signal(meta, v0, v1, flag, epoch, HAS_META: tl.constexpr):
    if HAS_META:
        tl.store(meta, v0.to(tl.int64))
        tl.store(meta + 1, v1.to(tl.int64))
    tl.atomic_xchg(flag, epoch.to(tl.int64), sem="release", scope="sys")


def _as_int(t: torch.Tensor) -> torch.Tensor:
    return t.view(_AS_INT[t.dtype.itemsize])


class TritonPuts:
    """The puts of onesided.py as Triton kernels over the heap's region views."""

    def rows(self, dsts: list[torch.Tensor], srcs: list[torch.Tensor], index: list[torch.Tensor | None]) -> None:
        idx = next((i for i in index if i is not None), None)
        assert all(i is None or i is idx for i in index), "one index (or none) shared by the column groups"
        n = int(idx.shape[0]) if idx is not None else int(srcs[0].shape[0])
        if n == 0:
            return
        args = []
        for dst, src in zip(dsts, srcs):
            assert dst.is_contiguous() and dst.dtype == src.dtype, (dst.dtype, src.dtype)
            args += [_as_int(src.contiguous()), _as_int(dst), int(src.shape[1])]
        groups = len(dsts)
        args += [args[0], args[1], 0] * (3 - groups)  # unused groups
        indexed = sum(1 << g for g, i in enumerate(index) if i is not None)
        _put_rows[(triton.cdiv(n, BLOCK_R),)](
            idx if idx is not None else args[0], n, *args,
            INDEXED=indexed, GROUPS=groups, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C,
        )

    def signal(self, heap: SymmetricHeap, signals: list[Signal]) -> None:
        heap.fence()  # the CPU emulation: kernels ran on this thread; on GPUs stream order does it
        for s in signals:
            region = heap.region(s.dest)
            flag = region[s.flag : s.flag + 8].view(torch.int64)
            if s.meta is None:
                _signal[(1,)](flag, 0, 0, flag, s.epoch, HAS_META=False)
            else:
                meta = region[s.meta : s.meta + 16].view(torch.int64)
                _signal[(1,)](meta, s.values[0], s.values[1], flag, s.epoch, HAS_META=True)
        wake_sleepers(heap, signals)
