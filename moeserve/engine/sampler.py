"""Logits -> tokens, with per-request state (seeded generator, generated-token counts).

Shape legend: S rows sampled this step (one per request), V vocabulary, R rows that sample randomly,
P rows with penalties, L rows that asked for logprobs.

Order of processing, per row (Hugging Face's order for the warpers):
  0. a structured output's bitmask (`allowed`): tokens its grammar does not allow at -inf;
  1. repetition_penalty over the prompt and output tokens (HF and vLLM: a seen token's logit is
     divided by it when positive, multiplied when negative), presence/frequency penalties (OpenAI
     semantics, over the tokens this sampler produced for the request:
     `logit[t] -= frequency * count[t] + presence * (count[t] > 0)`), then `logit_bias`
     (`logit[t] += bias[t]`), then the min_tokens mask (end-of-sequence and stop_token_ids at -inf
     while fewer than min_tokens tokens were produced, unless that leaves no token: a grammar
     that is complete allows only the end);
  2. logprobs are read here, from log_softmax of the penalized logits: the model's distribution
     as the request shaped it, before temperature and top-k/top-p. That is what a client can
     interpret without knowing our sampling internals, and it is stable across temperatures;
  3. greedy rows (temperature < 1e-5) take the argmax;
  4. random rows: divide by temperature, keep top-k (ties with the k-th kept), keep the smallest
     set of most likely tokens whose mass reaches top-p, keep tokens of at least min_p times the
     most likely one's probability, then draw by the exponential race
     argmax(p / q), q ~ Exp(1), which is a draw from p (one batched argmax, no multinomial). A seeded request draws its q from its own
     torch.Generator, so its tokens do not depend on what else is in the batch.
State survives preemption: a request recomputed after preemption continues with its counts and
its generator, because the scheduler only removes it (finished_request_ids) when it ends.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.core.step_plan import NewRequest, SampledToken
from moeserve.sampling_params import SamplingParams

GREEDY_BELOW = 1e-5  # temperatures this small are argmax; dividing by them overflows fp32


@dataclass
class _RequestState:
    params: SamplingParams
    generator: torch.Generator | None = None  # seeded requests: made on first use, on the logits' device
    counts: torch.Tensor | None = None  # [V] fp32 generated-token counts; only with penalties
    prompt: list[int] | None = None  # the prompt's token ids; only with a repetition penalty
    seen: torch.Tensor | None = None  # [V] bool: in the prompt or produced; only with a repetition penalty
    num_sampled: int = 0  # tokens produced so far; counted while min_tokens needs it

    @property
    def greedy(self) -> bool:
        return self.params.temperature < GREEDY_BELOW

    @property
    def penalized(self) -> bool:
        """Presence or frequency penalties (they need the output-token counts)."""
        return self.params.presence_penalty != 0.0 or self.params.frequency_penalty != 0.0

    @property
    def repeats_penalized(self) -> bool:
        return self.params.repetition_penalty != 1.0

    @property
    def masked(self) -> bool:
        """min_tokens still holds back the end-of-sequence and stop token ids."""
        return self.num_sampled < self.params.min_tokens and bool(self.banned_ids)

    @property
    def banned_ids(self) -> list[int]:
        eos = [] if self.params.ignore_eos else self.params.eos_token_ids
        return list(dict.fromkeys([*eos, *self.params.stop_token_ids]))

    @property
    def shaped(self) -> bool:
        """Its logits change before sampling (penalties, a logit bias or the min_tokens mask)."""
        return self.penalized or self.repeats_penalized or bool(self.params.logit_bias) or self.masked


class Sampler:
    """Mutates only its per-request state; never changes the logits it is given."""

    def __init__(self, seed: int = 0):
        self._states: dict[str, _RequestState] = {}
        self._seed = seed  # unseeded requests share one generator per device, seeded from this
        self._shared: dict[torch.device, torch.Generator] = {}

    def add(self, new: NewRequest) -> None:
        state = _RequestState(new.sampling, prompt=new.prompt_token_ids)
        if state.repeats_penalized and state.prompt is None:
            raise ValueError(f"request {new.request_id!r} has a repetition penalty but no prompt token ids")
        self._states[new.request_id] = state

    def remove(self, request_id: str) -> None:
        self._states.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._states)

    def prompt_top_n(self, request_id: str) -> int:
        """How many top alternatives the request wants per prompt token (SamplingParams.prompt_logprobs)."""
        return self._states[request_id].params.prompt_logprobs or 0

    def sample(self, logits: torch.Tensor, request_ids: list[str], allowed: torch.Tensor | None = None) -> list[SampledToken]:
        """logits: [S, V] fp32, row i belongs to request_ids[i]. One token per row.
        allowed: None, or [S, ceil(V / 32)] int32 on the logits' device, a packed bitmask of the tokens
        each row may take (structured outputs, engine/grammar_book.py); the others get -inf before
        anything else, so penalties, temperature, filters and logprobs all see the constrained row."""
        assert logits.dim() == 2 and logits.shape[0] == len(request_ids), (tuple(logits.shape), len(request_ids))
        try:
            states = [self._states[r] for r in request_ids]
        except KeyError as e:
            raise KeyError(f"sampler has no state for request {e.args[0]!r}: it was never in new_requests") from None
        if allowed is not None:
            logits = apply_token_bitmask(logits, allowed)
        if all(s.greedy and not s.shaped and s.params.logprobs is None for s in states):
            return [SampledToken(r, t) for r, t in zip(request_ids, logits.argmax(dim=-1).tolist())]
        logits = self._mask_min_tokens(self._bias(self._penalize(self._penalize_repeats(logits, states), states), states), states)
        tokens = logits.argmax(dim=-1)  # [S]; random rows are overwritten below
        random_rows = [i for i, s in enumerate(states) if not s.greedy]
        if random_rows:
            rows = torch.tensor(random_rows, device=logits.device)
            tokens[rows] = self._sample_random(logits[rows], [states[i] for i in random_rows])
        token_list = tokens.tolist()
        self._count(states, token_list, logits)
        out = [SampledToken(r, t) for r, t in zip(request_ids, token_list)]
        self._fill_logprobs(out, logits, tokens, states)
        return out

    # ---- steps ---------------------------------------------------------------------------------
    @staticmethod
    def _penalize_repeats(logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """repetition_penalty over each row's seen tokens (a new tensor when any row has one)."""
        rows = [i for i, s in enumerate(states) if s.repeats_penalized]
        if not rows:
            return logits
        V = logits.shape[1]
        for i in rows:
            s = states[i]
            if s.seen is None:
                s.seen = torch.zeros(V, dtype=torch.bool, device=logits.device)
                s.seen[torch.tensor(s.prompt or [], dtype=torch.int64, device=logits.device)] = True
        index = torch.tensor(rows, device=logits.device)
        sub = logits[index]  # [P, V]
        penalty = logits.new_tensor([states[i].params.repetition_penalty for i in rows])[:, None]
        # a tiny penalty (1e-39 is below float32's normal range) would send a logit to inf and softmax
        # to NaN: a bound that stays finite after the smallest temperature keeps such a token the
        # favourite, as the penalty means
        big = torch.finfo(logits.dtype).max * GREEDY_BELOW
        penalized = torch.where(sub > 0, sub / penalty, sub * penalty).clamp(-big, big)
        seen = torch.stack([states[i].seen for i in rows])
        logits = logits.clone()
        logits[index] = torch.where(seen, penalized, sub)
        return logits

    @staticmethod
    def _mask_min_tokens(logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """-inf at the end-of-sequence and stop token ids of rows still short of min_tokens. A row whose
        stop ids cover the whole vocabulary is left unmasked: there is always a token to sample."""
        rows, cols = [], []
        for i, s in enumerate(states):
            if s.masked:
                banned = [t for t in s.banned_ids if t < logits.shape[1]]
                if len(set(banned)) >= logits.shape[1]:
                    continue
                rows += [i] * len(banned)
                cols += banned
        if not rows:
            return logits
        index = (torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device))
        masked = logits.index_put(index, logits.new_tensor(float("-inf")))
        # a grammar that allows nothing but the end leaves such a row empty: the grammar wins (no host sync)
        empty = torch.isneginf(masked).all(dim=-1, keepdim=True)
        return torch.where(empty, logits, masked)

    def _penalize(self, logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        rows = [i for i, s in enumerate(states) if s.penalized and s.counts is not None]
        if not rows:
            return logits
        counts = torch.stack([states[i].counts for i in rows])  # [P, V]
        freq = logits.new_tensor([states[i].params.frequency_penalty for i in rows])[:, None]
        pres = logits.new_tensor([states[i].params.presence_penalty for i in rows])[:, None]
        index = torch.tensor(rows, device=logits.device)
        penalty = torch.addcmul(pres * counts.clamp(max=1.0), freq, counts)  # counts are whole numbers
        return logits.index_add(0, index, penalty, alpha=-1.0)

    @staticmethod
    def _bias(logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """logits + each row's logit_bias (a new tensor when any row has one)."""
        rows, cols, values = [], [], []
        for i, s in enumerate(states):
            for token, value in (s.params.logit_bias or {}).items():
                rows.append(i)
                cols.append(token)
                values.append(value)
        if not rows:
            return logits
        index = (torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device))
        return logits.index_put(index, logits.new_tensor(values), accumulate=True)

    def _sample_random(self, logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """logits: [R, V] fp32 penalized. Returns [R] int64 token ids."""
        V = logits.shape[1]
        temps = logits.new_tensor([s.params.temperature for s in states])[:, None]
        x = logits / temps
        x = top_k_filter(x, [s.params.top_k for s in states])
        x = top_p_filter(x, [s.params.top_p for s in states])
        x = min_p_filter(x, [s.params.min_p for s in states])
        probs = x.softmax(dim=-1)
        q = torch.empty_like(probs)
        unseeded = [j for j, s in enumerate(states) if s.params.seed is None]
        if unseeded:
            q[unseeded] = _exponential((len(unseeded), V), self._shared_generator(logits.device), logits.device)
        for j, s in enumerate(states):
            if s.params.seed is not None:
                q[j] = _exponential((V,), self._own_generator(s, logits.device), logits.device)
        return probs.div_(q).argmax(dim=-1)

    @staticmethod
    def _count(states: list[_RequestState], tokens: list[int], logits: torch.Tensor) -> None:
        for s, t in zip(states, tokens):
            s.num_sampled += 1
            if s.seen is not None:
                s.seen[t] = True
            if s.penalized:
                if s.counts is None:
                    s.counts = torch.zeros(logits.shape[1], dtype=torch.float32, device=logits.device)
                s.counts[t] += 1

    def _fill_logprobs(
        self, out: list[SampledToken], logits: torch.Tensor, tokens: torch.Tensor, states: list[_RequestState]
    ) -> None:
        rows = [i for i, s in enumerate(states) if s.params.logprobs is not None]
        if not rows:
            return
        index = torch.tensor(rows, device=logits.device)
        n_max = max(states[i].params.logprobs or 0 for i in rows)
        entries = token_logprobs(logits[index], tokens[index], n_max)
        for (chosen, top), i in zip(entries, rows):
            out[i].logprob = chosen
            out[i].top_logprobs = top[: states[i].params.logprobs or 0]

    # ---- generators ----------------------------------------------------------------------------
    def _shared_generator(self, device: torch.device) -> torch.Generator:
        if device not in self._shared:
            self._shared[device] = torch.Generator(device=device).manual_seed(self._seed)
        return self._shared[device]

    @staticmethod
    def _own_generator(state: _RequestState, device: torch.device) -> torch.Generator:
        if state.generator is None:
            state.generator = torch.Generator(device=device).manual_seed(state.params.seed)
        return state.generator


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """logits [S, V] fp32 with -inf where bit (t % 32) of bitmask[:, t // 32] ([S, ceil(V / 32)] int32) is
    clear: a new tensor, on the logits' device, with no host sync."""
    S, V = logits.shape
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    bits = (bitmask.to(logits.device, torch.int32).unsqueeze(-1) >> shifts) & 1  # [S, W, 32]
    return logits.masked_fill(bits.view(S, -1)[:, :V] == 0, float("-inf"))


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, n: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """logits: [R, V] fp32; tokens: [R] int64. Row i -> (logprob of tokens[i], top-n (token_id,
    logprob)), from log_softmax over the whole vocabulary of the logits given."""
    logprobs = torch.log_softmax(logits, dim=-1)  # [R, V]
    chosen = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
    if n == 0:
        return [(lp, []) for lp in chosen]
    top_val, top_ids = logprobs.topk(min(n, logprobs.shape[1]), dim=-1)
    return [(lp, list(zip(ids, vals))) for lp, ids, vals in zip(chosen, top_ids.tolist(), top_val.tolist())]


def prompt_logprobs(logits: torch.Tensor, targets: list[int], n: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """logits: [R, V] fp32 of R prompt positions; targets: the R next prompt tokens. `token_logprobs`
    of the raw logits (no penalties or temperature: the model's distribution)."""
    return token_logprobs(logits, torch.tensor(targets, dtype=torch.int64, device=logits.device), n)


def top_k_filter(x: torch.Tensor, top_k: list[int]) -> torch.Tensor:
    """x: [R, V]. Rows with top_k > 0 keep logits >= their k-th largest (ties kept, as in HF)."""
    rows = [j for j, k in enumerate(top_k) if k > 0]
    if not rows:
        return x
    V = x.shape[1]
    ks = torch.tensor([min(top_k[j], V) for j in rows], device=x.device)
    index = torch.tensor(rows, device=x.device)
    sub = x[index]
    kth = sub.topk(int(ks.max()), dim=-1).values.gather(1, (ks - 1)[:, None])  # [rows, 1]
    x = x.clone()
    x[index] = sub.masked_fill(sub < kth, float("-inf"))
    return x


def top_p_filter(x: torch.Tensor, top_p: list[float], candidates: int = 1024) -> torch.Tensor:
    """x: [R, V]. Rows with top_p < 1 keep their most likely tokens until the mass reaches top_p
    (ties with the last kept token kept). Looks at the top `candidates` tokens first and sorts
    the whole vocabulary only when they hold too little mass: a full sort costs ~10x a top-1024."""
    rows = [j for j, p in enumerate(top_p) if p < 1.0]
    if not rows:
        return x
    V = x.shape[1]
    index = torch.tensor(rows, device=x.device)
    p = x.new_tensor([top_p[j] for j in rows])[:, None]  # [P, 1]
    sub = x[index]  # [P, V]
    log_z = sub.logsumexp(dim=-1, keepdim=True)
    k = min(candidates, V)
    while True:
        top = sub.topk(k, dim=-1).values  # [P, k] descending
        probs = (top - log_z).exp()
        mass_before = probs.cumsum(dim=-1) - probs  # mass of strictly more likely tokens; 0 for the first
        if k == V or bool((mass_before[:, -1] + probs[:, -1] >= p).all()):
            break
        k = V
    # [P, 1]; at least the top token even where top_p rounds to 0 in fp32 (a top_p below ~1.4e-45)
    num_kept = (mass_before < p).sum(dim=-1, keepdim=True).clamp_(min=1)
    threshold = top.gather(1, num_kept - 1)
    x = x.clone()
    x[index] = sub.masked_fill(sub < threshold, float("-inf"))
    return x


def min_p_filter(x: torch.Tensor, min_p: list[float]) -> torch.Tensor:
    """x: [R, V]. Rows with min_p > 0 keep tokens whose probability is at least min_p times the
    row's largest: logit >= max logit + log(min_p), ratios that filtering elsewhere leaves alone."""
    rows = [j for j, p in enumerate(min_p) if p > 0.0]
    if not rows:
        return x
    index = torch.tensor(rows, device=x.device)
    sub = x[index]
    threshold = sub.amax(dim=-1, keepdim=True) + x.new_tensor([min_p[j] for j in rows])[:, None].log()
    x = x.clone()
    x[index] = sub.masked_fill(sub < threshold, float("-inf"))
    return x


def _exponential(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Exp(1) draws as -log(u), u ~ U[0, 1): ~3x cheaper than Tensor.exponential_ on CPU. u == 0
    gives inf, which only means that token loses the race; u < 1 keeps every draw above 0."""
    return torch.rand(shape, generator=generator, device=device).log_().neg_()
