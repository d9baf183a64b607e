"""Incremental detokenization and stop-string search for one request.

Decoding the whole output every step is quadratic; instead a short window of tokens before the new
ones is decoded twice (with and without the new tokens) and the difference is the new text. A
window that ends inside a multi-byte character decodes to U+FFFD: that text is held back until the
character completes, or until the request ends (`flush`), when the held-back tokens' text is what
`decode` gives them: their complete characters, and U+FFFD for bytes that never formed one (as
`tokenizer.decode(output_ids)` and `/detokenize` write them; vLLM leaves such a tail out).

The window starts in the prompt: the first output token is decoded after the prompt's last tokens,
so its text is what it adds to the prompt's text, as vLLM and OpenAI return it. Alone, a
SentencePiece token's leading space is dropped (`decode(["▁Par"])` is "Par"), and a completion of
"The capital of France is" came back as "Par Par", with echo "...isPar Par". A prompt whose last token ends inside a character gives no such context.
"""
from __future__ import annotations

_WINDOW = 6  # prompt tokens of left context for the first output token


class IncrementalDetokenizer:
    def __init__(self, tokenizer: object, skip_special_tokens: bool = True, prompt_ids: list[int] | None = None):
        self.tokenizer = tokenizer  # None: a checkpoint without a tokenizer produces ids only
        self.skip_special_tokens = skip_special_tokens
        # the prompt's last tokens (the context), then the output's; text holds the output's text only
        self.token_ids: list[int] = []
        self.text = ""
        if tokenizer is not None and prompt_ids:
            context = list(prompt_ids[-_WINDOW:])
            if not self._decode(context).endswith("\ufffd"):
                self.token_ids = context
        self._prefix_offset = 0
        self._read_offset = len(self.token_ids)

    def add(self, new_ids: list[int]) -> str:
        """Appends tokens; returns the newly completed text (possibly empty)."""
        self.token_ids.extend(new_ids)
        if self.tokenizer is None:
            return ""
        end = len(self.token_ids)
        prefix, full = self._decode_window(end)
        if full.endswith("\ufffd"):
            return ""
        return self._advance(end, full[len(prefix) :])

    def flush(self, hidden_tail: int = 0) -> str:
        """The request ended: appends and returns the text of tokens held back for an unfinished
        multi-byte character, as `decode` gives it, leaving out the last `hidden_tail` tokens (an
        end-of-sequence or stop token the text does not show)."""
        end = len(self.token_ids) - hidden_tail
        if self.tokenizer is None or end <= self._read_offset:
            return ""
        prefix, full = self._decode_window(end)
        return self._advance(end, full[len(prefix) :])

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def _decode_window(self, end: int) -> tuple[str, str]:
        """The window's text up to the tokens not yet read, and up to token `end`."""
        return (self._decode(self.token_ids[self._prefix_offset : self._read_offset]),
                self._decode(self.token_ids[self._prefix_offset : end]))

    def _advance(self, end: int, delta: str) -> str:
        """Tokens up to `end` are read and gave `delta`; the next window starts where this read began,
        a character boundary (its text did not end inside one), as vLLM's does. A window cut at a
        fixed token count could start inside a character: a byte-fallback tokenizer (`<0xF0>` tokens,
        Mixtral's and Llama's) then decodes the whole byte run to U+FFFD, every later window ended in
        U+FFFD and was held back, and a run of emoji came back as one emoji and a row of U+FFFD."""
        self._prefix_offset = self._read_offset
        self._read_offset = end
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
