"""Reference placements to compare against: contiguous, and an EPLB-style policy written from
DeepSeek's published description (replicate the expert with the highest load per replica, one
slot at a time; pack slots onto ranks heaviest first, each to the least-loaded rank with room;
the hierarchical variant first packs expert groups onto nodes and then does both inside a node).

Shape legend: L layers, E experts, P slots, G ranks, N nodes, K expert groups.
"""
from __future__ import annotations

import numpy as np

from moeserve.placement.plan import PlacementPlan


def replicate_greedy(load: np.ndarray, num_slots: int) -> np.ndarray:
    """Replica count per expert [E] for one layer's load [E]: each extra slot goes to argmax load/replicas."""
    reps = np.ones(len(load), np.int64)
    for _ in range(num_slots - len(load)):
        reps[np.argmax(load / reps)] += 1
    return reps


def pack_greedy(weights: np.ndarray, num_packs: int) -> np.ndarray:
    """Pack index of each item [n] (n divisible by num_packs): heaviest first to the lightest pack with room."""
    per_pack = len(weights) // num_packs
    pack_load, pack_items = np.zeros(num_packs), np.zeros(num_packs, np.int64)
    out = np.empty(len(weights), np.int64)
    for item in np.argsort(-weights, kind="stable"):
        open_load = np.where(pack_items < per_pack, pack_load, np.inf)
        p = int(np.argmin(open_load))
        out[item], pack_load[p], pack_items[p] = p, pack_load[p] + weights[item], pack_items[p] + 1
    return out


def _layer_slots(load: np.ndarray, experts: np.ndarray, num_slots: int, num_packs: int) -> np.ndarray:
    """phy2log of `num_slots` slots holding `experts` (ids) with loads `load` [len(experts)], packed."""
    reps = replicate_greedy(load, num_slots)
    items = np.repeat(np.arange(len(experts)), reps)
    pack = pack_greedy(load[items] / reps[items], num_packs)
    order = np.lexsort((items, pack))  # slots of pack 0 first, then pack 1, ...
    return experts[items[order]]


def eplb_global(loads: np.ndarray, num_ranks: int, num_nodes: int, num_redundant: int) -> PlacementPlan:
    """EPLB-style global policy for loads [L, E]."""
    num_layers, num_experts = loads.shape
    experts = np.arange(num_experts)
    phy2log = np.stack([_layer_slots(loads[l], experts, num_experts + num_redundant, num_ranks) for l in range(num_layers)])
    return PlacementPlan.from_phy2log(phy2log, num_experts, num_ranks, num_nodes)


def eplb_hierarchical(
    loads: np.ndarray, num_ranks: int, num_nodes: int, num_redundant: int, num_groups: int
) -> PlacementPlan:
    """EPLB-style hierarchical policy: whole expert groups per node, then replicate and pack inside each node."""
    num_layers, num_experts = loads.shape
    if num_groups % num_nodes or num_redundant % num_nodes or num_experts % num_groups:
        raise ValueError("hierarchical placement needs groups, redundant slots and experts divisible by nodes/groups")
    group_size = num_experts // num_groups
    slots_per_node = (num_experts + num_redundant) // num_nodes
    ranks_per_node = num_ranks // num_nodes
    rows = []
    for l in range(num_layers):
        group_load = loads[l].reshape(num_groups, group_size).sum(axis=1)
        node_of_group = pack_greedy(group_load, num_nodes)
        row = []
        for n in range(num_nodes):
            experts = (np.flatnonzero(node_of_group == n)[:, None] * group_size + np.arange(group_size)).ravel()
            row.append(_layer_slots(loads[l, experts], experts, slots_per_node, ranks_per_node))
        rows.append(np.concatenate(row))
    return PlacementPlan.from_phy2log(np.stack(rows), num_experts, num_ranks, num_nodes)
