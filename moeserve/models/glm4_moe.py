"""GLM-4.5 / 4.6 / 4.7 (`Glm4MoeForCausalLM`, transformers' `glm4_moe`).

- Attention: GQA with biases on q/k/v (`attention_bias`; none on o_proj), optional per-head q/k
  RMSNorm (`use_qk_norm`), partial rotary: the first `partial_rotary_factor` x head_dim dims of each
  head are rotated (NeoX halves), the rest pass through.
- Layers below `first_k_dense_replace` have a dense gated MLP of `intermediate_size`; the others are
  MoE: DeepSeek-V3's routing (sigmoid scores, `e_score_correction_bias` for the choice only, group-
  limited top-k over `n_group` / `topk_group`, `norm_topk_prob`, `routed_scaling_factor`;
  moe/deepseek_router.py) over `n_routed_experts` experts of `moe_intermediate_size`, plus
  `n_shared_experts` shared experts as one gated MLP, always added.
- Checkpoint names as DeepSeek's: `mlp.gate.weight`, `mlp.gate.e_score_correction_bias`,
  `mlp.experts.{e}.{gate,up,down}_proj` (or the fused layout), `mlp.shared_experts.*`. The MTP layer
  the releases carry past num_hidden_layers (`num_nextn_predict_layers`) is claimed unread.
"""

from __future__ import annotations

from torch import nn

from moeserve.dense.mlp import GatedMLP
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import claim_mtp_layers, load_attention_and_norms, new_attention, rotary_dim
from moeserve.models.deepseek_moe import build_deepseek_moe, load_deepseek_mlp
from moeserve.models.layout import glm4_moe_layer
from moeserve.models.moe_decoder import MoEDecoderModel
from moeserve.moe.deepseek_router import DeepseekRoutingConfig


class Glm4MoeForCausalLM(MoEDecoderModel):
    def build_attention(self, i: int) -> nn.Module:
        cfg = self.config
        return new_attention(cfg, self.ctx, self.dtype, qkv_bias=bool(getattr(cfg, "attention_bias", False)),
                             qk_norm="head" if getattr(cfg, "use_qk_norm", False) else None, rotary_dim=rotary_dim(cfg))

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        if not glm4_moe_layer(cfg, i):
            return GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, self.ctx, self.dtype)
        return build_deepseek_moe(cfg, DeepseekRoutingConfig.from_hf(cfg, 3), self.ctx, self.dtype)  # V3's routing

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        layer = self.decoder_layer(i)
        load_attention_and_norms(reader, layer, prefix)
        load_deepseek_mlp(reader, layer.mlp, f"{prefix}.mlp")

    def load_weights(self, reader: CheckpointReader) -> None:
        # the first MTP layer is read when speculative decoding runs it (models/mtp.py)
        claim_mtp_layers(reader, len(self.layers) + (self.mtp is not None), "Glm4MoeForCausalLM")
        super().load_weights(reader)
