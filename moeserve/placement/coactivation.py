"""Put experts that serve the same tokens on the same rank, so a token fans out to fewer ranks.

Shape legend: S scenarios, E experts, P slots, G ranks.
Cost of a placement = sum over expert pairs of co-activation count x [no rank holds both]: for
top-2 routing this is exactly the number of tokens that must touch two ranks. Hill climbing over
two moves (swap two slots between ranks; give a redundant slot of an expert to another expert)
keeps the worst rank's load under a cap, so locality is bought with a bounded loss of balance.
Each candidate is scored from scratch (O(E^2 G)): meant for models with tens of experts.
"""
from __future__ import annotations

import numpy as np

MAX_EXPERTS = 64  # above this the O(P^2) candidates x O(E^2 G) scoring is too slow; co-activation is skipped


def pair_cost(expert: np.ndarray, rank_of: np.ndarray, pairs: np.ndarray, num_ranks: int) -> float:
    """Co-activations [E, E] whose two experts share no rank, for slots expert [P] on rank_of [P]."""
    has = np.zeros((pairs.shape[0], num_ranks), np.float64)
    has[expert, rank_of] = 1.0
    together = (has @ has.T) > 0
    return float(pairs[~together].sum()) / 2.0


def peak_load(x: np.ndarray, expert: np.ndarray, rank_of: np.ndarray, num_ranks: int) -> float:
    """Worst-scenario busiest-rank load from scenarios x [S, E] (even split over replicas)."""
    reps = np.bincount(expert, minlength=x.shape[1])
    per = np.zeros((len(x), num_ranks))
    np.add.at(per.T, rank_of, (x / np.maximum(reps, 1)).T[expert])
    return float(per.max())


def improve(x: np.ndarray, expert: np.ndarray, rank_of: np.ndarray, pairs: np.ndarray, num_ranks: int,
            slack: float, max_passes: int = 20) -> np.ndarray:
    """Slot experts [P] (rank_of fixed per slot) lowering pair cost while peak load <= (1+slack) x start."""
    expert = expert.copy()
    cap = peak_load(x, expert, rank_of, num_ranks) * (1.0 + slack)
    best = (pair_cost(expert, rank_of, pairs, num_ranks), peak_load(x, expert, rank_of, num_ranks))
    num_experts = x.shape[1]
    for _ in range(max_passes):
        improved = False
        for cand in _moves(expert, rank_of, num_experts):
            reps = np.bincount(cand, minlength=num_experts)
            if (reps == 0).any() or _duplicated(cand, rank_of, num_experts, num_ranks):
                continue
            load = peak_load(x, cand, rank_of, num_ranks)
            if load > cap:
                continue
            key = (pair_cost(cand, rank_of, pairs, num_ranks), load)
            if key < best:
                best, expert, improved = key, cand, True
        if not improved:
            break
    return expert


def _duplicated(expert: np.ndarray, rank_of: np.ndarray, num_experts: int, num_ranks: int) -> bool:
    counts = np.zeros((num_experts, num_ranks), np.int64)
    np.add.at(counts, (expert, rank_of), 1)
    return bool((counts > 1).any())


def _moves(expert: np.ndarray, rank_of: np.ndarray, num_experts: int):
    """Candidate slot->expert maps: swaps across ranks, then retargets of one slot."""
    n = len(expert)
    for i in range(n):
        for j in range(i + 1, n):
            if rank_of[i] != rank_of[j] and expert[i] != expert[j]:
                cand = expert.copy()
                cand[i], cand[j] = expert[j], expert[i]
                yield cand
    for i in range(n):
        for e in range(num_experts):
            if e != expert[i]:
                cand = expert.copy()
                cand[i] = e
                yield cand
