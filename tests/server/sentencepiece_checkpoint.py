"""A tiny Mixtral checkpoint with a SentencePiece-style tokenizer, as transformers loads Mixtral's and
Llama's: BPE with byte fallback (a character outside the vocabulary is its UTF-8 bytes, "<0xE2>"
pieces), a Metaspace pre-tokenizer (a space is "▁", part of the token after it) and the decoder that
drops the text's first space. Built in-process (no download): <unk> <s> </s>, the 256 byte pieces,
"▁", ASCII letters, digits and punctuation, and whole-word merges for WORDS ("▁Paris", "▁▁", ...).
Random weights (tests/models/tiny_models.py)."""
from __future__ import annotations

import string
from pathlib import Path

WORDS = ("▁The", "▁capital", "▁of", "▁France", "▁is", "▁Paris", "▁ca", "▁▁", "▁ok")


def build_tokenizer():
    from transformers import LlamaTokenizer

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update((f"<0x{b:02X}>", 3 + b) for b in range(256))
    for c in "▁" + string.ascii_letters + string.digits + string.punctuation:
        vocab.setdefault(c, len(vocab))
    merges = []
    for word in WORDS:
        for end in range(2, len(word) + 1):
            if word[:end] not in vocab:
                vocab[word[:end]] = len(vocab)
                merges.append((word[: end - 1], word[end - 1]))
    return LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)


def save_checkpoint(path: Path):
    """Tokenizer and tiny Mixtral (vocabulary sized to the tokenizer) in `path`; -> the tokenizer as
    transformers loads it back."""
    from tiny_models import make_checkpoint
    from transformers import AutoTokenizer

    tokenizer = build_tokenizer()
    make_checkpoint("mixtral", path, vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=2)
    tokenizer.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)
