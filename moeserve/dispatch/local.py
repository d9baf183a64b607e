"""Single-rank dispatch: a stable sort by slot. Also the oracle every other backend is tested against."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.dispatch.base import ExpertBatch, Handle, check_routing, weighted_sum_fixed_order


@dataclass
class LocalHandle(Handle):
    row_pos: torch.Tensor  # [R] int64: flattened (token, j) position of each dispatched row
    topk_weights: torch.Tensor  # [T, k]
    out_dtype: torch.dtype


class LocalDispatcher:
    """All slots on this rank. dispatch mutates nothing; combine allocates its output."""

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self.num_local_slots = num_slots

    def dispatch(
        self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor
    ) -> tuple[ExpertBatch, LocalHandle]:
        # T tokens, k top-k, H hidden, S slots
        check_routing(topk_ids, self.num_slots)
        k = topk_ids.shape[1]
        flat = topk_ids.reshape(-1)
        keyed = torch.where(flat < 0, self.num_slots, flat)
        order = torch.argsort(keyed, stable=True)
        counts = torch.bincount(keyed, minlength=self.num_slots + 1)[: self.num_slots]
        row_pos = order[: int(counts.sum())]
        batch = ExpertBatch(
            hidden=hidden[row_pos // k],
            offsets=torch.cumsum(counts, 0).to(torch.int32),
            counts=counts,
        )
        return batch, LocalHandle(row_pos=row_pos, topk_weights=topk_weights, out_dtype=hidden.dtype)

    def combine(self, expert_out: torch.Tensor, handle: LocalHandle) -> torch.Tensor:
        return weighted_sum_fixed_order(expert_out, handle.row_pos, handle.topk_weights, handle.out_dtype)
