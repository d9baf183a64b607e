"""OLMoE: RMSNorm over the whole q and k projections (all heads together, not per head), optional
clip_qkv, optional attention bias, every layer MoE, top-k renormalised only if norm_topk_prob."""

from __future__ import annotations

from torch import nn

from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import load_attention_and_norms, load_moe, new_attention, softmax_moe
from moeserve.models.moe_decoder import MoEDecoderModel


class OlmoeForCausalLM(MoEDecoderModel):
    def build_attention(self, i: int) -> nn.Module:
        cfg = self.config
        bias = getattr(cfg, "attention_bias", False)
        return new_attention(
            cfg,
            self.ctx,
            self.dtype,
            qkv_bias=bias,
            o_bias=bias,
            qk_norm="full",
            clip_qkv=getattr(cfg, "clip_qkv", None),
        )

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        return softmax_moe(cfg, cfg.num_experts, cfg.intermediate_size, cfg.norm_topk_prob, self.ctx, self.dtype)

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        load_attention_and_norms(reader, self.layers[i], prefix)
        load_moe(reader, self.layers[i].mlp, f"{prefix}.mlp")
