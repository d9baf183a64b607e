"""A deployment's parallel layout and number formats: the plain data the fit and step models take."""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.capacity.dtypes import nbytes


@dataclass(frozen=True)
class Layout:
    """moeserve's --tp/--ep (DESIGN.md section 2): world = ep (or tp when ep is 1); ep/tp attention
    groups of tp ranks each; every MoE layer spans all ep ranks, `redundant` extra expert slots among them."""
    tp: int = 1
    ep: int = 1
    redundant: int = 0

    @property
    def world(self) -> int:
        return self.ep if self.ep > 1 else self.tp

    @property
    def attention_groups(self) -> int:
        return self.world // self.tp

    def validate(self, num_experts: int) -> "Layout":
        if self.tp < 1 or self.ep < 1 or self.redundant < 0:
            raise ValueError(f"tp {self.tp}, ep {self.ep} and redundant {self.redundant} must be positive")
        if self.ep > 1 and self.ep % self.tp:
            raise ValueError(f"--ep {self.ep} is not a multiple of --tp {self.tp}")
        if self.ep == 1 and self.redundant:
            raise ValueError("redundant experts need --ep > 1")
        if self.ep > 1 and (num_experts + self.redundant) % self.ep:
            raise ValueError(f"{num_experts} experts + {self.redundant} redundant do not split evenly over --ep {self.ep}")
        return self

    def slots_per_rank(self, num_experts: int) -> int:
        return (num_experts + self.redundant) // self.ep if self.ep > 1 else num_experts


@dataclass(frozen=True)
class Precision:
    weights: str = "fp8"  # linear layers (attention, MLPs, experts)
    kv: str = "bf16"
    activations: str = "bf16"  # also embeddings, LM head and the combine direction of dispatch

    @property
    def weight_bytes(self) -> float:
        return nbytes(self.weights)

    @property
    def kv_bytes(self) -> float:
        return nbytes(self.kv)

    @property
    def act_bytes(self) -> float:
        return nbytes(self.activations)

    @property
    def dispatch_bytes(self) -> float:
        """Bytes per value sent by dispatch: FP8 when the experts run in FP8/FP4 (DeepEP's way)."""
        return nbytes("fp8") + 4 / 128 if self.weights in ("fp8", "fp4") else self.act_bytes
