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
and as many as the KV cache holds (taken on demand, a full cache preempting the newest). Prefill as the
engine schedules it (Options.prefill): "mixed" spends each step's token budget on the running decodes first
and the rest on prompt chunks (vLLM V1, TensorRT-LLM); "stalled" and "separate" run prompt chunks as forwards
of their own while the decodes wait (SGLang; "separate" eager, without CUDA graphs; "separate-compiled" as
"separate" with compiled passes, ROCm ATOM). A request's first token
comes with its prompt's last chunk; its TPOT is (finish - first token) / (output - 1), as the benchmarks
count it.

Lengths: "fixed" (every request isl in, osl out, as `--random-range-ratio 1` sends), "uniform:R" (uniform on
mean x [1 - R, 1 + R], a random dataset with a range), "exponential" (exponential with the given mean, the
long tail of chat datasets such as ShareGPT: an assumption, the dataset's own lengths not being
available here). Lengths are the distribution's quantiles at (k + 0.5) / N, inputs paired with outputs in
fixed shuffled orders, so a run is deterministic. Arrivals: all at once, or evenly spaced at a rate
(the benchmarks draw Poisson gaps of the same mean), at most a number in flight when the benchmark caps its
concurrency (a closed loop: the next prompt is sent when one finishes).
"""
from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, replace

from moeserve.capacity.layout import Layout
from moeserve.capacity.predict import ENGINE_CHUNK, SEPARATE_MODES, Options, Predictor, Workload

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
    preemptions: int = 0  # running requests sent back to the queue by a full KV cache

    def as_dict(self) -> dict:
        return {"prompts": self.prompts, "seconds": round(self.seconds, 3),
                "output_tokens_per_s_per_gpu": round(self.output_tokens_per_s_per_gpu, 1),
                "input_tokens_per_s_per_gpu": round(self.input_tokens_per_s_per_gpu, 1),
                "mean_tpot_ms": round(self.mean_tpot_ms, 2), "mean_ttft_ms": round(self.mean_ttft_ms, 1),
                "peak_running": self.peak_running, "steps": self.steps, "preemptions": self.preemptions}


class _Steps:
    """Step times of one deployment, cached by sequences decoding and prompt tokens prefilled."""

    def __init__(self, pred: Predictor, layout: Layout, w: Workload, o: Options):
        self.pred, self.layout, self.w, self.o = pred, layout, w, o
        self.own_pass = o.pass_options()  # a prefill forward of its own ("separate" modes)
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
            o = self.own_pass if self.o.prefill in SEPARATE_MODES else replace(self.o, offload=False)
            self._prefill[key] = self.pred.prefill(self.layout, key / self.layout.gpus, self.w, o).step_ms / 1e3
        return self._prefill[key]  # rounded up: a few tokens' pass still reads every weight


def simulate(pred: Predictor, layout: Layout, w: Workload, o: Options, prompts: int, dist: str = "fixed",
             request_rate: float | None = None, max_seqs: int = DEFAULT_MAX_SEQS, chunk: int = ENGINE_CHUNK,
             kv_tokens: int | None = None, max_concurrency: int | None = None) -> RunResult:
    """Replay a run of `prompts` requests of mean lengths w.isl / w.osl (distribution `dist`) sent at once
    (request_rate None) or evenly at request_rate a second, at most max_concurrency in flight (the benchmarks'
    --max-concurrency: a request waits to be sent until one finishes; None: no cap); max_seqs and chunk are
    each scheduler's (one per attention group); kv_tokens: tokens the deployment's KV cache holds (None: from
    the memory model). TTFT counts from when a request is sent, as the benchmarks count it.

    KV is taken as the engines take it, on demand: a request is admitted when its prompt and the next step's
    tokens fit, its cache grows a token a step, and when a group's cache is full its newest running request
    is preempted (vLLM's recompute: it goes back to the head of the queue, and is prefilled again with the
    tokens it had generated when its turn comes)."""
    if prompts < 1:
        raise ValueError("a run needs at least one prompt")
    reqs = requests(prompts, w, dist)
    w = replace(w, isl_cv=max(w.isl_cv, spread_cv(dist)))
    steps = _Steps(pred, layout, w, o)
    groups = layout.attention_groups
    if kv_tokens is None:
        kv_tokens = int(pred.decode(layout, 1.0, w, o).memory["kv_tokens_capacity"]) * groups
    kv_group = kv_tokens / groups  # each attention group keeps its own sequences' KV
    arrival = [0.0 if not request_rate else k / request_rate for k in range(prompts)]  # when each may be sent
    cap = max_concurrency or prompts
    sent = [0.0] * prompts
    accept = max(1.0, o.mtp_accept)
    mixed = o.prefill == "mixed"

    waiting: deque[int] = deque()  # arrived and not running (preempted ones at the head)
    prefilling: list[deque] = [deque() for _ in range(groups)]  # per group: [request, prompt tokens left]
    heap: list[tuple[float, int, int]] = []  # (decoded count at which it finishes, request, version)
    decoded = 0.0  # tokens each running sequence has decoded since the run began (all advance together)
    home = [0] * prompts  # the attention group a request runs in
    made = [0] * prompts  # tokens generated when it last started decoding (or was preempted)
    since = [0.0] * prompts  # `decoded` when it last started decoding
    version = [0] * prompts  # bumped at each preemption: older heap entries are stale
    order: list[list[int]] = [[] for _ in range(groups)]  # running requests a group admitted, oldest first
    active = [False] * prompts  # decoding now
    seqs = [0] * groups  # sequences a group holds (prefilling or decoding)
    n_run = [0] * groups
    fixed = [0.0] * groups  # sum over a group's running of (prompt + made - since): KV = fixed + n_run x decoded
    pre_kv = [0] * groups  # KV of a group's prefilling requests (their prompts, regenerated tokens included)
    first = [-1.0] * prompts
    done = [0.0] * prompts
    t, arrived, finished, peak, nsteps, preempted = 0.0, 0, 0, 0, 0, 0

    def kv(g: int) -> float:
        return fixed[g] + n_run[g] * decoded + pre_kv[g]

    def stop(r: int) -> None:  # leaves the running set (finished or preempted)
        g = home[r]
        active[r] = False
        n_run[g] -= 1
        fixed[g] -= reqs[r][0] + made[r] - since[r]
        seqs[g] -= 1

    def start(r: int) -> None:  # decodes from now on
        g = home[r]
        active[r], since[r] = True, decoded
        n_run[g] += 1
        fixed[g] += reqs[r][0] + made[r] - decoded
        order[g].append(r)
        heapq.heappush(heap, (decoded + reqs[r][1] - made[r], r, version[r]))

    while finished < prompts:
        while arrived < prompts and arrival[arrived] <= t + 1e-12 and arrived - finished < cap:
            sent[arrived] = t
            waiting.append(arrived)
            arrived += 1
        while waiting:  # FCFS, each to the least loaded group with room (DP load balancing)
            r = waiting[0]
            need = reqs[r][0] + made[r]
            g = min(range(groups), key=lambda i: (seqs[i], kv(i)))
            if seqs[g] >= max_seqs or (kv(g) + need + n_run[g] * accept > kv_group and seqs[g]):
                break  # waits for a finishing request (a lone one is admitted anyway)
            waiting.popleft()
            home[r] = g
            seqs[g] += 1
            pre_kv[g] += need
            prefilling[g].append([r, need])
        for g in range(groups):  # a full cache preempts its group's newest running request
            while n_run[g] > 1 and kv(g) + n_run[g] * accept > kv_group:
                r = order[g].pop()
                if not active[r]:
                    continue
                stop(r)  # before `made` moves: stop takes back what start added
                made[r] += int((decoded - since[r]) + 1e-9)
                version[r] += 1
                waiting.appendleft(r)
                preempted += 1
        if not any(n_run) and not any(prefilling):
            if arrived == prompts or arrived - finished >= cap:
                raise RuntimeError("bench_run: requests wait that nothing can admit")  # a lone one always is
            t = max(t, arrival[arrived])  # idle until the next arrival
            continue
        most, completed = 0, []  # the most prompt tokens one group prefills in this step
        for g in range(groups):
            free = max(0, chunk - n_run[g]) if mixed else chunk
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
        running = sum(n_run)
        if most:  # groups step in lockstep: the busiest group's chunk sets the step; mixed carries the decodes
            dt = steps.prefill(most * groups)
            if mixed and running:
                dt += steps.decode(running)[1]
            k = 1 if mixed else 0
            t += dt
            nsteps += 1
        else:  # decode only: jump to the next finish, arrival or full cache
            while heap and (heap[0][2] != version[heap[0][1]] or not active[heap[0][1]]):
                heapq.heappop(heap)
            dt = steps.decode(running)[0]
            k = max(1, math.ceil((heap[0][0] - decoded) / accept - 1e-9))
            if arrived < prompts and arrived - finished < cap:
                k = min(k, max(1, math.ceil((arrival[arrived] - t) / dt - 1e-9)))
            for g in range(groups):
                if n_run[g]:
                    k = min(k, max(1, int((kv_group - kv(g)) / (n_run[g] * accept))))
            t += k * dt
            nsteps += k
        decoded += k * accept
        while heap and heap[0][0] <= decoded + 1e-9:
            _, r, v = heapq.heappop(heap)
            if v == version[r] and active[r]:
                stop(r)
                done[r] = t
                finished += 1
        for r in completed:  # the prompt's last chunk yields a token (the first, or the next after a preemption)
            g = home[r]
            pre_kv[g] -= reqs[r][0] + made[r]
            made[r] += 1
            if first[r] < 0:
                first[r] = t
            if made[r] >= reqs[r][1]:
                seqs[g] -= 1
                done[r] = t
                finished += 1
            else:
                start(r)
        peak = max(peak, sum(n_run))
    seconds = max(done)
    gpus = layout.gpus
    tpots = [(done[r] - first[r]) / (reqs[r][1] - 1) for r in range(prompts) if reqs[r][1] > 1]
    return RunResult(prompts, seconds, sum(o_ for _, o_ in reqs) / seconds / gpus,
                     sum(i for i, _ in reqs) / seconds / gpus,
                     1e3 * sum(tpots) / max(1, len(tpots)),
                     1e3 * sum(first[r] - sent[r] for r in range(prompts)) / prompts, peak, nsteps, preempted)
