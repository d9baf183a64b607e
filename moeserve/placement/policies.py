"""Placement policies by name (`moeserve place --policy`): ours and the baselines it is compared with."""
from __future__ import annotations

from typing import Callable

import numpy as np

from moeserve.placement import baselines, optimizer
from moeserve.placement.plan import PlacementPlan

# policy(scenarios [S, L, E], spec, pairs [L, E, E] | None, current plan | None) -> plan
Policy = Callable[[np.ndarray, optimizer.PlacementSpec, "np.ndarray | None", "PlacementPlan | None"], PlacementPlan]


def _robust(x, spec, pairs, current):
    return optimizer.optimize(x, spec, pairs=pairs, current=current)


def _eplb(x, spec, pairs, current):
    return baselines.eplb_global(optimizer.normalize(x).sum(axis=0), spec.num_ranks, spec.num_nodes, spec.num_redundant)


def _eplb_hierarchical(x, spec, pairs, current):
    loads = optimizer.normalize(x).sum(axis=0)
    return baselines.eplb_hierarchical(loads, spec.num_ranks, spec.num_nodes, spec.num_redundant, spec.num_groups)


def _contiguous(x, spec, pairs, current):
    if spec.num_redundant:
        raise ValueError("the contiguous policy has no redundant slots: use --redundant 0")
    return PlacementPlan.contiguous(x.shape[-2], x.shape[-1], spec.num_ranks, spec.num_nodes)


POLICIES: dict[str, Policy] = {
    "robust": _robust,
    "eplb": _eplb,
    "eplb-hierarchical": _eplb_hierarchical,
    "contiguous": _contiguous,
}


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"unknown placement policy {name!r}; valid: {', '.join(POLICIES)}")
    return POLICIES[name]
