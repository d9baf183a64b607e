"""The built-in model: a small Mixtral-architecture MoE made deterministically on first use.

`moeserve serve` with no `--model` serves it, so a fresh machine works with nothing downloaded.
Weights come from a fixed seed; the tokenizer is a byte-level BPE trained offline on a small corpus
shipped in the package. Both are written once to a cache folder (atomically, so concurrent first
uses from several processes are safe) and read back like any other checkpoint.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

BUILTIN_NAME = "moeserve-tiny-moe"
_SEED = 20261122
_VOCAB_SIZE = 2048
_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# generation ends at either (generation_config.json), as ChatML models' do: a chat reply at its end of turn
_END_TOKENS = ("<|endoftext|>", "<|im_end|>")
# Documented default chat format (ChatML-like); also used by the server when a checkpoint has none.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# 16 experts so that --ep 16 gives every rank one expert; 8 heads / 4 KV heads so --tp 4 splits evenly.
_MODEL_SHAPE = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=32,
    num_local_experts=16,
    num_experts_per_tok=2,
    max_position_embeddings=4096,
    initializer_range=0.06,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)


def builtin_config_fields() -> dict:
    """The built-in model's config.json fields that its layout depends on (engine/layout_check.py),
    known without building it."""
    return dict(architectures=["MixtralForCausalLM"], **_MODEL_SHAPE)


def _corpus_path() -> Path:
    return Path(__file__).with_name("data") / "tokenizer_corpus.txt"


def _fingerprint() -> str:
    h = hashlib.sha256(repr(sorted(_MODEL_SHAPE.items())).encode())
    h.update(f"{_SEED}-{_VOCAB_SIZE}-{CHAT_TEMPLATE}-{_END_TOKENS}".encode())
    h.update(_corpus_path().read_bytes())
    return h.hexdigest()[:12]


def cache_root() -> Path:
    return Path(os.environ.get("MOESERVE_CACHE", Path.home() / ".cache" / "moeserve"))


def builtin_model_dir() -> Path:
    """Path of the built-in checkpoint, creating it on first use."""
    target = cache_root() / f"{BUILTIN_NAME}-{_fingerprint()}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        _write_checkpoint(tmp)
        try:
            os.rename(tmp, target)  # atomic; loses the race gracefully if another process won
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_tokenizer():
    """Byte-level BPE trained on the shipped corpus; deterministic for a given tokenizers version."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(_corpus_path())], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=_SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _write_checkpoint(path: Path) -> None:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = MixtralConfig(
        vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=eos, pad_token_id=eos, **_MODEL_SHAPE
    )
    with torch.random.fork_rng():
        torch.manual_seed(_SEED)
        model = MixtralForCausalLM(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids(t) for t in _END_TOKENS]
    model.generation_config.pad_token_id = eos
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
