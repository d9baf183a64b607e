"""DeepSeek's MoE block, as DeepSeek-V2/V3 (models/deepseek.py) and GLM-4.5 (models/glm4_moe.py) build
and load it: routed experts chosen by DeepSeek's router (moe/deepseek_router.py) plus
`n_shared_experts` shared experts as one gated MLP, always added.

Checkpoint names: `mlp.gate.weight`, `mlp.gate.e_score_correction_bias` (V3 and GLM),
`mlp.experts.{e}.{gate,up,down}_proj` (or the fused layout, models/expert_loading.py),
`mlp.shared_experts.*`; a dense layer's `mlp.{gate,up,down}_proj`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from moeserve.dense.mlp import GatedMLP
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.expert_loading import load_experts
from moeserve.moe.deepseek_router import DeepseekGate, DeepseekRouter, DeepseekRoutingConfig
from moeserve.moe.layer import MoELayer


def build_deepseek_moe(cfg: Any, routing: DeepseekRoutingConfig, ctx: Any, dtype: Any) -> MoELayer:
    """The MoE layer of a DeepSeek-style config: `n_routed_experts` of `moe_intermediate_size`, routed
    by `routing`, with the shared experts (if any) as one gated MLP of n_shared_experts x that width."""
    shared = None
    if cfg.n_shared_experts:
        shared = GatedMLP(cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts, cfg.hidden_act, ctx,
                          dtype)
    return MoELayer(
        gate=DeepseekGate(cfg.n_routed_experts, cfg.hidden_size, dtype),
        router=DeepseekRouter(routing),
        num_experts=cfg.n_routed_experts,
        hidden=cfg.hidden_size,
        intermediate=cfg.moe_intermediate_size,
        ctx=ctx,
        dtype=dtype,
        act=cfg.hidden_act,
        shared_expert=shared,
    )


def load_deepseek_mlp(reader: CheckpointReader, mlp: nn.Module, prefix: str) -> None:
    """A layer's MLP from `prefix` (model.layers.{i}.mlp): a dense gated MLP, or the MoE block's gate,
    score-correction bias, routed experts and shared experts."""
    if not isinstance(mlp, MoELayer):
        mlp.load(reader, prefix)
        return
    mlp.gate.load(reader, f"{prefix}.gate.weight")
    mlp.router.load(reader, f"{prefix}.gate.e_score_correction_bias")
    load_experts(reader, mlp, prefix)
    if mlp.shared_expert is not None:
        mlp.shared_expert.load(reader, f"{prefix}.shared_experts")
