"""Torch path of `routing.choose_slots` (same algorithm, tensors stay on their device).

Kept apart so the rest of placement/ imports numpy only.
Shape legend: T tokens, k top-k, E experts, R max replicas, G ranks.
"""
from __future__ import annotations

import torch

from moeserve.placement.plan import PlacementPlan
from moeserve.placement.routing import ReplicaTable


class TorchReplicaTable:
    """`ReplicaTable` as int64 tensors on `device`."""

    def __init__(self, table: ReplicaTable, device: torch.device | str = "cpu") -> None:
        self.log2phy = torch.as_tensor(table.log2phy, dtype=torch.int64, device=device)  # [E, R]
        self.replicas = torch.as_tensor(table.replicas, dtype=torch.int64, device=device)  # [E]
        self.local_slot = torch.as_tensor(table.local_slot, dtype=torch.int64, device=device)  # [E, G]


def _occurrence(keys: torch.Tensor) -> torch.Tensor:
    sorted_keys, order = torch.sort(keys, stable=True)
    first = torch.searchsorted(sorted_keys, sorted_keys, right=False)
    out = torch.empty_like(keys)
    out[order] = torch.arange(keys.numel(), device=keys.device) - first
    return out


def choose_slots(table: TorchReplicaTable, topk: torch.Tensor, src_rank: torch.Tensor) -> torch.Tensor:
    """Physical slots [T, k] int64 (-1 where topk is -1). topk: int [T, k]; src_rank: int [T]."""
    t, k = topk.shape
    e = topk.reshape(-1).to(torch.int64)
    src = src_rank.to(torch.int64).repeat_interleave(k)
    valid = e >= 0
    e0 = torch.where(valid, e, torch.zeros_like(e))
    local = table.local_slot[e0, src]
    remote = valid & (local < 0)
    occ = _occurrence(torch.where(remote, e0, torch.full_like(e0, -1)))
    replica = (occ + src.clamp(min=0)) % table.replicas[e0]
    slots = torch.where(local >= 0, local, table.log2phy[e0, replica])
    return torch.where(valid, slots, torch.full_like(slots, -1)).reshape(t, k)


def slot_map_for(plan: PlacementPlan, layer: int, ep_rank: int, device: torch.device | str = "cpu"):
    """The replica choice of MoE layer `layer` on expert rank `ep_rank`, as the MoE layer takes it:
    logical ids [T, k] int64 -> physical slots [T, k] int64 (every token counts as this rank's)."""
    table = TorchReplicaTable(ReplicaTable.from_plan(plan, layer), device)

    def slot_map(topk_ids: torch.Tensor) -> torch.Tensor:
        src = torch.full((topk_ids.shape[0],), ep_rank, dtype=torch.int64, device=topk_ids.device)
        return choose_slots(table, topk_ids, src)

    return slot_map
