"""Packing replica slots onto ranks: a min-max greedy, then pairwise swaps on the worst rank.

Shape legend: B independent problems (layers) solved in one batch, n items (replica slots) per
problem, S load scenarios, G ranks (packs), E experts.
An item's weight is a vector over scenarios (its expert's load in each input trace divided by its
replica count); a rank's cost is its worst scenario load (plus an optional variance hedge).
Minimizing the worst rank's cost over every scenario at once keeps the plan balanced on any mix
of the input workloads, which is what makes it hold up out of sample. Problems are batched so
the Python loops run once per item or swap, not once per layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Items:
    expert: np.ndarray  # int64 [B, n], logical expert of each slot item
    weight: np.ndarray  # float64 [B, n, S], load per scenario
    var: np.ndarray  # float64 [B, n], variance hedge of each item (0 = none)

    @property
    def num_experts(self) -> int:
        return int(self.expert.max()) + 1


def rank_cost(load: np.ndarray, var: np.ndarray, hedge: float) -> np.ndarray:
    """Cost [...] of ranks with scenario loads [..., S] and summed variance [...]."""
    peak = load.max(axis=-1)
    return peak + hedge * np.sqrt(np.maximum(var, 0.0)) if hedge else peak


def greedy(items: Items, num_ranks: int, hedge: float) -> np.ndarray:
    """Rank of each item [B, n]: heaviest first, each to the rank whose cost grows least,
    replicas of one expert on distinct ranks where possible."""
    b, n = items.expert.shape
    per_rank, rows = n // num_ranks, np.arange(b)
    load = np.zeros((b, num_ranks, items.weight.shape[2]))
    var, filled = np.zeros((b, num_ranks)), np.zeros((b, num_ranks), np.int64)
    holds = np.zeros((b, items.num_experts, num_ranks), bool)
    out = np.empty((b, n), np.int64)
    order = np.argsort(-rank_cost(items.weight, items.var, hedge), axis=1, kind="stable")
    for step in range(n):
        i = order[:, step]
        w, v, e = items.weight[rows, i], items.var[rows, i], items.expert[rows, i]  # [B, S], [B], [B]
        cost = rank_cost(load + w[:, None], var + v[:, None], hedge)  # [B, G]
        ok = filled < per_rank
        spread = ok & ~holds[rows, e]
        use = np.where(spread.any(axis=1, keepdims=True), spread, ok)
        g = np.argmin(np.where(use, cost, np.inf), axis=1)
        out[rows, i] = g
        load[rows, g] += w
        var[rows, g] += v
        filled[rows, g] += 1
        holds[rows, e, g] = True
    return out


def refine(items: Items, rank_of: np.ndarray, num_ranks: int, hedge: float, max_iters: int,
           distinct: bool = True, budget=None, target: np.ndarray | None = None) -> np.ndarray:
    """Swap item pairs between the worst rank and any other while that lowers the worst rank's cost.

    rank_of: int [B, n] start assignment, equal item counts per rank. distinct: keep replicas of one
    expert on different ranks. budget (only with B == 1): extra constraint with
    `ok(mine [m], other [o], a, b [o]) -> bool [m, o]` and `apply(x, y, a, b)` (locality.HomeBudget).
    target: float [B], stop a problem once its worst rank costs no more than this (fewer swaps = fewer moves).
    """
    assert budget is None or rank_of.shape[0] == 1
    rank_of = rank_of.copy()
    if num_ranks < 2:
        return rank_of
    w, v, e = items.weight, items.var, items.expert
    bsz, n = e.shape
    m, rows = n // num_ranks, np.arange(bsz)
    load = np.zeros((bsz, num_ranks, w.shape[2]))
    np.add.at(load, (rows[:, None], rank_of), w)
    var = np.zeros((bsz, num_ranks))
    np.add.at(var, (rows[:, None], rank_of), v)
    holds = np.zeros((bsz, items.num_experts, num_ranks), np.int64)
    np.add.at(holds, (rows[:, None], e, rank_of), 1)
    active = np.ones(bsz, bool)
    for _ in range(max_iters):
        r = rows[active]
        cost = rank_cost(load[r], var[r], hedge)  # [B', G]
        a = np.argmax(cost, axis=1)
        if target is not None:
            done = cost[np.arange(len(r)), a] <= target[r]
            active[r[done]] = False
            if done.all():
                break
            r, cost, a = r[~done], cost[~done], a[~done]
        idx = np.argsort(rank_of[r] != a[:, None], axis=1, kind="stable")
        mine, other = idx[:, :m], idx[:, m:]  # items on the worst rank, and the rest
        rc = r[:, None]
        bo = rank_of[rc, other]  # [B', o]
        wm, wo = w[rc, mine], w[rc, other]  # [B', m, S], [B', o, S]
        d = wm[:, :, None] - wo[:, None]  # [B', m, o, S]: load leaving the worst rank
        new_a, new_b = load[r, a][:, None, None] - d, load[rc, bo][:, None] + d
        if hedge:
            dv = v[rc, mine][:, :, None] - v[rc, other][:, None]
            new = np.maximum(rank_cost(new_a, var[r, a][:, None, None] - dv, hedge),
                             rank_cost(new_b, var[rc, bo][:, None] + dv, hedge))
        else:
            new = np.maximum(new_a, new_b).max(axis=-1)  # [B', m, o]
        em, eo = e[rc, mine], e[rc, other]
        ok = em[:, :, None] != eo[:, None]
        if distinct:
            ok &= (holds[rc, eo, a[:, None]] == 0)[:, None] & (holds[r[:, None, None], em[:, :, None], bo[:, None]] == 0)
        if budget is not None:
            ok &= budget.ok(mine[0], other[0], int(a[0]), bo[0])[None]
        new = np.where(ok, new, np.inf).reshape(len(r), -1)
        best = np.argmin(new, axis=1)
        gain = new[np.arange(len(r)), best] < cost[np.arange(len(r)), a] * (1 - 1e-9)
        active[r[~gain]] = False
        if not gain.any():
            break
        r, a, best = r[gain], a[gain], best[gain]
        i, j = np.divmod(best, other.shape[1])
        x, y = mine[gain, i], other[gain, j]
        bj = rank_of[r, y]
        if budget is not None:
            budget.apply(int(x[0]), int(y[0]), int(a[0]), int(bj[0]))
        dw = w[r, y] - w[r, x]
        dv = v[r, y] - v[r, x]
        load[r, a] += dw
        load[r, bj] -= dw
        var[r, a] += dv
        var[r, bj] -= dv
        holds[r, e[r, x], a] -= 1
        holds[r, e[r, y], bj] -= 1
        holds[r, e[r, x], bj] += 1
        holds[r, e[r, y], a] += 1
        rank_of[r, x], rank_of[r, y] = bj, a
    return rank_of
