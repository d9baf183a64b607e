"""Qwen2-MoE and Qwen3-MoE.

Qwen2-MoE: qkv bias, a shared expert scaled by sigmoid(shared_expert_gate(x)), optional sliding
window on layers whose layer_types entry is "sliding_attention".
Qwen3-MoE: per-head RMSNorm on q and k, `attention_bias` on q/k/v/o, no shared expert, sliding
window on every layer when config.sliding_window is set (use_sliding_window).
Both: a layer is MoE unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step != 0
(then a dense MLP of intermediate_size); top-k weights renormalised only if norm_topk_prob.
"""

from __future__ import annotations

from torch import nn

from moeserve.dense.linear import ReplicatedLinear
from moeserve.dense.mlp import GatedMLP
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import load_attention_and_norms, load_moe, new_attention, softmax_moe
from moeserve.models.layout import qwen_moe_layer
from moeserve.models.moe_decoder import MoEDecoderModel
from moeserve.moe.layer import MoELayer


class _QwenMoeBase(MoEDecoderModel):
    def is_moe_layer(self, i: int) -> bool:
        return qwen_moe_layer(self.config, i)  # the rule the layout check reads too

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        if not self.is_moe_layer(i):
            return GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, self.ctx, self.dtype)
        return softmax_moe(
            cfg,
            cfg.num_experts,
            cfg.moe_intermediate_size,
            cfg.norm_topk_prob,
            self.ctx,
            self.dtype,
            **self.shared_parts(),
        )

    def shared_parts(self) -> dict:
        return {}

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        layer = self.layers[i]
        load_attention_and_norms(reader, layer, prefix)
        if isinstance(layer.mlp, MoELayer):
            load_moe(reader, layer.mlp, f"{prefix}.mlp")
            if layer.mlp.shared_expert is None:  # shared_expert_intermediate_size 0: the gate scales zeros
                reader.claim([f"{prefix}.mlp.shared_expert_gate.weight"])
        else:
            layer.mlp.load(reader, f"{prefix}.mlp")


class Qwen2MoeForCausalLM(_QwenMoeBase):
    def build_attention(self, i: int) -> nn.Module:
        cfg = self.config
        layer_types = getattr(cfg, "layer_types", None) or []
        sliding = i < len(layer_types) and layer_types[i] == "sliding_attention"
        window = cfg.sliding_window if sliding and cfg.sliding_window else None
        return new_attention(cfg, self.ctx, self.dtype, qkv_bias=getattr(cfg, "qkv_bias", True), sliding_window=window)

    def shared_parts(self) -> dict:
        cfg = self.config
        if not getattr(cfg, "shared_expert_intermediate_size", 0):
            return {}
        return dict(
            shared_expert=GatedMLP(
                cfg.hidden_size, cfg.shared_expert_intermediate_size, cfg.hidden_act, self.ctx, self.dtype
            ),
            shared_expert_gate=ReplicatedLinear(cfg.hidden_size, 1, False, self.dtype),
        )


class Qwen3MoeForCausalLM(_QwenMoeBase):
    def build_attention(self, i: int) -> nn.Module:
        cfg = self.config
        bias = getattr(cfg, "attention_bias", False)
        window = getattr(cfg, "sliding_window", None) or None
        return new_attention(
            cfg, self.ctx, self.dtype, qkv_bias=bias, o_bias=bias, qk_norm="head", sliding_window=window
        )
