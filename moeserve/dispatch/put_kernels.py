"""Triton kernels for the `nvshmem` backend's puts and flags (the protocol is onesided.py's): one launch
per phase for all destinations, not one per destination (each launch from Python costs tens of
microseconds on a GPU host, against a few for the bytes of a decode step).

_put_rows: program (b, d) copies rows [b * BLOCK_R, (b + 1) * BLOCK_R) of destination d (grid =
    (cdiv(largest count, BLOCK_R), W)), up to three column groups (hidden, slots, weights) of the
    same rows from this rank's tensors into d's region: dst_d[r] = src[index[start_d + r]] (a group
    that is not indexed reads src[start_d + r]). Destinations are addresses (int64, one per
    destination and group) turned into pointers in the kernel: the peers' regions are separate
    allocations. Values are moved as same-width integers, so every dtype (bf16 included) travels bit
    for bit.
_signal: program d writes destination d's meta words, then the epoch into its flag with a release
    atomic at system scope, so the rows (written by the earlier launch, in stream order) are visible
    before the flag.

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
def _put_rows(index, starts, counts, src0, dst0, w0, src1, dst1, w1, src2, dst2, w2, INDEXED: tl.constexpr,
              GROUPS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """INDEXED: bit g set = group g reads src rows index[start + r], else src rows start + r.
    starts, counts: [W] int64; dst0..2: [W] int64 addresses of destination d's block of each group."""
    d = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < tl.load(counts + d)
    rows = rows.to(tl.int64)
    plain = tl.load(starts + d) + rows
    if INDEXED != 0:
        picked = tl.load(index + plain, mask=rmask, other=0).to(tl.int64)
    else:
        picked = plain
    out0 = tl.load(dst0 + d).to(tl.pointer_type(src0.dtype.element_ty))
    _copy_rows(src0, out0, w0, rows, picked if INDEXED & 1 else plain, rmask, BLOCK_C)
    if GROUPS > 1:
        out1 = tl.load(dst1 + d).to(tl.pointer_type(src1.dtype.element_ty))
        _copy_rows(src1, out1, w1, rows, picked if INDEXED & 2 else plain, rmask, BLOCK_C)
    if GROUPS > 2:
        out2 = tl.load(dst2 + d).to(tl.pointer_type(src2.dtype.element_ty))
        _copy_rows(src2, out2, w2, rows, picked if INDEXED & 4 else plain, rmask, BLOCK_C)


# compiled (not interpreted), Triton turns an int argument equal to 1 into a constant, which has no .to:
# the epoch stays a run-time scalar
@triton.jit(do_not_specialize=["epoch"])
def _signal(meta, v0, v1, flags, epoch, HAS_META: tl.constexpr):
    """Program d: meta[d] (an address) <- (v0[d], v1[d]) if HAS_META, then flags[d] (an address) <- epoch."""
    d = tl.program_id(0)
    if HAS_META:
        words = tl.load(meta + d).to(tl.pointer_type(tl.int64))
        tl.store(words, tl.load(v0 + d))
        tl.store(words + 1, tl.load(v1 + d))
    flag = tl.load(flags + d).to(tl.pointer_type(tl.int64))
    tl.atomic_xchg(flag, epoch.to(tl.int64), sem="release", scope="sys")


def _as_int(t: torch.Tensor) -> torch.Tensor:
    return t.view(_AS_INT[t.dtype.itemsize])


class TritonPuts:
    """The puts of onesided.py as Triton kernels over the heap's region views: one launch for the rows
    of a phase and one for its flags, whatever the number of destinations."""

    def rows(self, dsts: list[list[torch.Tensor]], srcs: list[torch.Tensor], indexed: list[bool],
             index: torch.Tensor | None, starts: list[int], counts: list[int]) -> None:
        most = max(counts, default=0)
        if most == 0:
            return
        groups = len(srcs)
        device = srcs[0].device
        # one host-to-device copy for every small argument: [starts, counts, addresses per group]
        words = torch.tensor([starts, counts, *([int(dst[g].data_ptr()) for dst in dsts] for g in range(groups))],
                             dtype=torch.int64).to(device, non_blocking=True)
        args = []
        for g, src in enumerate(srcs):
            assert all(dst[g].is_contiguous() and dst[g].dtype == src.dtype for dst in dsts), "contiguous, same dtype"
            args += [_as_int(src.contiguous()), words[2 + g], int(src.shape[1])]
        args += [args[0], args[1], 0] * (3 - groups)  # unused groups
        bits = sum(1 << g for g, on in enumerate(indexed) if on)
        assert index is not None or not bits, "indexed groups need an index"
        _put_rows[(triton.cdiv(most, BLOCK_R), len(dsts))](
            index if index is not None else words[0], words[0], words[1], *args,
            INDEXED=bits, GROUPS=groups, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C,
        )

    def signal(self, heap: SymmetricHeap, signals: list[Signal]) -> None:
        heap.fence()  # the CPU emulation: kernels ran on this thread; on GPUs stream order does it
        has_meta = signals[0].meta is not None
        assert all((s.meta is not None) == has_meta for s in signals), "all signals of a phase carry meta, or none"
        regions = [heap.region(s.dest) for s in signals]
        table = [[r.data_ptr() + s.flag_at(heap.rank) for r, s in zip(regions, signals)]]
        if has_meta:
            table += [[r.data_ptr() + s.meta for r, s in zip(regions, signals)],
                      [s.values[0] for s in signals], [s.values[1] for s in signals]]
        words = torch.tensor(table, dtype=torch.int64).to(regions[0].device, non_blocking=True)
        flags = words[0]
        meta, v0, v1 = (words[1], words[2], words[3]) if has_meta else (flags, flags, flags)  # unused: no meta
        _signal[(len(signals),)](meta, v0, v1, flags, signals[0].epoch, HAS_META=has_meta)
        wake_sleepers(heap, signals)
