"""Mixtral: GQA attention (optional sliding window), every layer MoE, softmax top-k renormalised.

Checkpoint names: model.layers.{i}.block_sparse_moe.{gate, experts.{e}.w1/w2/w3} (per-expert, as
save_pretrained writes), or model.layers.{i}.mlp.{gate, experts.gate_up_proj/down_proj} (fused).
"""

from __future__ import annotations

from torch import nn

from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import load_attention_and_norms, load_moe, new_attention, softmax_moe
from moeserve.models.expert_loading import MIXTRAL_EXPERT_NAMES
from moeserve.models.moe_decoder import MoEDecoderModel


class MixtralForCausalLM(MoEDecoderModel):
    def build_attention(self, i: int) -> nn.Module:
        return new_attention(self.config, self.ctx, self.dtype, sliding_window=self.config.sliding_window or None)

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        return softmax_moe(cfg, cfg.num_local_experts, cfg.intermediate_size, True, self.ctx, self.dtype)

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        layer = self.layers[i]
        load_attention_and_norms(reader, layer, prefix)
        moe = f"{prefix}.block_sparse_moe"
        if not reader.has(f"{moe}.gate.weight"):
            moe = f"{prefix}.mlp"
        load_moe(reader, layer.mlp, moe, MIXTRAL_EXPERT_NAMES)
