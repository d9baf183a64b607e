"""DeepSeek-V2 and DeepSeek-V3: MLA attention, shared + routed experts, DeepSeek routing.

Layer i is an MoE layer when i >= first_k_dense_replace and i % moe_layer_freq == 0 (transformers
ignores moe_layer_freq and behaves as 1, which every released checkpoint uses; a checkpoint it saved
with another value is read its way, see `checkpoint.load_hf_config`); the others are dense gated MLPs. V2 and V3 differ in routing (moe/deepseek_router.py) and in the rope layout:
V2 is always pairwise-interleaved, V3 follows `rope_interleave` (default True).

Checkpoint names follow transformers' `save_pretrained` (and DeepSeek's own releases):
`model.layers.{i}.self_attn.{q_proj | q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
kv_a_layernorm, kv_b_proj, o_proj}`, `mlp.{gate_proj, up_proj, down_proj}` (dense layers),
`mlp.gate.weight`, `mlp.gate.e_score_correction_bias` (V3), `mlp.experts.{e}.{gate,up,down}_proj`
(or the fused 3D layout, see models/expert_loading.py), `mlp.shared_experts.{gate,up,down}_proj`.
Layers past num_hidden_layers (V3's multi-token-prediction module, layer 61 in the release) are
claimed unread, unless speculative decoding runs the first of them (`enable_mtp`, models/mtp.py).
FP8 releases (V3, R1, Kimi K2: `weight_scale_inv` beside each quantized weight) load through
models/quant_fp8.py like any other architecture's.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import nn

from moeserve.dense.mla import MlaDims, MultiHeadLatentAttention
from moeserve.dense.mlp import GatedMLP
from moeserve.dense.yarn import MlaRotaryEmbedding, rope_config_from_hf, softmax_scale
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import claim_mtp_layers, load_attention_and_norms
from moeserve.models.deepseek_moe import build_deepseek_moe, load_deepseek_mlp
from moeserve.models.layout import deepseek_moe_layer as is_moe_layer  # the rule the layout check reads too
from moeserve.models.moe_decoder import MoEDecoderModel
from moeserve.moe.deepseek_router import DeepseekRoutingConfig

log = logging.getLogger(__name__)


class _DeepseekForCausalLM(MoEDecoderModel):
    VERSION = 0

    def __init__(self, hf_config: Any, ctx: Any, dtype: Any):
        if getattr(hf_config, "mlp_bias", False):
            raise ValueError("DeepSeek checkpoints with mlp_bias=True are not supported")
        if self.VERSION == 2 and getattr(hf_config, "norm_topk_prob", False):
            log.warning("DeepSeek-V2 norm_topk_prob=True is ignored, as transformers 5.23 ignores it")
        super().__init__(hf_config, ctx, dtype)

    # --- MoEDecoderModel hooks ----------------------------------------------------------------
    def build_attention(self, i: int) -> nn.Module:
        cfg = self.config
        dims = MlaDims.from_hf(cfg)
        rope = rope_config_from_hf(cfg, cfg.qk_rope_head_dim)
        interleave = self.VERSION == 2 or getattr(cfg, "rope_interleave", True)
        rotary = MlaRotaryEmbedding(rope, "interleaved" if interleave else "half")
        return MultiHeadLatentAttention(dims, rotary, softmax_scale(rope, dims.qk_head_dim), self.ctx, self.dtype)

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        if not is_moe_layer(cfg, i):
            return GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, self.ctx, self.dtype)
        return build_deepseek_moe(cfg, DeepseekRoutingConfig.from_hf(cfg, self.VERSION), self.ctx, self.dtype)

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        layer = self.decoder_layer(i)
        load_attention_and_norms(reader, layer, prefix)
        load_deepseek_mlp(reader, layer.mlp, f"{prefix}.mlp")

    def load_weights(self, reader: CheckpointReader) -> None:
        # an MTP layer past the first unread one is not run (models/mtp.py)
        claim_mtp_layers(reader, len(self.layers) + (self.mtp is not None), type(self).__name__)
        super().load_weights(reader)


class DeepseekV2ForCausalLM(_DeepseekForCausalLM):
    VERSION = 2


class DeepseekV3ForCausalLM(_DeepseekForCausalLM):
    VERSION = 3
