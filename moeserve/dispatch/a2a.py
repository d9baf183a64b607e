"""Expert-parallel dispatch over `all_to_all_single`, deduplicated per (token, destination rank).

dispatch, phase 1: every rank sends every rank [rows it will send, bad-routing flag] (int64).
    A bad id anywhere makes every rank raise here, before the payload phase, so no peer is left
    waiting. Ranks with zero tokens take part like any other.
dispatch, phase 2: one uint8 all_to_all of packed rows. A token whose top-k slots share a rank
    travels to it once: [hidden | local slot per top-k position (-1 = elsewhere; int8 up to 127
    slots per rank) | router weights (their own dtype)].
    The expert rank expands the rows into its expert-major ExpertBatch.
combine: the expert rank sums each received row's weighted expert outputs (fp32, top-k order) and
    sends one partial sum per (token, rank) back; the source rank sums the partials in order of
    each rank's first top-k position. Both directions move one row per (token, destination rank).

Only the uneven `all_to_all_single` form is used: the list form of uneven all_to_all fails on gloo.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeserve.dispatch.base import (
    ExpertBatch,
    Handle,
    routing_error,
    sum_in_position_order,
    weighted_sum_fixed_order,
)
from moeserve.dispatch.even_split import EvenSplitDispatcher, dest_ranks
from moeserve.dispatch.local import expert_batch, group_by_slot
from moeserve.dispatch.wire import (
    Column,
    pack_rows,
    slot_dtype,
    unpack_rows,
    weight_dtype,
)
from moeserve.parallel_state import ParallelContext


@dataclass
class A2AHandle(Handle):
    send_counts: list[int]  # [W] rows this rank sent to each rank
    recv_counts: list[int]  # [W] rows this rank received from each rank
    send_pos: torch.Tensor  # [N] int64: t * k + (first top-k position on that rank) of each sent row
    row_pos: torch.Tensor  # [R] int64: recv_row * k + j of each ExpertBatch row
    recv_weights: torch.Tensor  # [M, k] router weights of the received rows (the sender's dtype)
    num_tokens: int  # T
    out_dtype: torch.dtype


@dataclass
class _Plan:
    """Where this rank's rows go. N = sent rows, ordered by destination rank then token."""

    send_counts: torch.Tensor  # [W] int64
    token_idx: torch.Tensor  # [N] int64 source token of each sent row
    local_slots: torch.Tensor  # [N, k] int slot on the destination rank, -1 = not on that rank
    send_pos: torch.Tensor  # [N] int64


def plan_sends(topk_ids: torch.Tensor, slots_per_rank: int, world: int) -> _Plan:
    """topk_ids [T, k] valid slot ids (int, -1 = dropped) -> one send row per (token, destination rank)."""
    # T tokens, k top-k, W ranks, N sent rows
    T, k = topk_ids.shape
    ids = topk_ids.long()
    dest = dest_ranks(ids, slots_per_rank, world)  # [T, k]; W = dropped
    present = torch.zeros(T, world + 1, dtype=torch.bool, device=ids.device)
    present.scatter_(1, dest, True)
    rank_idx, token_idx = present[:, :world].t().nonzero(as_tuple=True)  # rank-major, tokens ascending
    on_rank = dest[token_idx] == rank_idx[:, None]  # [N, k]
    local_slots = torch.where(on_rank, ids[token_idx] % slots_per_rank, -1).to(slot_dtype(slots_per_rank))
    first_j = on_rank.to(torch.int8).argmax(dim=1)
    return _Plan(
        send_counts=torch.bincount(rank_idx, minlength=world),
        token_idx=token_idx,
        local_slots=local_slots,
        send_pos=token_idx * k + first_j,
    )


class A2ADispatcher(EvenSplitDispatcher):
    """Slots split evenly over ctx.ep_size ranks. dispatch and combine each allocate their outputs
    and mutate no state; every rank must call them in the same order (they are collectives)."""

    def __init__(self, num_slots: int, ctx: ParallelContext, combine_dtype: torch.dtype | None = None):
        super().__init__(num_slots, ctx)
        # None: partial sums travel back in the payload dtype (bf16 rounds them once more than local).
        self.combine_dtype = combine_dtype

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, A2AHandle]:
        """hidden [T, H]; topk_ids [T, k] int physical slots (-1 = dropped); topk_weights [T, k] float.
        max_tokens is unused (a2a needs no global size). ids_valid: skip the range check (base.py)."""
        # T tokens, k top-k, H hidden, W ranks, S local slots, N rows sent, M rows received
        W, S, k = self.ctx.ep_size, self.num_local_slots, topk_ids.shape[1]
        err = None if ids_valid else routing_error(topk_ids, self.num_slots)
        plan = None if err else plan_sends(topk_ids, S, W)
        header = torch.zeros(W, 2, dtype=torch.int64, device=hidden.device)
        if plan is None:
            header[:, 1] = 1
        else:
            header[:, 0] = plan.send_counts
        recv_header = torch.empty_like(header)
        dist.all_to_all_single(recv_header, header, group=self.ctx.ep_group)
        self.raise_if_any_bad(recv_header[:, 1].nonzero().flatten().tolist(), err)
        assert plan is not None

        w_dtype = weight_dtype(topk_weights)
        columns = [Column(hidden.dtype, hidden.shape[1]), Column(plan.local_slots.dtype, k), Column(w_dtype, k)]
        send = pack_rows(
            [hidden, plan.local_slots, topk_weights.to(w_dtype)], index=[plan.token_idx, None, plan.token_idx]
        )
        send_counts, recv_counts = plan.send_counts.tolist(), recv_header[:, 0].tolist()
        recv = send.new_empty(sum(recv_counts), send.shape[1])
        dist.all_to_all_single(recv, send, recv_counts, send_counts, group=self.ctx.ep_group)
        recv_hidden, recv_slots, recv_weights = unpack_rows(recv, columns)

        row_pos, counts = group_by_slot(recv_slots, S)
        handle = A2AHandle(
            send_counts=send_counts,
            recv_counts=recv_counts,
            send_pos=plan.send_pos,
            row_pos=row_pos,
            recv_weights=recv_weights,
            num_tokens=topk_ids.shape[0],
            out_dtype=hidden.dtype,
        )
        return expert_batch(recv_hidden, row_pos, counts, k), handle

    def combine(self, expert_out: torch.Tensor, handle: A2AHandle) -> torch.Tensor:
        """expert_out [R, H] in ExpertBatch row order -> [T, H] in the dispatched hidden's dtype."""
        # R expert rows, M received rows, N sent rows, T tokens, k top-k
        wire_dtype = self.combine_dtype or handle.out_dtype
        partial = weighted_sum_fixed_order(expert_out, handle.row_pos, handle.recv_weights, torch.float32)
        partial = partial.to(wire_dtype)  # [M, H]
        back = partial.new_empty(sum(handle.send_counts), partial.shape[1])  # [N, H]
        dist.all_to_all_single(back, partial, handle.send_counts, handle.recv_counts, group=self.ctx.ep_group)
        k = handle.recv_weights.shape[1]
        return sum_in_position_order(back, handle.send_pos, handle.num_tokens, k, handle.out_dtype)

