"""Single-rank dispatch: a stable sort by slot. Also the oracle every other backend is tested against."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.dispatch.base import (
    ExpertBatch,
    Handle,
    check_routing,
    weighted_sum_fixed_order,
)


@dataclass
class LocalHandle(Handle):
    row_pos: torch.Tensor  # [R] int64: flattened (token, j) position of each dispatched row
    topk_weights: torch.Tensor  # [T, k]
    out_dtype: torch.dtype


def group_by_slot(
    slot_ids: torch.Tensor, num_slots: int, none_dropped: bool = False, padded: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert-major order of the (token, j) positions of slot_ids [T, k] (int, -1 = not here).

    Returns row_pos [R] int64 (flattened t * k + j of each row; slot-major, then in position order)
    and counts [num_slots] int64 (rows per slot). By default the -1 positions are left out: R is the
    count of ids >= 0, one host read.
    none_dropped: the caller knows every id lies in [0, num_slots): then R = T * k and nothing is read
    back to the host (`sorted_by_slot`).
    padded: a fixed-capacity caller's rows, nothing read back to the host either: R = T * k, the -1
    positions last (in position order), counted by no slot.
    """
    if none_dropped:
        return sorted_by_slot(slot_ids, num_slots)
    flat = slot_ids.reshape(-1).long()
    keyed = torch.where(flat < 0, num_slots, flat)
    if padded:
        return sorted_by_slot(keyed, num_slots)
    order = torch.argsort(keyed, stable=True)
    counts = torch.bincount(keyed, minlength=num_slots + 1)[:num_slots]
    return order[: int(counts.sum())], counts


def sorted_by_slot(slot_ids: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """group_by_slot for ids that are all in [0, num_slots) (ids >= num_slots sort last, counted by
    no slot: a fixed-capacity caller's padding), entirely on the device: a stable sort, and each
    slot's end found by a binary search in the sorted ids (bincount's output size would need the
    largest id on the host). row_pos [T * k] int64, counts [num_slots] int64."""
    keys, order = torch.sort(slot_ids.reshape(-1).long(), stable=True)
    ends = torch.searchsorted(keys, torch.arange(num_slots, device=keys.device), right=True)  # [S]
    return order, torch.diff(ends, prepend=ends.new_zeros(1))


def expert_batch(hidden: torch.Tensor, row_pos: torch.Tensor, counts: torch.Tensor, top_k: int) -> ExpertBatch:
    """Gather hidden [T, H] rows into the expert-major batch described by row_pos [R] / counts [S]."""
    return ExpertBatch(
        hidden=hidden[row_pos // top_k],
        offsets=torch.cumsum(counts, 0).to(torch.int32),
        counts=counts,
    )


class LocalDispatcher:
    """All slots on this rank. dispatch mutates nothing; combine allocates its output."""

    graph_safe = True  # no host read with ids_valid: capturable in a CUDA graph

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self.num_local_slots = num_slots

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, LocalHandle]:
        """hidden [T, H]; topk_ids [T, k] int (-1 = dropped); topk_weights [T, k]. max_tokens is unused.
        ids_valid: see base.py; then no host read at all."""
        if ids_valid:
            row_pos, counts = sorted_by_slot(topk_ids, self.num_slots)
        else:
            lowest = check_routing(topk_ids, self.num_slots)
            row_pos, counts = group_by_slot(topk_ids, self.num_slots, none_dropped=lowest is not None and lowest >= 0)
        batch = expert_batch(hidden, row_pos, counts, topk_ids.shape[1])
        return batch, LocalHandle(row_pos=row_pos, topk_weights=topk_weights, out_dtype=hidden.dtype)

    def expert_output(self, batch: ExpertBatch) -> None:
        """No buffer of its own for the expert output: the experts allocate it."""
        return None

    def combine(self, expert_out: torch.Tensor, handle: LocalHandle) -> torch.Tensor:
        """expert_out [R, H] in ExpertBatch row order -> [T, H] in the dispatched hidden's dtype."""
        return weighted_sum_fixed_order(expert_out, handle.row_pos, handle.topk_weights, handle.out_dtype)
