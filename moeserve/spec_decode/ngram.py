"""N-gram drafts (prompt lookup decoding): copy what followed the sequence's own suffix earlier on.

For each sequence: the longest n in [prompt_lookup_min, prompt_lookup_max] such that its last n
tokens occur earlier in it (prompt and output); the draft is the (up to) k tokens that followed the
most recent such occurrence. No weights, no device: the proposer runs on rank 0 beside the scheduler,
and a sequence without a match gets no draft (it decodes one token that step).

vLLM's proposer (KMP over the whole sequence) takes the same longest match; among equally long
matches we take the most recent with a whole draft after it: on text that loops (as greedy output of
small models does) any occurrence predicts the same, and on long prompts the recent one is the more
local context; the latest occurrence of all would cut a short loop's draft to its period.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def propose(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """tokens: [L] int array of one sequence -> up to k draft tokens (empty: no n-gram of length
    >= min_n recurs). Vectorised over the occurrences of the last token, O(L + matches x max_n)."""
    L = len(tokens)
    if k < 1 or L < min_n + 1:
        return []
    # every earlier position holding the last token ends a candidate occurrence of the suffix
    ends = np.flatnonzero(tokens[: L - 1] == tokens[L - 1])
    if ends.size == 0:
        return []
    lengths = np.ones(ends.size, dtype=np.int64)  # matched suffix length at each candidate
    for j in range(1, min(max_n, L - 1)):
        back = ends - j
        alive = (lengths == j) & (back >= 0)
        if not alive.any():
            break
        lengths[alive] += tokens[back[alive]] == tokens[L - 1 - j]
    best = int(lengths.max())
    if best < min_n:
        return []
    longest = ends[lengths == best]
    # the most recent of the longest matches that still has k tokens after it, else the earliest (fullest)
    full = longest[longest <= L - 1 - k]
    end = int(full[-1]) if full.size else int(longest[0])
    return tokens[end + 1 : end + 1 + k].tolist()


class NgramProposer:
    """Per-request token buffers grown as tokens arrive, so a step converts only new tokens.

    Mutates only its buffers; `forget` drops a request's (finished or aborted)."""

    def __init__(self, min_n: int, max_n: int, k: int):
        assert 1 <= min_n <= max_n and k >= 1
        self.min_n, self.max_n, self.k = min_n, max_n, k
        self._buffers: dict[str, tuple[np.ndarray, int]] = {}

    def propose(self, request_id: str, token_ids: Sequence[int], max_drafts: int | None = None) -> list[int]:
        """Up to min(k, max_drafts) drafts to follow `token_ids` (the request's whole sequence)."""
        k = self.k if max_drafts is None else min(self.k, max_drafts)
        if k < 1:
            return []
        return propose(self._sync(request_id, token_ids), self.min_n, self.max_n, k)

    def forget(self, request_id: str) -> None:
        self._buffers.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._buffers)

    def _sync(self, request_id: str, token_ids: Sequence[int]) -> np.ndarray:
        buf, n = self._buffers.get(request_id, (None, 0))
        total = len(token_ids)
        if buf is None or total < n:  # new, or not the sequence we saw (never shrinks otherwise)
            buf, n = np.empty(max(64, 2 * total), dtype=np.int64), 0
        elif total > len(buf):
            grown = np.empty(2 * total, dtype=np.int64)
            grown[:n] = buf[:n]
            buf = grown
        if total > n:
            buf[n:total] = token_ids[n:total]
        self._buffers[request_id] = (buf, total)
        return buf[:total]
