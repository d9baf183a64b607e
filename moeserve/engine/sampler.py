"""Logits -> tokens, with per-request state (seeded generator, generated-token counts).

Shape legend: S rows sampled this step (one per request), V vocabulary, R rows that sample randomly,
P rows with penalties, L rows that asked for logprobs.

Order of processing, per row (Hugging Face's order for the warpers):
  0. a structured output's bitmask (`allowed`): tokens its grammar does not allow at -inf;
  1. repetition_penalty over the prompt and output tokens (HF and vLLM: a seen token's logit is
     divided by it when positive, multiplied when negative), presence/frequency penalties (OpenAI
     semantics, over the tokens this sampler produced for the request:
     `logit[t] -= frequency * count[t] + presence * (count[t] > 0)`), then `logit_bias`
     (`logit[t] += bias[t]`), then `allowed_token_ids` (every other token at -inf), then `bad_words` (a bad word's last
     token at -inf where the output ends with the tokens before it), then the min_tokens mask (end-of-sequence and stop_token_ids at -inf
     while fewer than min_tokens tokens were produced, unless that leaves no token: a grammar
     that is complete allows only the end);
  2. logprobs are read here, from log_softmax of the penalized logits: the model's distribution
     as the request shaped it, before temperature and top-k/top-p. That is what a client can
     interpret without knowing our sampling internals, and it is stable across temperatures.
     With them, the sampled token's rank in that distribution (`chosen_ranks`);
  3. greedy rows (temperature < 1e-5) take the argmax;
  4. random rows: divide by temperature, keep top-k (ties with the k-th kept), keep the smallest
     set of most likely tokens whose mass reaches top-p, keep tokens of at least min_p times the
     most likely one's probability, then draw by the exponential race
     argmax(p / q), q ~ Exp(1), which is a draw from p (one batched argmax, no multinomial). A seeded request draws its q from its own
     torch.Generator, so its tokens do not depend on what else is in the batch.
State survives preemption: a request recomputed after preemption continues with its counts and
its generator, because the scheduler only removes it (finished_request_ids) when it ends.

Reading back: `launch` leaves the sampled ids (and any logprobs) on the device and queues one
non-blocking copy of them into pinned host memory, then records an event; `SampledBatch.result()`
waits for that event alone. So the host reads a step's tokens once, when they are there, and never
waits for work queued after them (the next step, async scheduling). Per-request state (penalty
counts, seen tokens) is updated on the device from the sampled ids, without reading them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.core.step_plan import NewRequest, SampledToken
from moeserve.engine.host_copy import to_device
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
    bias: tuple[torch.Tensor, torch.Tensor] | None = None  # logit_bias as ([B] int64 ids, [B] fp32) on the device
    allowed: torch.Tensor | None = None  # allowed_token_ids as a [V] bool mask on the device
    # bad_words: the output's last tokens, [W] int64 on the device (-1 before any), W the longest
    # bad word's prefix; updated on the device from each sampled id, never read back
    recent: torch.Tensor | None = None

    def bias_tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The request's logit_bias as device tensors, built on first use (not every step: up to
        MAX_LOGIT_BIAS_ENTRIES entries a request)."""
        if self.bias is None or self.bias[0].device != device:
            bias = self.params.logit_bias or {}
            self.bias = (to_device(list(bias), torch.int64, device), to_device(list(bias.values()), torch.float32, device))
        return self.bias

    def allowed_mask(self, vocab: int, device: torch.device) -> torch.Tensor:
        """[vocab] bool, True at the request's allowed_token_ids; built on first use."""
        if self.allowed is None or self.allowed.device != device:
            allowed = torch.zeros(vocab, dtype=torch.bool, device=device)
            allowed[to_device(self.params.allowed_token_ids or [], torch.int64, device)] = True
            self.allowed = allowed
        return self.allowed

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
        """Its logits change before sampling (penalties, a logit bias, allowed_token_ids, bad words or
        the min_tokens mask)."""
        return (self.penalized or self.repeats_penalized or bool(self.params.logit_bias)
                or self.params.allowed_token_ids is not None or bool(self.params.bad_words_token_ids) or self.masked)

    def recent_tokens(self, device: torch.device) -> torch.Tensor:
        """[W] int64: the output's last W tokens, -1 where there are fewer (bad_words' prefixes)."""
        if self.recent is None:
            width = max(len(seq) for seq in self.params.bad_words_token_ids) - 1
            self.recent = torch.full((width,), -1, dtype=torch.int64, device=device)
        return self.recent


@dataclass
class _Logprobs:
    """Device tensors of the rows that asked for logprobs: L rows, n = the most alternatives asked."""

    rows: list[int]  # their rows among the S sampled
    wanted: list[int]  # alternatives each asked for
    chosen: torch.Tensor  # [L] fp32 logprob of the sampled id
    top_ids: torch.Tensor  # [L, n] int64
    top_val: torch.Tensor  # [L, n] fp32
    ranks: torch.Tensor  # [L] int32 rank of the sampled id (chosen_ranks)


class SampledBatch:
    """One step's sampled ids (and logprobs) on their way to the host: `tokens` [S] int64 stays on the
    device (the next step's pending tokens are filled from it); the host copy is queued at once, into
    pinned memory on a GPU, and `result()` waits for it alone."""

    def __init__(self, request_ids: list[str], tokens: torch.Tensor, logprobs: _Logprobs | None = None):
        self.request_ids, self.tokens, self.logprobs = request_ids, tokens, logprobs
        parts = [tokens] if logprobs is None else [tokens, logprobs.chosen, logprobs.top_ids, logprobs.top_val, logprobs.ranks]
        self._event = None
        if tokens.device.type == "cuda":
            self._host = [torch.empty(p.shape, dtype=p.dtype, pin_memory=True) for p in parts]
            for host, part in zip(self._host, parts):
                host.copy_(part, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = parts

    def token_ids(self) -> list[int]:
        """The sampled ids on the host, once the copy has landed (waits for it alone)."""
        if self._event is not None:
            self._event.synchronize()
        return self._host[0].tolist()

    def result(self) -> list[SampledToken]:
        """The SampledTokens, once the copy has landed (the step's one wait on the device)."""
        token_list = self.token_ids()
        out = [SampledToken(r, t) for r, t in zip(self.request_ids, token_list)]
        if self.logprobs is not None:
            chosen, top_ids, top_val, ranks = (h.tolist() for h in self._host[1:])
            for j, (i, n) in enumerate(zip(self.logprobs.rows, self.logprobs.wanted)):
                out[i].logprob = chosen[j]
                out[i].top_logprobs = list(zip(top_ids[j], top_val[j]))[:n]
                out[i].rank = ranks[j]
        return out


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

    def states(self, request_ids: list[str]) -> list[_RequestState]:
        try:
            return [self._states[r] for r in request_ids]
        except KeyError as e:
            raise KeyError(f"sampler has no state for request {e.args[0]!r}: it was never in new_requests") from None

    def prompt_top_n(self, request_id: str) -> int:
        """How many top alternatives the request wants per prompt token (SamplingParams.prompt_logprobs)."""
        return self._states[request_id].params.prompt_logprobs or 0

    def sample(self, logits: torch.Tensor, request_ids: list[str], allowed: torch.Tensor | None = None) -> list[SampledToken]:
        """logits: [S, V] fp32, row i belongs to request_ids[i]. One token per row (drafts: engine/spec_sampling.py).
        allowed: None, or [S, ceil(V / 32)] int32 on the logits' device, a packed bitmask of the tokens
        each row may take (structured outputs, engine/grammar_book.py); the others get -inf before
        anything else, so penalties, temperature, filters and logprobs all see the constrained row."""
        return self.launch(logits, request_ids, allowed).result()

    def launch(self, logits: torch.Tensor, request_ids: list[str], allowed: torch.Tensor | None = None) -> SampledBatch:
        """`sample` without reading back: the ids (`SampledBatch.tokens`, [S] int64 on the logits'
        device) and their host copy on its way."""
        assert logits.dim() == 2 and logits.shape[0] == len(request_ids), (tuple(logits.shape), len(request_ids))
        states = self.states(request_ids)
        if allowed is not None:
            logits = apply_token_bitmask(logits, allowed)
        if all(s.greedy and not s.shaped and s.params.logprobs is None for s in states):
            self._sampled(states)
            return SampledBatch(request_ids, logits.argmax(dim=-1))
        shaped = self._bias(self._penalize(self._penalize_repeats(logits, states), states), states)
        logits = self._mask_min_tokens(self._ban_bad_words(shaped, states), states)
        tokens = logits.argmax(dim=-1)  # [S]; random rows are overwritten below
        random_rows = [i for i, s in enumerate(states) if not s.greedy]
        if random_rows:
            rows = to_device(random_rows, torch.int64, logits.device)
            tokens[rows] = self._sample_random(logits[rows], [states[i] for i in random_rows])
        self._count(states, tokens, logits.shape[1])
        self._sampled(states)
        return SampledBatch(request_ids, tokens, self._logprobs(logits, tokens, states))

    @staticmethod
    def _sampled(states: list[_RequestState]) -> None:
        for s in states:
            s.num_sampled += 1

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
                s.seen[to_device(s.prompt or [], torch.int64, logits.device)] = True
        index = to_device(rows, torch.int64, logits.device)
        sub = logits[index]  # [P, V]
        penalty = to_device([states[i].params.repetition_penalty for i in rows], logits.dtype, logits.device)[:, None]
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
        index = (to_device(rows, torch.int64, logits.device), to_device(cols, torch.int64, logits.device))
        masked = logits.index_put(index, torch.full((), float("-inf"), dtype=logits.dtype, device=logits.device))
        # a grammar that allows nothing but the end leaves such a row empty: the grammar wins (no host sync)
        empty = torch.isneginf(masked).all(dim=-1, keepdim=True)
        return torch.where(empty, logits, masked)

    @staticmethod
    def _ban_bad_words(logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """-inf at each bad word's last token in the rows whose output ends with the tokens before it
        (a one-token word: always), compared on the device. A row it would leave without a token is
        left as it was, as the min_tokens mask does."""
        rows = [i for i, s in enumerate(states) if s.params.bad_words_token_ids]
        if not rows:
            return logits
        device = logits.device
        index_rows, index_cols, hits = [], [], []
        for i in rows:
            s = states[i]
            recent = s.recent_tokens(device)
            for seq in s.params.bad_words_token_ids:
                prefix = seq[:-1]
                index_rows.append(i)
                index_cols.append(seq[-1])
                if prefix:
                    hits.append((recent[len(recent) - len(prefix):] == to_device(prefix, torch.int64, device)).all())
                else:
                    hits.append(torch.ones((), dtype=torch.bool, device=device))
        penalty = torch.where(torch.stack(hits), float("-inf"), 0.0).to(logits.dtype)
        index = (to_device(index_rows, torch.int64, device), to_device(index_cols, torch.int64, device))
        banned = logits.index_put(index, penalty, accumulate=True)  # duplicates add: a ban is never undone
        empty = torch.isneginf(banned).all(dim=-1, keepdim=True)
        return torch.where(empty, logits, banned)

    def _penalize(self, logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        rows = [i for i, s in enumerate(states) if s.penalized and s.counts is not None]
        if not rows:
            return logits
        counts = torch.stack([states[i].counts for i in rows])  # [P, V]
        freq = to_device([states[i].params.frequency_penalty for i in rows], logits.dtype, logits.device)[:, None]
        pres = to_device([states[i].params.presence_penalty for i in rows], logits.dtype, logits.device)[:, None]
        index = to_device(rows, torch.int64, logits.device)
        penalty = torch.addcmul(pres * counts.clamp(max=1.0), freq, counts)  # counts are whole numbers
        return logits.index_add(0, index, penalty, alpha=-1.0)

    @staticmethod
    def _bias(logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """logits + each row's logit_bias, then -inf outside its allowed_token_ids: what shapes a row
        the same at every position (a new tensor when any row has either)."""
        biased = [(i, s.bias_tensors(logits.device)) for i, s in enumerate(states) if s.params.logit_bias]
        if biased:
            rows = torch.cat([torch.full_like(cols, i) for i, (cols, _) in biased])
            cols = torch.cat([cols for _, (cols, _) in biased])
            values = torch.cat([values for _, (_, values) in biased]).to(logits.dtype)
            logits = logits.index_put((rows, cols), values, accumulate=True)
        limited = [i for i, s in enumerate(states) if s.params.allowed_token_ids is not None]
        if limited:
            V = logits.shape[1]
            index = to_device(limited, torch.int64, logits.device)
            keep = torch.stack([states[i].allowed_mask(V, logits.device) for i in limited])  # [A, V]
            masked = torch.where(keep, logits[index], torch.full((), float("-inf"), dtype=logits.dtype, device=logits.device))
            logits = logits.index_copy(0, index, masked)
        return logits

    def _sample_random(self, logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
        """logits: [R, V] fp32 penalized. Returns [R] int64 token ids."""
        probs = sampling_probs(logits, states)
        return probs.div_(self.draws(states, (probs.shape[1],), logits.device, _exponential)).argmax(dim=-1)

    def draws(self, states: list[_RequestState], shape: tuple[int, ...], device: torch.device, draw) -> torch.Tensor:
        """[R, *shape] random numbers from `draw(shape, generator, device)`, row j from states[j]'s own
        generator when it is seeded, the others from the shared one in one call."""
        out = torch.empty((len(states), *shape), device=device)
        unseeded = [j for j, s in enumerate(states) if s.params.seed is None]
        if unseeded:
            out[unseeded] = draw((len(unseeded), *shape), self._shared_generator(device), device)
        for j, s in enumerate(states):
            if s.params.seed is not None:
                out[j] = draw(shape, self._own_generator(s, device), device)
        return out

    @staticmethod
    def _count(states: list[_RequestState], tokens: torch.Tensor, vocab: int) -> None:
        """Each row's sampled id into its seen / counts tensors [vocab], on the device (no read back)."""
        for i, s in enumerate(states):
            t = tokens[i : i + 1]
            if s.params.bad_words_token_ids:
                recent = s.recent_tokens(tokens.device)
                s.recent = torch.cat([recent[1:], t]) if len(recent) else recent
            if s.seen is not None:
                s.seen.index_fill_(0, t, True)
            if s.penalized:
                if s.counts is None:
                    s.counts = torch.zeros(vocab, dtype=torch.float32, device=tokens.device)
                s.counts.index_add_(0, t, torch.ones(1, dtype=torch.float32, device=tokens.device))

    @staticmethod
    def _logprobs(logits: torch.Tensor, tokens: torch.Tensor, states: list[_RequestState]) -> _Logprobs | None:
        """The logprob of each sampled id, its rank and the top-n alternatives, on the device, for the
        rows that asked for them (read back with the ids)."""
        rows = [i for i, s in enumerate(states) if s.params.logprobs is not None]
        if not rows:
            return None
        index = to_device(rows, torch.int64, logits.device)
        n_max = max(states[i].params.logprobs or 0 for i in rows)
        logprobs = torch.log_softmax(logits[index], dim=-1)  # [L, V]
        chosen = logprobs.gather(1, tokens[index][:, None])[:, 0]
        top_val, top_ids = logprobs.topk(min(n_max, logprobs.shape[1]), dim=-1)
        return _Logprobs(rows, [states[i].params.logprobs or 0 for i in rows], chosen, top_ids, top_val,
                         chosen_ranks(logprobs, chosen))

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


def sampling_probs(logits: torch.Tensor, states: list[_RequestState]) -> torch.Tensor:
    """logits: [R, V] fp32 penalized -> [R, V] the distribution each row samples from: temperature,
    then top-k, top-p and min-p."""
    temps = to_device([s.params.temperature for s in states], logits.dtype, logits.device)[:, None]
    x = logits / temps
    x = top_k_filter(x, [s.params.top_k for s in states])
    x = top_p_filter(x, [s.params.top_p for s in states])
    x = min_p_filter(x, [s.params.min_p for s in states])
    return x.softmax(dim=-1)


def chosen_ranks(logprobs: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """logprobs: [R, V] fp32; chosen: [R] fp32, a logprob of each row. -> [R] int32 ranks: how many
    entries of the row are at least as likely (vLLM's count, `batched_count_greater_than`): 1 for the
    most likely token, and a token tied with others ranks after all of them. One comparison and one
    sum over the row, on the device, with no host sync: about one more pass over the row than the
    log_softmax and top-k that read it already (docs/server.md, "prompt_logprobs", has the count)."""
    return (logprobs >= chosen[:, None]).sum(dim=-1, dtype=torch.int32)  # int32: a third faster than int64 on a CPU


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, n: int) -> list[tuple[float, list[tuple[int, float]], int]]:
    """logits: [R, V] fp32; tokens: [R] int64. Row i -> (logprob of tokens[i], top-n (token_id,
    logprob), rank of tokens[i]), from log_softmax over the whole vocabulary of the logits given."""
    logprobs = torch.log_softmax(logits, dim=-1)  # [R, V]
    chosen = logprobs.gather(1, tokens[:, None])[:, 0]
    ranks = chosen_ranks(logprobs, chosen).tolist()
    chosen = chosen.tolist()
    if n == 0:
        return [(lp, [], r) for lp, r in zip(chosen, ranks)]
    top_val, top_ids = logprobs.topk(min(n, logprobs.shape[1]), dim=-1)
    return [(lp, list(zip(ids, vals)), r) for lp, ids, vals, r in zip(chosen, top_ids.tolist(), top_val.tolist(), ranks)]


def prompt_logprobs(logits: torch.Tensor, targets: list[int], n: int) -> list[tuple[float, list[tuple[int, float]], int]]:
    """logits: [R, V] fp32 of R prompt positions; targets: the R next prompt tokens. `token_logprobs`
    of the raw logits (no penalties or temperature: the model's distribution)."""
    return token_logprobs(logits, torch.tensor(targets, dtype=torch.int64, device=logits.device), n)


def top_k_filter(x: torch.Tensor, top_k: list[int]) -> torch.Tensor:
    """x: [R, V]. Rows with top_k > 0 keep logits >= their k-th largest (ties kept, as in HF)."""
    rows = [j for j, k in enumerate(top_k) if k > 0]
    if not rows:
        return x
    V = x.shape[1]
    k_list = [min(top_k[j], V) for j in rows]
    ks = to_device(k_list, torch.int64, x.device)
    index = to_device(rows, torch.int64, x.device)
    sub = x[index]
    kth = sub.topk(max(k_list), dim=-1).values.gather(1, (ks - 1)[:, None])  # [rows, 1]
    x = x.clone()
    x[index] = sub.masked_fill(sub < kth, float("-inf"))
    return x


def top_p_filter(x: torch.Tensor, top_p: list[float], candidates: int = 1024) -> torch.Tensor:
    """x: [R, V]. Rows with top_p < 1 keep their most likely tokens until the mass reaches top_p
    (ties with the last kept token kept). On a CPU it looks at the top `candidates` tokens first and
    sorts the whole vocabulary only when they hold too little mass: a full sort costs ~10x a
    top-1024 there. On a GPU it sorts the whole vocabulary at once: deciding would read a device value
    back (a sync), and the sort is cheap there. Either way the same threshold."""
    rows = [j for j, p in enumerate(top_p) if p < 1.0]
    if not rows:
        return x
    V = x.shape[1]
    index = to_device(rows, torch.int64, x.device)
    p = to_device([top_p[j] for j in rows], x.dtype, x.device)[:, None]  # [P, 1]
    sub = x[index]  # [P, V]
    log_z = sub.logsumexp(dim=-1, keepdim=True)
    k = min(candidates, V) if x.device.type == "cpu" else V
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
    index = to_device(rows, torch.int64, x.device)
    sub = x[index]
    threshold = sub.amax(dim=-1, keepdim=True) + to_device([min_p[j] for j in rows], x.dtype, x.device)[:, None].log()
    x = x.clone()
    x[index] = sub.masked_fill(sub < threshold, float("-inf"))
    return x


def _exponential(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Exp(1) draws as -log(u), u ~ U[0, 1): ~3x cheaper than Tensor.exponential_ on CPU. u == 0
    gives inf, which only means that token loses the race; u < 1 keeps every draw above 0."""
    return torch.rand(shape, generator=generator, device=device).log_().neg_()
