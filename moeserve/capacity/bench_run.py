"""A benchmark run of N prompts, step by step: what `vllm bench serve` or SGLang's `bench_serving` reports.

The planner's other figures are a steady state: a fixed number of sequences in flight, each replaced as it
finishes. A benchmark that sends N prompts at once (no `--max-concurrency`, `--request-rate inf`) or at a
rate measures something else: the whole run, from the first prompt to the last token, while the batch
fills, prefills, then drains as requests of different lengths finish, the last ones decoding at a batch of
a few. Its output rate is the total output over that time, and with long-tailed output lengths the tail
decides it: the longest request's tokens take at least that many steps, however small the batch.

This module replays such a run against the step model (Predictor's decode and prefill steps): one
scheduler over the deployment's GPUs, FCFS, at most `max_seqs` sequences a scheduler (vLLM's
`--max-num-seqs`, 1,024 by default on cards of 70 GiB or more: EngineArgs.get_batch_defaults, vLLM 0.32)
and as many as the KV cache holds (each admitted request reserves its prompt and output). Prefill as the
engine schedules it (Options.prefill): "mixed" spends each step's token budget on the running decodes first
and the rest on prompt chunks (vLLM V1, TensorRT-LLM); "stalled" and "separate" run prompt chunks as forwards
of their own while the decodes wait (SGLang; "separate" eager, without CUDA graphs). A request's first token
comes with its prompt's last chunk; its TPOT is (finish - first token) / (output - 1), as the benchmarks
count it.

Lengths: "fixed" (every request isl in, osl out, as `--random-range-ratio 1` sends), "uniform:R" (uniform on
mean x [1 - R, 1 + R], a random dataset with a range), "exponential" (exponential with the given mean, the
long tail of chat datasets such as ShareGPT: an assumption, the dataset's own lengths not being
available here). Lengths are the distribution's quantiles at (k + 0.5) / N, inputs paired with outputs in
fixed shuffled orders, so a run is deterministic. Arrivals: all at once, or evenly spaced at a rate
(the benchmarks draw Poisson gaps of the same mean).
"""
from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, replace

from moeserve.capacity.layout import Layout
from moeserve.capacity.predict import ENGINE_CHUNK, Options, Predictor, Workload

DEFAULT_MAX_SEQS = 1024  # vLLM's --max-num-seqs on cards of 70 GiB or more (EngineArgs.get_batch_defaults)
DISTRIBUTIONS = ("fixed", "uniform", "exponential")


def parse_distribution(text: str) -> tuple[str, float]:
    """'fixed', 'exponential' or 'uniform:R' (0 <= R < 1) -> (kind, R)."""
    kind, _, arg = text.partition(":")
    if kind not in DISTRIBUTIONS:
        raise ValueError(f"length distribution {text!r}: expected fixed, uniform:R or exponential")
    if kind != "uniform":
        if arg:
            raise ValueError(f"length distribution {text!r}: {kind} takes no parameter")
        return kind, 0.0
    try:
        spread = float(arg)
    except ValueError:
        raise ValueError(f"length distribution {text!r}: uniform needs a spread R, e.g. uniform:0.2") from None
    if not 0 <= spread < 1:
        raise ValueError(f"length distribution {text!r}: the spread R must be in [0, 1)")
    return kind, spread


def lengths(n: int, mean: int, dist: str) -> list[int]:
    """n lengths of the distribution with the given mean (its quantiles at (k + 0.5) / n), each at least 1."""
    kind, spread = parse_distribution(dist)
    qs = [(k + 0.5) / n for k in range(n)]
    if kind == "fixed":
        return [mean] * n
    if kind == "uniform":
        return [max(1, round(mean * (1 - spread + 2 * spread * q))) for q in qs]
    return [max(1, round(-mean * math.log(1 - q))) for q in qs]


def spread_cv(dist: str) -> float:
    """The distribution's std / mean (prompt lengths' spread makes long prompts dominate attention work)."""
    kind, spread = parse_distribution(dist)
    return {"fixed": 0.0, "uniform": spread / math.sqrt(3), "exponential": 1.0}[kind]


def requests(n: int, w: Workload, dist: str) -> list[tuple[int, int]]:
    """(input, output) lengths of n requests in arrival order: inputs and outputs drawn apart, each in a fixed
    shuffled order."""
    ins, outs = lengths(n, w.isl, dist), lengths(n, w.osl, dist)
    random.Random(0).shuffle(ins)  # arrival order is no order of length
    random.Random(1).shuffle(outs)
    return list(zip(ins, outs))


@dataclass(frozen=True)
class RunResult:
    prompts: int
    seconds: float
    output_tokens_per_s_per_gpu: float
    input_tokens_per_s_per_gpu: float
    mean_tpot_ms: float
    mean_ttft_ms: float
    peak_running: int  # most sequences decoding at once
    steps: int

    def as_dict(self) -> dict:
        return {"prompts": self.prompts, "seconds": round(self.seconds, 3),
                "output_tokens_per_s_per_gpu": round(self.output_tokens_per_s_per_gpu, 1),
                "input_tokens_per_s_per_gpu": round(self.input_tokens_per_s_per_gpu, 1),
                "mean_tpot_ms": round(self.mean_tpot_ms, 2), "mean_ttft_ms": round(self.mean_ttft_ms, 1),
                "peak_running": self.peak_running, "steps": self.steps}


class _Steps:
    """Step times of one deployment, cached by sequences decoding and prompt tokens prefilled."""

    def __init__(self, pred: Predictor, layout: Layout, w: Workload, o: Options):
        self.pred, self.layout, self.w, self.o = pred, layout, w, o
        self.eager = replace(o, offload=False, cuda_graphs=False, tbo=False)
        self._decode: dict[int, tuple[float, float]] = {}
        self._prefill: dict[int, float] = {}

    def decode(self, running: int) -> tuple[float, float]:
        """(step seconds, its attention seconds) of `running` sequences over the deployment."""
        if running not in self._decode:
            d = self.pred.decode(self.layout, running / self.layout.gpus, self.w, self.o)
            self._decode[running] = (d.step_ms / 1e3, d.breakdown_ms.get("attention", 0.0) / 1e3)
        return self._decode[running]

    def prefill(self, tokens: int) -> float:
        """Seconds of a forward prefilling `tokens` prompt tokens spread over the deployment's GPUs (to the next
        256: a cached step serves every count up to it)."""
        key = max(256, math.ceil(tokens / 256) * 256)
        if key not in self._prefill:
            o = self.eager if self.o.prefill == "separate" else replace(self.o, offload=False)
            self._prefill[key] = self.pred.prefill(self.layout, key / self.layout.gpus, self.w, o).step_ms / 1e3
        return self._prefill[key]  # rounded up: a few tokens' pass still reads every weight


def simulate(pred: Predictor, layout: Layout, w: Workload, o: Options, prompts: int, dist: str = "fixed",
             request_rate: float | None = None, max_seqs: int = DEFAULT_MAX_SEQS, chunk: int = ENGINE_CHUNK,
             kv_tokens: int | None = None) -> RunResult:
    """Replay a run of `prompts` requests of mean lengths w.isl / w.osl (distribution `dist`) sent at once
    (request_rate None) or evenly at request_rate a second; max_seqs and chunk are each scheduler's (one per
    attention group); kv_tokens: tokens the deployment's KV cache holds (None: from the memory model)."""
    if prompts < 1:
        raise ValueError("a run needs at least one prompt")
    reqs = requests(prompts, w, dist)
    w = replace(w, isl_cv=max(w.isl_cv, spread_cv(dist)))
    steps = _Steps(pred, layout, w, o)
    groups = layout.attention_groups
    if kv_tokens is None:
        kv_tokens = int(pred.decode(layout, 1.0, w, o).memory["kv_tokens_capacity"]) * groups
    kv_group = kv_tokens / groups  # each attention group keeps its own sequences' KV
    arrival = [0.0 if not request_rate else k / request_rate for k in range(prompts)]
    accept = max(1.0, o.mtp_accept)
    mixed = o.prefill == "mixed"

    waiting: deque[int] = deque()  # arrived, not admitted
    prefilling: list[deque] = [deque() for _ in range(groups)]  # per group: [request, prompt tokens left]
    running: list[tuple[float, int]] = []  # heap of (decoded-token count at which it finishes, request)
    decoded = 0.0  # tokens each running sequence has decoded since the run began (all advance together)
    home = [0] * prompts  # the attention group a request runs in
    seqs = [0] * groups  # sequences admitted and not finished, per group
    decoding = [0] * groups
    reserved = [0] * groups  # KV tokens reserved, per group
    first = [0.0] * prompts
    done = [0.0] * prompts
    t, arrived, finished, peak, nsteps = 0.0, 0, 0, 0, 0

    def finish(r: int) -> None:
        nonlocal finished
        g = home[r]
        done[r] = t
        finished += 1
        seqs[g] -= 1
        reserved[g] -= reqs[r][0] + reqs[r][1]

    while finished < prompts:
        while arrived < prompts and arrival[arrived] <= t + 1e-12:
            waiting.append(arrived)
            arrived += 1
        while waiting:  # FCFS, each to the least loaded group with room (DP load balancing)
            r = waiting[0]
            need = reqs[r][0] + reqs[r][1]
            g = min(range(groups), key=lambda i: (seqs[i], reserved[i]))
            if seqs[g] >= max_seqs or (reserved[g] + need > kv_group and seqs[g]):
                break  # waits for a finishing request (a lone one is admitted anyway)
            waiting.popleft()
            home[r], seqs[g], reserved[g] = g, seqs[g] + 1, reserved[g] + need
            prefilling[g].append([r, reqs[r][0]])
        if not running and not any(prefilling):
            t = max(t, arrival[arrived])  # idle until the next arrival
            continue
        most, completed = 0, []  # the most prompt tokens one group prefills in this step
        for g in range(groups):
            free = max(0, chunk - decoding[g]) if mixed else chunk
            take = 0
            for item in prefilling[g]:
                if take >= free:
                    break
                part = min(item[1], free - take)
                item[1] -= part
                take += part
                if item[1] == 0:
                    completed.append(item[0])
            prefilling[g] = deque(i for i in prefilling[g] if i[1] > 0)
            most = max(most, take)
        if most:  # groups step in lockstep: the busiest group's chunk sets the step; mixed carries the decodes
            dt = steps.prefill(most * groups)
            if mixed and running:
                dt += steps.decode(len(running))[1]
            k = 1 if mixed else 0
            t += dt
            nsteps += 1
        else:  # decode only: jump to the next finish or arrival
            dt = steps.decode(len(running))[0]
            k = max(1, math.ceil((running[0][0] - decoded) / accept - 1e-9))
            if arrived < prompts:
                k = max(1, min(k, math.ceil((arrival[arrived] - t) / dt - 1e-9)))
            t += k * dt
            nsteps += k
        decoded += k * accept
        while running and running[0][0] <= decoded + 1e-9:
            r = heapq.heappop(running)[1]
            decoding[home[r]] -= 1
            finish(r)
        for r in completed:  # the prompt's last chunk yields its first token
            first[r] = t
            if reqs[r][1] <= 1:
                finish(r)
            else:
                heapq.heappush(running, (decoded + reqs[r][1] - 1, r))
                decoding[home[r]] += 1
        peak = max(peak, len(running))
    seconds = max(done)
    gpus = layout.gpus
    tpots = [(done[r] - first[r]) / (reqs[r][1] - 1) for r in range(prompts) if reqs[r][1] > 1]
    return RunResult(prompts, seconds, sum(o_ for _, o_ in reqs) / seconds / gpus,
                     sum(i for i, _ in reqs) / seconds / gpus,
                     1e3 * sum(tpots) / max(1, len(tpots)),
                     1e3 * sum(first[r] - arrival[r] for r in range(prompts)) / prompts, peak, nsteps)
