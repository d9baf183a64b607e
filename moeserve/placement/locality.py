"""Group locality for group-limited routing (DeepSeek: a token uses at most 4 of 8 expert groups).

Every group gets a home node; with `home_share = 1` all of a group's slots live there (a token then
reaches at most `topk_groups` nodes), and lower floors let replicas and experts leave home as long
as each group keeps at least that share of its load served at home. Node loads are balanced by
swapping slots between the busiest node and any other within that budget.

Shape legend: S scenarios, E experts, K groups, N nodes, n slot items.
"""
from __future__ import annotations

import numpy as np

from moeserve.placement import packing


def home_nodes(group_load: np.ndarray, num_nodes: int) -> np.ndarray:
    """Node of each group [K] from group loads [S, K]: min-max greedy, then pairwise swaps.

    Minimizes the worst scenario's busiest node; K/N groups per node.
    """
    num_groups = group_load.shape[1]
    items = packing.Items(np.arange(num_groups)[None], group_load.T[None], np.zeros((1, num_groups)))
    node = packing.greedy(items, num_nodes, hedge=0.0)
    return packing.refine(items, node, num_nodes, hedge=0.0, max_iters=10 * num_groups)[0]


class HomeBudget:
    """Constraint for `packing.refine` over nodes: each group's load away from home stays within budget.

    Load is counted with each item's mean weight over the scenarios.
    """

    def __init__(self, group: np.ndarray, home: np.ndarray, mean_weight: np.ndarray, budget: np.ndarray, node_of: np.ndarray):
        self.group, self.home, self.w, self.budget = group, home, mean_weight, budget  # [n], [K], [n], [K]
        away = node_of != home[group]
        self.away = np.bincount(group[away], weights=mean_weight[away], minlength=len(budget)).astype(np.float64)

    def _delta(self, items: np.ndarray, src, dst) -> np.ndarray:
        h = self.home[self.group[items]]
        return self.w[items] * ((dst != h).astype(float) - (src != h).astype(float))

    def ok(self, mine: np.ndarray, other: np.ndarray, a: int, b: np.ndarray) -> np.ndarray:
        """bool [m, o]: whether swapping mine[i] (on node a) with other[j] (on node b[j]) keeps budgets."""
        dx = self._delta(mine[:, None], a, b[None])  # [m, o]
        dy = self._delta(other[None], b[None], a)  # [1, o]
        gx, gy = self.group[mine][:, None], self.group[other][None]
        slack = self.budget + 1e-9 - self.away
        same = gx == gy
        return np.where(same, dx + dy <= slack[gx], (dx <= slack[gx]) & (dy <= slack[gy]))

    def apply(self, x: int, y: int, a: int, b: int) -> None:
        self.away[self.group[x]] += self._delta(np.array([x]), a, b)[0]
        self.away[self.group[y]] += self._delta(np.array([y]), b, a)[0]
