"""One-sided expert dispatch over a symmetric heap (`shm`, `nvshmem`): no collective on the data path.

One step (one MoE layer call) has an epoch e (1, 2, ...; the same on every rank, since every rank
calls dispatch and combine in the same order) and uses the buffers of parity p = e % 2
(heap_layout.py). Source s, destination d:
dispatch: s writes its rows for d straight into d's region, blocks [p][s]: one row per (token, d)
    (hidden, the local slot of each top-k position or -1, the router weights), in token order; then
    the row count and a bad-routing flag into d's meta; then, after a store fence, the epoch into
    d's dispatch flag [p][s] (and wakes d if it sleeps on that row of flags and this flag was the
    last one down: flag_wait.py). Every pair signals,
    with zero rows too (the empty-batch protocol).
    d waits until all W flags read e, then raises with every rank if any source flagged bad
    routing, else expands the rows (sources in rank order, tokens in order) into its ExpertBatch:
    the same rows in the same order as `local` on the whole batch.
combine: d sums each received row's weighted expert outputs in fp32 in top-k order (one partial
    per (token, d)), writes them into s's partial block [p][d], fences, and raises s's combine
    flag [p][d] to e. s waits for all W, then sums the partials of each token in order of the
    rank's first top-k position, in fp32 (a2a's order: docs/dispatch.md, "Numerics").

Reading in place (the C++ path): where the expert output lies in d's heap (the MoE layer has the
experts write into the buffer `expert_output` offers: the one of parity p's [W * M, H] blocks, rows or
hidden, that does not hold the ExpertBatch), d writes no partial rows. It publishes, into each
source's terms block [p][d], the output's offset in its region and the output row of each of that
source's rows at each top-k position, and raises the flag. s then reads its tokens' expert rows where
they lie and sums them with its own router weights in top-k order, from 0, in fp32: local's sum, bit
for bit, for every token. That saves the partial rows' write and read (a third of an unplaced call's
bytes). The output stays where it is until d's experts of step e + 2, by which time every source's
combine of e has returned (the same argument as below). A rank whose ExpertBatch passes the rows
block (top-k positions piled on it), or whose expert output lies elsewhere, sends partials as above;
each source reads each rank's word and takes each rank's terms the way that rank sent them.

Op count: at decode sizes each torch op's fixed cost, not the bytes, is the latency, so the math is
vectorized over destinations (onesided_plan.py): one plan for all ranks, one fan-out write per column
into every destination at once (a [W, M, width] view across the regions, where the heap has one),
the received rows read as one [W, n, k] grid (n = the largest count), and each fixed-order sum one
gather of k terms per row (a zero row stands in for absent terms) plus k - 1 adds written straight
into the peers' partial blocks. Fewer still: shm's C++ kernels (native.py) do each side of a phase in
one call (and its signal to every peer in one more), and nvshmem's Triton kernels (put_kernels.py) in
one launch, rows and flags together, with the senders' counts of slot ids in the meta words sizing
the receiver's ExpertBatch.

Bytes: at prefill sizes the copies, not the ops, are the latency. The C++ path keeps a rank's rows for
itself out of its own blocks (nobody else reads them): send writes only their slot ids and weights,
expand takes their hidden rows from the dispatched tensor, and total sums their partials from the
expert output instead of reading back what partial would have written. What peers write and read, and
every result bit, is unchanged (csrc/onesided.cpp).

Placed calls (the C++ path, from `placed_bytes` of rows per rank): one round more, first. Every source
writes its count of top-k positions per (destination, local slot) into every rank's counts [p][s] and
raises its counts flag; once all are up, every rank holds every count and derives from them, alike,
whether any source flagged bad routing (every rank raises) and whether every destination's ExpertBatch
fits its hidden block of parity p ([W * M, H], unused by a placed call); if one does not, the call goes
on through the blocks as above. Otherwise each source writes each hidden row once, straight to its row
of the destination's ExpertBatch (local's order: slot-major, then source, token, top-k position, so the
start of a source's rows for (d, e) is the sum of the counts before it), with the slots and weights
into the blocks as before, and the destination's ExpertBatch is a view of its block: no copy out.
An unplaced call of the C++ path copies its ExpertBatch into its rows block of parity p where it fits
(else into a new tensor). Either way the ExpertBatch is valid until the dispatch two steps later (the
same parity), which the MoE layer's use (experts, then combine) never reaches. The extra round costs
every call a flag exchange, which the saved copy repays only for large calls (docs/dispatch.md,
"Placed calls").

Why nobody overwrites rows still being read: a source writes step e's rows only after its combine
of step e-1 returned, which needed every peer's combine flag e-1, which each peer raised only after
it had read all of its dispatch rows of e-1; likewise a partial of step e is written only after the
destination's dispatch flag e, raised after that rank's combine of e-1 had read its partials.
Alternating parities adds a step of slack on top: a handle may keep views of its own step's blocks
while peers already write the next step's into the other parity.

Sizes: M rows per (source, destination) pair, M >= the step's token bound; sized once at the first
call from max(capacity_tokens, max_tokens). A later call with a larger bound (or new dtype, hidden
size or top-k) re-creates the heap on every rank at once: the decision depends only on values
identical on every rank. Without max_tokens one all_reduce agrees on it (the engine always passes it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeserve import envs
from moeserve.dispatch.base import ExpertBatch, Handle, routing_error, shape_error
from moeserve.dispatch.even_split import EvenSplitDispatcher
from moeserve.dispatch.flag_wait import wait_for_flags
from moeserve.dispatch.heap import SymmetricHeap, collective_device
from moeserve.dispatch.heap_layout import COMBINE, COUNTS, DISPATCH, META_WORDS, Blocks, Layout
from moeserve.dispatch.onesided_plan import expand_grid, plan_fanout, position_index, sum_in_j_order
from moeserve.dispatch import native as native_kernels
from moeserve.dispatch.puts import FusedPuts, Puts, Signal, TorchPuts
from moeserve.dispatch.wire import slot_dtype, weight_dtype
from moeserve.parallel_state import ParallelContext

HeapFactory = Callable[[int], SymmetricHeap]  # bytes per rank -> heap (a collective over the ep group)
# Up to this many bytes of hidden rows per call, one fan-out op per column writes every destination
# (gather, then scatter: each row copied twice); above it one copy per destination (each row once).
FAN_BYTES = 1 << 20
# placed_bytes where no rank may place a call (one without the C++ path)
NEVER = 1 << 62


@dataclass
class OneSidedHandle(Handle):
    epoch: int
    back_index: torch.Tensor  # [T, k] int64: row of this rank's partial rows (heap_layout.partial_rows)
    #                           summed at (t, j): the partial of the rank whose first top-k position is j
    recv_counts: list[int]  # [W] rows this rank received from each rank
    grid_rows: int  # n = max(recv_counts): received row q = s * n + r is row r from source s
    term_index: torch.Tensor  # [W * n, k] int64: ExpertBatch row at (q, j), R (a zero row) where none
    row_weights: torch.Tensor  # [R] router weight of each ExpertBatch row (the sender's dtype)
    out_dtype: torch.dtype
    device: torch.device
    ids: torch.Tensor | None = None  # the C++ path: topk_ids and weights [T, k], as sent (combine reads
    weights: torch.Tensor | None = None  # expert output in place with them: local's terms, in j order)


class OneSidedDispatcher(EvenSplitDispatcher):
    """Slots split evenly over ctx.ep_size ranks. Mutates only its heap and its epoch counter; every
    rank must call dispatch and combine in the same order (each call is one step of the protocol)."""

    def __init__(
        self,
        num_slots: int,
        ctx: ParallelContext,
        heap_factory: HeapFactory,
        puts: Puts | FusedPuts,
        timeout_s: float = 60.0,
        capacity_tokens: int = 0,
        device: torch.device | str = "cpu",
        native: bool = True,
    ):
        super().__init__(num_slots, ctx)
        self.heap_factory, self.puts = heap_factory, puts
        self.timeout_s, self.capacity_tokens = timeout_s, capacity_tokens
        self.yield_s: float | None = None  # how long a flag wait yields before it sleeps (flag_wait.py)
        self.device = torch.device(device)  # where the heap lives: other tensors are staged through it
        self.epoch = 0
        # From this many bytes of hidden rows per rank (the step's token bound x a row: the same on every
        # rank) a call of the C++ path is placed: a round of counts first, then every row written at its
        # final row of the receiver's ExpertBatch (no copy out of the blocks): docs/dispatch.md, "Placed
        # calls". The ranks agree on the largest as they make the heap (_ensure).
        self.placed_bytes = envs.SHM_PLACED_BYTES.get()
        self._placed_from = NEVER  # the agreed placed_bytes of this heap
        self.placed_calls = 0  # calls whose rows went straight to their ExpertBatch rows (_count)
        self.heap: SymmetricHeap | None = None
        self.layout: Layout | None = None
        self._mine: list[Blocks] = []  # [parity]: [W source, M, width] views of this rank's own region
        self._partials: list[torch.Tensor] = []  # [parity]: [W * M + 1, H] its partial rows (+ a zero row)
        self._outbox: list[list[Blocks]] = []  # [parity][rank]: [M, width] views of this source's blocks there
        # [parity]: [W destination, M, width] views of this source's blocks in every region (one op
        # writes all destinations); None where the heap or the puts cannot (then one put per destination)
        self._fan: list[Blocks | None] = []
        # the C++ path (native.py) where it is built and the heap has fan-out views (shm over TorchPuts)
        self.native = native and isinstance(puts, TorchPuts) and native_kernels.load()
        self._native = False  # native, and this heap has fan-out views and C++-addressable words (set with the heap)
        # the Triton kernels (put_kernels.py, the nvshmem backend): each phase one launch
        self._fused = getattr(puts, "fused", False)
        self._tables: list = []  # [parity]: their device-side address tables (put_kernels.Tables)
        # placed calls of the C++ path, [parity]: this rank's view of every source's counts [W, W, S], its
        # own counts in every region [W, W * S], every rank's ExpertBatch [W, W * M, H], its own [W * M, H]
        self._counts: list[torch.Tensor] = []
        self._counts_fan: list[torch.Tensor] = []
        self._placed_fan: list[torch.Tensor] = []
        self._placed: list[torch.Tensor] = []
        # Reading in place (the C++ path): [parity] this rank's rows block [W * M, H] (an unplaced call's
        # ExpertBatch; the experts' output where the ExpertBatch is the hidden block), its terms block
        # [W, 1 + M * k] and its row of every rank's, and every region's address in this process.
        # read_in_place False: combine always sends partial rows (dispatch_latency.py --partials).
        self._rows: list[torch.Tensor] = []
        self._terms: list[torch.Tensor] = []
        self._terms_fan: list[torch.Tensor] = []
        self._regions = torch.zeros(0, dtype=torch.int64)
        self._region = 0  # this rank's region's address
        self.read_in_place = True
        self.in_place_combines = 0  # combines whose expert output its sources read where it lay
        self._likes: dict[torch.dtype, torch.Tensor] = {}
        self._words: tuple[int, int, int, int] | None = None  # the heap's native_words, where C++ signals
        self._no_rows = torch.zeros(0, dtype=torch.int64)  # set with the heap: [W] zero counts (nothing sent)
        self._none = torch.zeros(0, dtype=torch.int64)  # no counts: combine's signal has no meta words
        self._shape: tuple | None = None  # (hidden, dtype, top-k, weight dtype) the layout was made for

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, OneSidedHandle]:
        """hidden [T, H]; topk_ids [T, k] int physical slots (-1 = dropped); topk_weights [T, k] float;
        max_tokens: >= T on every rank, identical on all ranks (None: agreed by one all_reduce).
        ids_valid: the caller vouches for the id range (base.py); the kernels check it anyway."""
        # T tokens, k top-k, W ranks
        T, k = topk_ids.shape
        W, me = self.ctx.ep_size, self.ctx.ep_rank
        origin = hidden.device
        if origin != self.device:  # e.g. GPU ranks over the host heap: staged through host memory
            hidden, topk_ids, topk_weights = (t.to(self.device) for t in (hidden, topk_ids, topk_weights))
        if max_tokens is None:
            agreed = torch.tensor([T], dtype=torch.int64, device=collective_device(self.ctx.ep_group))
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.ctx.ep_group)
            max_tokens = int(agreed)
        w_dtype = weight_dtype(topk_weights)
        layout = self._ensure(max_tokens, hidden.shape[1], hidden.dtype, k, w_dtype)
        # the C++ send and the Triton kernels check the id range themselves as they read the ids (one
        # pass fewer at decode sizes)
        err = shape_error(topk_ids) if self._native or self._fused or ids_valid else routing_error(topk_ids, self.num_slots)
        if err is None and T > max_tokens:
            err = f"{T} tokens exceed max_tokens={max_tokens} given to dispatch"
        self.epoch += 1
        epoch, p = self.epoch, self.epoch % 2
        row = layout.flag_row(DISPATCH, p)
        weights = topk_weights if topk_weights.dtype == w_dtype else topk_weights.to(w_dtype)
        placed = None  # a placed call's start rows (_count)
        if self._fused:  # rows, meta words and flags in one launch, no host sync
            back_index = self.puts.send(self.heap, self._tables[p], layout, hidden, topk_ids, weights,
                                        self.num_local_slots, self._mine[p].slots, epoch, row, err is not None)
        elif self._native:  # the C++ send, then every peer's meta and flag in one call
            topk_ids, weights = topk_ids.contiguous(), weights.contiguous()  # and combine reads them
            counts, back_index, own = self._no_rows, None, None
            if max_tokens * hidden.shape[1] * hidden.element_size() >= self._placed_from:  # alike on every rank
                placed = self._count(p, epoch, topk_ids, err)
            if err is None:
                fan, hidden = self._fan[p], hidden.contiguous()
                start, rows_at = (placed, self._placed_fan[p]) if placed is not None else (self._none, self._none)
                # this rank's own rows stay in `hidden` (own: their tokens) unless placed: csrc/onesided.cpp
                counts, back_index, own = torch.ops.moeserve_dispatch.send(
                    hidden, topk_ids, weights, self.num_local_slots,
                    fan.hidden, fan.slots, fan.weights, me, start, rows_at)
                # an id out of range: nothing was written (the MoE layer's ids are valid: no read back)
                if not ids_valid and int(counts[0]) < 0:
                    err, counts = routing_error(topk_ids, self.num_slots), self._no_rows
            torch.ops.moeserve_dispatch.signal(*self._words, me, W, layout.meta_word(p, me), counts,
                                               int(err is not None), row, epoch)
        else:
            send_counts, back_index = [0] * W, None
            if err is None:
                send_counts, back_index = self._send(p, hidden, topk_ids, weights)
            self.puts.signal(self.heap, [
                Signal(d, layout.meta_word(p, me), (send_counts[d], int(err is not None)), row, epoch)
                for d in _ring(me, W)
            ])
        wait_for_flags(self.heap, row, epoch, self.timeout_s, "dispatch rows", self.yield_s)
        meta = self.heap.load_words(layout.meta_word(p), META_WORDS * W)
        self._raise_if_bad([s for s in range(W) if meta[META_WORDS * s + 1]], err, topk_ids)
        assert back_index is not None
        recv_counts = meta[0::META_WORDS]
        n = max(recv_counts)
        if self._fused:  # the senders counted the slot ids they sent: the ExpertBatch's size, no sync
            rows, counts, offsets, term_index, row_weights = self.puts.expand(
                self._tables[p], self._mine[p], self.num_local_slots, n, sum(meta[2::META_WORDS]))
            batch = ExpertBatch(hidden=rows, offsets=offsets, counts=counts)
        elif self._native:  # unplaced: into the rows block where it fits (else a new tensor)
            rows, counts, offsets, term_index, row_weights = torch.ops.moeserve_dispatch.expand(
                self._mine[p].slots, self._mine[p].hidden, self._mine[p].weights, recv_counts,
                self.num_local_slots, me, hidden, own, self._none if placed is None else self._placed[p],
                self._rows[p])
            batch = ExpertBatch(hidden=rows, offsets=offsets, counts=counts)
        else:
            batch, term_index, row_weights = self._receive(p, recv_counts)
        if origin != self.device:
            batch = ExpertBatch(batch.hidden.to(origin), batch.offsets.to(origin), batch.counts.to(origin))
        handle = OneSidedHandle(
            epoch=epoch, back_index=back_index, recv_counts=recv_counts, grid_rows=n,
            term_index=term_index, row_weights=row_weights, out_dtype=hidden.dtype, device=origin,
        )
        if self._native:
            handle.ids, handle.weights = topk_ids, weights
        return batch, handle

    def expert_output(self, batch: ExpertBatch) -> torch.Tensor | None:
        """Where the experts should write this call's output [R, H] (payload dtype) so that combine's
        sources read it in place: the one of this parity's [W * M, H] blocks that does not hold the
        ExpertBatch (the rows block for a placed call, the hidden block, already read, for an unplaced
        one). None where combine will send partial rows anyway (no C++ path, read_in_place off, an
        ExpertBatch past the rows block, rows staged from another device). Valid like the ExpertBatch."""
        if not (self._native and self.read_in_place) or batch.hidden.device != self.device:
            return None
        p, R, at = self.epoch % 2, batch.num_rows, _address(batch.hidden)
        for holds, other in ((self._placed[p], self._rows[p]), (self._rows[p], self._placed[p])):
            if at == holds.data_ptr() and R <= other.shape[0]:
                return other[:R]
        return None

    def combine(self, expert_out: torch.Tensor, handle: OneSidedHandle) -> torch.Tensor:
        """expert_out [R, H] in ExpertBatch row order -> [T, H] in the dispatched hidden's dtype."""
        # R expert rows, n grid rows per source, T tokens, H hidden, W ranks
        assert self.layout is not None and handle.epoch == self.epoch, "combine must follow its own dispatch"
        W, me, layout = self.ctx.ep_size, self.ctx.ep_rank, self.layout
        epoch, p, n = handle.epoch, handle.epoch % 2, handle.grid_rows
        if expert_out.device != self.device:
            expert_out = expert_out.to(self.device)
        if self._native:
            expert_out = expert_out.contiguous()
        row = layout.flag_row(COMBINE, p)
        if self._fused:  # partial rows and flags in one launch
            self.puts.partial(self.heap, self._tables[p], expert_out, handle.row_weights, handle.term_index, n,
                              epoch, row)
        elif self._native:  # partial rows unless the sources read the output in place, then the terms
            offset = self._in_place_offset(expert_out, p)
            if offset < 0:
                self._partial_rows(p, expert_out, handle)
            else:
                self.in_place_combines += 1
            torch.ops.moeserve_dispatch.publish(handle.term_index, handle.recv_counts, n, self._terms_fan[p], offset)
            torch.ops.moeserve_dispatch.signal(*self._words, me, W, 0, self._none, 0, row, epoch)
        else:
            self._partial_rows(p, expert_out, handle)
            self.puts.signal(self.heap, [Signal(s, None, (), row, epoch) for s in _ring(me, W)])
        wait_for_flags(self.heap, row, epoch, self.timeout_s, "combine rows", self.yield_s)
        if self._fused:
            out = self.puts.total(self._partials[p], handle.back_index, handle.out_dtype)
        elif self._native:  # and this rank's own partial rows, which `partial` left to it
            out = torch.ops.moeserve_dispatch.total(
                self._partials[p], handle.back_index, self._like(handle.out_dtype), me * layout.rows, layout.rows,
                me * n, expert_out, handle.row_weights, handle.term_index, handle.ids, self.num_local_slots,
                handle.weights, self._terms[p], self._regions, layout.nbytes)
        else:
            out = sum_in_j_order(self._partials[p], handle.back_index).to(handle.out_dtype)
        return out if handle.device == self.device else out.to(handle.device)

    def _count(self, p: int, epoch: int, topk_ids: torch.Tensor, err: str | None) -> torch.Tensor | None:
        """A placed call's first round: this source's count of top-k positions per (destination, local
        slot) into every rank's counts, a flag, and a wait for every source's. Then every rank has every
        count and reads from them, alike: bad routing anywhere (raised here, on every rank), and whether
        every destination's ExpertBatch fits its hidden block (None where one does not: the call goes
        through the blocks). Returns [W, S] int64: the ExpertBatch row at which this source's first
        row for each (destination, slot) goes; the destination's order is `local`'s, slot-major, then
        source, token and top-k position."""
        # W ranks, S local slots, M rows per block
        W, me, layout = self.ctx.ep_size, self.ctx.ep_rank, self.layout
        torch.ops.moeserve_dispatch.route_counts(topk_ids if err is None else self._none,
                                                 self.num_local_slots, self._counts_fan[p], int(err is not None))
        row = layout.flag_row(COUNTS, p)
        torch.ops.moeserve_dispatch.signal(*self._words, me, W, 0, self._none, 0, row, epoch)
        wait_for_flags(self.heap, row, epoch, self.timeout_s, "expert counts", self.yield_s)
        bad, start = torch.ops.moeserve_dispatch.placed_start(self._counts[p], me, W * layout.rows)
        if start.numel() == 0:  # bad routing somewhere, or an ExpertBatch past its block
            self._raise_if_bad([s for s, b in enumerate(bad.tolist()) if b], err, topk_ids)
            return None
        self.placed_calls += 1
        return start

    def _in_place_offset(self, expert_out: torch.Tensor, p: int) -> int:
        """The byte offset of expert_out in this rank's region where its sources may read it in place (it
        lies inside one of this parity's [W * M, H] blocks, contiguous, in the payload dtype), else -1."""
        if not self.read_in_place or expert_out.dtype != self.layout.dtype or not expert_out.is_contiguous():
            return -1
        lo = _address(expert_out)
        hi = lo + expert_out.numel() * expert_out.element_size()
        for block in (self._placed[p], self._rows[p]):
            start = block.data_ptr()
            if start <= lo and hi <= start + block.numel() * block.element_size():
                return lo - self._region
        return -1

    def _raise_if_bad(self, bad: list[int], err: str | None, topk_ids: torch.Tensor) -> None:
        """Raises on every rank when any rank flagged bad routing (bad: their ranks)."""
        if not bad:
            return
        if err is None and self.ctx.ep_rank in bad:  # found by the kernels: word it here
            err = routing_error(topk_ids, self.num_slots)
        self.raise_if_any_bad(bad, err)

    def _partial_rows(self, p: int, expert_out: torch.Tensor, handle: OneSidedHandle) -> None:
        """Every source's partial rows of this step into its partial block [p][me] (no flag yet)."""
        # R expert rows, n grid rows per source, H hidden, W ranks
        n, W = handle.grid_rows, self.ctx.ep_size
        if n and self._native:
            torch.ops.moeserve_dispatch.partial(expert_out, handle.row_weights, handle.term_index,
                                                self._fan[p].partial[:, :n], self.ctx.ep_rank)
        elif n:
            R, H = expert_out.shape
            terms = torch.empty(R + 1, H, dtype=torch.float32, device=self.device)  # row R: zeros
            terms[R].zero_()
            # local's products: rows and weights upcast to fp32, then multiplied
            torch.mul(expert_out.float(), handle.row_weights.float()[:, None], out=terms[:R])
            fan = self._fan[p]
            if fan is not None:  # straight into every source's partial block, in one op
                sum_in_j_order(terms, handle.term_index, out=fan.partial[:, :n])
            else:
                partial = sum_in_j_order(terms, handle.term_index)  # [W * n, H]: n rows per source
                self.puts.rows([[dst.partial] for dst in self._outbox[p]], [partial], [False], None,
                               [s * n for s in range(W)], handle.recv_counts)

    def close(self) -> None:
        """Unmaps the heap (a later dispatch would create a new one, collectively)."""
        if self.heap is not None:
            self._mine, self._partials, self._outbox, self._fan, self._tables = [], [], [], [], []
            self._counts, self._counts_fan, self._placed_fan, self._placed = [], [], [], []
            self._rows, self._terms, self._terms_fan, self._regions = [], [], [], self._none
            self.heap.close()
            self.heap, self.layout = None, None

    def _send(self, p: int, hidden: torch.Tensor, topk_ids: torch.Tensor, weights: torch.Tensor
              ) -> tuple[list[int], torch.Tensor]:
        """This rank's rows for every destination into its blocks [p][me] there (no signal yet).
        Returns the rows sent to each rank and back_index [T, k] (the handle's)."""
        # T tokens, k top-k, W ranks, M rows per block
        fan, layout = self._fan[p], self.layout
        T, k = topk_ids.shape
        W, M = layout.world, layout.rows
        plan = plan_fanout(topk_ids, self.num_local_slots, W, layout.slot_dtype)
        back_index = position_index(plan.send_pos, plan.dest * M + plan.row, T, k, W * M)
        if fan is not None and plan.token_idx.numel() * hidden.shape[1] * hidden.element_size() <= FAN_BYTES:
            self.puts.scatter(fan.hidden, plan.dest, plan.row, hidden, plan.token_idx)
            self.puts.scatter(fan.slots, plan.dest, plan.row, plan.local_slots, None)
            self.puts.scatter(fan.weights, plan.dest, plan.row, weights, plan.token_idx)
            return plan.send_counts, back_index
        # large batches (one copy of each row per destination, where the fan-out's gather + scatter would
        # copy it twice), and heaps without fan-out views
        starts = [0] * W
        for d in range(1, W):
            starts[d] = starts[d - 1] + plan.send_counts[d - 1]
        self.puts.rows([[dst.hidden, dst.slots, dst.weights] for dst in self._outbox[p]],
                       [hidden, plan.local_slots, weights], [True, False, True], plan.token_idx, starts,
                       plan.send_counts)
        return plan.send_counts, back_index

    def _receive(self, p: int, recv_counts: list[int]) -> tuple[ExpertBatch, torch.Tensor, torch.Tensor]:
        """The ExpertBatch of this step's received rows, term_index [W * n, k] and row_weights [R]."""
        # W ranks, M rows per block, n grid rows per source, k top-k, S local slots
        mine, layout, S = self._mine[p], self.layout, self.num_local_slots
        W, M, k, n = layout.world, layout.rows, layout.top_k, max(recv_counts)
        row_pos, counts = expand_grid(mine.slots[:, :n], recv_counts, S)
        q = row_pos // k  # grid row s * n + r -> heap row s * M + r of the flattened [W * M] blocks
        heap_rows = q + (q // n) * (M - n) if 0 < n < M else q
        batch = ExpertBatch(
            hidden=mine.hidden.view(W * M, -1).index_select(0, heap_rows),
            offsets=torch.cumsum(counts, 0).to(torch.int32),
            counts=counts,
        )
        term_index = position_index(row_pos, None, W * n, k, row_pos.shape[0])
        return batch, term_index, mine.weights[:, :n].reshape(-1)[row_pos]

    def _ensure(self, max_tokens: int, hidden: int, dtype: torch.dtype, k: int, w_dtype: torch.dtype) -> Layout:
        """The heap for this call, re-created (on every rank alike) when it cannot hold it."""
        W = self.ctx.ep_size
        cur = self.layout
        if cur is not None and cur.rows >= max_tokens and self._shape == (hidden, dtype, k, w_dtype):
            return cur  # every call but the first few: no Layout built (it costs microseconds per call)
        self._shape = (hidden, dtype, k, w_dtype)
        rows = max(1, self.capacity_tokens, max_tokens, cur.rows if cur is not None else 0)
        layout = Layout(W, rows, hidden, k, dtype, slot_dtype(self.num_local_slots), w_dtype, self.num_local_slots,
                        in_place=self.native)
        self.close()
        self.heap = self.heap_factory(layout.nbytes)
        self.layout = layout
        me = self.ctx.ep_rank
        self._mine = [layout.blocks(self.heap.region(me), p) for p in (0, 1)]
        self._partials = [layout.partial_rows(self.heap.region(me), p) for p in (0, 1)]
        # this rank's blocks in every peer's region: [M, width] views
        self._outbox = [[Blocks(*(v[me] for v in vars(layout.blocks(self.heap.region(r), p)).values()))
                         for r in range(W)] for p in (0, 1)]
        fan_out = hasattr(self.puts, "scatter")
        self._fan = [layout.fanout(self.heap, p, me) if fan_out else None for p in (0, 1)]
        # how the C++ signal addresses the heap's words (the shm heap), else None: Python signals
        words = getattr(self.heap, "native_words", None)
        self._native = self.native and self._fan[0] is not None and words is not None and self.device.type == "cpu"
        self._words = words() if self._native else None
        # every rank must place the same calls: the largest threshold, NEVER if any rank lacks the C++ path
        agreed = torch.tensor([self.placed_bytes if self._native else NEVER], dtype=torch.int64,
                              device=collective_device(self.ctx.ep_group))
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.ctx.ep_group)
        self._placed_from = int(agreed)
        if self._native:  # placed calls: every rank's counts and ExpertBatches
            self._counts = [layout.counts(self.heap.region(me), p) for p in (0, 1)]
            self._counts_fan = [layout.counts_fanout(self.heap, p, me) for p in (0, 1)]
            self._placed_fan = [layout.placed_fanout(self.heap, p) for p in (0, 1)]
            self._placed = [m.hidden.view(W * layout.rows, hidden) for m in self._mine]
            region = self.heap.region(me)
            self._rows = [layout.rows_block(region, p) for p in (0, 1)]
            self._terms = [layout.terms(region, p) for p in (0, 1)]
            self._terms_fan = [layout.terms_fanout(self.heap, p, me) for p in (0, 1)]
            self._regions = torch.tensor([self.heap.region(r).data_ptr() for r in range(W)], dtype=torch.int64)
            self._region = region.data_ptr()
        self._no_rows = torch.zeros(W, dtype=torch.int64)
        self._tables = self.puts.tables(self.heap, layout, me) if self._fused else []
        return layout

    def _like(self, dtype: torch.dtype) -> torch.Tensor:
        """An empty tensor of dtype: how the C++ `total` is told its output dtype."""
        if dtype not in self._likes:
            self._likes[dtype] = torch.empty(0, dtype=dtype)
        return self._likes[dtype]


def _address(t: torch.Tensor) -> int:
    """Where t's first element is or would be (data_ptr() is 0 for a tensor of no elements)."""
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def _ring(me: int, world: int) -> list[int]:
    """Destinations starting after this rank, so W sources do not all write rank 0 first."""
    return [(me + i) % world for i in range(1, world + 1)]
