"""Incremental detokenization and stop-string search for one request.

Decoding the whole output every step is quadratic; instead a short window of tokens before the new
ones is decoded twice (with and without the new tokens) and the difference is the new text. A
window that ends inside a multi-byte character decodes to U+FFFD: that text is held back until the
character completes, or until the request ends (`flush`), when the complete characters of the
held-back tokens are kept and only an unfinished character at the very end is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field

_WINDOW = 6  # tokens of left context; enough for byte-level BPE to merge across the boundary


@dataclass
class IncrementalDetokenizer:
    tokenizer: object
    skip_special_tokens: bool = True
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    _prefix_offset: int = 0
    _read_offset: int = 0

    def add(self, new_ids: list[int]) -> str:
        """Appends tokens; returns the newly completed text (possibly empty)."""
        self.token_ids.extend(new_ids)
        if self.tokenizer is None:  # a checkpoint without a tokenizer produces ids only
            return ""
        end = len(self.token_ids)
        prefix, full = self._decode_window(end)
        if full.endswith("\ufffd"):
            return ""
        return self._advance(end, full[len(prefix) :])

    def flush(self, hidden_tail: int = 0) -> str:
        """The request ended: appends and returns the complete characters of tokens held back for an
        unfinished multi-byte character, leaving out the last `hidden_tail` tokens (an end-of-sequence
        or stop token the text does not show) and the unfinished character itself."""
        end = len(self.token_ids) - hidden_tail
        if self.tokenizer is None or end <= self._read_offset:
            return ""
        prefix, full = self._decode_window(end)
        return self._advance(end, full[len(prefix) :].rstrip("\ufffd"))

    def _decode_window(self, end: int) -> tuple[str, str]:
        """The window's text up to the tokens not yet read, and up to token `end`."""
        decode, skip = self.tokenizer.decode, self.skip_special_tokens
        prefix = decode(self.token_ids[self._prefix_offset : self._read_offset], skip_special_tokens=skip)
        return prefix, decode(self.token_ids[self._prefix_offset : end], skip_special_tokens=skip)

    def _advance(self, end: int, delta: str) -> str:
        """Tokens up to `end` are read and gave `delta`."""
        self._read_offset = end
        self._prefix_offset = max(0, end - _WINDOW)
        self.text += delta
        return delta


def find_stop(text: str, delta_len: int, stops: list[str]) -> tuple[int, str] | None:
    """Earliest stop string that overlaps the last `delta_len` characters: (index in text, string)."""
    best: tuple[int, str] | None = None
    for s in stops:
        start = max(0, len(text) - delta_len - len(s) + 1)
        i = text.find(s, start)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, s)
    return best
