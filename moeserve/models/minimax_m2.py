"""MiniMax-M2 (`MiniMaxM2ForCausalLM`, transformers' `minimax_m2`).

- Attention: GQA without biases, q/k RMSNorm over all heads' concatenated projections (OLMoE's
  "full" q/k norm: under tp the sum of squares is all-reduced), partial rotary (`rotary_dim`, read by
  transformers as `partial_rotary_factor`); full attention on every layer.
- MoE on every layer, no shared experts: sigmoid scores, `e_score_correction_bias` for the choice only,
  plain top-k (no groups), weights normalised to sum 1 (moe/deepseek_router.py).
- Checkpoint names (MiniMax's release and transformers' `save_pretrained`):
  `block_sparse_moe.gate.weight`, `block_sparse_moe.e_score_correction_bias`,
  `block_sparse_moe.experts.{e}.w1/w3/w2.weight`; transformers' in-memory names (`mlp.gate.weight`,
  `mlp.e_score_correction_bias`, fused `mlp.experts.gate_up_proj` / `down_proj`) load too. Layers past
  num_hidden_layers (multi-token prediction) are claimed unread.
"""

from __future__ import annotations

from torch import nn

from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import claim_mtp_layers, load_attention_and_norms, new_attention, rotary_dim
from moeserve.models.expert_loading import MIXTRAL_EXPERT_NAMES, ExpertNames, load_experts
from moeserve.models.moe_decoder import MoEDecoderModel
from moeserve.moe.deepseek_router import DeepseekGate, DeepseekRouter, DeepseekRoutingConfig
from moeserve.moe.layer import MoELayer


class MiniMaxM2ForCausalLM(MoEDecoderModel):
    def build_attention(self, i: int) -> nn.Module:
        return new_attention(self.config, self.ctx, self.dtype, qk_norm="full", rotary_dim=rotary_dim(self.config))

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        routing = DeepseekRoutingConfig(num_experts=cfg.num_local_experts, top_k=cfg.num_experts_per_tok,
                                        scoring_func="sigmoid", topk_method="greedy", norm_topk_prob=True)
        return MoELayer(
            gate=DeepseekGate(cfg.num_local_experts, cfg.hidden_size, self.dtype),
            router=DeepseekRouter(routing),
            num_experts=cfg.num_local_experts,
            hidden=cfg.hidden_size,
            intermediate=cfg.intermediate_size,
            ctx=self.ctx,
            dtype=self.dtype,
            act=cfg.hidden_act,
        )

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        layer = self.layers[i]
        load_attention_and_norms(reader, layer, prefix)
        mlp = f"{prefix}.block_sparse_moe"
        names = MIXTRAL_EXPERT_NAMES
        if not reader.has(f"{mlp}.gate.weight"):  # transformers' in-memory names
            mlp, names = f"{prefix}.mlp", ExpertNames()
        layer.mlp.gate.load(reader, f"{mlp}.gate.weight")
        layer.mlp.router.load(reader, f"{mlp}.e_score_correction_bias")
        load_experts(reader, layer.mlp, mlp, names)

    def load_weights(self, reader: CheckpointReader) -> None:
        claim_mtp_layers(reader, len(self.layers), "MiniMaxM2ForCausalLM")
        super().load_weights(reader)
