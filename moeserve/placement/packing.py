"""Packing replica slots onto ranks: a min-max greedy, then pairwise swaps on the worst rank.

Shape legend: n items (replica slots), S load scenarios, G ranks (packs), E experts.
An item's weight is a vector over scenarios (its expert's load in each input trace divided by its
replica count); a rank's cost is its worst scenario load plus a hedge for load the scenarios did
not see. Minimizing the worst rank's cost over every scenario at once keeps the plan balanced on
any mix of the input workloads, which is what makes it hold up out of sample.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Items:
    expert: np.ndarray  # int64 [n], logical expert of each slot item
    weight: np.ndarray  # float64 [n, S], load per scenario
    var: np.ndarray  # float64 [n], variance hedge of each item (0 = none)
    allowed: np.ndarray | None = None  # bool [n, G], ranks an item may go to (None = all)


def rank_cost(load: np.ndarray, var: np.ndarray, hedge: float) -> np.ndarray:
    """Cost [...] of ranks with scenario loads [..., S] and summed variance [...]."""
    return load.max(axis=-1) + hedge * np.sqrt(var)


def greedy(items: Items, num_ranks: int, hedge: float) -> np.ndarray:
    """Rank of each item [n]: heaviest first, each to the rank whose cost grows least."""
    n = len(items.expert)
    per_rank = n // num_ranks
    load = np.zeros((num_ranks, items.weight.shape[1]))
    var = np.zeros(num_ranks)
    filled = np.zeros(num_ranks, np.int64)
    holds = np.zeros((int(items.expert.max()) + 1, num_ranks), bool)
    out = np.empty(n, np.int64)
    for i in np.argsort(-rank_cost(items.weight, items.var, hedge), kind="stable"):
        cost = rank_cost(load + items.weight[i], var + items.var[i], hedge)
        ok = filled < per_rank
        if items.allowed is not None:
            ok &= items.allowed[i]
        spread = ok & ~holds[items.expert[i]]  # replicas of one expert on distinct ranks when possible
        g = int(np.argmin(np.where(spread if spread.any() else ok, cost, np.inf)))
        out[i] = g
        load[g] += items.weight[i]
        var[g] += items.var[i]
        filled[g] += 1
        holds[items.expert[i], g] = True
    return out


def refine(
    items: Items, rank_of: np.ndarray, num_ranks: int, hedge: float, max_iters: int, distinct: bool = True, budget=None
) -> np.ndarray:
    """Swap item pairs between the worst rank and any other while that lowers the worst rank's cost.

    distinct: keep replicas of one expert on different ranks. budget: optional extra constraint with
    `ok(mine [m], other [o], a, b [o]) -> bool [m, o]` and `apply(x, y, a, b)` (locality.HomeBudget).
    """
    rank_of = rank_of.copy()
    w, v, e = items.weight, items.var, items.expert
    load = np.zeros((num_ranks, w.shape[1]))
    np.add.at(load, rank_of, w)
    var = np.bincount(rank_of, weights=v, minlength=num_ranks).astype(float)
    holds = np.zeros((int(e.max()) + 1, num_ranks), np.int64)
    np.add.at(holds, (e, rank_of), 1)
    for _ in range(max_iters):
        cost = rank_cost(load, var, hedge)
        a = int(np.argmax(cost))
        mine, other = np.flatnonzero(rank_of == a), np.flatnonzero(rank_of != a)
        b = rank_of[other]
        new_a = load[a] - w[mine][:, None] + w[other][None]  # [m, o, S]
        new_b = load[b][None] - w[other][None] + w[mine][:, None]
        var_a = var[a] - v[mine][:, None] + v[other][None]
        var_b = var[b][None] - v[other][None] + v[mine][:, None]
        new = np.maximum(rank_cost(new_a, var_a, hedge), rank_cost(new_b, var_b, hedge))  # [m, o]
        ok = e[mine][:, None] != e[other][None]
        if distinct:
            ok &= (holds[e[other], a][None] == 0) & (holds[e[mine][:, None], b[None]] == 0)
        if budget is not None:
            ok &= budget.ok(mine, other, a, b)
        if items.allowed is not None:
            ok &= items.allowed[mine][:, b] & items.allowed[other, a][None]
        new = np.where(ok, new, np.inf)
        i, j = np.unravel_index(int(np.argmin(new)), new.shape)
        if not new[i, j] < cost[a] * (1 - 1e-9):
            break
        x, y = mine[i], other[j]
        bj = rank_of[y]
        if budget is not None:
            budget.apply(x, y, a, bj)
        load[a] += w[y] - w[x]
        load[bj] += w[x] - w[y]
        var[a] += v[y] - v[x]
        var[bj] += v[x] - v[y]
        holds[e[x], a] -= 1
        holds[e[y], bj] -= 1
        holds[e[x], bj] += 1
        holds[e[y], a] += 1
        rank_of[x], rank_of[y] = bj, a
    return rank_of
