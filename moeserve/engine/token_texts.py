"""The text shown for each token in logprobs (completions' `tokens` and `top_logprobs` keys, chat's
`token` and `bytes`, prompt_logprobs' `decoded_token`, the Python API's `Logprob.decoded_token`), as
vLLM shows it, so that a scored sequence's token texts joined are its text:

1. `decode([id])`, the token alone;
2. SentencePiece-style tokenizers (a Metaspace pre-tokenizer: Mixtral, Mistral, Llama as transformers
   loads them) drop a lone token's leading space (`decode([id("▁Paris")])` is "Paris"): the spaces its
   vocabulary piece starts with ("▁" each) are put back, " Paris";
3. a token whose text ends in U+FFFD ends inside a UTF-8 character (a byte-fallback "<0xE2>" piece, or
   a byte-level BPE token holding part of a character): it is decoded after the chosen tokens of the
   up to 4 positions before it, and its text is what the completed character adds; a token that
   completes no character shows "". So "→" as <0xE2> <0x86> <0x92> shows "", "", "→" (chat `bytes`
   [], [], [226, 134, 146]). Alternatives at a position are decoded after the same chosen tokens.

The first prompt token (scored by nothing) is `decode([id])` alone, and is no context for the
tokens after it, as in vLLM. Per token this costs a cached lookup (step 1-2 depend on the id only)
and, for a token inside a character only, a few decodes of at most 5 tokens: never the sequence.
Byte-level BPE tokenizers (GPT-2 style: the built-in model, Qwen, DeepSeek-V3) keep their spaces in
the token itself, so step 2 never applies to them.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

REPLACEMENT = "\ufffd"  # what decode gives for bytes that form no character
CONTEXT = 4  # positions of left context: enough for any UTF-8 character (4 bytes)
CACHED_IDS = 1 << 16  # token texts kept per tokenizer


def leading_space_marker(tokenizer: Any) -> str | None:
    """The character a Metaspace pre-tokenizer writes for a space ("▁"), or None (no such
    pre-tokenizer: decode keeps a lone token's spaces)."""
    import json

    pre = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre is None:
        return None
    config = json.loads(pre.__getstate__())
    for part in config.get("pretokenizers", [config]):  # a Sequence, or the pre-tokenizer itself
        if part.get("type") == "Metaspace":
            return part.get("replacement", "\u2581")
    return None


class TokenTexts:
    """Token texts of one tokenizer (see the module docstring). Thread-safe: the cache only memoizes
    a pure function of the token id."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.marker = leading_space_marker(tokenizer)
        self.alone = functools.lru_cache(maxsize=CACHED_IDS)(self._alone)
        self._decoded = functools.lru_cache(maxsize=CACHED_IDS)(lambda token: tokenizer.decode([token]))

    def first(self, token: int) -> str:
        """The first prompt token's text: decode alone."""
        return self._decoded(token)

    def _alone(self, token: int) -> str:
        """decode([token]) with the leading spaces of its vocabulary piece (steps 1-2)."""
        text = self._decoded(token) or ""
        if self.marker is None:
            return text
        piece = self.tokenizer.convert_ids_to_tokens(token) or ""  # None: an id past the tokenizer's vocabulary
        markers = len(piece) - len(piece.lstrip(self.marker))
        missing = markers - (len(text) - len(text.lstrip(" ")))
        return " " * missing + text if missing > 0 else text

    def at(self, token: int, context: Sequence[int]) -> str:
        """`token`'s text after the chosen tokens `context` (oldest first; only the last CONTEXT count)."""
        text = self.alone(token)
        return self._completed(token, context) if text.endswith(REPLACEMENT) else text

    def _completed(self, token: int, context: Sequence[int]) -> str:
        """Step 3: what `token` adds to the shortest run of context tokens that, with it, ends on a
        whole character; "" if none does. The context's own trailing partial tokens showed "" (or
        their own text, when that ended on a character), so their bytes are this token's."""
        decode = self.tokenizer.decode
        for n in range(1, min(len(context), CONTEXT) + 1):
            before = list(context[-n:])
            full = decode(before + [token])
            if full.endswith(REPLACEMENT):
                continue
            clean = len(before)
            while clean > 0 and self._decoded(before[clean - 1]).endswith(REPLACEMENT):
                clean -= 1
            prefix = decode(before[:clean]) if clean else ""
            if full.startswith(prefix):
                return full[len(prefix):]
            return full[len(os.path.commonprefix([prefix, full])):]  # decode normalized the joint
        return ""

    def positions(self, entries: Sequence[tuple[Any, ...]], context: Sequence[int] = (),
                  top_n: int | None = None) -> Iterator[tuple[str, list[str]]]:
        """Per (token, logprob, top[, rank]) entry (top: [(id, logprob)]): the chosen token's text and
        its first `top_n` alternatives' (all with None). `context`: the chosen tokens of the
        positions before entries[0] (a stream's earlier chunks). An entry without a logprob is the
        first prompt token: decoded alone, no alternatives, and no context for the next."""
        context = list(context[-CONTEXT:])
        for token, logprob, top, *_ in entries:
            if logprob is None:
                yield self.first(token), []
                continue
            yield self.at(token, context), [self.at(t, context) for t, _ in top[:top_n]]
            context = (context + [token])[-CONTEXT:]


def context_before(entries: Sequence[tuple[Any, ...]], start: int) -> list[int]:
    """The `context` of TokenTexts.positions(entries[start:]): the chosen tokens of the scored
    positions before it."""
    return [entry[0] for entry in entries[max(0, start - CONTEXT):start] if entry[1] is not None]


class TokenIdNames:
    """TokenTexts' stand-in for a checkpoint without a tokenizer: each token named as vLLM's
    --return-tokens-as-token-ids does ("token_id:123")."""

    def first(self, token: int) -> str:
        return f"token_id:{token}"

    def at(self, token: int, context: Sequence[int] = ()) -> str:
        return f"token_id:{token}"

    def positions(self, entries: Sequence[tuple[Any, ...]], context: Sequence[int] = (),
                  top_n: int | None = None) -> Iterator[tuple[str, list[str]]]:
        for token, logprob, top, *_ in entries:
            yield self.first(token), [] if logprob is None else [self.first(t) for t, _ in top[:top_n]]


def token_texts(tokenizer: Any) -> TokenTexts | TokenIdNames:
    return TokenIdNames() if tokenizer is None else TokenTexts(tokenizer)
