"""Runtime replica choice: logical top-k ids -> physical slots of one MoE layer (numpy reference).

Shape legend: T tokens, k top-k, E experts, R max replicas, G ranks, P slots.
A token uses the replica on its own rank when there is one (no transfer at all); otherwise the
tokens of an expert take its replicas round-robin in token order, starting at replica
(src_rank mod replicas) so that small batches (one decode token per rank) from different ranks do
not all land on the first replica; this splits an expert's load evenly (the evaluator's assumption). Deterministic: the same batch always gets the same slots.
`routing_torch.py` is the same algorithm on torch tensors; tests compare the two.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeserve.placement.plan import PlacementPlan


@dataclass(frozen=True)
class ReplicaTable:
    """One layer's lookup tables."""

    log2phy: np.ndarray  # int64 [E, R], -1 padded
    replicas: np.ndarray  # int64 [E]
    local_slot: np.ndarray  # int64 [E, G], a slot of expert e on rank g, -1 if none

    @classmethod
    def from_plan(cls, plan: PlacementPlan, layer: int) -> "ReplicaTable":
        local = np.full((plan.num_experts, plan.num_ranks), -1, np.int64)
        slots = np.arange(plan.num_slots)[::-1]  # reversed so the lowest slot on a rank wins
        local[plan.phy2log[layer][slots], plan.slot_rank()[slots]] = slots
        return cls(plan.log2phy[layer], plan.replicas[layer], local)


def occurrence(keys: np.ndarray) -> np.ndarray:
    """For each element of keys [n], how many earlier elements have the same key."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.searchsorted(sorted_keys, sorted_keys, side="left")
    out = np.empty(len(keys), np.int64)
    out[order] = np.arange(len(keys)) - first
    return out


def choose_slots(table: ReplicaTable, topk: np.ndarray, src_rank: np.ndarray) -> np.ndarray:
    """Physical slots [T, k] (int64, -1 where topk is -1).

    topk: int [T, k] logical expert ids, -1 = dropped; src_rank: int [T] rank each token is on.
    """
    t, k = topk.shape
    e = topk.reshape(-1).astype(np.int64)
    src = np.repeat(np.asarray(src_rank, np.int64), k)
    valid = e >= 0
    e0 = np.where(valid, e, 0)
    local = table.local_slot[e0, src]
    remote = valid & (local < 0)
    occ = occurrence(np.where(remote, e0, -1))
    replica = (occ + np.maximum(src, 0)) % table.replicas[e0]  # ranks start on different replicas
    slots = np.where(local >= 0, local, table.log2phy[e0, replica])
    return np.where(valid, slots, -1).reshape(t, k)
