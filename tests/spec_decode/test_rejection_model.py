"""Rejection sampling on a model: the built-in model sampled at temperature 0.5 with n-gram drafts on a
prompt it loops on, 3,000 times; the first token's and (given the likeliest first token) the second
token's empirical distributions must pass a chi-square test against the model's own distributions
(from transformers). The second token is sampled in a verify step whose draft the model likes (it
continues the loop), so both the accept and the resample branch run often."""
from __future__ import annotations

import pytest
import torch

from moeserve import LLM, SamplingParams
from moeserve.engine.builtin_model import build_tokenizer, builtin_model_dir

pytestmark = pytest.mark.slow  # 3,000 samples through an engine

PROMPT = "I am sure I am sure I am sure I am sure I am sure I am"
TEMPERATURE = 0.5
SAMPLES = 3000
CELLS = 8  # the likeliest tokens each get a cell; the rest share one


def _p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = counts.sum() * probs
    stat = ((counts - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((len(probs) - 1) / 2, dtype=torch.float64), stat / 2))


def _cells(samples: list[int], probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(observed counts, probabilities) over the CELLS likeliest tokens and one cell for the rest."""
    top = probs.topk(CELLS).indices.tolist()
    p = torch.cat([probs[top], (1 - probs[top].sum()).clamp(min=0)[None]])
    counts = torch.zeros(CELLS + 1, dtype=torch.float64)
    for t in samples:
        counts[top.index(t) if t in top else CELLS] += 1
    return counts, p


def _distributions() -> tuple[list[int], int, torch.Tensor, torch.Tensor]:
    """(prompt ids, the likeliest first token, p(first), p(second | that first)) at TEMPERATURE, from transformers."""
    from transformers import AutoModelForCausalLM

    ids = build_tokenizer().encode(PROMPT)
    hf = AutoModelForCausalLM.from_pretrained(builtin_model_dir(), dtype=torch.float32).eval()
    with torch.no_grad():
        p1 = (hf(torch.tensor([ids])).logits[0, -1].double() / TEMPERATURE).softmax(-1)
        first = int(p1.argmax())
        p2 = (hf(torch.tensor([ids + [first]])).logits[0, -1].double() / TEMPERATURE).softmax(-1)
    return ids, first, p1, p2


def _sample(ids: list[int]) -> tuple[list[list[int]], dict]:
    # max_tokens 3: the second token is sampled in a verify of one draft (the third would be past max_tokens)
    llm = LLM(speculative_config={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
                                  "prompt_lookup_max": 3}, max_num_seqs=256, seed=1)
    try:
        outs = llm.generate([ids] * SAMPLES, SamplingParams(temperature=TEMPERATURE, max_tokens=3, ignore_eos=True))
        return [o.token_ids for o in outs], llm.engine.stats()
    finally:
        llm.shutdown()


@pytest.fixture(scope="module")
def model_distributions():
    return _distributions()


def test_sampled_tokens_follow_the_model_with_drafts_in_flight(model_distributions):
    ids, first, p1, p2 = model_distributions
    outs, stats = _sample(ids)
    firsts = [o[0] for o in outs]
    seconds = [o[1] for o in outs if o[0] == first]
    assert len(seconds) > 1000 and p2.max() > 0.3  # a likely draft, verified often enough to test
    assert stats["spec_decode_num_draft_tokens"] >= len(seconds) and stats["spec_decode_num_accepted_tokens"] > 300
    assert _p_value(*_cells(firsts, p1)) > 1e-3
    assert _p_value(*_cells(seconds, p2)) > 1e-3


def test_the_same_test_rejects_a_wrong_rule(model_distributions, monkeypatch):
    """Power: a verify that resamples a rejected position from p itself (the draft not removed)
    over-weights the draft; the same samples and test must fail it."""
    from moeserve.engine import rejection, spec_sampling

    def wrong(probs, rows, uniforms, exponentials):
        accepted, _ = rejection.verify_random(probs, rows, uniforms, exponentials)
        final = probs[rows.index.gather(1, accepted[:, None])[:, 0]]
        return accepted, final.div(exponentials).argmax(dim=-1)

    monkeypatch.setattr(spec_sampling, "verify_random", wrong)
    ids, first, _, p2 = model_distributions
    outs, _ = _sample(ids)
    assert _p_value(*_cells([o[1] for o in outs if o[0] == first], p2)) < 1e-6
