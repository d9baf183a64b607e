"""The dispatch interface: two verbs, a named handle, and the expert-major batch they exchange.

    dispatch(hidden [T, H], topk_ids [T, k] physical slots (int64, -1 = dropped), topk_weights [T, k])
        -> (ExpertBatch, Handle)
    expert_output(ExpertBatch) -> [R, H] buffer for the experts to write into, or None
    combine(expert_out [R, H], Handle) -> [T, H]

Physical slot p lives on rank p // slots_per_rank as local slot p % slots_per_rank.
Router weights are applied in `combine`, accumulated in fp32 in a fixed order (per token, in top-k
order). `local` sums the k weighted rows of a token in j order. Multi-rank backends reduce a
token's rows on each expert rank first (so one row per (token, rank) travels back), which regroups
the fp32 sum: they equal `local` bit for bit when a token's slots lie on distinct ranks or all on
one rank, and to fp32 rounding (~1e-7 relative) otherwise (docs/dispatch.md).

Backends take two optional keywords in `dispatch`:
- `max_tokens`: a bound on every rank's token count this step, identical on all ranks (the StepPlan's
  `max_group_tokens`). `local` ignores it.
- `ids_valid`: the caller vouches that every id lies in [0, num_slots) (none dropped): the MoE layer,
  whose ids are a router's top-k through a validated placement map. Backends then skip the host-side
  range check (`check_routing` reads the ids' range back: a device sync per layer on a GPU); `local`
  and `a2a_ll` then make no host read at all (docs/gpu_runtime.md). Direct callers keep the check.
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

    hidden may be a view of the backend's own buffers (shm's C++ path: onesided.py), valid until
    the same dispatcher's dispatch two calls later: use it before combine, as the MoE layer does, or
    copy it to keep it.
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
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, Handle]: ...

    def expert_output(self, batch: ExpertBatch) -> torch.Tensor | None:
        """A [R, H] buffer of the backend's for the experts' output of this batch (combine then reads
        it where it lies: shm's C++ path), or None: the experts allocate their output."""
        ...

    def combine(self, expert_out: torch.Tensor, handle: Handle) -> torch.Tensor: ...


def routing_error(topk_ids: torch.Tensor, num_slots: int) -> str | None:
    """The reason topk_ids [T, k] (int) is not a valid routing over num_slots slots, or None.

    Multi-rank backends share this verdict with their peers before the payload moves, so a bad id on
    one rank makes every rank raise instead of leaving peers waiting in a collective.
    """
    return _check(topk_ids, num_slots)[0]


def shape_error(topk_ids: torch.Tensor) -> str | None:
    """routing_error's checks of dtype and shape alone (a caller that checks the id range itself)."""
    if topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool:
        return f"expert slot ids must be integers, got {topk_ids.dtype}"
    if topk_ids.dim() != 2:
        return f"expert slot ids must be [tokens, top_k], got shape {tuple(topk_ids.shape)}"
    return None


def _check(topk_ids: torch.Tensor, num_slots: int) -> tuple[str | None, int | None]:
    """(error or None, smallest id or None when there are no ids)."""
    err = shape_error(topk_ids)
    if err is not None:
        return err, None
    if topk_ids.numel() == 0:
        return None, None
    lo, hi = (int(v) for v in torch.aminmax(topk_ids))
    if lo < -1 or hi >= num_slots:
        return f"expert slot ids must lie in [-1, {num_slots}), got [{lo}, {hi}]", lo
    return None, lo


def check_routing(topk_ids: torch.Tensor, num_slots: int) -> int | None:
    """Bounds check before any communication starts (a bad id would otherwise hang peers).
    Returns the smallest id (-1 when some id is dropped), None for an empty routing."""
    err, lowest = _check(topk_ids, num_slots)
    if err is not None:
        raise ValueError(err)
    return lowest


def weighted_sum_fixed_order(
    rows: torch.Tensor, row_pos: torch.Tensor, topk_weights: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[t] = sum_j topk_weights[t, j] * rows[i] where row_pos[i] = t * k + j, summed in fp32 in j order.

    rows [R, H]; row_pos [R] int64 (flattened (token, j) position of each row, unique); topk_weights
    [T, k]. Positions without a row (dropped ids) contribute nothing. Returns [T, H] in out_dtype.
    """
    T, k = topk_weights.shape
    return _accumulate_in_j_order(rows, row_pos, T, k, topk_weights).to(out_dtype)


def sum_in_position_order(
    rows: torch.Tensor, row_pos: torch.Tensor, num_tokens: int, top_k: int, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[t] = sum over rows i with row_pos[i] // top_k == t, in fp32, in row_pos order (no weights).

    rows [R, H] (already weighted partial sums); row_pos [R] int64 in [0, num_tokens * top_k), unique.
    Returns [num_tokens, H] in out_dtype.
    """
    return _accumulate_in_j_order(rows, row_pos, num_tokens, top_k, None).to(out_dtype)


def _accumulate_in_j_order(
    rows: torch.Tensor, row_pos: torch.Tensor, T: int, k: int, topk_weights: torch.Tensor | None
) -> torch.Tensor:
    """[T, H] fp32: out = 0, then for j = 0, 1, ..., k-1: out[t] += w[t, j] * rows[i] for the row i at
    position t * k + j. The j order is the contract every backend reproduces; one [T, H] buffer, not
    [T * k, H], so a large prefill costs no k-fold copy."""
    # T tokens, k top-k, H hidden, R rows
    if rows.shape[0] == T * k and T > 0:
        # every position has its row (no dropped ids): gather into position order and add the k
        # terms in j order; the same products and sums as below, in k multiplies and k - 1 adds
        by_pos = rows[torch.argsort(row_pos)].view(T, k, -1).float()  # [T, k, H]
        if topk_weights is not None:
            by_pos = by_pos * topk_weights.float()[:, :, None]
        out = by_pos[:, 0]
        for j in range(1, k):
            out = out + by_pos[:, j]
        return out
    out = torch.zeros(T, rows.shape[-1], dtype=torch.float32, device=rows.device)
    token, j_of = row_pos // k, row_pos % k
    term = rows.float()  # [R, H]
    if topk_weights is not None:
        term = term * topk_weights.reshape(-1).float()[row_pos][:, None]
    for j in range(k):
        sel = (j_of == j).nonzero().flatten()
        # tokens are unique within one j, so each out row receives at most one add per pass
        out.index_add_(0, token[sel], term[sel])
    return out
