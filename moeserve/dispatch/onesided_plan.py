"""The tensor math of the one-sided protocol (onesided.py), vectorized over destinations: a handful of
torch ops per call whatever the world size, since at decode sizes each op's fixed cost, not the bytes,
sets the latency.

    plan_fanout: which rows a source sends to which rank, and where each lands in that rank's block
    expand_grid: the receiver's ExpertBatch from its [W, n, k] grid of received slot ids
    position_index, sum_in_j_order: the fixed-order fp32 sum of a token's k terms (base.py's contract),
        as gathers from rows that include a zero row for absent positions

Each has a reference in base.py / a2a.py / local.py (plan_sends, group_by_slot,
sum_in_position_order); tests/dispatch/test_dispatch_local.py compares them bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.dispatch.local import group_by_slot

# Up to this many fp32 elements, sum_in_j_order gathers all k terms of every token in one op (a
# [T, k, H] buffer); above it (a large prefill) one top-k position at a time, so no k-fold buffer.
DENSE_LIMIT = 1 << 22


@dataclass
class FanoutPlan:
    """Where this rank's rows go: N sent rows, one per (token, destination rank), rank-major then token."""

    send_counts: list[int]  # [W] rows for each rank
    dest: torch.Tensor  # [N] int64 destination rank of each sent row
    row: torch.Tensor  # [N] int64 row of it in the destination's block (0, 1, ... per rank)
    token_idx: torch.Tensor  # [N] int64 source token
    local_slots: torch.Tensor  # [N, k] slot on the destination (slot_dtype), -1 = not on that rank
    send_pos: torch.Tensor  # [N] int64 t * k + first top-k position of the token on that rank


def plan_fanout(topk_ids: torch.Tensor, slots_per_rank: int, world: int, slot_dtype: torch.dtype) -> FanoutPlan:
    """topk_ids [T, k] valid slot ids (int, -1 = dropped) -> one send row per (token, destination rank).

    The same rows in the same order as a2a.plan_sends, plus each row's place in its destination's block."""
    # T tokens, k top-k, W ranks, N sent rows
    T, k = topk_ids.shape
    ids = topk_ids.long()
    ranks = torch.arange(world, device=ids.device)[:, None, None]
    on = ids.div(slots_per_rank, rounding_mode="floor")[None] == ranks  # [W, T, k]; -1 ids on no rank
    sent = on.any(2)  # [W, T]
    dest, token_idx = sent.nonzero(as_tuple=True)  # rank-major, tokens ascending
    row = sent.cumsum(1)[dest, token_idx] - 1
    slots = torch.where(on, (ids % slots_per_rank).to(slot_dtype), torch.tensor(-1, dtype=slot_dtype))
    first_j = on.to(torch.uint8).argmax(2)  # [W, T] first top-k position on each rank
    return FanoutPlan(
        send_counts=sent.sum(1).tolist(),
        dest=dest,
        row=row,
        token_idx=token_idx,
        local_slots=slots[dest, token_idx],
        send_pos=token_idx * k + first_j[dest, token_idx],
    )


def expand_grid(slots: torch.Tensor, counts: list[int], num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """slots [W, n, k] received local slot ids (-1 = elsewhere; rows r >= counts[s] of source s are
    stale and ignored) -> row_pos [R] int64 (q * k + j of each ExpertBatch row, q = s * n + r; slot-major,
    then in (source, row, j) order: local's order) and counts [num_slots] int64 (rows per slot)."""
    # W sources, n rows per source (the largest count), k top-k, R expert rows
    n = slots.shape[1]
    keyed = slots.to(torch.int64, copy=True)  # never written back: slots may be a view of the heap
    if min(counts) < n:
        stale = torch.arange(n, device=slots.device) >= torch.tensor(counts, device=slots.device)[:, None]
        keyed.masked_fill_(stale[:, :, None], -1)
    return group_by_slot(keyed, num_slots)


def position_index(pos: torch.Tensor, rows: torch.Tensor | None, num_tokens: int, top_k: int,
                   absent: int) -> torch.Tensor:
    """[T, k] int64: rows[i] at position pos[i] = t * k + j (rows None: i), `absent` where no pos names it.
    pos [R] int64 unique; rows [R] int64."""
    index = torch.full((num_tokens * top_k,), absent, dtype=torch.int64, device=pos.device)
    index[pos] = torch.arange(pos.shape[0], device=pos.device) if rows is None else rows
    return index.view(num_tokens, top_k)


def sum_in_j_order(rows: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[T, H] fp32: out[t] = rows[index[t, 0]] + rows[index[t, 1]] + ... in j order (base.py's fixed order).

    rows [P, H] fp32, where the row that index names for an absent position holds zeros (x + 0.0 == x,
    so it changes no sum; only -0.0 becomes +0.0, as in local's zero-started sum); index [T, k] int64.
    out: where to write the sum, any shape of T * H fp32 elements and any strides (e.g. a [W, n, H]
    fan-out view of peers' memory); returned as given."""
    # T tokens, k top-k, H hidden, P rows
    (T, k), H = index.shape, rows.shape[1]
    shape = out.shape if out is not None else (T, H)
    if T * k * H <= DENSE_LIMIT:  # one gather of all k terms, then k - 1 adds
        by_j = rows.index_select(0, index.view(-1)).view(T, k, H)  # a row copy each, not elementwise
        terms = [by_j[:, j].view(shape) for j in range(k)]
    else:  # a large prefill: gather one top-k position at a time, no k-fold buffer
        terms = [rows.index_select(0, index[:, j]).view(shape) for j in range(k)]
    if k == 1:
        return terms[0] if out is None else out.copy_(terms[0])
    total = terms[0]
    for term in terms[1:-1]:
        total = total + term
    return torch.add(total, terms[-1], out=out) if out is not None else total + terms[-1]
