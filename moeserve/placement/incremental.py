"""Start from the plan in force and change as few slots as reach the target balance.

Shape legend: S scenarios, L layers, E experts, P slots, G ranks.
Each expert keeps up to its new replica count of its current slots; the freed slots take the
missing replicas (heaviest first, on the lightest rank); then pairwise swaps on the worst rank run
only until the layer is within tolerance of a fresh plan. Every slot that keeps its expert is a
copy of weights that never happens.
"""
from __future__ import annotations

import numpy as np

from moeserve.placement import packing


def seed_from_current(current: np.ndarray, reps: np.ndarray, per_replica: np.ndarray, num_ranks: int) -> np.ndarray:
    """Slot experts [P] for one layer: current row [P] trimmed/extended to replica counts reps [E].

    per_replica: float [E], mean load of one replica of each expert (decides where new replicas go).
    """
    spr = len(current) // num_ranks
    row = np.full(len(current), -1, np.int64)
    seen = np.zeros(len(reps), np.int64)
    for slot, e in enumerate(current):
        if seen[e] < reps[e]:
            row[slot], seen[e] = e, seen[e] + 1
    missing = np.repeat(np.arange(len(reps)), reps - seen)
    rank_load = np.zeros(num_ranks)
    kept = row >= 0
    np.add.at(rank_load, np.flatnonzero(kept) // spr, per_replica[row[kept]])
    for e in missing[np.argsort(-per_replica[missing], kind="stable")]:
        free = np.flatnonzero(row < 0)
        ranks = free // spr
        holds = (row.reshape(num_ranks, spr) == e).any(axis=1)[ranks]  # keep replicas apart
        cost = rank_load[ranks] + np.where(holds, np.inf, 0.0)
        if np.isinf(cost).all():
            cost = rank_load[ranks]
        slot = free[int(np.argmin(cost))]
        row[slot] = e
        rank_load[slot // spr] += per_replica[e]
    return row


def refine_from(items: packing.Items, rows: np.ndarray, num_ranks: int, hedge: float, max_iters: int,
                target: np.ndarray) -> np.ndarray:
    """Swap-refine seeded rows [L, P] (items listed slot by slot) and return rows with moved items in
    the slots their new rank freed; untouched items keep their slot."""
    spr = rows.shape[1] // num_ranks
    start = np.broadcast_to(np.arange(rows.shape[1]) // spr, rows.shape)
    rank_of = packing.refine(items, start.copy(), num_ranks, hedge, max_iters, target=target)
    out = rows.copy()
    for l in np.flatnonzero((rank_of != start).any(axis=1)):
        moved = np.flatnonzero(rank_of[l] != start[l])  # item i sat in slot i
        free = {int(g): list(moved[moved // spr == g]) for g in np.unique(moved // spr)}  # swaps keep counts
        for i in moved:
            out[l, free[int(rank_of[l, i])].pop()] = rows[l, i]
    return out
