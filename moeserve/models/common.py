"""Config readers and layer builders shared by the Llama-style MoE architectures."""

from __future__ import annotations

import logging
import re
from typing import Any

import torch

from moeserve.dense.attention import Attention, AttentionSpec
from moeserve.dense.linear import ReplicatedLinear
from moeserve.dense.rotary import RotaryEmbedding, inv_freq_for, rope_parameters
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.expert_loading import ExpertNames, load_experts
from moeserve.moe.layer import MoELayer
from moeserve.moe.router import SoftmaxTopKRouter
from moeserve.parallel_state import ParallelContext

logger = logging.getLogger(__name__)


def head_dim(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def rotary_dim(cfg: Any) -> int:
    """The rotated dims of each head: head_dim times the rope's `partial_rotary_factor` (transformers
    keeps it in rope_parameters; older configs have it, or MiniMax's `rotary_dim`, at the top level)."""
    factor = rope_parameters(cfg).get("partial_rotary_factor") or getattr(cfg, "partial_rotary_factor", None)
    if factor is None and getattr(cfg, "rotary_dim", None):
        return int(cfg.rotary_dim)
    return int(head_dim(cfg) * (factor or 1.0))


def make_rotary(cfg: Any, dim: int | None = None) -> RotaryEmbedding:
    """dim: the rotated dims of a head (partial rotary); None = head_dim."""
    dim = dim or head_dim(cfg)
    inv_freq, scaling = inv_freq_for(rope_parameters(cfg), dim, getattr(cfg, "max_position_embeddings", None))
    return RotaryEmbedding(inv_freq, scaling)


def attention_spec(cfg: Any, **overrides: Any) -> AttentionSpec:
    base = dict(
        hidden_size=cfg.hidden_size,
        num_heads=cfg.num_attention_heads,
        num_kv_heads=cfg.num_key_value_heads,
        head_dim=head_dim(cfg),
        rms_norm_eps=cfg.rms_norm_eps,
    )
    return AttentionSpec(**(base | overrides))


def softmax_moe(
    cfg: Any,
    num_experts: int,
    intermediate: int,
    renormalize: bool,
    ctx: ParallelContext,
    dtype: torch.dtype,
    **shared: Any,
) -> MoELayer:
    """An MoE layer with a bias-free linear gate and softmax top-k routing."""
    return MoELayer(
        gate=ReplicatedLinear(cfg.hidden_size, num_experts, False, dtype),
        router=SoftmaxTopKRouter(cfg.num_experts_per_tok, renormalize),
        num_experts=num_experts,
        hidden=cfg.hidden_size,
        intermediate=intermediate,
        ctx=ctx,
        dtype=dtype,
        act=cfg.hidden_act,
        **shared,
    )


def load_attention_and_norms(reader: CheckpointReader, layer: Any, prefix: str) -> None:
    """prefix 'model.layers.{i}': self_attn.*, input_layernorm, post_attention_layernorm."""
    layer.self_attn.load(reader, f"{prefix}.self_attn")
    layer.input_layernorm.load(reader, f"{prefix}.input_layernorm.weight")
    layer.post_attention_layernorm.load(reader, f"{prefix}.post_attention_layernorm.weight")


def load_moe(reader: CheckpointReader, moe: MoELayer, prefix: str, names: ExpertNames = ExpertNames()) -> None:
    """prefix e.g. 'model.layers.0.mlp': gate.weight, experts.*, and the shared expert if present."""
    moe.gate.load(reader, f"{prefix}.gate")
    load_experts(reader, moe, prefix, names)
    if moe.shared_expert is not None:
        moe.shared_expert.load(reader, f"{prefix}.shared_expert")
    if moe.shared_expert_gate is not None:
        moe.shared_expert_gate.load(reader, f"{prefix}.shared_expert_gate")


def new_attention(cfg: Any, ctx: ParallelContext, dtype: torch.dtype, **overrides: Any) -> Attention:
    spec = attention_spec(cfg, **overrides)
    return Attention(spec, make_rotary(cfg, spec.rotary_dim), ctx, dtype)


_LAYER_INDEX = re.compile(r"model\.layers\.(\d+)\.")


def claim_mtp_layers(reader: CheckpointReader, num_layers: int, architecture: str) -> None:
    """Claim, unread, the tensors of decoder layers past num_hidden_layers: the multi-token-prediction
    modules DeepSeek-V3 (`num_nextn_predict_layers`) and GLM-4.5 (`num_mtp_layers`) ship there, which
    only speculative decoding would run. Logged once per load, on the rank that shows progress."""
    beyond = [n for n in reader.names() if (m := _LAYER_INDEX.match(n)) and int(m.group(1)) >= num_layers]
    if beyond:
        layers = sorted({int(_LAYER_INDEX.match(n).group(1)) for n in beyond})
        logger.info("%s: %d tensors of layers %s (multi-token prediction) are not loaded", architecture,
                    len(beyond), layers)
        reader.claim(beyond)
