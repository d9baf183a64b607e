"""The EAGLE-3 draft head a model without MTP layers drafts with (Qwen3-MoE, Kimi K2, Mixtral): its shape,
read from the head's config.json, a shipped head's, or one assumed from the target's.

EAGLE-3 (Li et al., 2025, arXiv:2503.01840) drafts with one Llama decoder layer beside the target: an input
projection `fc` fuses three of the target's hidden states (3 x target hidden -> hidden), the layer's q, k and v
projections read the RMSNormed token embedding and that fused state concatenated (2 x hidden wide), and an LM
head over a reduced draft vocabulary (`draft_vocab_size`, mapped back to the target's by a table) picks the
draft. The embedding is the target's. SGLang (models/llama_eagle3.py), vLLM (llama_eagle3.py) and
TensorRT-LLM run the layer and the LM head split over the target's tensor-parallel group and `fc` whole on
every rank; the head's weights and its KV cache are BF16 as its checkpoints ship them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moeserve.capacity.model_spec import ModelSpec, read_json_object

# EAGLE-3 heads of the shipped models, by the target's (hidden, layers, vocabulary): SpecForge's training configs
# (github.com/sgl-project/SpecForge, configs/), the heads SGLang's EAGLE-3 recipes serve
SHIPPED_SOURCE = "SpecForge configs/{}"
_SHIPPED = {
    # configs/qwen3-235B-A22B-eagle3.json: hidden 4096, 64 heads, 4 KV heads of 128, intermediate 24576
    (4096, 94, 151936): ("qwen3-235B-A22B-eagle3.json", dict(hidden=4096, heads=64, kv_heads=4, head_dim=128,
                                                               intermediate=24576, draft_vocab=32000)),
    # configs/kimi-k2-eagle3.json: hidden 7168, 64 heads, 64 KV heads of 128, intermediate 18432
    (7168, 61, 163840): ("kimi-k2-eagle3.json", dict(hidden=7168, heads=64, kv_heads=64, head_dim=128,
                                                     intermediate=18432, draft_vocab=32000)),
}
DRAFT_VOCAB = 32000  # EAGLE-3's default draft vocabulary (SpecForge, the speculators library)
MLP_WIDTHS = 6  # intermediate / hidden of a head whose target has no dense MLP (SpecForge: Qwen3-235B, gpt-oss-120b)


@dataclass(frozen=True)
class DraftHead:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    draft_vocab: int
    target_hidden: int
    source: str  # where the shape comes from: a config.json, a shipped head, or "assumed from the target"

    @property
    def fc_params(self) -> int:
        return 3 * self.target_hidden * self.hidden

    @property
    def qkv_params(self) -> int:
        return 2 * self.hidden * self.head_dim * (self.heads + 2 * self.kv_heads)

    @property
    def o_params(self) -> int:
        return self.heads * self.head_dim * self.hidden

    @property
    def mlp_params(self) -> int:
        return 3 * self.hidden * self.intermediate

    @property
    def lm_head_params(self) -> int:
        return self.draft_vocab * self.hidden

    def params_per_rank(self, tp: int) -> float:
        """Weights of the head on one rank of a TP group: fc whole, the layer and the LM head split."""
        return self.fc_params + (self.qkv_params + self.o_params + self.mlp_params + self.lm_head_params) / tp

    def as_model(self) -> ModelSpec:
        """The head as a one-layer dense GQA model (the step model's kernels run it): its LM head the draft
        vocabulary's."""
        return ModelSpec(name="eagle3-head", hidden=self.hidden, num_layers=1, vocab=self.draft_vocab,
                         num_heads=self.heads, num_kv_heads=self.kv_heads, head_dim=self.head_dim, num_experts=1,
                         top_k=1, expert_intermediate=0, num_moe_layers=0, dense_intermediate=self.intermediate)

    def describe(self) -> str:
        return (f"EAGLE-3 head ({self.source}): hidden {self.hidden}, {self.heads} heads, {self.kv_heads} KV heads of "
                f"{self.head_dim}, MLP {self.intermediate}, draft vocabulary {self.draft_vocab}")


def default_head(target: ModelSpec) -> DraftHead:
    """The shipped head of `target` (by its hidden size, layers and vocabulary), else one assumed from its shape as
    SpecForge's heads follow their targets: the target's hidden size, query heads and head width (MLA: 128, as
    Kimi K2's head; its KV heads then the query heads), its KV heads, its dense MLP's width (else 6 x hidden) and a
    32K draft vocabulary."""
    shipped = _SHIPPED.get((target.hidden, target.num_layers, target.vocab))
    if shipped:
        name, shape = shipped
        return DraftHead(**shape, target_hidden=target.hidden, source=SHIPPED_SOURCE.format(name))
    head_dim = 128 if target.is_mla else target.head_dim
    kv_heads = target.num_heads if target.is_mla else target.num_kv_heads
    return DraftHead(hidden=target.hidden, heads=target.num_heads, kv_heads=kv_heads, head_dim=head_dim,
                     intermediate=target.dense_intermediate or MLP_WIDTHS * target.hidden, draft_vocab=DRAFT_VOCAB,
                     target_hidden=target.hidden, source="assumed from the target's shape")


def head_from_config(cfg: dict, target: ModelSpec, source: str) -> DraftHead:
    """A DraftHead from an EAGLE-3 head's config.json: Hugging Face's LlamaForCausalLMEagle3 fields at the top
    level, or the speculators library's (`transformer_layer_config`, `draft_vocab_size`, `target_hidden_size`)."""
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg

    def whole(d: dict, key: str, default=None) -> int:  # a key absent or null takes `default`
        value = d.get(key)
        value = default if value is None else value
        if type(value) is not int or not 1 <= value <= 1 << 24:
            raise ValueError(f"--draft-model {source}: {key} must be a whole number in [1, {1 << 24}], "
                             f"got {repr(value)[:40]}")
        return value

    layers = layer.get("num_hidden_layers", 1)
    if layers != 1:
        raise ValueError(f"--draft-model {source}: an EAGLE-3 head has one decoder layer, this config has "
                         f"num_hidden_layers {repr(layers)[:40]}")
    hidden, heads = whole(layer, "hidden_size"), whole(layer, "num_attention_heads")
    return DraftHead(hidden=hidden, heads=heads, kv_heads=whole(layer, "num_key_value_heads", heads),
                     head_dim=whole(layer, "head_dim", hidden // heads),
                     intermediate=whole(layer, "intermediate_size"),
                     draft_vocab=whole(cfg, "draft_vocab_size", layer.get("vocab_size", target.vocab)),
                     target_hidden=whole(cfg, "target_hidden_size", target.hidden),
                     source=source)


def load_head(source: str, target: ModelSpec) -> DraftHead:
    """--draft-model: an EAGLE-3 head's checkpoint directory or config.json."""
    path = Path(source)
    path = path / "config.json" if path.is_dir() else path
    return head_from_config(read_json_object(path, source, "--draft-model"), target, str(path))
