"""Sampler vs plain per-row reference implementations written here (loops over Python floats)."""
import math

import pytest
import torch

from moeserve.core.step_plan import NewRequest
from moeserve.engine.sampler import Sampler, top_k_filter, top_p_filter
from moeserve.sampling_params import SamplingParams, SamplingParamsError

torch.set_num_threads(1)
V = 50


def sampler_with(**requests: SamplingParams) -> Sampler:
    s = Sampler(seed=123)
    for rid, params in requests.items():
        s.add(NewRequest(rid, params))
    return s


# ---- plain references -------------------------------------------------------------------------
def ref_penalize(row: list[float], generated: list[int], presence: float, frequency: float) -> list[float]:
    out = list(row)
    for t in set(generated):
        out[t] -= frequency * generated.count(t) + presence
    return out


def ref_softmax(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(v - m) if v != -math.inf else 0.0 for v in row]
    z = sum(e)
    return [v / z for v in e]


def ref_keep(row: list[float], temperature: float, top_k: int, top_p: float) -> set[int]:
    """Tokens left after temperature, top-k (ties with the k-th kept) and top-p."""
    x = [v / temperature for v in row]
    keep = set(range(len(x)))
    if top_k > 0:
        kth = sorted(x, reverse=True)[top_k - 1]
        keep = {i for i in keep if x[i] >= kth}
    if top_p < 1.0:
        p = ref_softmax([x[i] if i in keep else -math.inf for i in range(len(x))])
        mass, kept = 0.0, set()
        for i in sorted(keep, key=lambda i: -p[i]):
            if mass >= top_p:
                break
            kept.add(i)
            mass += p[i]
        keep = kept
    return keep


# ---- tests ------------------------------------------------------------------------------------
def test_greedy_is_argmax_in_one_batched_call():
    logits = torch.randn(6, V)
    s = sampler_with(**{f"g{i}": SamplingParams(temperature=0.0) for i in range(6)})
    out = s.sample(logits, [f"g{i}" for i in range(6)])
    assert [o.token_id for o in out] == [max(range(V), key=lambda t: logits[i, t].item()) for i in range(6)]
    assert all(o.logprob is None for o in out)


def test_greedy_rows_stay_argmax_in_a_mixed_batch():
    logits = torch.randn(3, V)
    s = sampler_with(g=SamplingParams(temperature=0.0), r=SamplingParams(temperature=1.0), h=SamplingParams(temperature=0.0, logprobs=2))
    out = s.sample(logits, ["g", "r", "h"])
    assert out[0].token_id == int(logits[0].argmax()) and out[2].token_id == int(logits[2].argmax())


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (-1, 0.7), (8, 0.5), (1, 1.0), (-1, 0.05)])
def test_top_k_top_p_keep_the_reference_set(top_k, top_p):
    torch.manual_seed(top_k + int(100 * top_p))
    x = torch.randn(4, V) * 2
    temperature = 0.7
    y = top_p_filter(top_k_filter(x / temperature, [top_k] * 4), [top_p] * 4)
    for i in range(4):
        kept = {t for t in range(V) if y[i, t] != -math.inf}
        assert kept == ref_keep(x[i].tolist(), temperature, top_k, top_p)
        assert torch.equal(y[i][list(kept)], (x[i] / temperature)[list(kept)])


@pytest.mark.parametrize("top_p", [1e-300, 1e-46, 1e-45, 1e-30])
def test_a_top_p_that_rounds_to_zero_in_fp32_keeps_the_top_token(top_p):
    # top_p is compared in fp32: below ~1.4e-45 it becomes 0 there, and nothing would be kept
    x = torch.randn(3, V)
    y = top_p_filter(x, [top_p] * 3)
    for i in range(3):
        assert (y[i] != -math.inf).nonzero().flatten().tolist() == [int(x[i].argmax())]
    out = sampler_with(r=SamplingParams(temperature=1.0, top_p=top_p, seed=1)).sample(x[:1], ["r"])
    assert out[0].token_id == int(x[0].argmax())


def test_top_k_keeps_ties_with_the_kth():
    x = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]])
    y = top_k_filter(x, [2])
    assert (y[0] != -math.inf).tolist() == [True, False, True, True, False]


def test_random_draws_follow_the_filtered_distribution():
    torch.manual_seed(0)
    row = torch.randn(8) * 1.5
    params = SamplingParams(temperature=0.8, top_k=6, top_p=0.9)
    keep = ref_keep(row.tolist(), 0.8, 6, 0.9)
    probs = ref_softmax([v / 0.8 if i in keep else -math.inf for i, v in enumerate(row.tolist())])
    n = 4000
    s = sampler_with(**{f"r{i}": params for i in range(n)})
    tokens = [o.token_id for o in s.sample(row.expand(n, 8).contiguous(), [f"r{i}" for i in range(n)])]
    assert set(tokens) <= keep
    for t in range(8):
        freq = tokens.count(t) / n
        assert abs(freq - probs[t]) < 4 * math.sqrt(probs[t] * (1 - probs[t]) / n) + 1e-9, (t, freq, probs[t])


def test_seeded_tokens_do_not_depend_on_the_batch():
    params = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, seed=7)
    steps = [torch.randn(V) for _ in range(6)]

    def run(batch_maker) -> list[int]:
        s = sampler_with(
            me=params,
            other=SamplingParams(temperature=1.0),
            seeded=SamplingParams(temperature=0.5, seed=7),
            greedy=SamplingParams(temperature=0.0),
        )
        got = []
        for step, row in enumerate(steps):
            ids = batch_maker(step)
            logits = torch.randn(len(ids), V)
            logits[ids.index("me")] = row
            got.append(s.sample(logits, ids)[ids.index("me")].token_id)
        return got

    alone = run(lambda step: ["me"])
    assert run(lambda step: ["other", "greedy", "me", "seeded"][: 3 + step % 2]) == alone
    assert run(lambda step: ["seeded", "me"] if step % 2 else ["me", "other"]) == alone
    assert len(set(alone)) > 1  # it really sampled


def test_penalties_match_the_openai_formula_over_generated_tokens():
    torch.manual_seed(1)
    params = SamplingParams(temperature=0.0, presence_penalty=0.6, frequency_penalty=0.4, logprobs=3)
    s = sampler_with(p=params, plain=SamplingParams(temperature=0.0))
    base = torch.randn(V) * 0.3
    base[7] = 3.0  # without penalties the same token forever
    generated: list[int] = []
    for _ in range(8):
        logits = torch.stack([base, base])
        out = s.sample(logits, ["p", "plain"])
        ref = ref_penalize(base.tolist(), generated, 0.6, 0.4)
        ref_lp = [math.log(p) for p in ref_softmax(ref)]
        expect = max(range(V), key=lambda t: ref[t])
        assert out[0].token_id == expect and out[1].token_id == 7
        assert out[0].logprob == pytest.approx(ref_lp[expect], abs=1e-5)
        top = sorted(range(V), key=lambda t: -ref_lp[t])[:3]
        assert [t for t, _ in out[0].top_logprobs] == top
        assert [lp for _, lp in out[0].top_logprobs] == pytest.approx([ref_lp[t] for t in top], abs=1e-5)
        generated.append(out[0].token_id)
    assert len(set(generated)) > 1


def test_logit_bias_adds_to_the_penalized_logits_before_sampling_and_logprobs():
    torch.manual_seed(2)
    base = torch.randn(V)
    top = int(base.argmax())
    bias = {top: -100.0, 3: 0.25, 11: -0.5}
    biased = SamplingParams(temperature=0.0, logit_bias=bias, presence_penalty=0.5, logprobs=2)
    forced = SamplingParams(temperature=1.0, seed=5, logit_bias={17: 100.0})
    s = sampler_with(b=biased, f=forced, plain=SamplingParams(temperature=0.0))
    generated: list[int] = []
    for _ in range(4):
        out = s.sample(torch.stack([base, base, base]), ["b", "f", "plain"])
        ref = ref_penalize(base.tolist(), generated, 0.5, 0.0)
        for t, v in bias.items():
            ref[t] += v
        ref_lp = [math.log(p) for p in ref_softmax(ref)]
        expect = max(range(V), key=lambda t: ref[t])
        assert out[0].token_id == expect != top
        assert out[0].logprob == pytest.approx(ref_lp[expect], abs=1e-5)
        assert out[1].token_id == 17  # +100 outweighs any logit of these rows
        assert out[2].token_id == top  # the bias belongs to its request only
        generated.append(out[0].token_id)


def test_a_requests_logit_bias_becomes_tensors_once_not_every_step():
    """Up to 1,024 entries a request: walking them in Python on every decode step was the cost."""
    s = sampler_with(b=SamplingParams(temperature=0.0, logit_bias={i: -1.0 for i in range(0, V, 2)}),
                     plain=SamplingParams(temperature=0.0))
    s.sample(torch.zeros(2, V), ["b", "plain"])
    built = s.states(["b"])[0].bias
    s.sample(torch.zeros(2, V), ["plain", "b"])  # the rows change places: the bias follows its request
    assert s.states(["b"])[0].bias is built and s.states(["plain"])[0].bias is None
    out = s.sample(torch.zeros(2, V), ["plain", "b"])
    assert out[0].token_id == 0 and out[1].token_id == 1  # every even id biased down for "b" only


@pytest.mark.parametrize(
    "bias, message",
    [({5: 101.0}, "in \\[-100, 100\\]"), ({5: float("nan")}, "in \\[-100, 100\\]"), ({-1: 1.0}, "non-negative"),
     ({"x": 1.0}, "token ids"), ({5: "big"}, "token ids"), ({True: 1.0}, "token ids")],
)
def test_logit_bias_is_validated(bias, message):
    with pytest.raises(SamplingParamsError, match=message) as e:
        SamplingParams(logit_bias=bias)
    assert e.value.param == "logit_bias"


def test_logit_bias_takes_json_keys_and_survives_the_wire():
    from moeserve.sampling_params import params_to_plain

    p = SamplingParams(logit_bias={"7": 2, 9: -1.5})
    assert p.logit_bias == {7: 2.0, 9: -1.5}
    plain = params_to_plain(p)
    assert plain["logit_bias"] == [[7, 2.0], [9, -1.5]]
    assert SamplingParams(**plain) == p
    assert SamplingParams(logit_bias={}).logit_bias is None


def test_logprobs_of_a_sampled_token_and_zero_alternatives():
    logits = torch.randn(2, V)
    s = sampler_with(a=SamplingParams(temperature=1.0, logprobs=0), b=SamplingParams(temperature=1.0, logprobs=5))
    out = s.sample(logits, ["a", "b"])
    for i, o in enumerate(out):
        ref = [math.log(p) for p in ref_softmax(logits[i].tolist())]
        assert o.logprob == pytest.approx(ref[o.token_id], abs=1e-5)
    assert out[0].top_logprobs == [] and len(out[1].top_logprobs) == 5
    assert out[1].top_logprobs[0][0] == int(logits[1].argmax())


def ref_rank(row: list[float], value: float) -> int:
    """vLLM's rank: how many entries of the row are at least as likely (1 = the most likely)."""
    return sum(1 for x in row if x >= value)


def test_a_sampled_token_has_its_rank_in_the_vocabulary_even_outside_the_alternatives():
    torch.manual_seed(0)
    logits = torch.randn(6, V)
    logits[5, 3] = logits[5, 8] = logits[5].max() + 1.0  # a tie for the most likely: argmax takes 3, rank 2
    params = dict(a=SamplingParams(temperature=2.0, logprobs=0, seed=1), b=SamplingParams(temperature=2.0, logprobs=1, seed=2),
                  c=SamplingParams(temperature=0.0, logprobs=0), d=SamplingParams(temperature=2.0, logprobs=2, seed=4),
                  e=SamplingParams(temperature=2.0, logprobs=0, seed=5), f=SamplingParams(temperature=0.0, logprobs=1))
    out = sampler_with(**params).sample(logits, list(params))
    for i, o in enumerate(out):
        ref = [math.log(p) for p in ref_softmax(logits[i].tolist())]
        assert o.rank == ref_rank(ref, ref[o.token_id]), i
    assert out[2].rank == 1 and out[5].token_id == 3 and out[5].rank == 2
    assert any(o.rank > len(o.top_logprobs) for o in out)  # the case: the token is not among its alternatives


def test_token_logprobs_rank_the_given_tokens():
    from moeserve.engine.sampler import token_logprobs

    torch.manual_seed(1)
    logits = torch.randn(4, V)
    tokens = torch.tensor([0, 7, int(logits[2].argmax()), int(logits[3].argmin())])
    for i, (lp, top, rank) in enumerate(token_logprobs(logits, tokens, 2)):
        ref = [math.log(p) for p in ref_softmax(logits[i].tolist())]
        assert lp == pytest.approx(ref[int(tokens[i])], abs=1e-5) and len(top) == 2
        assert rank == ref_rank(ref, ref[int(tokens[i])])
    assert [e[2] for e in token_logprobs(logits[2:], tokens[2:], 0)] == [1, V]


def test_state_is_kept_until_removed():
    s = sampler_with(a=SamplingParams(temperature=0.0))
    s.sample(torch.randn(1, V), ["a"])
    s.remove("a")
    s.remove("a")  # finished ids may repeat across paths; removal is idempotent
    with pytest.raises(KeyError, match="never in new_requests"):
        s.sample(torch.randn(1, V), ["a"])


# ---- repetition_penalty, min_p, min_tokens: transformers' own logits processors are the oracle ----
def test_repetition_penalty_matches_transformers_over_prompt_and_output():
    from transformers import RepetitionPenaltyLogitsProcessor

    torch.manual_seed(3)
    prompt = [7, 7, 2, 30]
    base = torch.randn(V) * 0.3
    base[[7, 2, 11]] = torch.tensor([2.5, -1.0, 2.0])  # positive and negative seen logits; 11 unseen
    s = Sampler(seed=0)
    s.add(NewRequest("r", SamplingParams(temperature=0.0, repetition_penalty=1.7, logprobs=2), prompt))
    s.add(NewRequest("plain", SamplingParams(temperature=0.0)))
    hf = RepetitionPenaltyLogitsProcessor(penalty=1.7)
    seen = list(prompt)
    for _ in range(6):
        out = s.sample(torch.stack([base, base]), ["r", "plain"])
        ref = hf(torch.tensor([seen]), base[None].clone())[0]
        assert out[0].token_id == int(ref.argmax())
        assert out[0].logprob == pytest.approx(float(torch.log_softmax(ref, -1)[out[0].token_id]), abs=1e-5)
        assert out[1].token_id == int(base.argmax())  # the penalty belongs to its request only
        seen.append(out[0].token_id)
    assert seen[len(prompt)] == 11 != int(base.argmax())  # the prompt's 7 (2.5 / 1.7) gave way
    assert len(set(seen[len(prompt):])) > 1


@pytest.mark.parametrize("penalty", [1e-39, 1e-300, 1e-6])
def test_a_tiny_repetition_penalty_keeps_logits_finite(penalty):
    # 1e-39 is below float32's normal range: a seen positive logit divided by it overflowed to inf,
    # softmax gave NaN and every request got token 0 with logprob -9999
    prompt = [7, 2]
    base = torch.randn(V) * 0.3
    base[[7, 2]] = torch.tensor([0.5, -1.0])
    s = Sampler(seed=0)
    s.add(NewRequest("greedy", SamplingParams(temperature=0.0, repetition_penalty=penalty, logprobs=2), prompt))
    s.add(NewRequest("sampled", SamplingParams(temperature=0.8, seed=1, repetition_penalty=penalty, logprobs=2), prompt))
    for out in s.sample(torch.stack([base, base]), ["greedy", "sampled"]):
        assert out.token_id == 7  # the penalty raised the seen positive logit above all others
        assert math.isfinite(out.logprob) and out.logprob == pytest.approx(0.0, abs=1e-3)
        assert all(math.isfinite(lp) for _, lp in out.top_logprobs)


def test_repetition_penalty_needs_the_prompt():
    with pytest.raises(ValueError, match="no prompt token ids"):
        Sampler().add(NewRequest("r", SamplingParams(repetition_penalty=1.2)))


@pytest.mark.parametrize("min_p", [0.05, 0.3, 1.0])
def test_min_p_keeps_what_transformers_keeps(min_p):
    from transformers import MinPLogitsWarper

    from moeserve.engine.sampler import min_p_filter

    torch.manual_seed(4)
    x = torch.randn(3, V) * 2
    ours = min_p_filter(x, [min_p, 0.0, min_p])
    hf = MinPLogitsWarper(min_p=min_p)(torch.zeros(3, 1, dtype=torch.long), x.clone())
    assert torch.equal(torch.isinf(ours[[0, 2]]), torch.isinf(hf[[0, 2]]))
    assert torch.equal(ours[1], x[1])  # min_p 0 leaves its row alone
    if min_p == 1.0:  # only the most likely token survives: sampling becomes greedy
        s = sampler_with(m=SamplingParams(temperature=1.5, min_p=1.0, seed=9))
        assert all(s.sample(x[:1], ["m"])[0].token_id == int(x[0].argmax()) for _ in range(5))


def test_min_tokens_masks_eos_and_stop_ids_until_enough_tokens():
    base = torch.zeros(V)
    base[[3, 4, 5]] = torch.tensor([9.0, 8.0, 7.0])  # eos 3 first, stop id 4 second, then 5
    params = SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=[4], eos_token_ids=[3])
    ignoring = SamplingParams(temperature=0.0, min_tokens=3, ignore_eos=True, eos_token_ids=[3])
    s = sampler_with(m=params, i=ignoring, plain=SamplingParams(temperature=0.0))
    got = [[o.token_id for o in s.sample(torch.stack([base, base, base]), ["m", "i", "plain"])] for _ in range(5)]
    assert [g[0] for g in got] == [5, 5, 5, 3, 3]  # three tokens without eos or the stop id, then free
    assert [g[1] for g in got] == [3] * 5  # ignore_eos: eos is an ordinary token, nothing to mask
    assert [g[2] for g in got] == [3] * 5


def test_min_tokens_never_masks_the_whole_vocabulary():
    """stop ids covering every token: the mask is not applied (no all -inf row, finite logprobs)."""
    base = torch.zeros(V)
    base[7] = 5.0
    params = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=list(range(V)), logprobs=1)
    s = sampler_with(m=params)
    out = s.sample(base[None], ["m"])[0]
    assert out.token_id == 7 and math.isfinite(out.logprob)


@pytest.mark.parametrize(
    "kwargs, param",
    [(dict(repetition_penalty=0.0), "repetition_penalty"), (dict(repetition_penalty=-1.0), "repetition_penalty"),
     (dict(repetition_penalty=float("inf")), "repetition_penalty"), (dict(min_p=1.5), "min_p"),
     (dict(min_p=-0.1), "min_p"), (dict(min_tokens=-1), "min_tokens"), (dict(min_tokens=10, max_tokens=2), "min_tokens")],
)
def test_new_sampling_fields_are_validated(kwargs, param):
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(**kwargs)
    assert e.value.param == param


@pytest.mark.parametrize(
    "kwargs, param",
    [(dict(temperature="0.5"), "temperature"), (dict(temperature=None), "temperature"), (dict(top_p="1"), "top_p"),
     (dict(presence_penalty=None), "presence_penalty"), (dict(frequency_penalty="1"), "frequency_penalty"),
     (dict(repetition_penalty=True), "repetition_penalty"), (dict(min_p=True), "min_p"),
     (dict(n=True), "n"), (dict(max_tokens=True), "max_tokens"), (dict(top_k=True), "top_k"),
     (dict(logprobs=True), "logprobs"), (dict(prompt_logprobs=False), "prompt_logprobs"), (dict(min_tokens=True), "min_tokens"),
     (dict(seed=True), "seed"), (dict(seed=2**64), "seed"), (dict(seed=-(2**63) - 1), "seed"),
     (dict(ignore_eos="no"), "ignore_eos"), (dict(detokenize="no"), "detokenize"),
     (dict(skip_special_tokens=None), "skip_special_tokens"), (dict(include_stop_str_in_output=1), "include_stop_str_in_output"),
     (dict(stop=5), "stop"), (dict(stop_token_ids=5), "stop_token_ids"), (dict(stop_token_ids="12"), "stop_token_ids"),
     (dict(stop_token_ids=[True]), "stop_token_ids")],
)
def test_fields_of_the_wrong_type_name_themselves(kwargs, param):
    """What a Python caller can pass that JSON and pydantic never hand the server: a str or None where a number
    goes (a TypeError that named no field), a bool where a count goes, a truthy "no" where a flag goes."""
    with pytest.raises(SamplingParamsError, match=param) as e:
        SamplingParams(**kwargs)
    assert e.value.param == param


def test_every_64_bit_seed_is_taken():
    for seed in (-(2**63), -1, 0, 2**64 - 1):
        assert SamplingParams(seed=seed).seed == seed
    assert SamplingParams(temperature=0, top_p=1, presence_penalty=1).greedy  # ints are numbers


def test_allowed_token_ids_leave_only_those_tokens_greedy_random_and_in_logprobs():
    """vLLM's allowed_token_ids: every other token at -inf, after logit_bias; logprobs see the
    restricted distribution; a row without it is untouched."""
    torch.manual_seed(3)
    base = torch.randn(V)
    allowed = [4, 9, 31]
    best = max(allowed, key=lambda t: float(base[t]))
    s = sampler_with(g=SamplingParams(temperature=0.0, allowed_token_ids=allowed, logprobs=3),
                     r=SamplingParams(temperature=1.0, seed=1, allowed_token_ids=allowed),
                     b=SamplingParams(temperature=0.0, allowed_token_ids=allowed, logit_bias={31: 100.0}),
                     plain=SamplingParams(temperature=0.0))
    ref_lp = [math.log(p) if p else -math.inf for p in
              ref_softmax([float(base[t]) if t in allowed else -math.inf for t in range(V)])]
    for _ in range(20):
        g, r, b, plain = s.sample(torch.stack([base] * 4), ["g", "r", "b", "plain"])
        assert g.token_id == best and g.logprob == pytest.approx(ref_lp[best], abs=1e-5)
        assert {t for t, _ in g.top_logprobs} == set(allowed)
        assert r.token_id in allowed
        assert b.token_id == 31
        assert plain.token_id == int(base.argmax())


@pytest.mark.parametrize("kwargs, message", [
    (dict(allowed_token_ids=[]), "non-empty"), (dict(allowed_token_ids=[-1]), "non-negative"),
    (dict(allowed_token_ids=[True]), "non-negative"),
    (dict(allowed_token_ids=[1], structured_outputs={"regex": "a+"}), "structured output"),
    (dict(allowed_token_ids=list(range(262_145))), "at most 262144"),
])
def test_allowed_token_ids_are_validated(kwargs, message):
    with pytest.raises(SamplingParamsError, match=message) as e:
        SamplingParams(**kwargs)
    assert e.value.param == "allowed_token_ids"


def test_allowed_token_ids_survive_the_wire():
    from moeserve.sampling_params import params_to_plain

    p = SamplingParams(allowed_token_ids=(3, 5), n=4, seed=1)
    assert SamplingParams(**params_to_plain(p)) == p and p.allowed_token_ids == [3, 5]
    # a whole vocabulary's list is neither copied item by item for the wire (dataclasses.asdict took
    # 350 ms a choice for 150,000 ids) nor validated again for every choice
    assert params_to_plain(p)["allowed_token_ids"] is p.allowed_token_ids
    choice = p.for_choice(2)
    assert (choice.n, choice.seed, choice.allowed_token_ids) == (1, 3, [3, 5]) and p.n == 4


def test_bad_words_ban_a_last_token_only_after_its_prefix():
    """vLLM's bad_words semantics on token sequences: a one-token word is banned at every step; a
    longer one's last token only where the output so far ends with the tokens before it."""
    base = torch.zeros(V)
    base[7], base[8], base[9] = 3.0, 2.0, 1.0  # greedy favourites: 7, then 8, then 9
    s = sampler_with(w=SamplingParams(temperature=0.0, bad_words_token_ids=[[7]]),
                     m=SamplingParams(temperature=0.0, bad_words_token_ids=[[3, 8, 7]]),
                     plain=SamplingParams(temperature=0.0))
    w, m, plain = s.sample(torch.stack([base] * 3), ["w", "m", "plain"])
    assert (w.token_id, m.token_id, plain.token_id) == (8, 7, 7)  # m's output does not end with 3, 8
    forced = base.clone()
    forced[3] = 10.0
    out = s.sample(torch.stack([base, forced, base]), ["w", "m", "plain"])
    assert out[1].token_id == 3
    forced = base.clone()
    forced[8] = 10.0
    assert s.sample(torch.stack([base, forced, base]), ["w", "m", "plain"])[1].token_id == 8
    assert s.sample(torch.stack([base] * 3), ["w", "m", "plain"])[1].token_id == 8  # 3, 8 then 7: banned
    assert s.sample(torch.stack([base] * 3), ["w", "m", "plain"])[1].token_id == 7  # the prefix is gone


def test_bad_words_never_leave_a_row_without_a_token():
    only = torch.full((V,), float("-inf"))
    only[4] = 0.0
    s = sampler_with(b=SamplingParams(temperature=0.0, bad_words_token_ids=[[4]]))
    assert s.sample(only[None], ["b"])[0].token_id == 4


@pytest.mark.parametrize("words, message", [(["ok", ""], "non-empty"), ("word", "list of strings"),
                                            ([" "], "non-empty"), ([5], "non-empty")])
def test_bad_words_are_validated(words, message):
    with pytest.raises(SamplingParamsError, match=message) as e:
        SamplingParams(bad_words=words)
    assert e.value.param == "bad_words"
