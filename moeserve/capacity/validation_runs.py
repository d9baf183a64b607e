"""Validation cases read again as the benchmark runs they are (bench_run.simulate), not at a steady batch.

These published figures are whole runs of a fixed number of prompts sent at once or at a rate, and their
parts first read each at one batch (the burst's peak, every request in flight), which no run holds: the batch
fills, then drains as requests finish, the last ones decoding alone. Replaying the run step by step is a
change of mechanism made after those parts were recorded, so the figures it gives them are an after column
(docs/capacity.md, "What changed"), not blind predictions. The reading of each run's lengths is taken from
the benchmark command its source prints, decided before its figure was computed:
- ShareGPT (vllm bench serve --dataset-name sharegpt, 1,000 prompts, no rate or concurrency limit; gpustack's
  performance lab, blinds 8 and 16): the dataset's lengths read as exponential around the run's mean input
  and output (chat answers are long-tailed; the dataset's own lengths are not available here), all at once;
  the 984 requests of blind 16's Qwen3 runs (its page: 984 successful) and blind 8's 1,000.
- SGLang bench_serving --dataset-name random at its default range ratio (blind 17: 600 prompts at 40 a
  second): lengths uniform from 1 to the set length, mean about half of it, read as uniform:0.99 around the
  run's mean (93 in, 201 out).
- Runs of lengths all alike (--random-range-ratio 1, or a source's fixed lengths: blind 12's 500 prompts of
  100 in / 5K out at once and 960 of 2K / 2K at 4 a second; blind 16's DataCrunch runs of 300, 600 and 1,200
  prompts of 1K / 1K at 1, 2 and 4 a second and its 10,000 prompts of 512 / 1 and 1 / 512 at once): fixed.
An SGLang run prefills as SGLang schedules without --enable-mixed-chunk, eager passes of their own while the
decodes wait ("separate"), whatever its case read for a steady state; a TPOT is the run's mean (a median the
source gives read as it, as the cases read them); a prefill case's figure is the run's input rate.
"""
from __future__ import annotations

from dataclasses import replace

from moeserve.capacity.validation_cases import Case

SHAREGPT = "exponential"
RUNS: dict[str, tuple] = {
    "gpustack DeepSeek-R1 8xH200 vLLM v0.11.0 TP8, ShareGPT 1,000 at once": (1000, SHAREGPT, None),
    "gpustack DeepSeek-R1 8xH200 SGLang v0.5.3 TP8, ShareGPT 1,000 at once": (1000, SHAREGPT, None),
    "gpustack DeepSeek-R1 8xH200 SGLang v0.5.3 TP8 DP attention, ShareGPT 1,000 at once": (1000, SHAREGPT, None),
    "gpustack DeepSeek-R1 8xH200 TensorRT-LLM v1.0.0 TP8 EP8, ShareGPT 1,000 at once": (1000, SHAREGPT, None),
    "gpustack Qwen3-235B 8xH100 vLLM TP8 BF16, ShareGPT 1,000 at once": (984, SHAREGPT, None),
    "gpustack Qwen3-235B 8xH100 SGLang TP8 BF16, ShareGPT 1,000 at once": (984, SHAREGPT, None),
    "gpustack Qwen3-235B 8xH100 vLLM TP8 EP8 FP8, ShareGPT 1,000 at once": (984, SHAREGPT, None),
    "gpustack Qwen3-235B 4xH100 vLLM TP4 FP8, ShareGPT 1,000 at once": (984, SHAREGPT, None),
    "gpustack Qwen3-235B 4xH100 vLLM TP4 EP4 FP8, ShareGPT 1,000 at once": (984, SHAREGPT, None),
    "gpustack Qwen3-235B 4xH100 vLLM TP4 FP8, 16K batched tokens, ShareGPT 1,000 at once": (984, SHAREGPT, None),
    "SGLang DeepSeek-V3 2x8 H800 TP16, 600 random at 40 req/s": (600, "uniform:0.99", 40.0),
    "SGLang DeepSeek-V3 8xH200 EP8, 600 random at 40 req/s": (600, "uniform:0.99", 40.0),
    "SGLang DeepSeek-V3 8xH200 TP8, 600 random at 40 req/s": (600, "uniform:0.99", 40.0),
    "SGLang 2x8 H800 TP16, 2K/2K at 4 req/s, throughput": (960, "fixed", 4.0),
    "SGLang 2x8 H800 TP16, 2K/2K at 4 req/s, TPOT": (960, "fixed", 4.0),
    "SGLang 8xH20 TP8, 500 at once, 100/5K, throughput": (500, "fixed", None),
    "SGLang 8xH20 TP8, 500 at once, 100/5K, TPOT": (500, "fixed", None),
    "SGLang 8xH20 TP8 DP attention, 500 at once, 100/5K, throughput": (500, "fixed", None),
    "SGLang 8xH20 TP8 DP attention, 500 at once, 100/5K, TPOT": (500, "fixed", None),
    "vLLM 0.7.2 8xH20 TP8, 500 at once, 100/5K, throughput": (500, "fixed", None),
    "vLLM 0.7.2 8xH20 TP8, 500 at once, 100/5K, TPOT": (500, "fixed", None),
    "SGLang DeepSeek-V3 8xH200 DP-attention FP8, 1 req/s, 1K/1K, TPOT": (300, "fixed", 1.0),
    "SGLang DeepSeek-V3 8xH200 DP-attention FP8, 2 req/s, 1K/1K, TPOT": (600, "fixed", 2.0),
    "SGLang DeepSeek-V3 8xH200 DP-attention FP8, 4 req/s, 1K/1K, TPOT": (1200, "fixed", 4.0),
    "SGLang DeepSeek-V3 8xH200 TP8, 10,000 at once, prefill 512": (10_000, "fixed", None),
    "SGLang DeepSeek-V3 8xH200 DP-attention, 10,000 at once, prefill 512": (10_000, "fixed", None),
    "SGLang DeepSeek-V3 8xH200 TP8, 10,000 at once, decode 512": (10_000, "fixed", None),
    "SGLang DeepSeek-V3 8xH200 DP-attention, 10,000 at once, decode 512": (10_000, "fixed", None),
}


def as_runs(cases: list[Case]) -> list[Case]:
    """The cases, each named in RUNS read as its run; every name in RUNS must name a case."""
    names = {c.name for c in cases}
    missing = sorted(set(RUNS) - names)
    if missing:
        raise ValueError(f"validation_runs.RUNS names no case: {missing}")
    return [_as_run(c) if c.name in RUNS else c for c in cases]


def _as_run(c: Case) -> Case:
    o = replace(c.options, prefill="separate") if c.engine == "SGLang" else c.options
    return replace(c, run=RUNS[c.name], options=o)
