"""A lower bound on a text's token count from its length in bytes, so that a prompt that cannot fit
the context is refused before it is tokenized.

    bound = PromptBound.of(tokenizer)          # once, at start-up; None: no sound bound is known
    bound.min_tokens(len(text.encode()))       # the text has at least this many tokens

Tokenizing an 8 MB prompt took 8-25 s, only to refuse it as too long. No token
of a tokenizer stands for more input bytes than `max_token_bytes`: the longest UTF-8 spelling of
any vocabulary entry (byte-level BPE spells each input byte as one character of one or two bytes,
SentencePiece's "▁" spells one space in three, byte fallback "<0x41>" one byte in six, and added
tokens spell themselves). Normalizers may shrink text first (NFC composes three Hangul jamo, 9
bytes, into one 3-byte syllable; NFKC folds a 3-byte full-width letter to one byte): their worst
ratio multiplies the bound. A tokenizer that may drop text or map unbounded text to one token
(WordPiece's [UNK] for a long word, a BPE that fuses unknown characters, whitespace-splitting
pre-tokenizers, Strip and precompiled normalizers) has no bound: its prompts are tokenized and
then checked, as before.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("moeserve.server")

# Normalizers and how much they may shrink a text (input bytes per output byte, at worst)
_NORMALIZER_SHRINK = {"NFC": 3.0, "NFD": 3.0, "NFKC": 3.0, "NFKD": 3.0, "Lowercase": 1.5, "Prepend": 1.0}
# Pre-tokenizers that keep every input byte in some piece
_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts"}


@dataclass(frozen=True)
class PromptBound:
    max_token_bytes: int  # the most bytes of (normalized) input one token stands for
    shrink: float  # the most a normalizer may shrink the input before tokenization

    @classmethod
    def of(cls, tokenizer: Any) -> "PromptBound | None":
        """The bound of a Hugging Face fast tokenizer, or None (no tokenizer, a slow one, or one
        that may drop text: see the module's docstring)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        try:
            spec = json.loads(backend.to_str())
            shrink = _shrink(spec.get("normalizer"))
            if shrink is None or not _keeps_text(spec.get("pre_tokenizer")) or not _bounded_model(spec.get("model") or {}):
                return None
            longest = max(len(token.encode("utf-8")) for token in tokenizer.get_vocab())
        except (ValueError, TypeError, AttributeError):
            logger.warning("could not read the tokenizer's structure: long prompts are tokenized before the length check")
            return None
        return cls(max_token_bytes=max(1, longest), shrink=shrink)

    def min_tokens(self, num_bytes: int) -> int:
        """Tokens a text of `num_bytes` UTF-8 bytes has at least (special tokens added only raise it)."""
        return int(num_bytes / (self.max_token_bytes * self.shrink))


def _shrink(normalizer: dict[str, Any] | None) -> float | None:
    if normalizer is None:
        return 1.0
    kind = normalizer.get("type")
    if kind == "Sequence":
        total = 1.0
        for part in normalizer.get("normalizers", []):
            factor = _shrink(part)
            if factor is None:
                return None
            total *= factor
        return total
    if kind == "Replace":
        pattern = normalizer.get("pattern", {}).get("String")
        content = normalizer.get("content", "")
        if pattern is None or not content:  # a regex, or a deletion: may drop any amount of text
            return None
        return max(1.0, len(pattern.encode()) / len(content.encode()))
    return _NORMALIZER_SHRINK.get(kind)


def _keeps_text(pre: dict[str, Any] | None) -> bool:
    if pre is None:
        return True
    kind = pre.get("type")
    if kind == "Sequence":
        return all(_keeps_text(p) for p in pre.get("pretokenizers", []))
    if kind == "Split":
        return pre.get("behavior") != "Removed"
    return kind in _KEEPING_PRE_TOKENIZERS


def _bounded_model(model: dict[str, Any]) -> bool:
    """BPE spells every piece with its tokens, unknown characters one token each unless fused."""
    if model.get("type") != "BPE":
        return False
    return bool(model.get("byte_fallback")) or not model.get("fuse_unk") or model.get("unk_token") is None
