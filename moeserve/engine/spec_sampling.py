"""The sampler's verify step: a request with k drafts owns k + 1 rows and gets its accepted drafts and
one more token (engine/rejection.py has the rule and why it keeps the target's distribution).

Shape legend: R rows of the step, B requests with drafts, K their most drafts, V vocabulary.

What shapes a row: logit_bias (the same at every position) and, for random requests, temperature and
top-k/top-p/min-p, all per row as `Sampler.sample` applies them. Penalties, repetition penalties
and a min_tokens mask depend on the tokens before each row, so the scheduler gives such requests no
drafts (core/spec_scheduling.py); they take the plain path here, one row each. Logprobs of each
emitted token are read from its own row, as without drafts.
"""
from __future__ import annotations

import torch

from moeserve.core.step_plan import SampledToken
from moeserve.engine.rejection import DraftRows, verify_greedy, verify_random
from moeserve.engine.sampler import Sampler, _exponential, sampling_probs, token_logprobs


def sample_drafted(sampler: Sampler, logits: torch.Tensor, request_ids: list[str], drafts: list[list[int]],
                   allowed: torch.Tensor | None = None) -> list[SampledToken]:
    """logits [R, V] fp32, R = sum(len(d) + 1 for d in drafts); request i owns len(drafts[i]) + 1
    consecutive rows. allowed: the structured-output bitmask of the requests without drafts, in their
    order (Sampler.sample's). Returns each request's tokens, consecutive and in request order."""
    sizes = [len(d) + 1 for d in drafts]
    assert logits.dim() == 2 and logits.shape[0] == sum(sizes) and len(drafts) == len(request_ids), \
        (tuple(logits.shape), sizes, len(request_ids))
    states = sampler.states(request_ids)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    out: list[list[SampledToken]] = [[] for _ in request_ids]
    plain = [i for i, d in enumerate(drafts) if not d]
    if plain:
        rows = torch.tensor([starts[i] for i in plain], device=logits.device)
        for i, tok in zip(plain, sampler.sample(logits[rows], [request_ids[i] for i in plain], allowed=allowed)):
            out[i].append(tok)
    for greedy in (True, False):
        chosen = [i for i, d in enumerate(drafts) if d and states[i].greedy == greedy]
        if chosen:
            _verify(sampler, logits, [request_ids[i] for i in chosen], [states[i] for i in chosen],
                    [drafts[i] for i in chosen], [starts[i] for i in chosen], greedy, [out[i] for i in chosen])
    return [tok for toks in out for tok in toks]


def _verify(sampler: Sampler, logits: torch.Tensor, request_ids: list[str], states: list, drafts: list[list[int]],
            starts: list[int], greedy: bool, out: list[list[SampledToken]]) -> None:
    for request_id, s, d in zip(request_ids, states, drafts):
        assert not (s.penalized or s.repeats_penalized or s.masked), \
            f"request {request_id} got drafts though its sampling depends on its own output"
    device = logits.device
    index = torch.tensor([r for start, d in zip(starts, drafts) for r in range(start, start + len(d) + 1)], device=device)
    row_states = [s for s, d in zip(states, drafts) for _ in range(len(d) + 1)]
    x = sampler._bias(logits[index], row_states)  # [R', V], the rows as the request shaped them
    rows = DraftRows.build(drafts, device)
    if greedy:
        accepted, nxt = verify_greedy(x, rows)
    else:
        probs = sampling_probs(x, row_states)
        uniforms = _uniforms(sampler, states, drafts, rows.max_drafts, device)
        exponentials = sampler.draws(states, (probs.shape[1],), device, _exponential)
        accepted, nxt = verify_random(probs, rows, uniforms, exponentials)
    counts, last = torch.stack([accepted, nxt]).tolist()  # the one host read of the verify
    tokens = [d[:m] + [t] for d, m, t in zip(drafts, counts, last)]
    emitted = [(b, j) for b, toks in enumerate(tokens) for j in range(len(toks))]
    emitted_states = [states[b] for b, _ in emitted]
    sampler._count(emitted_states, torch.tensor([tokens[b][j] for b, j in emitted], device=device), logits.shape[1])
    sampler._sampled(emitted_states)
    for b, toks in enumerate(tokens):
        out[b].extend(SampledToken(request_ids[b], t) for t in toks)
    wants = [(b, j) for b, j in emitted if states[b].params.logprobs is not None]
    if wants:  # each token's logprob from its own row (local row = index of its position in x)
        local = [sum(len(d) + 1 for d in drafts[:b]) + j for b, j in wants]
        n_max = max(states[b].params.logprobs or 0 for b, _ in wants)
        chosen = torch.tensor([tokens[b][j] for b, j in wants], device=device)
        entries = token_logprobs(x[torch.tensor(local, device=device)], chosen, n_max)
        for (b, j), (lp, top, rank) in zip(wants, entries):
            token = out[b][-len(tokens[b]) + j]
            token.logprob, token.top_logprobs, token.rank = lp, top[: states[b].params.logprobs or 0], rank


def _uniforms(sampler: Sampler, states: list, drafts: list[list[int]], K: int, device: torch.device) -> torch.Tensor:
    """[B, K] U[0, 1): a seeded request draws exactly its own k from its generator, so its stream does
    not depend on the other requests' draft counts; columns past its drafts are unused."""
    u = torch.zeros(len(states), K, device=device)
    unseeded = [b for b, s in enumerate(states) if s.params.seed is None]
    if unseeded:
        u[unseeded] = torch.rand((len(unseeded), K), generator=sampler._shared_generator(device), device=device)
    for b, s in enumerate(states):
        if s.params.seed is not None:
            u[b, : len(drafts[b])] = torch.rand((len(drafts[b]),), generator=sampler._own_generator(s, device), device=device)
    return u

