"""Fixed-capacity expert-parallel dispatch over `all_to_all_single` (DeepEP's low-latency layout, on
NCCL or gloo): no host read, so a decode step runs inside a CUDA graph (docs/gpu_runtime.md).

`a2a` sends each rank exactly its rows, which needs the split sizes on the host (NCCL's
`all_to_all_single` takes them as Python ints): a device sync per MoE layer. Here every rank sends
every rank a block of M rows, M = the step's token bound (`max_tokens`, identical on every rank), so
the splits are equal and known without looking at the routing, and no count ever leaves the device.

dispatch: source s packs, for each destination d, one row per token with a top-k position on d, in
    token order (row r of d's block is the r-th such token): [hidden | local slot + 1 of each top-k
    position (0 = not on d) | router weights]. Rows past its count stay zero, and a zero slot column
    means "no expert here", so no count travels. One all_to_all_single of [W * M, row bytes] uint8.
    d sorts the received (row, top-k position) entries by local slot, stably (source, row, j: local's
    order), into an ExpertBatch of fixed capacity W * M * k rows; its offsets come from a binary
    search in the sorted slots (local.group_by_slot, padded). Rows past offsets[-1] are padding: the experts
    compute nothing for them that anyone reads.
combine: d sums each received row's weighted expert outputs in fp32 in top-k order (one partial per
    (token, d); zero for an empty row), sends [W * M, H] back (one all_to_all_single), and s sums each
    token's partials in order of each rank's first top-k position: a2a's order and bits.
Cost: W x M rows each way per rank whatever the routing (a2a moves one per (token, destination)), and
    an ExpertBatch of W * M * k rows of memory. For decode batches that is the price of a step the
    host never waits on; prefill-sized steps are better served by `a2a`.
Checks: with `ids_valid` (the MoE layer) nothing is checked on the host. Direct callers get the range
    check first, its verdict shared by one all_gather so that every rank raises alike.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeserve.dispatch.base import ExpertBatch, Handle, routing_error
from moeserve.dispatch.even_split import EvenSplitDispatcher, dest_ranks
from moeserve.dispatch.local import expert_batch, group_by_slot
from moeserve.dispatch.onesided_plan import sum_in_j_order
from moeserve.dispatch.wire import Column, pack_rows, slot_dtype, unpack_rows, weight_dtype
from moeserve.parallel_state import ParallelContext


@dataclass
class A2ALLHandle(Handle):
    row_pos: torch.Tensor  # [W * M * k] int64: received entry q * k + j of each ExpertBatch row
    here: torch.Tensor  # [W * M, k] bool: received entry (q, j) names a local slot
    recv_weights: torch.Tensor  # [W * M, k] router weights of the received rows (the sender's dtype)
    back_index: torch.Tensor  # [T, k] int64: returned partial row summed at (t, j), W * M (zeros) where none
    out_dtype: torch.dtype


class A2ALLDispatcher(EvenSplitDispatcher):
    """Slots split evenly over ctx.ep_size ranks. dispatch and combine allocate their outputs and
    mutate no state; every rank must call them in the same order with the same max_tokens."""

    graph_safe = True  # no host read with ids_valid: capturable in a CUDA graph

    def __init__(self, num_slots: int, ctx: ParallelContext, combine_dtype: torch.dtype | None = None):
        super().__init__(num_slots, ctx)
        # None: partial sums travel back in the payload dtype, as a2a's
        self.combine_dtype = combine_dtype

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, A2ALLHandle]:
        """hidden [T, H]; topk_ids [T, k] int physical slots (-1 = dropped); topk_weights [T, k] float;
        max_tokens: M >= T, identical on every rank (None: agreed by one all_reduce, a host read)."""
        # T tokens, k top-k, H hidden, W ranks, S local slots, M rows per (source, destination) block
        (T, k), W, S = topk_ids.shape, self.ctx.ep_size, self.num_local_slots
        if max_tokens is None:
            agreed = torch.tensor([T], dtype=torch.int64, device=hidden.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.ctx.ep_group)
            max_tokens = int(agreed)
        if not ids_valid:
            self._check(topk_ids, T, max_tokens, hidden.device)
        elif T > max_tokens:
            raise ValueError(f"{T} tokens exceed max_tokens={max_tokens} given to a2a_ll dispatch")
        M, device = max(max_tokens, 1), hidden.device
        ids = topk_ids.long()
        ranks = torch.arange(W, device=device)
        dest = dest_ranks(ids, S, W)  # [T, k]; W = dropped
        on = dest[None] == ranks[:, None, None]  # [W, T, k]
        sent = on.any(2)  # [W, T]
        row = sent.cumsum(1) - 1  # [W, T]: row of token t in d's block
        dump = W * M  # the row every unsent (d, t) writes, cut off before sending
        target = torch.where(sent, ranks[:, None] * M + row, dump).view(-1)  # [W * T]
        src = torch.full((dump + 1,), T, dtype=torch.int64, device=device)  # T = the zero row
        src.scatter_(0, target, torch.arange(T, device=device).repeat(W))
        s_dtype = slot_dtype(S + 1)
        slots = torch.where(on, (ids % S + 1)[None], 0).to(s_dtype)  # [W, T, k]: local slot + 1, 0 = none
        send_slots = torch.zeros(dump + 1, k, dtype=s_dtype, device=device).index_copy_(0, target, slots.view(W * T, k))
        w_dtype = weight_dtype(topk_weights)
        zero_row = (0, 0, 0, 1)
        columns = [Column(hidden.dtype, hidden.shape[1]), Column(s_dtype, k), Column(w_dtype, k)]
        send = pack_rows(
            [torch.nn.functional.pad(hidden, zero_row), send_slots[:dump],
             torch.nn.functional.pad(topk_weights.to(w_dtype), zero_row)],
            index=[src[:dump], None, src[:dump]],
        )
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.ctx.ep_group)
        recv_hidden, recv_slots, recv_weights = unpack_rows(recv, columns)  # [W * M, H], [W * M, k], ...

        here = recv_slots > 0
        row_pos, counts = group_by_slot(recv_slots.long() - 1, S, padded=True)
        batch = expert_batch(recv_hidden, row_pos, counts, k)  # [W * M * k, H] rows: valid up to offsets[-1]
        # the partial of rank d for token t comes back as row d * M + row[d, t]; it is summed at t's first
        # top-k position on d (a2a's order), every other position adds the zero row
        first = on.to(torch.uint8).argmax(2)  # [W, T] first top-k position on each rank
        d = dest.clamp(max=W - 1)  # [T, k]
        t = torch.arange(T, device=device)[:, None]
        is_first = (dest < W) & (first[d, t] == torch.arange(k, device=device))
        back_index = torch.where(is_first, d * M + row[d, t], dump)
        handle = A2ALLHandle(row_pos=row_pos, here=here, recv_weights=recv_weights, back_index=back_index,
                             out_dtype=hidden.dtype)
        return batch, handle

    def combine(self, expert_out: torch.Tensor, handle: A2ALLHandle) -> torch.Tensor:
        """expert_out [W * M * k, H] in ExpertBatch row order (rows past offsets[-1] unread, NaN or not)
        -> [T, H] in the dispatched hidden's dtype."""
        # W ranks, M rows per block, k top-k, H hidden, T tokens
        WM, k = handle.here.shape
        H = expert_out.shape[1]
        entry_row = torch.empty_like(handle.row_pos)
        entry_row[handle.row_pos] = torch.arange(handle.row_pos.shape[0], device=expert_out.device)
        terms = expert_out.index_select(0, entry_row).view(WM, k, H).float() * handle.recv_weights.float()[:, :, None]
        terms = torch.where(handle.here[:, :, None], terms, 0.0)  # padding rows may hold anything
        partial = terms[:, 0]
        for j in range(1, k):  # fp32, in top-k order
            partial = partial + terms[:, j]
        partial = partial.to(self.combine_dtype or handle.out_dtype)
        back = torch.empty_like(partial)
        dist.all_to_all_single(back, partial, group=self.ctx.ep_group)
        rows = torch.cat([back.float(), back.new_zeros(1, H, dtype=torch.float32)])  # row W * M: zeros
        return sum_in_j_order(rows, handle.back_index).to(handle.out_dtype)

    def _check(self, topk_ids: torch.Tensor, T: int, max_tokens: int, device: torch.device) -> None:
        """The range check and the token bound, decided on every rank from every rank's verdict."""
        err = routing_error(topk_ids, self.num_slots)
        if err is None and T > max_tokens:
            err = f"{T} tokens exceed max_tokens={max_tokens} given to a2a_ll dispatch"
        mine = torch.tensor([int(err is not None)], dtype=torch.int64, device=device)
        every = [torch.empty_like(mine) for _ in range(self.ctx.ep_size)]
        dist.all_gather(every, mine, group=self.ctx.ep_group)
        self.raise_if_any_bad([r for r, flag in enumerate(every) if int(flag)], err)
