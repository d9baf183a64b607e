"""What the multi-rank backends whose slots split evenly over the ep ranks share (a2a, a2a_ll, agrs and
the one-sided shm/nvshmem): the split itself, and the error every rank raises alike on bad routing.

Physical slot p lives on ep rank p // S as its local slot p % S (S = num_local_slots, base.py).
"""
from __future__ import annotations

import torch

from moeserve.dispatch.base import ExpertBatch
from moeserve.parallel_state import ParallelContext


class EvenSplitDispatcher:
    """num_slots physical slots split evenly over ctx.ep_size ranks; the backends add dispatch and combine."""

    def __init__(self, num_slots: int, ctx: ParallelContext):
        if num_slots % ctx.ep_size:
            raise ValueError(f"{num_slots} expert slots do not split evenly over ep_size {ctx.ep_size}")
        self.num_slots = num_slots
        self.num_local_slots = num_slots // ctx.ep_size
        self.ctx = ctx

    def expert_output(self, batch: ExpertBatch) -> torch.Tensor | None:
        """No buffer of its own for the expert output: the experts allocate it."""
        return None

    def raise_if_any_bad(self, bad: list[int], own_error: str | None) -> None:
        """Raises on every rank alike when any ep rank flagged bad routing (bad: those ranks, the
        verdicts every rank received); own_error: this rank's reason, if it is one of them."""
        if bad:
            detail = f": {own_error}" if own_error else ""
            raise ValueError(f"invalid expert routing on ep rank(s) {bad} (this is rank {self.ctx.ep_rank}){detail}")


def dest_ranks(ids: torch.Tensor, slots_per_rank: int, world: int) -> torch.Tensor:
    """ids [T, k] int64 physical slots (-1 = dropped) -> [T, k] int64 ep rank holding each, `world` where dropped."""
    return torch.where(ids >= 0, ids.div(slots_per_rank, rounding_mode="floor"), world)
