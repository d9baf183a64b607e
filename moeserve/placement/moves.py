"""Reuse the current plan's slots: relabel a new layer's ranks (and slots within a rank) so that as
many slots as possible keep the expert they already hold. Relabelling never changes a layer's
balancedness: nodes are matched first, then ranks within matched nodes, so node loads are kept too.

Shape legend: P slots, G ranks, N nodes, E experts.
"""
from __future__ import annotations

import numpy as np


def _overlap(new_sets: list[np.ndarray], cur_sets: list[np.ndarray], num_experts: int) -> np.ndarray:
    """Multiset intersection sizes [len(new), len(cur)]."""
    a = np.stack([np.bincount(s, minlength=num_experts) for s in new_sets])
    b = np.stack([np.bincount(s, minlength=num_experts) for s in cur_sets])
    return np.minimum(a[:, None, :], b[None, :, :]).sum(axis=2)


def greedy_match(score: np.ndarray) -> np.ndarray:
    """perm [n] with perm[i] = column matched to row i: repeatedly the largest remaining score."""
    n = score.shape[0]
    perm = np.full(n, -1, np.int64)
    s = score.astype(float).copy()
    for _ in range(n):
        i, j = np.unravel_index(int(np.argmax(s)), s.shape)
        perm[i] = j
        s[i, :], s[:, j] = -np.inf, -np.inf
    return perm


def _order_within(new: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Arrange the experts of new [S] in S slots so experts already in cur [S] keep their slot."""
    out = np.full(len(cur), -1, np.int64)
    pool = list(new)
    for pos, e in enumerate(cur):
        if e in pool:
            out[pos] = e
            pool.remove(e)
    out[out < 0] = sorted(pool)
    return out


def align(new_row: np.ndarray, cur_row: np.ndarray, num_ranks: int, num_nodes: int, num_experts: int) -> np.ndarray:
    """new_row [P] relabelled to keep as many of cur_row's [P] slots as possible."""
    spr, rpn = len(new_row) // num_ranks, num_ranks // num_nodes
    new_r, cur_r = new_row.reshape(num_ranks, spr), cur_row.reshape(num_ranks, spr)
    new_n, cur_n = new_r.reshape(num_nodes, -1), cur_r.reshape(num_nodes, -1)
    node_perm = greedy_match(_overlap(list(new_n), list(cur_n), num_experts))
    out = np.empty_like(cur_r)
    for n_new, n_cur in enumerate(node_perm):
        src = range(n_new * rpn, (n_new + 1) * rpn)
        dst = list(range(n_cur * rpn, (n_cur + 1) * rpn))
        rank_perm = greedy_match(_overlap([new_r[g] for g in src], [cur_r[g] for g in dst], num_experts))
        for g, j in zip(src, rank_perm):
            out[dst[j]] = _order_within(new_r[g], cur_r[dst[j]])
    return out.reshape(-1)
