"""Plans for placement-runtime tests: random placements with replicas, including two replicas of one
expert on one rank, so every re-plan really moves weights (within and across ranks)."""
from __future__ import annotations

import numpy as np

from moeserve.placement.plan import PlacementPlan


def random_row(rng: np.random.Generator, num_experts: int, num_slots: int, per_rank: int) -> np.ndarray:
    """phy2log [P]: every expert at least once; with a spare slot, one expert twice on one random rank."""
    if num_slots == num_experts or per_rank < 2:
        rest = np.concatenate([np.arange(num_experts), rng.integers(0, num_experts, num_slots - num_experts)])
        return rest[rng.permutation(num_slots)]
    twin = int(rng.integers(num_experts))
    others = np.array([e for e in range(num_experts) if e != twin])
    rest = np.concatenate([others, rng.integers(0, num_experts, num_slots - num_experts - 1)])
    rest = rest[rng.permutation(len(rest))]
    at = int(rng.integers(num_slots // per_rank)) * per_rank
    return np.concatenate([rest[:at], [twin, twin], rest[at:]])


def random_plan(seed: int, num_layers: int, num_experts: int, num_slots: int, num_ranks: int) -> PlacementPlan:
    rng = np.random.default_rng(seed)
    rows = [random_row(rng, num_experts, num_slots, num_slots // num_ranks) for _ in range(num_layers)]
    return PlacementPlan.from_phy2log(np.stack(rows), num_experts, num_ranks).validate()


def cycling_planner(seed: int = 0):
    """A planner for `PlacementController.planner` that ignores the loads and returns a new random plan
    every call (the 'forced plan changes' of the rebalancing tests)."""
    calls = iter(range(seed, seed + 10**6))

    def plan(loads: np.ndarray, current: PlacementPlan) -> PlacementPlan:
        return random_plan(next(calls), current.num_layers, current.num_experts, current.num_slots, current.num_ranks)

    return plan
