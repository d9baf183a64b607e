"""One-sided expert dispatch over a symmetric heap (`shm`, `nvshmem`): no collective on the data path.

One step (one MoE layer call) has an epoch e (1, 2, ...; the same on every rank, since every rank
calls dispatch and combine in the same order) and uses the buffers of parity p = e % 2
(heap_layout.py). Source s, destination d:
dispatch: s writes its rows for d straight into d's region, blocks [p][s]: one row per (token, d)
    (hidden, the local slot of each top-k position or -1, the router weights), in token order; then
    the row count and a bad-routing flag into d's meta; then, after a store fence, the epoch into
    d's dispatch flag [p][s]. Every pair signals, with zero rows too (the empty-batch protocol).
    d waits until all W flags read e, then raises with every rank if any source flagged bad
    routing, else expands the rows (sources in rank order, tokens in order) into its ExpertBatch:
    the same rows in the same order as `local` on the whole batch.
combine: d sums each received row's weighted expert outputs in fp32 in top-k order (one partial
    per (token, d)), writes them into s's partial block [p][d], fences, and raises s's combine
    flag [p][d] to e. s waits for all W, then sums the partials of each token in order of the
    rank's first top-k position, in fp32 (a2a's order: docs/dispatch.md, "Numerics").

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

from moeserve.dispatch.a2a import plan_sends
from moeserve.dispatch.base import ExpertBatch, Handle, routing_error, sum_in_position_order, weighted_sum_fixed_order
from moeserve.dispatch.flag_wait import wait_for_flags
from moeserve.dispatch.heap import SymmetricHeap
from moeserve.dispatch.heap_layout import COMBINE, DISPATCH, Blocks, Layout
from moeserve.dispatch.local import group_by_slot
from moeserve.dispatch.puts import Puts, Signal
from moeserve.dispatch.wire import slot_dtype, weight_dtype
from moeserve.parallel_state import ParallelContext

HeapFactory = Callable[[int], SymmetricHeap]  # bytes per rank -> heap (a collective over the ep group)


@dataclass
class OneSidedHandle(Handle):
    epoch: int
    send_counts: list[int]  # [W] rows this rank sent to each rank
    send_pos: torch.Tensor  # [N] int64: t * k + (first top-k position on that rank) of each sent row
    recv_counts: list[int]  # [W] rows this rank received from each rank
    row_pos: torch.Tensor  # [R] int64: recv_row * k + j of each ExpertBatch row
    recv_weights: torch.Tensor  # [Mr, k] router weights of the received rows
    num_tokens: int  # T
    out_dtype: torch.dtype
    device: torch.device


class OneSidedDispatcher:
    """Slots split evenly over ctx.ep_size ranks. Mutates only its heap and its epoch counter; every
    rank must call dispatch and combine in the same order (each call is one step of the protocol)."""

    def __init__(
        self,
        num_slots: int,
        ctx: ParallelContext,
        heap_factory: HeapFactory,
        puts: Puts,
        timeout_s: float = 60.0,
        capacity_tokens: int = 0,
        device: torch.device | str = "cpu",
    ):
        if num_slots % ctx.ep_size:
            raise ValueError(f"{num_slots} expert slots do not split evenly over ep_size {ctx.ep_size}")
        self.num_slots = num_slots
        self.num_local_slots = num_slots // ctx.ep_size
        self.ctx = ctx
        self.heap_factory, self.puts = heap_factory, puts
        self.timeout_s, self.capacity_tokens = timeout_s, capacity_tokens
        self.device = torch.device(device)  # where the heap lives: other tensors are staged through it
        self.epoch = 0
        self.heap: SymmetricHeap | None = None
        self.layout: Layout | None = None
        self._blocks: list[list[Blocks]] = []  # [parity][rank]: [W, M, width] views of each rank's region
        self._outbox: list[list[Blocks]] = []  # [parity][rank]: [M, width] views of this source's blocks there
        self._arange = torch.empty(0, dtype=torch.int64)

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
    ) -> tuple[ExpertBatch, OneSidedHandle]:
        """hidden [T, H]; topk_ids [T, k] int physical slots (-1 = dropped); topk_weights [T, k] float;
        max_tokens: >= T on every rank, identical on all ranks (None: agreed by one all_reduce)."""
        # T tokens, k top-k, H hidden, W ranks, S local slots, N rows sent, Mr rows received
        T, k = topk_ids.shape
        W, S, me = self.ctx.ep_size, self.num_local_slots, self.ctx.ep_rank
        origin = hidden.device
        if origin != self.device:  # e.g. GPU ranks over the host heap: staged through host memory
            hidden, topk_ids, topk_weights = (t.to(self.device) for t in (hidden, topk_ids, topk_weights))
        if max_tokens is None:
            agreed = torch.tensor([T], dtype=torch.int64)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.ctx.ep_group)
            max_tokens = int(agreed)
        err = routing_error(topk_ids, self.num_slots)
        if err is None and T > max_tokens:
            err = f"{T} tokens exceed max_tokens={max_tokens} given to dispatch"
        w_dtype = weight_dtype(topk_weights)
        layout = self._ensure(max_tokens, hidden.shape[1], hidden.dtype, k, w_dtype)
        self.epoch += 1
        epoch, p = self.epoch, self.epoch % 2
        plan = plan_sends(topk_ids, S, W) if err is None else None
        send_counts = plan.send_counts.tolist() if plan is not None else [0] * W
        if plan is not None:
            weights = topk_weights if topk_weights.dtype == w_dtype else topk_weights.to(w_dtype)
            for d in _ring(me, W):
                n, a = send_counts[d], sum(send_counts[:d])
                if n:
                    idx = plan.token_idx[a : a + n]
                    dst = self._outbox[p][d]
                    self.puts.rows(
                        [dst.hidden, dst.slots, dst.weights],
                        [hidden, plan.local_slots[a : a + n], weights],
                        [idx, None, idx],
                    )
        self.puts.signal(self.heap, [
            Signal(d, layout.meta_word(p, me), (send_counts[d], int(err is not None)),
                   layout.flag_offset(DISPATCH, p, me), epoch)
            for d in _ring(me, W)
        ])
        wait_for_flags(self.heap, layout.flag_offset(DISPATCH, p), epoch, self.timeout_s, "dispatch rows")
        meta = self.heap.load_words(layout.meta_word(p), 2 * W)
        bad = [s for s in range(W) if meta[2 * s + 1]]
        if bad:
            detail = f": {err}" if err else ""
            raise ValueError(f"invalid expert routing on ep rank(s) {bad} (this is rank {me}){detail}")
        assert plan is not None
        recv_counts = meta[0::2]
        mine = self._blocks[p][me]
        recv_index = self._index(recv_counts)  # [Mr] rows of the flattened [W * M] blocks
        recv_slots = mine.slots.view(-1, k).index_select(0, recv_index)
        recv_weights = mine.weights.view(-1, k).index_select(0, recv_index)
        row_pos, counts = group_by_slot(recv_slots, S)
        rows = mine.hidden.view(-1, hidden.shape[1]).index_select(0, recv_index[row_pos // k])
        batch = ExpertBatch(hidden=rows, offsets=torch.cumsum(counts, 0).to(torch.int32), counts=counts)
        if origin != self.device:
            batch = ExpertBatch(batch.hidden.to(origin), batch.offsets.to(origin), batch.counts.to(origin))
        handle = OneSidedHandle(
            epoch=epoch, send_counts=send_counts, send_pos=plan.send_pos, recv_counts=recv_counts,
            row_pos=row_pos, recv_weights=recv_weights, num_tokens=T, out_dtype=hidden.dtype, device=origin,
        )
        return batch, handle

    def combine(self, expert_out: torch.Tensor, handle: OneSidedHandle) -> torch.Tensor:
        """expert_out [R, H] in ExpertBatch row order -> [T, H] in the dispatched hidden's dtype."""
        # R expert rows, Mr received rows, N sent rows, T tokens, k top-k, W ranks
        assert self.layout is not None and handle.epoch == self.epoch, "combine must follow its own dispatch"
        W, me, layout = self.ctx.ep_size, self.ctx.ep_rank, self.layout
        epoch, p = handle.epoch, handle.epoch % 2
        if expert_out.device != self.device:
            expert_out = expert_out.to(self.device)
        partial = weighted_sum_fixed_order(expert_out, handle.row_pos, handle.recv_weights, torch.float32)  # [Mr, H]
        for s in _ring(me, W):
            n, a = handle.recv_counts[s], sum(handle.recv_counts[:s])
            if n:
                self.puts.rows([self._outbox[p][s].partial], [partial[a : a + n]], [None])
        self.puts.signal(self.heap, [Signal(s, None, (), layout.flag_offset(COMBINE, p, me), epoch) for s in _ring(me, W)])
        wait_for_flags(self.heap, layout.flag_offset(COMBINE, p), epoch, self.timeout_s, "combine rows")
        back = self._blocks[p][me].partial.view(-1, layout.hidden).index_select(0, self._index(handle.send_counts))
        k = handle.recv_weights.shape[1]
        out = sum_in_position_order(back, handle.send_pos, handle.num_tokens, k, handle.out_dtype)
        return out if handle.device == self.device else out.to(handle.device)

    def close(self) -> None:
        """Unmaps the heap (a later dispatch would create a new one, collectively)."""
        if self.heap is not None:
            self._blocks, self._outbox = [], []
            self.heap.close()
            self.heap, self.layout = None, None

    def _ensure(self, max_tokens: int, hidden: int, dtype: torch.dtype, k: int, w_dtype: torch.dtype) -> Layout:
        """The heap for this call, re-created (on every rank alike) when it cannot hold it."""
        W = self.ctx.ep_size
        want = Layout(W, 0, hidden, k, dtype, slot_dtype(self.num_local_slots), w_dtype)
        cur = self.layout
        if cur is not None and cur.rows >= max_tokens and cur == Layout(**{**want.__dict__, "rows": cur.rows}):
            return cur
        rows = max(1, self.capacity_tokens, max_tokens, cur.rows if cur is not None else 0)
        layout = Layout(**{**want.__dict__, "rows": rows})
        self.close()
        self.heap = self.heap_factory(layout.nbytes)
        self.layout = layout
        self._blocks = [[layout.blocks(self.heap.region(r), p) for r in range(W)] for p in (0, 1)]
        me = self.ctx.ep_rank  # this rank's blocks in every peer's region: [M, width] views
        self._outbox = [[Blocks(*(v[me] for v in vars(b).values())) for b in row] for row in self._blocks]
        self._arange = torch.arange(W * rows, device=self.device)
        return layout

    def _index(self, counts: list[int]) -> torch.Tensor:
        """[sum(counts)] int64: rows [s * M, s * M + counts[s]) of the flattened [W * M] blocks, s in order."""
        M = self.layout.rows
        parts = [self._arange[s * M : s * M + n] for s, n in enumerate(counts) if n]
        if not parts:
            return self._arange[:0]
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def _ring(me: int, world: int) -> list[int]:
    """Destinations starting after this rank, so W sources do not all write rank 0 first."""
    return [(me + i) % world for i in range(1, world + 1)]
