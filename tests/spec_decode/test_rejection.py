"""Rejection sampling keeps the target distribution: greedy drafts give the tokens of plain argmax
decoding; random drafts give, at every position, the target's own distribution (chi-square tests with
fixed seeds and enough samples that a subtly wrong rule fails them)."""
from __future__ import annotations

import torch

from moeserve.core.step_plan import NewRequest
from moeserve.engine.rejection import DraftRows, num_accepted, verify_greedy, verify_random
from moeserve.engine.sampler import Sampler
from moeserve.engine.spec_sampling import sample_drafted
from moeserve.sampling_params import SamplingParams


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of observed `counts` [V] under `probs` [V] (cells with zero probability must be empty)."""
    n = counts.sum()
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a token of probability 0 was drawn"
    expected = n * probs[keep]
    stat = ((counts[keep] - expected) ** 2 / expected).sum()
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat.double() / 2))


def test_num_accepted_stops_at_the_first_miss():
    matches = torch.tensor([[True, True, False], [False, True, True], [True, True, True], [True, True, True]])
    assert num_accepted(matches, torch.tensor([3, 3, 3, 2])).tolist() == [2, 0, 3, 2]


def test_draft_rows_layout():
    rows = DraftRows.build([[5, 6], [], [7]])
    assert rows.index.tolist() == [[0, 1, 2], [3, 3, 3], [4, 5, 5]]
    assert rows.drafts.tolist() == [[5, 6], [-1, -1], [7, -1]] and rows.num_drafts.tolist() == [2, 0, 1]


def test_greedy_verify_is_argmax_decoding():
    torch.manual_seed(0)
    logits = torch.randn(9, 11)
    best = logits.argmax(-1).tolist()
    # request 0: rows 0-3, drafts agree twice then miss; request 1: rows 4-5, agrees; request 2: rows 6-8, misses at once
    drafts = [[best[0], best[1], (best[2] + 1) % 11], [best[4]], [(best[6] + 1) % 11, best[7]]]
    accepted, nxt = verify_greedy(logits, DraftRows.build(drafts))
    assert accepted.tolist() == [2, 1, 0]
    assert nxt.tolist() == [best[2], best[5], best[6]]


def _draws(B: int, K: int, V: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, K, generator=g), torch.rand(B, V, generator=g).log_().neg_()


def _rows_for(N: int, p0: torch.Tensor, p1: torch.Tensor, p2: torch.Tensor, drafts: list[int]):
    probs = torch.stack([p0, p1, p2]).repeat(N, 1)  # N copies of one request with 2 drafts
    return probs, DraftRows.build([drafts] * N)


def _emitted(accepted: torch.Tensor, nxt: torch.Tensor, drafts: list[int]) -> list[list[int]]:
    return [drafts[:m] + [t] for m, t in zip(accepted.tolist(), nxt.tolist())]


def _distributions():
    V = 6
    p0 = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
    p1 = torch.tensor([0.05, 0.40, 0.05, 0.30, 0.20, 0.00])  # row 1: the target after d1
    p2 = torch.tensor([0.10, 0.10, 0.50, 0.10, 0.10, 0.10])  # row 2: after d1 d2
    return V, p0, p1, p2, [1, 3]  # drafts d1 = 1 (p0 0.25), d2 = 3 (p1 0.30)


def test_random_verify_keeps_the_target_distribution_at_every_position():
    V, p0, p1, p2, drafts = _distributions()
    N = 40_000
    probs, rows = _rows_for(N, p0, p1, p2, drafts)
    accepted, nxt = verify_random(probs, rows, *_draws(N, 2, V, seed=1))
    out = _emitted(accepted, nxt, drafts)
    first = torch.bincount(torch.tensor([o[0] for o in out]), minlength=V).double()
    second = torch.bincount(torch.tensor([o[1] for o in out if o[0] == drafts[0]]), minlength=V).double()
    third = torch.bincount(torch.tensor([o[2] for o in out if o[:2] == drafts]), minlength=V).double()
    assert chi_square_p(first, p0.double()) > 1e-3
    assert chi_square_p(second, p1.double()) > 1e-3
    assert chi_square_p(third, p2.double()) > 1e-3
    # acceptance is p0(d1), then p1(d2): the rule accepts as often as it may
    assert abs((accepted >= 1).double().mean() - 0.25) < 0.01
    assert abs((accepted == 2).double().mean() - 0.25 * 0.30) < 0.01


def test_the_chi_square_test_catches_a_wrong_rule():
    """Power: resampling a rejected position from p (the draft not removed) over-weights the draft;
    the same samples and test must reject it."""
    V, p0, p1, p2, drafts = _distributions()
    N = 40_000
    probs, rows = _rows_for(N, p0, p1, p2, drafts)
    uniforms, exps = _draws(N, 2, V, seed=1)
    p_d1 = probs[rows.index[:, 0]].gather(1, rows.drafts[:, :1])[:, 0]
    accept = uniforms[:, 0] < p_d1
    wrong = torch.where(accept, rows.drafts[:, 0], (probs[rows.index[:, 0]] / exps).argmax(-1))
    counts = torch.bincount(wrong, minlength=V).double()
    assert chi_square_p(counts, p0.double()) < 1e-9


def test_sampler_verify_mixes_greedy_random_and_plain_requests():
    V = 8
    sampler = Sampler(seed=3)
    params = {"g": SamplingParams(temperature=0.0, logprobs=2), "r": SamplingParams(temperature=0.8, seed=7),
              "p": SamplingParams(temperature=0.0, presence_penalty=0.5), "x": SamplingParams(temperature=1.0)}
    for rid, p in params.items():
        sampler.add(NewRequest(rid, p))
    torch.manual_seed(0)
    logits = torch.randn(3 + 2 + 1 + 1, V)
    best = logits.argmax(-1).tolist()
    drafts = [[best[0], best[1]], [2], [], []]
    out = sample_drafted(sampler, logits, ["g", "r", "p", "x"], drafts)
    by = {}
    for s in out:
        by.setdefault(s.request_id, []).append(s)
    assert [s.token_id for s in by["g"]] == [best[0], best[1], best[2]]
    lp = torch.log_softmax(logits[:3], -1)
    assert [round(s.logprob, 5) for s in by["g"]] == [round(float(lp[j, best[j]]), 5) for j in range(3)]
    assert len(by["g"][0].top_logprobs) == 2
    assert 1 <= len(by["r"]) <= 2 and len(by["p"]) == 1 and len(by["x"]) == 1
    assert [s.request_id for s in out] == ["g"] * 3 + ["r"] * len(by["r"]) + ["p", "x"]
    assert sampler.states(["g"])[0].num_sampled == 3


def test_a_draft_outside_allowed_token_ids_is_rejected():
    """allowed_token_ids shape every row alike, so drafts are verified against the restricted rows:
    a draft the list forbids is never emitted, and the token after it is the allowed argmax."""
    V = 8
    sampler = Sampler(seed=3)
    sampler.add(NewRequest("a", SamplingParams(temperature=0.0, allowed_token_ids=[1, 2])))
    sampler.add(NewRequest("r", SamplingParams(temperature=1.0, seed=2, allowed_token_ids=[5])))
    torch.manual_seed(1)
    logits = torch.randn(3 + 2, V)
    logits[:, 6] = 10.0  # the unrestricted favourite everywhere, and both requests' draft
    out = sample_drafted(sampler, logits, ["a", "r"], [[6, 6], [6]])
    a = [s.token_id for s in out if s.request_id == "a"]
    assert a == [1 if logits[0, 1] > logits[0, 2] else 2]
    assert [s.token_id for s in out if s.request_id == "r"] == [5]
