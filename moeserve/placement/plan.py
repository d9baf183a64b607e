"""`PlacementPlan`: which logical expert lives in each physical slot of each MoE layer.

Shape legend: L MoE layers, E logical experts, P physical slots, G ranks (GPUs), N nodes,
R max replicas. Slot p lives on rank p // (P / G); rank g on node g // (G / N) (node-major).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from moeserve.placement.file_limits import FileContentError, check_cells
from moeserve.placement.plan_file import PLAN_FORMAT, PLAN_VERSION, PlanFields, plan_fields, read_plan_file


class PlanError(ValueError):
    """A plan that breaks an invariant or does not fit the deployment; the message says which."""


class PlanFileError(PlanError):
    """A plan file whose content breaks its format, a bound or an invariant: `detail` says which
    field, `path` which file."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"placement plan {path}: {detail}")
        self.path, self.detail = path, detail


@dataclass(frozen=True)
class PlacementPlan:
    phy2log: np.ndarray  # int64 [L, P], logical expert in each physical slot
    log2phy: np.ndarray  # int64 [L, E, R], physical slots of each expert, -1 padded
    replicas: np.ndarray  # int64 [L, E], number of slots of each expert
    num_ranks: int
    num_nodes: int = 1
    layer_ids: tuple[int, ...] | None = None  # model layer number of each MoE layer, if known

    @classmethod
    def from_phy2log(
        cls, phy2log: np.ndarray, num_experts: int, num_ranks: int, num_nodes: int = 1, layer_ids=None
    ) -> "PlacementPlan":
        """Derive `log2phy` and `replicas` from `phy2log` [L, P] (slots listed in ascending order)."""
        phy2log = np.asarray(phy2log, dtype=np.int64)
        if phy2log.ndim != 2:
            raise PlanError(f"phy2log must be [layers, slots], got shape {phy2log.shape}")
        num_layers, _ = phy2log.shape
        replicas = np.zeros((num_layers, num_experts), np.int64)
        for layer in range(num_layers):
            ok = (phy2log[layer] >= 0) & (phy2log[layer] < num_experts)
            replicas[layer] = np.bincount(phy2log[layer][ok], minlength=num_experts)
        width = max(int(replicas.max(initial=0)), 1)
        try:
            check_cells((num_layers, num_experts, width), "log2phy [layers, experts, most replicas of an expert]")
        except FileContentError as e:
            raise PlanError(str(e)) from None
        log2phy = np.full((num_layers, num_experts, width), -1, np.int64)
        for layer in range(num_layers):
            order = np.argsort(phy2log[layer], kind="stable")  # slots grouped by expert, ascending
            experts = phy2log[layer][order]
            ok = (experts >= 0) & (experts < num_experts)
            order, experts = order[ok], experts[ok]
            starts = np.searchsorted(experts, experts, side="left")
            log2phy[layer, experts, np.arange(len(experts)) - starts] = order
        ids = tuple(int(i) for i in layer_ids) if layer_ids is not None else None
        return cls(phy2log, log2phy, replicas, int(num_ranks), int(num_nodes), ids)

    @classmethod
    def contiguous(cls, num_layers: int, num_experts: int, num_ranks: int, num_nodes: int = 1) -> "PlacementPlan":
        """No redundancy: rank g holds experts [g*E/G, (g+1)*E/G) in every layer."""
        if num_experts % num_ranks:
            raise PlanError(f"{num_experts} experts do not split evenly over {num_ranks} ranks")
        phy2log = np.tile(np.arange(num_experts), (num_layers, 1))
        return cls.from_phy2log(phy2log, num_experts, num_ranks, num_nodes)

    @property
    def num_layers(self) -> int:
        return self.phy2log.shape[0]

    @property
    def num_slots(self) -> int:
        return self.phy2log.shape[1]

    @property
    def num_experts(self) -> int:
        return self.replicas.shape[1]

    @property
    def slots_per_rank(self) -> int:
        return self.num_slots // self.num_ranks

    @property
    def ranks_per_node(self) -> int:
        return self.num_ranks // self.num_nodes

    def slot_rank(self) -> np.ndarray:
        """Rank of each physical slot [P]."""
        return np.arange(self.num_slots) // self.slots_per_rank

    def slot_node(self) -> np.ndarray:
        """Node of each physical slot [P]."""
        return self.slot_rank() // self.ranks_per_node

    def validate(self) -> "PlacementPlan":
        """Check every invariant; raise `PlanError` naming the first one broken."""
        num_layers, num_slots = self.phy2log.shape
        if self.num_ranks < 1 or self.num_nodes < 1 or self.num_ranks % self.num_nodes:
            raise PlanError(f"{self.num_ranks} ranks do not split evenly over {self.num_nodes} nodes")
        if num_slots % self.num_ranks:
            raise PlanError(f"{num_slots} slots do not split evenly over {self.num_ranks} ranks")
        if self.replicas.shape != (num_layers, self.num_experts) or self.log2phy.shape[:2] != self.replicas.shape:
            raise PlanError("phy2log, log2phy and replicas disagree on layers or experts")
        if self.layer_ids is not None and len(self.layer_ids) != num_layers:
            raise PlanError(f"{len(self.layer_ids)} layer_ids for {num_layers} layers")
        bad = (self.phy2log < 0) | (self.phy2log >= self.num_experts)
        if bad.any():
            layer, slot = np.argwhere(bad)[0]
            raise PlanError(f"layer {layer} slot {slot} holds expert {self.phy2log[layer, slot]}, not in [0, {self.num_experts})")
        for layer in range(num_layers):
            self._validate_layer(layer)
        return self

    def _validate_layer(self, layer: int) -> None:
        p2l, l2p, reps = self.phy2log[layer], self.log2phy[layer], self.replicas[layer]
        counts = np.bincount(p2l, minlength=self.num_experts)
        if (counts == 0).any():
            raise PlanError(f"layer {layer}: expert {int(np.argmin(counts))} has no slot")
        if not np.array_equal(counts, reps):
            raise PlanError(f"layer {layer}: replicas disagree with phy2log")
        filled = l2p >= 0
        if not np.array_equal(filled, np.arange(l2p.shape[1])[None, :] < reps[:, None]):
            raise PlanError(f"layer {layer}: log2phy must list replicas[e] slots per expert, then -1 padding")
        slots = l2p[filled]
        experts = np.broadcast_to(np.arange(self.num_experts)[:, None], l2p.shape)[filled]
        if len(np.unique(slots)) != len(slots) or not np.array_equal(p2l[slots], experts):
            raise PlanError(f"layer {layer}: log2phy and phy2log are not inverse maps")

    def to_json(self) -> dict:
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION,
            "num_ranks": self.num_ranks,
            "num_nodes": self.num_nodes,
            "num_experts": self.num_experts,
            "layer_ids": list(self.layer_ids) if self.layer_ids is not None else None,
            "phy2log": self.phy2log.tolist(),
        }

    @classmethod
    def from_json(cls, obj: dict) -> "PlacementPlan":
        """The plan of a JSON object (`to_json`'s form, plan_file.py), every field and invariant checked."""
        try:
            fields = plan_fields(obj)
        except FileContentError as e:
            raise PlanError(str(e)) from None
        return cls._from_fields(fields)

    @classmethod
    def _from_fields(cls, f: PlanFields) -> "PlacementPlan":
        return cls.from_phy2log(f.phy2log, f.num_experts, f.num_ranks, f.num_nodes, f.layer_ids).validate()

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def load(cls, path: str) -> "PlacementPlan":
        """The plan file at `path`; OSError when it cannot be read, PlanError naming the file and the
        field (or the invariant) otherwise."""
        try:
            return cls._from_fields(read_plan_file(path))
        except (FileContentError, PlanError) as e:
            raise PlanFileError(path, str(e)) from None
