"""The built-in model: a small Mixtral-architecture MoE trained on English prose, shipped in the package.

`moeserve serve` with no `--model` serves it, so a fresh machine works with nothing downloaded. The
checkpoint (float16 safetensors, config.json, generation_config.json, tokenizer files) lives in
moeserve/engine/data/moeserve-tiny-moe/ and is read like any other Hugging Face checkpoint; nothing is
trained or written at start-up. scripts/train_builtin_model.py made it (corpus, tokenizer, training and
the numbers: docs/builtin_model.md).
"""
from __future__ import annotations

from moeserve.builtin_model_info import (  # noqa: F401  (re-exported: the engine's importers read them here)
    BUILTIN_NAME, MODEL_SHAPE, VOCAB_SIZE, builtin_config_fields, builtin_model_dir,
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# generation ends at either (generation_config.json), as ChatML models' do: a chat reply at its end of turn
END_TOKENS = ("<|endoftext|>", "<|im_end|>")
# Documented default chat format (ChatML-like); also used by the server when a checkpoint has none.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROPE_THETA = 10000.0


def build_tokenizer():
    """The built-in model's tokenizer (byte-level BPE, ChatML special tokens and chat template)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(builtin_model_dir())


def mixtral_config(vocab_size: int):
    """transformers' MixtralConfig of the built-in model (the training script saves it)."""
    from transformers import MixtralConfig

    eos = SPECIAL_TOKENS.index("<|endoftext|>")
    return MixtralConfig(vocab_size=vocab_size, bos_token_id=None, eos_token_id=eos, pad_token_id=eos,
                         rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA}, **MODEL_SHAPE)


def set_generation_config(model, tokenizer) -> None:
    """Generation stops at any of END_TOKENS; pads with <|endoftext|>."""
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids(t) for t in END_TOKENS]
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
