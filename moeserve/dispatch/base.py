"""The dispatch interface: two verbs, a named handle, and the expert-major batch they exchange.

    dispatch(hidden [T, H], topk_ids [T, k] physical slots (int64, -1 = dropped), topk_weights [T, k])
        -> (ExpertBatch, Handle)
    combine(expert_out [R, H], Handle) -> [T, H]

Physical slot p lives on rank p // slots_per_rank as local slot p % slots_per_rank.
Router weights are applied in `combine`, accumulated in fp32 in a fixed order (per token, in top-k
order), so every backend returns bit-identical results to `local`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class ExpertBatch:
    """Rows grouped by local expert slot.

    hidden:  [R, H] rows, all rows of local slot 0 first, then slot 1, ...
    offsets: [S] int32 cumulative end offsets per local slot (what `grouped_mm` takes as `offs`).
    counts:  [S] int64 rows per local slot.
    """

    hidden: torch.Tensor
    offsets: torch.Tensor
    counts: torch.Tensor

    @property
    def num_rows(self) -> int:
        return int(self.hidden.shape[0])


class Handle:
    """Base class of backend handles: whatever `combine` needs to undo a `dispatch`."""


class Dispatcher(Protocol):
    num_slots: int  # physical slots over all ranks
    num_local_slots: int  # slots held by this rank

    def dispatch(
        self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor
    ) -> tuple[ExpertBatch, Handle]: ...

    def combine(self, expert_out: torch.Tensor, handle: Handle) -> torch.Tensor: ...


def check_routing(topk_ids: torch.Tensor, num_slots: int) -> None:
    """Bounds check before any communication starts (a bad id would otherwise hang peers)."""
    if topk_ids.numel() == 0:
        return
    lo, hi = int(topk_ids.min()), int(topk_ids.max())
    if lo < -1 or hi >= num_slots:
        raise ValueError(f"expert slot ids must lie in [-1, {num_slots}), got [{lo}, {hi}]")


def weighted_sum_fixed_order(
    rows: torch.Tensor, row_pos: torch.Tensor, topk_weights: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[t] = sum_j topk_weights[t, j] * rows[i] where row_pos[i] = t * k + j, summed in fp32 in j order.

    rows [R, H]; row_pos [R] int64 (flattened (token, j) position of each row); topk_weights [T, k].
    Positions without a row (dropped ids) contribute zero.
    """
    # T tokens, k top-k, H hidden
    T, k = topk_weights.shape
    H = rows.shape[-1]
    buf = torch.zeros(T * k, H, dtype=torch.float32, device=rows.device)
    buf[row_pos] = rows.float()
    buf.mul_(topk_weights.reshape(-1, 1).float())
    out = buf.view(T, k, H)[:, 0].clone()
    for j in range(1, k):
        out += buf.view(T, k, H)[:, j]
    return out.to(out_dtype)
