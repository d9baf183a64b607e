"""OpenAI's gpt-oss (`GptOssForCausalLM`, transformers' `gpt_oss`).

- Attention: GQA with biases on q/k/v/o, one learned attention-sink logit per query head
  (`self_attn.sinks`), sliding-window attention on the layers whose `layer_types` entry is
  "sliding_attention" (every other layer in the releases, window 128), full attention on the others;
  YaRN rope (`truncate: false`, dense/yarn.py).
- MoE on every layer: router = linear with bias (`mlp.router.weight` / `.bias`), top-k of the logits,
  softmax over those k; experts with biases and the clamped SwiGLU (`swiglu_alpha`, `swiglu_limit`,
  moe/experts.py ClampedSwiGLU), stored fused with gate and up interleaved (models/gpt_oss_experts.py),
  in BF16 or MXFP4 (`quantization_config.quant_method: "mxfp4"`, dequantized at load).
- No shared experts, no dense layers; `hidden_act` in config.json is not used.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from moeserve.dense.linear import ReplicatedLinear
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.common import load_attention_and_norms, new_attention
from moeserve.models.gpt_oss_experts import load_gpt_oss_experts
from moeserve.models.moe_decoder import MoEDecoderModel
from moeserve.moe.experts import ClampedSwiGLU
from moeserve.moe.layer import MoELayer
from moeserve.moe.router import TopKSoftmaxRouter

QUANT_METHODS = ("mxfp4",)


def quant_method(hf_config: Any) -> str | None:
    """config.json's quantization_config.quant_method (a dict, or transformers' config object), or None."""
    quant = getattr(hf_config, "quantization_config", None)
    if not quant:
        return None
    return quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", str(quant))


class GptOssForCausalLM(MoEDecoderModel):
    def __init__(self, hf_config: Any, ctx: Any, dtype: Any):
        method = quant_method(hf_config)
        if method is not None and method not in QUANT_METHODS:
            raise ValueError(f"gpt-oss checkpoints quantized with {method!r} are not supported; moeserve reads "
                             f"gpt-oss in BF16/FP32 or as released ({', '.join(QUANT_METHODS)})")
        super().__init__(hf_config, ctx, dtype)

    def build_attention(self, i: int) -> nn.Module:
        cfg = self.config
        layer_types = getattr(cfg, "layer_types", None) or []
        sliding = i < len(layer_types) and layer_types[i] == "sliding_attention"
        bias = getattr(cfg, "attention_bias", True)
        return new_attention(cfg, self.ctx, self.dtype, qkv_bias=bias, o_bias=bias, sinks=True,
                             sliding_window=cfg.sliding_window if sliding and cfg.sliding_window else None)

    def build_mlp(self, i: int) -> nn.Module:
        cfg = self.config
        return MoELayer(
            gate=ReplicatedLinear(cfg.hidden_size, cfg.num_local_experts, True, self.dtype),
            router=TopKSoftmaxRouter(cfg.num_experts_per_tok),
            num_experts=cfg.num_local_experts,
            hidden=cfg.hidden_size,
            intermediate=cfg.intermediate_size,
            ctx=self.ctx,
            dtype=self.dtype,
            act=ClampedSwiGLU(float(cfg.swiglu_alpha), float(cfg.swiglu_limit)),
            expert_bias=True,
        )

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        prefix = f"model.layers.{i}"
        layer = self.layers[i]
        load_attention_and_norms(reader, layer, prefix)
        layer.mlp.gate.load(reader, f"{prefix}.mlp.router")
        load_gpt_oss_experts(reader, layer.mlp, f"{prefix}.mlp.experts")
