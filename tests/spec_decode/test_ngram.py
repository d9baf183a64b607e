"""The n-gram proposer against a brute-force reference: the longest recurring suffix in
[min_n, max_n], its most recent earlier occurrence, the (up to) k tokens after it."""
from __future__ import annotations

import random

import numpy as np
import pytest

from moeserve.spec_decode.ngram import NgramProposer, propose


def _reference(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    L = len(tokens)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        suffix = tokens[L - n :]
        starts = [s for s in range(L - n) if tokens[s : s + n] == suffix]  # strictly before the suffix
        if starts:
            full = [s for s in starts if s + n + k <= L]
            start = full[-1] if full else starts[0]  # most recent with k tokens after it, else the fullest
            return tokens[start + n : start + n + k]
    return []


@pytest.mark.parametrize("vocab", [2, 3, 8])
def test_matches_the_brute_force_reference(vocab):
    rng = random.Random(vocab)
    for _ in range(400):
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
        min_n = rng.randrange(1, 4)
        max_n = rng.randrange(min_n, 6)
        k = rng.randrange(1, 5)
        assert propose(np.array(tokens), min_n, max_n, k) == _reference(tokens, min_n, max_n, k), (tokens, min_n, max_n, k)


def test_repetition_is_continued_and_novel_text_gets_nothing():
    assert propose(np.array([5, 6, 7, 8, 5, 6, 7]), 2, 3, 3) == [8, 5, 6]
    assert propose(np.array([1, 2, 3, 4, 5]), 1, 3, 3) == []
    assert propose(np.array([4, 4, 4, 4]), 1, 2, 5) == [4, 4]  # no occurrence has 5 after it: the fullest
    assert propose(np.array([3, 4, 3, 4, 3, 4, 3]), 1, 3, 2) == [4, 3]  # most recent with 2 after it
    assert propose(np.array([9, 1, 2, 9, 1, 2]), 4, 5, 2) == []  # shorter than min_n: no draft


def test_proposer_buffers_follow_the_sequence():
    p = NgramProposer(1, 3, 2)
    seq = [1, 2, 3, 1, 2]
    assert p.propose("a", seq) == [3, 1]
    seq += [3, 9]
    assert p.propose("a", seq) == []
    seq += [1, 2] * 100  # grows past the buffer
    assert p.propose("a", seq, max_drafts=1) == [1]
    assert p.propose("b", [7, 7]) == [7] and len(p) == 2
    p.forget("a")
    assert len(p) == 1
    assert p.propose("b", [7, 7], max_drafts=0) == []
