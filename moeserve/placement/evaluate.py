"""Score a plan on loads and per-token choices.

Shape legend: L MoE layers, E experts, P slots, G ranks (GPUs), N nodes, n token records, k top-k.
Balancedness of a layer = mean GPU load / max GPU load, where an expert's tokens are split evenly
over its replicas (what the runtime's round-robin replica choice does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeserve.placement.plan import PlacementPlan
from moeserve.placement.trace import TokenSample


@dataclass(frozen=True)
class Score:
    balancedness: np.ndarray  # float [L], GPU mean/max per layer
    node_balancedness: np.ndarray  # float [L], node mean/max per layer
    gpus_per_token: float | None = None  # mean over token records, fewest-GPU replica choice
    nodes_per_token: float | None = None

    def summary(self) -> dict:
        b, nb = self.balancedness, self.node_balancedness
        out = {
            "balancedness_mean": float(b.mean()),
            "balancedness_p5": float(np.percentile(b, 5)),
            "balancedness_min": float(b.min()),
            "node_balancedness_mean": float(nb.mean()),
            "node_balancedness_min": float(nb.min()),
        }
        if self.gpus_per_token is not None:
            out.update(gpus_per_token=self.gpus_per_token, nodes_per_token=self.nodes_per_token)
        return out


def rank_loads(plan: PlacementPlan, loads: np.ndarray) -> np.ndarray:
    """Load of each rank [L, G] from logical loads [L, E] with even split over replicas."""
    layers = np.arange(plan.num_layers)[:, None]
    slot_load = loads[layers, plan.phy2log] / plan.replicas[layers, plan.phy2log]  # [L, P]
    return slot_load.reshape(plan.num_layers, plan.num_ranks, plan.slots_per_rank).sum(axis=2)


def balancedness(per_unit: np.ndarray) -> np.ndarray:
    """mean / max over the last axis; a layer with no load counts as perfectly balanced."""
    peak = per_unit.max(axis=-1)
    return np.where(peak > 0, per_unit.mean(axis=-1) / np.where(peak > 0, peak, 1), 1.0)


def score(plan: PlacementPlan, loads: np.ndarray, tokens: TokenSample | None = None) -> Score:
    """Score `plan` on loads [L, E] (and token records, if given)."""
    if loads.shape != (plan.num_layers, plan.num_experts):
        raise ValueError(f"loads {loads.shape} do not match the plan's [{plan.num_layers}, {plan.num_experts}]")
    gpu = rank_loads(plan, loads)
    node = gpu.reshape(plan.num_layers, plan.num_nodes, plan.ranks_per_node).sum(axis=2)
    gpt = npt = None
    if tokens is not None and len(tokens.layer):
        gpt, npt = units_per_token(plan, tokens)
    return Score(balancedness(gpu), balancedness(node), gpt, npt)


def presence(plan: PlacementPlan, layer: int, per_node: bool = False) -> np.ndarray:
    """bool [E, G] (or [E, N]): whether an expert has a replica on a rank (node)."""
    unit = plan.slot_node() if per_node else plan.slot_rank()
    out = np.zeros((plan.num_experts, plan.num_nodes if per_node else plan.num_ranks), bool)
    out[plan.phy2log[layer], unit] = True
    return out


def min_cover(has: np.ndarray, topk: np.ndarray, prefer: np.ndarray | None = None) -> np.ndarray:
    """Units (ranks or nodes) each token must touch [n], choosing replicas greedily to touch few.

    has: bool [E, U] replica presence; topk: int [n, k] logical ids, -1 = none;
    prefer: int [n] a unit to pick on ties (the token's own rank), -1 = none.
    Greedy set cover: exact for k <= 2, within ln(k) of the optimum otherwise.
    """
    n, k = topk.shape
    cover = has[np.maximum(topk, 0)] & (topk >= 0)[:, :, None]  # [n, k, U]
    left = topk >= 0  # [n, k]
    bonus = np.zeros((n, has.shape[1]))
    if prefer is not None:
        ok = prefer >= 0
        bonus[np.flatnonzero(ok), prefer[ok]] = 0.5
    touched = np.zeros(n, np.int64)
    rows = np.arange(n)
    for _ in range(k):
        gain = (cover & left[:, :, None]).sum(axis=1)  # [n, U]
        pick = np.argmax(gain + bonus * (gain > 0), axis=1)
        hit = gain[rows, pick] > 0
        touched += hit
        left &= ~cover[rows, :, pick]
        if not left.any():
            break
    return touched


def units_per_token(plan: PlacementPlan, tokens: TokenSample) -> tuple[float, float]:
    """Mean GPUs and nodes touched per token record under the fewest-GPU replica choice. A source
    rank the plan does not have (the trace was recorded on more ranks) counts as unknown."""
    gpus = nodes = 0
    for layer in range(plan.num_layers):
        sel = tokens.layer == layer
        if not sel.any():
            continue
        topk, rank = tokens.topk[sel], tokens.rank[sel]
        rank = np.where(rank < plan.num_ranks, rank, -1)
        gpus += min_cover(presence(plan, layer), topk, rank).sum()
        node_of = np.where(rank >= 0, rank // plan.ranks_per_node, -1)
        nodes += min_cover(presence(plan, layer, per_node=True), topk, node_of).sum()
    return gpus / len(tokens.layer), nodes / len(tokens.layer)


def experts_moved(new: PlacementPlan, current: PlacementPlan) -> int:
    """Slots whose expert changes: each needs the expert's weights copied in."""
    if new.phy2log.shape != current.phy2log.shape:
        raise ValueError(f"plans differ in shape: {new.phy2log.shape} vs {current.phy2log.shape}")
    return int((new.phy2log != current.phy2log).sum())


def home_share(plan: PlacementPlan, loads: np.ndarray, num_groups: int) -> np.ndarray:
    """Share of each group's load served on the node serving most of it [L, K]."""
    layers = np.arange(plan.num_layers)[:, None]
    slot_load = loads[layers, plan.phy2log] / plan.replicas[layers, plan.phy2log]  # [L, P]
    group = plan.phy2log // (plan.num_experts // num_groups)  # [L, P]
    per = np.zeros((plan.num_layers, num_groups, plan.num_nodes))
    np.add.at(per, (np.broadcast_to(layers, group.shape), group, np.broadcast_to(plan.slot_node(), group.shape)), slot_load)
    total = per.sum(axis=2)
    return np.where(total > 0, per.max(axis=2) / np.where(total > 0, total, 1), 1.0)
