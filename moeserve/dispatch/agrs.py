"""Expert-parallel dispatch by all-gather + reduce-scatter: fixed shapes, two collectives per layer.

dispatch: every rank pads its T tokens to max_tokens (M, the same on every rank: the StepPlan's
    `max_group_tokens`, or one all_reduce(MAX) of token counts when the caller gives none) and
    all-gathers [header | M packed rows] from every rank. The header carries the rank's token count
    and a bad-routing flag, so a bad id (or T > M) on one rank makes every rank raise before any
    expert runs. Each rank keeps the rows routed to its own slots as its ExpertBatch.
combine: each rank sums its experts' weighted outputs per gathered token (fp32, top-k order; zero
    where it holds none of the token's slots) and reduce-scatters the [W * M, H] fp32 sums; rank r
    keeps its own M rows. The cross-rank reduction is in fp32 whatever the payload dtype, so bf16
    payloads pay double bytes on the way back for local-like accuracy.

Wins over a2a only for tiny batches on few ranks (two collectives and no count exchange); measured
on gloo it is 5-25% faster up to 32 tokens at ep 2 and slower everywhere else (docs/dispatch.md). reduce_scatter falls back to all_reduce + slice on
process-group backends without it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeserve.dispatch.base import (
    ExpertBatch,
    Handle,
    routing_error,
    weighted_sum_fixed_order,
)
from moeserve.dispatch.even_split import EvenSplitDispatcher
from moeserve.dispatch.local import expert_batch, group_by_slot
from moeserve.dispatch.wire import (
    Column,
    pack_rows,
    row_bytes,
    unpack_rows,
    weight_dtype,
)
from moeserve.parallel_state import ParallelContext

_HEADER = Column(torch.int64, 2)  # [token count, bad-routing flag]


@dataclass
class AgrsHandle(Handle):
    row_pos: torch.Tensor  # [R] int64: gathered_token * k + j of each ExpertBatch row
    gathered_weights: torch.Tensor  # [W * M, k] router weights of all gathered tokens
    max_tokens: int  # M
    num_tokens: int  # T
    out_dtype: torch.dtype


class AgrsDispatcher(EvenSplitDispatcher):
    """Slots split evenly over ctx.ep_size ranks. dispatch and combine each allocate their outputs
    and mutate no state; every rank must call them in the same order (they are collectives)."""

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, AgrsHandle]:
        """hidden [T, H]; topk_ids [T, k] int physical slots (-1 = dropped); topk_weights [T, k] float;
        max_tokens: M >= T on every rank, identical on all ranks (None: agreed by one all_reduce).
        ids_valid: skip the range check (base.py)."""
        # T tokens, M padded tokens per rank, k top-k, H hidden, W ranks, S local slots
        T, k = topk_ids.shape
        W, S = self.ctx.ep_size, self.num_local_slots
        if max_tokens is None:
            agreed = torch.tensor([T], dtype=torch.int64, device=hidden.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.ctx.ep_group)
            max_tokens = int(agreed)
        err = None if ids_valid else routing_error(topk_ids, self.num_slots)
        if err is None and T > max_tokens:
            err = f"{T} tokens exceed max_tokens={max_tokens} given to agrs dispatch"
        rows = _padded_rows(hidden, topk_ids, topk_weights, max_tokens, ok=err is None)
        header = torch.tensor([[T, int(err is not None)]], dtype=torch.int64, device=hidden.device)
        chunk = torch.cat([header.view(torch.uint8).reshape(-1), rows.reshape(-1)])
        gathered = chunk.new_empty(W * chunk.numel())
        _all_gather_single(gathered, chunk, group=self.ctx.ep_group)
        gathered = gathered.view(W, chunk.numel())

        (headers,) = unpack_rows(gathered[:, : _HEADER.nbytes], [_HEADER])
        self.raise_if_any_bad(headers[:, 1].nonzero().flatten().tolist(), err)
        columns = [Column(hidden.dtype, hidden.shape[1]), Column(torch.int32, k), Column(weight_dtype(topk_weights), k)]
        all_rows = gathered[:, _HEADER.nbytes :].reshape(W * max_tokens, row_bytes(columns))
        g_hidden, g_ids, g_weights = unpack_rows(all_rows, columns)  # [W*M, H], [W*M, k], [W*M, k]

        mine = (g_ids >= 0) & (torch.div(g_ids, S, rounding_mode="floor") == self.ctx.ep_rank)
        local_slots = torch.where(mine, g_ids % S, -1)
        row_pos, counts = group_by_slot(local_slots, S)
        handle = AgrsHandle(
            row_pos=row_pos, gathered_weights=g_weights, max_tokens=max_tokens, num_tokens=T, out_dtype=hidden.dtype
        )
        return expert_batch(g_hidden, row_pos, counts, k), handle

    def combine(self, expert_out: torch.Tensor, handle: AgrsHandle) -> torch.Tensor:
        """expert_out [R, H] in ExpertBatch row order -> [T, H] in the dispatched hidden's dtype."""
        # W ranks, M padded tokens per rank, T this rank's tokens, H hidden
        partial = weighted_sum_fixed_order(expert_out, handle.row_pos, handle.gathered_weights, torch.float32)
        mine = partial.new_empty(handle.max_tokens, partial.shape[1])  # [M, H]
        _reduce_scatter(mine, partial, self.ctx)
        return mine[: handle.num_tokens].to(handle.out_dtype)


def _padded_rows(
    hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, max_tokens: int, ok: bool
) -> torch.Tensor:
    """uint8 [M, row bytes]: packed [hidden | slot ids int32 | weights] of T tokens, then M - T
    pad rows routed nowhere (-1). A rank with bad routing sends only pad rows (it is about to raise)."""
    # T tokens, M padded, k top-k, H hidden
    T, k = topk_ids.shape
    pad_hidden = hidden.new_zeros(max_tokens, hidden.shape[1])
    pad_ids = torch.full((max_tokens, k), -1, dtype=torch.int32, device=hidden.device)
    pad_weights = torch.zeros(max_tokens, k, dtype=weight_dtype(topk_weights), device=hidden.device)
    if ok:
        pad_hidden[:T] = hidden
        pad_ids[:T] = topk_ids
        pad_weights[:T] = topk_weights
    return pack_rows([pad_hidden, pad_ids, pad_weights])


_HAS_REDUCE_SCATTER = True


def _reduce_scatter(out: torch.Tensor, full: torch.Tensor, ctx: ParallelContext) -> None:
    """out [M, H] = rank ep_rank's M-row slice of full [W * M, H] summed over ranks.

    Every rank runs the same build, so all ranks take the same branch.
    """
    global _HAS_REDUCE_SCATTER
    if _HAS_REDUCE_SCATTER:
        try:
            _reduce_scatter_single(out, full, group=ctx.ep_group)
            return
        except (RuntimeError, NotImplementedError) as e:  # gloo builds without reduce_scatter
            if "not support" not in str(e).lower() and "not implemented" not in str(e).lower():
                raise
            _HAS_REDUCE_SCATTER = False
    dist.all_reduce(full, group=ctx.ep_group)
    m = out.shape[0]
    out.copy_(full[ctx.ep_rank * m : (ctx.ep_rank + 1) * m])


# torch 2.13 names them all_gather_single / reduce_scatter_single; earlier releases (2.11, as GPU images
# ship) only all_gather_into_tensor / reduce_scatter_tensor, which 2.13 keeps. Looked up at each call, so
# a stand-in set on torch.distributed (benchmarks/dispatch_bytes.py) is the one called.
def _all_gather_single(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp, group=group)


def _reduce_scatter_single(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp, group=group)
