"""The `nvshmem` backend's side of the one-sided protocol (onesided.py) as Triton kernels: one launch
per phase and side, each doing the tensor work, the puts into the peers' regions and the flags
together, with no host sync inside a phase (csrc/onesided.cpp is the CPU counterpart). Every result
is the torch path's (onesided_plan.py) bit for bit: back_index, term_index, row weights, partial rows
and totals (tests/dispatch/test_put_kernels.py, under the interpreter).

    # T tokens, k top-k, H hidden, W ranks, M rows per (source, destination) block, S local slots,
    # n grid rows per source (the largest received count), R expert rows

_send (grid: token blocks x W destinations x column chunks): program (b, d, c) counts the rows this rank sends d for the
    tokens before block b (a scan of their ids), then writes the block's rows for d straight into d's
    region (hidden columns of chunk c; chunk 0 also the local slot ids and router weights), in token
    order, and back_index [T, k]. The
    programs of d add their rows, terms and bad ids into a scratch row; the last one to finish (an
    acq_rel counter) writes d's meta words (rows, bad, terms) and then the epoch into d's flag, a
    release at system scope: every row is visible before the flag.
_expand (grid: S slots x column chunks): program e finds the received rows of local slot e in (source,
    row, top-k position) order (local's order) from this rank's own blocks and the sources' counts in
    its meta words, copies them into the ExpertBatch, and (chunk 0) writes term_index, row weights,
    the slot's count and end offset.
_partial (grid: W sources x row blocks x column chunks): the fp32 sum, in top-k order, of each received
    row's weighted expert outputs, written into the source's partial block; the last program of a
    source raises its combine flag (as _send does).
_total (grid: token blocks x column chunks): each token's partials summed in top-k order, then rounded
    once to the output dtype.

Rows travel as same-width integers (every dtype bit for bit); bf16 is widened and rounded by its bits
(exact, and right under the interpreter, whose bf16 arithmetic is not). Sums are plain fp32 multiplies
and adds in a fixed order, compiled without fused multiply-adds (enable_fp_fusion=False).

On GPUs the peers' regions are NVSHMEM peer tensors (NVLink peer memory; nvshmem_heap.py), reached
through int64 addresses turned into pointers (separate allocations). With TRITON_INTERPRET=1 (set
before this module is imported) the same kernels run on the CPU over the shared-memory heap, which is
how CI runs them across real processes (MOESERVE_NVSHMEM_EMULATE=1).

Arguments that change from call to call (the epoch, token and row counts, the zero row's index) are
not specialized (`do_not_specialize`): Triton compiles a kernel anew for an integer argument equal
to 1 and for one divisible by 16, so a decode step of one token, or the 16th epoch, would otherwise
stop serving for a compile the first time it comes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from moeserve.dispatch.even_split import dest_ranks
from moeserve.dispatch.heap import SymmetricHeap
from moeserve.dispatch.heap_layout import COMBINE, DISPATCH, META_WORDS, Layout
from moeserve.dispatch.puts import Signal, wake_sleepers

BT = 16  # tokens (or rows) per program
BLOCK_C = 128  # columns per inner step
CHUNK = 1024  # columns per program of _expand, _partial and _total
SEND_CHUNK = 512  # of _send: a decode step's few rows per destination still spread over many programs
# Above this many token blocks, _send's programs read the rows before their block from a prefix computed
# by a few torch ops on the device, not from a scan of the earlier ids each (quadratic in the tokens)
SCAN_BLOCKS = 16
BE = 64  # received (row, top-k position) entries per step of _expand
_AS_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}  # FLOAT: how a kernel widens a dtype
# reductions and scans as triton builtins with the standard combine functions, which the interpreter maps
# to numpy (tl.sum and friends are jit functions fixed in the mode triton was imported in:
# moeserve/kernels/triton/launch.py)
_SUM, _MAX, _MIN = tl.standard._sum_combine, tl.standard._elementwise_max, tl.standard._elementwise_min


@triton.jit
def _widen(v, FLOAT: tl.constexpr):
    """Loaded values of a float dtype (bf16 as its int16 bits) -> fp32, exactly."""
    if FLOAT == 1:
        return (v.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        return v.to(tl.float32)


@triton.jit
def _finish(scratch, programs, flag_at, epoch, meta_at, HAS_META: tl.constexpr):
    """Called by each of the `programs` programs of one destination after its stores: the last to
    arrive writes the meta words (rows, bad, terms from scratch), then the epoch into the flag, and
    clears scratch. scratch: int32 [4] (arrivals, rows, terms, bad)."""
    tl.debug_barrier()  # every thread's stores of this program come before its arrival
    arrived = tl.atomic_add(scratch, 1, sem="acq_rel", scope="sys")
    if arrived == programs - 1:
        if HAS_META:
            rows = tl.atomic_xchg(scratch + 1, 0)
            terms = tl.atomic_xchg(scratch + 2, 0)
            bad = tl.atomic_xchg(scratch + 3, 0)
            words = meta_at.to(tl.pointer_type(tl.int64))
            tl.store(words, tl.where(bad == 0, rows, 0).to(tl.int64))
            tl.store(words + 1, (bad != 0).to(tl.int64))
            tl.store(words + 2, tl.where(bad == 0, terms, 0).to(tl.int64))
        tl.atomic_xchg(scratch, 0)
        tl.debug_barrier()
        tl.atomic_xchg(flag_at.to(tl.pointer_type(tl.int64)), epoch.to(tl.int64), sem="release", scope="sys")


@triton.jit(do_not_specialize=["epoch", "T", "bad_in"])
def _send(ids, x, w, slot_like, back, table, scratch, starts, epoch, T, bad_in, S, W, M, H,
          K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr,
          HAS_STARTS: tl.constexpr):
    """ids [T, K] int; x [T, H], w [T, K] as same-width ints; back [T, K] int64 out; table int64 [5, W]
    (d's hidden, slots and weights block of this source, its meta words and its dispatch flag);
    scratch int32 [W, 4]; bad_in: 1 when the host found the call invalid (then nothing is sent).
    Program (b, d, c): token block b, destination d, hidden columns chunk c (chunk 0 also writes the
    slots, weights, back_index and counts). HAS_STARTS: starts [blocks, W] int32 holds the rows for d
    before each block (a large batch: the host's prefix, not each program's scan of the earlier ids)."""
    b = tl.program_id(0)
    d = tl.program_id(1)
    c = tl.program_id(2)
    j = tl.arange(0, BK)
    jm = j < K
    before = tl.reduce(tl.full([BT], 0, tl.int32), 0, _SUM)
    if HAS_STARTS:
        before += tl.load(starts + b * W + d)
    else:
        for t0 in range(0, b * BT, BT):  # rows for d from the tokens before this block
            t = t0 + tl.arange(0, BT)
            v = tl.load(ids + t[:, None] * K + j[None, :], mask=(t[:, None] < T) & jm[None, :], other=-1).to(tl.int64)
            on = (v >= 0) & (v // S == d)
            before += tl.reduce(tl.reduce(on.to(tl.int32), 1, _MAX), 0, _SUM)
    t = b * BT + tl.arange(0, BT)
    t64 = t.to(tl.int64)
    m2 = (t[:, None] < T) & jm[None, :]  # the host passes T = 0 with bad_in
    v = tl.load(ids + t64[:, None] * K + j[None, :], mask=m2, other=-1).to(tl.int64)
    bad = tl.reduce(tl.reduce((m2 & ((v < -1) | (v >= W * S))).to(tl.int32), 1, _SUM), 0, _SUM) + bad_in
    on = m2 & (v >= 0) & (v // S == d)
    sent = tl.reduce(on.to(tl.int32), 1, _MAX)  # [BT]
    row = (before + tl.associative_scan(sent, 0, _SUM) - sent).to(tl.int64)
    sent_m = sent > 0
    mine = scratch + d * 4
    if c == 0:
        back_at = back + t64[:, None] * K + j[None, :]
        first = tl.reduce(tl.where(on, j[None, :], BK), 1, _MIN)
        tl.store(back_at, d * M + row[:, None] + tl.full([BT, BK], 0, tl.int64),
                 mask=on & (j[None, :] == first[:, None]))
        if d == 0:  # positions that are no rank's first: the zero row W * M
            rank = tl.where((v >= 0) & (v < W * S), v // S, -1)
            same = (rank[:, :, None] == rank[:, None, :]) & (j[None, None, :] < j[None, :, None])
            repeat = tl.reduce(same.to(tl.int32), 2, _MAX) > 0
            lead = (rank >= 0) & (repeat == 0)
            tl.store(back_at, W * M + tl.full([BT, BK], 0, tl.int64),
                     mask=(t[:, None] < T) & jm[None, :] & (lead == 0))
        slots_at = tl.load(table + W + d).to(tl.pointer_type(slot_like.dtype.element_ty))
        local = tl.where(on, v % S, -1).to(slot_like.dtype.element_ty)
        tl.store(slots_at + row[:, None] * K + j[None, :], local, mask=sent_m[:, None] & jm[None, :])
        weights_at = tl.load(table + 2 * W + d).to(tl.pointer_type(w.dtype.element_ty))
        wv = tl.load(w + t64[:, None] * K + j[None, :], mask=sent_m[:, None] & jm[None, :])
        tl.store(weights_at + row[:, None] * K + j[None, :], wv, mask=sent_m[:, None] & jm[None, :])
        tl.atomic_add(mine + 1, tl.reduce(sent, 0, _SUM))
        tl.atomic_add(mine + 2, tl.reduce(tl.reduce(on.to(tl.int32), 1, _SUM), 0, _SUM))
        tl.atomic_add(mine + 3, bad)
    hidden_at = tl.load(table + d).to(tl.pointer_type(x.dtype.element_ty))
    for c0 in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = sent_m[:, None] & (cols[None, :] < H)
        tl.store(hidden_at + row[:, None] * H + cols[None, :], tl.load(x + t64[:, None] * H + cols[None, :], mask=mask),
                 mask=mask)
    programs = tl.num_programs(0) * tl.num_programs(2)
    _finish(mine, programs, tl.load(table + 4 * W + d), epoch, tl.load(table + 3 * W + d), True)


@triton.jit(do_not_specialize=["n", "R"])
def _expand(slots, x, w, meta, rows_out, w_out, term_index, counts_out, offsets_out, W, M, n, R, H,
            K: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    """This rank's blocks slots [W, M, K], x [W, M, H] and w [W, M, K] (x, w as same-width ints), meta
    its int64 meta words ([W, 4]: rows from each source first) -> rows_out [R, H], w_out [R],
    term_index [W * n, K] int64 (R where no row), counts_out [S] int64, offsets_out [S] int32."""
    e = tl.program_id(0)
    c = tl.program_id(1)
    i = tl.arange(0, BE)
    r_in, jj = i // BK, i % BK
    lower = tl.reduce(tl.full([BE], 0, tl.int32), 0, _SUM)  # entries of slots below e: where e's rows start
    for s in range(0, W):
        count = tl.load(meta + s * 4)
        for r0 in range(0, n, BE // BK):
            r = r0 + r_in
            ok = (r < count) & (jj < K)
            v = tl.load(slots + (s * M + r) * K + jj, mask=ok, other=-1).to(tl.int32)
            lower += tl.reduce(((v >= 0) & (v < e)).to(tl.int32), 0, _SUM)
    at = lower
    for s in range(0, W):
        count = tl.load(meta + s * 4)
        for r0 in range(0, n, BE // BK):
            r = r0 + r_in
            ok = (r < n) & (jj < K)
            v = tl.load(slots + (s * M + r) * K + jj, mask=ok & (r < count), other=-1).to(tl.int32)
            pick = v == e
            dest = (at + tl.associative_scan(pick.to(tl.int32), 0, _SUM) - pick.to(tl.int32)).to(tl.int64)
            src = (s * M + r).to(tl.int64)
            if c == 0:
                tl.store(term_index + (s * n + r) * K + jj, dest, mask=pick)
                tl.store(w_out + dest, tl.load(w + src * K + jj, mask=pick), mask=pick)
                if e == 0:  # entries that are no slot's row
                    tl.store(term_index + (s * n + r) * K + jj, R + tl.full([BE], 0, tl.int64), mask=ok & (v < 0))
            for c0 in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK_C):
                cols = c0 + tl.arange(0, BLOCK_C)
                mask = pick[:, None] & (cols[None, :] < H)
                tl.store(rows_out + dest[:, None] * H + cols[None, :],
                         tl.load(x + src[:, None] * H + cols[None, :], mask=mask), mask=mask)
            at += tl.reduce(pick.to(tl.int32), 0, _SUM)
    if c == 0:
        tl.store(counts_out + e, (at - lower).to(tl.int64))
        tl.store(offsets_out + e, at)


@triton.jit(do_not_specialize=["epoch", "n", "R"])
def _partial(y, w, term_index, meta, table, scratch, epoch, n, R, H, K: tl.constexpr, YF: tl.constexpr,
             WF: tl.constexpr, BT: tl.constexpr, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    """y [R, H] expert outputs, w [R] row weights (bf16 as int16 bits); term_index [W * n, K]; meta this
    rank's meta words; table int64 [2, W] (source s's partial block for this rank's rows, and its
    combine flag); scratch int32 [W, 4]. Program (s, b, c): rows b of source s, columns chunk c."""
    s = tl.program_id(0)
    r = tl.program_id(1) * BT + tl.arange(0, BT)
    rm = r < tl.load(meta + s * 4)
    q = (s * n + r).to(tl.int64)
    out = tl.load(table + s).to(tl.pointer_type(tl.float32))
    for c0 in range(tl.program_id(2) * CHUNK, tl.program_id(2) * CHUNK + CHUNK, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        cm = cols < H
        acc = tl.full([BT, BLOCK_C], 0, tl.float32)
        for j in range(K):
            at = tl.load(term_index + q * K + j, mask=rm, other=R)
            has = rm & (at < R)
            wv = _widen(tl.load(w + at, mask=has, other=0), WF)
            yv = _widen(tl.load(y + at[:, None] * H + cols[None, :], mask=has[:, None] & cm[None, :], other=0), YF)
            acc += yv * wv[:, None]
        tl.store(out + r[:, None].to(tl.int64) * H + cols[None, :], acc, mask=rm[:, None] & cm[None, :])
    _finish(scratch + s * 4, tl.num_programs(1) * tl.num_programs(2), tl.load(table + tl.num_programs(0) + s), epoch, 0,
            False)


@triton.jit(do_not_specialize=["T", "zero"])
def _total(partials, back, out, T, H, zero, K: tl.constexpr, OUT: tl.constexpr, BT: tl.constexpr,
           CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    """out [T, H] (OUT: 0 fp32, 1 bf16 as int16 bits, 2 fp16) = sum in top-k order of partials[back[t, j]]
    (fp32 [zero + 1, H], row `zero` all zeros), rounded once."""
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    tm = t < T
    t64 = t.to(tl.int64)
    for c0 in range(tl.program_id(1) * CHUNK, tl.program_id(1) * CHUNK + CHUNK, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = tm[:, None] & (cols[None, :] < H)
        acc = tl.full([BT, BLOCK_C], 0, tl.float32)
        for j in range(K):
            at = tl.load(back + t64 * K + j, mask=tm, other=zero)
            acc += tl.load(partials + at[:, None] * H + cols[None, :], mask=mask & (at != zero)[:, None], other=0.0)
        dst = out + t64[:, None] * H + cols[None, :]
        if OUT == 1:  # round to nearest even by the bits, as torch does (NaN stays a quiet NaN)
            bits = acc.to(tl.int32, bitcast=True)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            tl.store(dst, tl.where(acc != acc, 0x7FC0, rounded).to(tl.int16), mask=mask)
        elif OUT == 2:
            tl.store(dst, acc.to(tl.float16), mask=mask)
        else:
            tl.store(dst, acc, mask=mask)


def _chunk(H: int) -> int:
    """Columns per program: CHUNK, or fewer for a narrow hidden (no masked steps past H)."""
    return min(CHUNK, max(BLOCK_C, triton.next_power_of_2(H)))


def _as_int(t: torch.Tensor) -> torch.Tensor:
    return t.view(_AS_INT[t.dtype.itemsize])


def _bits(t: torch.Tensor) -> torch.Tensor:
    """bf16 as its int16 bits (the kernels widen them exactly); other dtypes as they are."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def _block_starts(topk_ids: torch.Tensor, num_local_slots: int, world: int, blocks: int) -> torch.Tensor:
    """[blocks, W] int32: the rows this rank sends each destination for the tokens before each block of
    BT (a token sends a destination one row if any of its ids lies there); on the device, no sync."""
    # T tokens, k top-k, W ranks
    T = topk_ids.shape[0]
    ids = topk_ids.long()
    ranks = dest_ranks(ids, num_local_slots, world)  # -1: no rank
    sent = torch.zeros(blocks * BT, world + 1, dtype=torch.int32, device=ids.device)
    sent[:T].scatter_(1, ranks.clamp(max=world), 1)  # ids past the last rank: bad, counted by the kernel
    per_block = sent[:, :world].view(blocks, BT, world).sum(1, dtype=torch.int32)
    return (torch.cumsum(per_block, 0, dtype=torch.int32) - per_block).contiguous()


@dataclass
class Tables:
    """One parity's device-side addresses, built once per heap: no per-call host-to-device copy."""

    send: torch.Tensor  # int64 [5, W]: hidden, slots, weights block of this source in d's region; meta; flag
    combine: torch.Tensor  # int64 [2, W]: partial block of this rank's rows in s's region; s's combine flag
    meta: torch.Tensor  # int64 [W, 4]: this rank's own meta words of the parity


class TritonPuts:
    """The nvshmem backend's phases (onesided.py calls them where `fused` is set): one launch each."""

    fused = True

    def __init__(self) -> None:
        self._scratch: dict[tuple, torch.Tensor] = {}

    def tables(self, heap: SymmetricHeap, layout: Layout, me: int) -> list[Tables]:
        """Both parities' address tables for this heap (onesided.py keeps them with the heap)."""
        W, out = layout.world, []
        bases = [heap.region(r).data_ptr() for r in range(W)]
        device = heap.region(me).device
        for p in (0, 1):
            hid, slo, wei, par = layout.source_offsets(p, me)
            send = [[b + off for b in bases] for off in (hid, slo, wei, layout.meta_word(p, me),
                                                         layout.flag_row(DISPATCH, p) + 8 * me)]
            combine = [[b + off for b in bases] for off in (par, layout.flag_row(COMBINE, p) + 8 * me)]
            start = layout.meta_word(p)
            meta = heap.region(me)[start : start + 8 * META_WORDS * W].view(torch.int64).view(W, META_WORDS)
            out.append(Tables(torch.tensor(send, dtype=torch.int64, device=device),
                              torch.tensor(combine, dtype=torch.int64, device=device), meta))
        self._scratch[(device, DISPATCH)] = torch.zeros(W, 4, dtype=torch.int32, device=device)
        self._scratch[(device, COMBINE)] = torch.zeros(W, 4, dtype=torch.int32, device=device)
        return out

    def send(self, heap: SymmetricHeap, tables: Tables, layout: Layout, hidden: torch.Tensor,
             topk_ids: torch.Tensor, weights: torch.Tensor, num_local_slots: int, slot_like: torch.Tensor,
             epoch: int, row: int, bad: bool) -> torch.Tensor:
        """This rank's rows, meta words and dispatch flags for every destination; returns back_index
        [T, k] (bad: the host found the call invalid; only the bad flag goes out)."""
        T, k = topk_ids.shape
        W = layout.world
        back = torch.empty(T, k, dtype=torch.int64, device=hidden.device)
        H = hidden.shape[1]
        send_chunk = min(SEND_CHUNK, _chunk(H))
        blocks = max(1, triton.cdiv(T, BT)) if not bad else 1
        large = blocks > SCAN_BLOCKS and not bad
        starts = _block_starts(topk_ids, num_local_slots, W, blocks) if large else back  # back: unused
        _send[(blocks, W, triton.cdiv(H, send_chunk))](
            topk_ids, _as_int(hidden), _as_int(weights), slot_like, back, tables.send,
            self._scratch[(hidden.device, DISPATCH)], starts, epoch, T if not bad else 0, int(bad), num_local_slots,
            W, layout.rows, H, K=k, BK=triton.next_power_of_2(k), BT=BT, CHUNK=send_chunk, BLOCK_C=BLOCK_C,
            HAS_STARTS=large,
        )
        self._wake(heap, row, epoch)
        return back

    def expand(self, tables: Tables, blocks, num_local_slots: int, n: int, R: int):
        """The ExpertBatch (rows, per-slot counts, offsets), term_index and row weights of this step's
        received rows (R of them, n the largest count)."""
        W, M, k = blocks.slots.shape
        H = blocks.hidden.shape[2]
        device = blocks.hidden.device
        rows = torch.empty(R, H, dtype=blocks.hidden.dtype, device=device)
        row_weights = torch.empty(R, dtype=blocks.weights.dtype, device=device)
        term_index = torch.empty(W * n, k, dtype=torch.int64, device=device)
        counts = torch.empty(num_local_slots, dtype=torch.int64, device=device)
        offsets = torch.empty(num_local_slots, dtype=torch.int32, device=device)
        bk = triton.next_power_of_2(k)
        chunk = _chunk(H)
        _expand[(num_local_slots, triton.cdiv(H, chunk))](
            blocks.slots, _as_int(blocks.hidden), _as_int(blocks.weights), tables.meta, _as_int(rows),
            _as_int(row_weights), term_index, counts, offsets, W, M, n, R, H,
            K=k, BK=bk, BE=max(BE, bk), CHUNK=chunk, BLOCK_C=BLOCK_C,
        )
        return rows, counts, offsets, term_index, row_weights

    def partial(self, heap: SymmetricHeap, tables: Tables, expert_out: torch.Tensor, row_weights: torch.Tensor,
                term_index: torch.Tensor, n: int, epoch: int, row: int) -> None:
        """Every source's partial rows into its partial block, then its combine flag."""
        W = tables.combine.shape[1]
        R, H = expert_out.shape
        k = term_index.shape[1]
        chunk = _chunk(H)
        _partial[(W, max(1, triton.cdiv(n, BT)), triton.cdiv(H, chunk))](
            _bits(expert_out.contiguous()), _bits(row_weights), term_index, tables.meta, tables.combine,
            self._scratch[(expert_out.device, COMBINE)], epoch, n, R, H,
            K=k, YF=_KINDS[expert_out.dtype], WF=_KINDS[row_weights.dtype], BT=BT, CHUNK=chunk, BLOCK_C=BLOCK_C,
            enable_fp_fusion=False,
        )
        self._wake(heap, row, epoch)

    def total(self, partials: torch.Tensor, back_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[T, H] in dtype: each token's partials summed in top-k order (partials' last row: zeros)."""
        T, k = back_index.shape
        H = partials.shape[1]
        out = torch.empty(T, H, dtype=dtype, device=partials.device)
        if T:
            chunk = _chunk(H)
            _total[(triton.cdiv(T, BT), triton.cdiv(H, chunk))](
                partials, back_index, _bits(out), T, H, partials.shape[0] - 1, K=k, OUT=_KINDS[dtype], BT=BT,
                CHUNK=chunk, BLOCK_C=BLOCK_C, enable_fp_fusion=False,
            )
        return out

    @staticmethod
    def _wake(heap: SymmetricHeap, row: int, epoch: int) -> None:
        """The emulated heap: the kernel ran on this thread, so the flags are down; wake sleeping peers."""
        if hasattr(heap, "notify"):
            wake_sleepers(heap, [Signal(d, None, (), row, epoch) for d in range(heap.world)])
