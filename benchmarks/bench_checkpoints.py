"""Benchmark checkpoints, made with transformers from a fixed seed (no downloads)."""
from __future__ import annotations

from pathlib import Path

TINY_MIXTRAL = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=32,
    num_local_experts=8,
    num_experts_per_tok=2,
    vocab_size=4096,
    max_position_embeddings=2048,
    initializer_range=0.05,
)


def make_tiny_mixtral(path: str | Path, seed: int = 0) -> Path:
    """The `tiny-mixtral` of the engine benchmarks, with the built-in tokenizer (vocab padded to 4096)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    from moeserve.engine.builtin_model import build_tokenizer

    path = Path(path)
    if (path / "config.json").exists():
        return path
    tokenizer = build_tokenizer()
    eos = tokenizer.eos_token_id
    torch.manual_seed(seed)
    model = MixtralForCausalLM(MixtralConfig(eos_token_id=eos, pad_token_id=eos, bos_token_id=None, **TINY_MIXTRAL))
    model.float().eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
