"""What is known about the built-in model without loading it: its name, shape and where its files lie.

A leaf (it imports nothing of moeserve), so that the pure libraries (capacity/) and the engine both
read the built-in model's facts from here; engine/builtin_model.py adds what loading it needs (the
tokenizer, the chat template, transformers' config).
"""
from __future__ import annotations

from pathlib import Path

BUILTIN_NAME = "moeserve-tiny-moe"
VOCAB_SIZE = 4096
# 16 experts so that --ep 16 gives every rank one expert; 4 heads / 4 KV heads so --tp 4 splits evenly.
# Small because it was trained on a shared 2-core CPU in about 40 minutes (docs/builtin_model.md).
MODEL_SHAPE = dict(
    hidden_size=128,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=32,
    num_local_experts=16,
    num_experts_per_tok=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)


def builtin_config_fields() -> dict:
    """The built-in model's config.json fields that its layout depends on (engine/layout_check.py),
    known without reading the checkpoint."""
    return dict(architectures=["MixtralForCausalLM"], vocab_size=VOCAB_SIZE, **MODEL_SHAPE)


def builtin_model_dir() -> Path:
    """The shipped checkpoint directory (package data under moeserve/engine/data/)."""
    return Path(__file__).parent / "engine" / "data" / BUILTIN_NAME
