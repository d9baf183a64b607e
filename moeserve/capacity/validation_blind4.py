"""The fourth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 850fd9a, while a model change was being made by someone who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`). No source here is used by another part.

Sources:
- TensorRT-LLM issue #5929 ('DS-R1 FP4 on B200 vs DS-R1 FP8 on H200 --- slow-down in TTFT',
  github.com/NVIDIA/TensorRT-LLM/issues/5929, 2025-07-10): LLMPerf against trtllm-serve (TensorRT-LLM
  v0.21.0rc2) on 8 H200 (DeepSeek-R1 FP8) and 8 B200 (DeepSeek-R1 FP4), attention TP 8 with the experts
  split TP 8 (EP None), TP 2 x EP 4 (EP 4) or EP 8; p50 inter-token latency at 1 and 8 concurrent requests
  of 1,600 or 8,192 input and 600 output tokens.
- The SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c, 2026-05-01), the 'Speed
  Benchmark' sections of docs/autoregressive/DeepSeek/DeepSeek-R1.md (8 B200, DeepSeek-R1-0528 FP8,
  --tp 8, SGLang 0.5.6.post1), Moonshotai/Kimi-K2.md (8 B200, Kimi-K2-Instruct, --tp 8 --dp 4
  --enable-dp-attention, with --ep 4 for throughput, SGLang 0.5.6.post1, ShareGPT prompts),
  Qwen/Qwen3.md (8 B200, Qwen3-235B-A22B-Instruct-2507 BF16, --tp 8, SGLang 0.5.6) and
  DeepSeek/DeepSeek-V3.md (8 MI300X, DeepSeek-V3, --tp 8 --dp 8 --enable-dp-attention with EAGLE MTP,
  SGLang 0.5.7, ShareGPT prompts): bench_serving outputs with their totals.
- SGLang PR #6835 ('Add H20-3e fused MoE kernel tuning configs for DeepSeek-R1/V3',
  github.com/sgl-project/sglang/pull/6835, 2025-06-03): DeepSeek-R1-0528 on 8 H20-3e (the H20 with 141 GB
  of HBM3e) at --tp 8, 200 random prompts at concurrency 8, the run without the PR's configs.

Readings common to all: a mean TPOT (or p50 inter-token latency) is predicted as 1 / TPOT of decode at
the run's concurrency over the GPUs; an output throughput of a run that interleaves prefill with decode
on the same GPUs as colocated, in chunks of 8,192 tokens, at the concurrency bench_serving reports
('Concurrency:', the mean number of requests in flight) over the GPUs; prompt and output lengths are the
run's totals over its requests (bench_serving's random lengths, uniform below the set length unless the
range ratio is 1, and ShareGPT's are both spread; the spread is left out, as the earlier parts do); KV
cache in BF16 and no speculative decoding unless the launch line sets them; no redundant experts.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import NVFP4, Case

TRT_5929 = ("TensorRT-LLM issue #5929 (github.com/NVIDIA/TensorRT-LLM/issues/5929), LLMPerf against trtllm-serve "
            "v0.21.0rc2")
COOKBOOK = "SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c), {page}, 'Speed Benchmark'"
SGL_6835 = ("SGLang PR #6835 (github.com/sgl-project/sglang/pull/6835), DeepSeek-R1-0528 on 8 H20-3e at --tp 8, the "
            "run without MoE config")

# the H20-3e: the H20's tensor cores with 141 GB of HBM3e at 4.8 TB/s (the H200's memory; 150.75 GB as the device reports it)
H20_3E = (("memory_gb", 150.75), ("memory_bandwidth_gbs", 4800))  # memory as the H200 reports it (hardware/h200.yaml)

_TRT = ("1 / the p50 inter-token latency ({itl} ms) of LLMPerf at {conc} concurrent request{s} of {isl:,} in / 600 "
        "out (fixed lengths assumed) against trtllm-serve on 8 {gpu}; attention TP 8 (no attention DP set), {moe}; "
        "{prec}; KV in BF16 (no KV quantization set) and no MTP (no speculative config set); CUDA graphs")
_FP8 = "DeepSeek-R1 FP8 checkpoint"
_FP4 = ("NVIDIA's DeepSeek-R1 FP4 checkpoint read as NVFP4 routed experts and dense FFNs, FP8 attention "
        "projections")
_MOE_TP8 = "experts split TP 8 (EP None)"
_MOE_EP4 = "experts split TP 2 x EP 4 (ep_size 4), no redundant experts"
_MOE_EP8 = "whole experts over EP 8, no redundant experts"


def _trt(name: str, gpu: str, layout: Layout, conc: int, isl: int, itl_ms: float, moe: str, fp4: bool) -> Case:
    opts = Options(balancedness=ASSUMED_PLAIN) if layout.ep > 1 else Options()
    text = _TRT.format(itl=itl_ms, conc=conc, s="s" if conc > 1 else "", isl=isl, gpu=gpu.upper(), moe=moe,
                       prec=_FP4 if fp4 else _FP8)
    return Case(name, TRT_5929, gpu, "decode", layout, conc / 8, Workload(isl, 600), opts, 1000 / itl_ms,
                "tok/s/user", text, NVFP4 if fp4 else Precision(weights="fp8"), model="deepseek-r1", blind=4)


_R1 = ("DeepSeek-R1-0528 FP8 on 8 B200 at --tp 8 (experts split TP 8, one attention group), SGLang 0.5.6.post1, "
       "BF16 KV, CUDA graphs")
_KIMI = ("Kimi-K2-Instruct (FP8 checkpoint) on 8 B200 at --tp 8 --dp 4 --enable-dp-attention: four attention groups "
         "of TP 2, {moe}; SGLang 0.5.6.post1, BF16 KV, CUDA graphs")
_QWEN = ("Qwen3-235B-A22B-Instruct-2507 (BF16) on 8 B200 at --tp 8 (experts split TP 8, one attention group), "
         "SGLang 0.5.6, BF16 KV, CUDA graphs")

BLIND4 = [
    _trt("TensorRT-LLM 8xH200 TP8 FP8, batch 1, 1.6K/600", "h200", Layout(8, 1, 0), 1, 1600, 13.78, _MOE_TP8,
         False),
    _trt("TensorRT-LLM 8xH200 TP8 EP4 FP8, batch 1, 8K/600", "h200", Layout(tp=8, ep=4, moe_tp=2), 1, 8192, 11.59,
         _MOE_EP4, False),
    _trt("TensorRT-LLM 8xH200 TP8 EP8 FP8, concurrency 8, 1.6K/600", "h200", Layout(8, 8, 0), 8, 1600, 16.42,
         _MOE_EP8, False),
    _trt("TensorRT-LLM 8xB200 TP8 EP4 FP4, batch 1, 1.6K/600", "b200", Layout(tp=8, ep=4, moe_tp=2), 1, 1600, 6.61,
         _MOE_EP4, True),
    _trt("TensorRT-LLM 8xB200 TP8 FP4, batch 1, 8K/600", "b200", Layout(8, 1, 0), 1, 8192, 7.14, _MOE_TP8, True),
    Case("SGLang 8xB200 TP8 FP8, batch 1, 1K/1K", COOKBOOK.format(page="DeepSeek/DeepSeek-R1.md"), "b200", "decode",
         Layout(8, 1, 0), 1 / 8, Workload(610, 421), Options(), 1000 / 9.16, "tok/s/user",
         "1 / the mean TPOT (9.16 ms) of 10 requests at concurrency 1, random 1,000 in / 1,000 out at range ratio 0 "
         "(mean 610 in / 421 out: the run's totals 6,101 / 4,210); " + _R1, Precision(weights="fp8"),
         model="deepseek-r1", blind=4),
    Case("SGLang 8xB200 TP8 FP8, concurrency 100, 1K/1K", COOKBOOK.format(page="DeepSeek/DeepSeek-R1.md"), "b200",
         "colocated", Layout(8, 1, 0), 92.26 / 8, Workload(500, 504), Options(prefill="separate"), 2282.90 / 8, "tok/s/GPU",
         "output tok/s (2,282.90) / 8 GPUs of 500 requests at max concurrency 100 (92.26 in flight on average), "
         "random 1,000 / 1,000 at range ratio 0 (mean 500 in / 504 out: the totals 249,831 / 252,162); " + _R1,
         Precision(weights="fp8"), model="deepseek-r1", blind=4),
    Case("SGLang 8xB200 TP8 FP8, concurrency 64, 8K/1K", COOKBOOK.format(page="DeepSeek/DeepSeek-R1.md"), "b200",
         "colocated", Layout(8, 1, 0), 59.45 / 8, Workload(3981, 530), Options(prefill="separate"), 1468.50 / 8, "tok/s/GPU",
         "output tok/s (1,468.50) / 8 GPUs of 320 requests at max concurrency 64 (59.45 in flight on average), "
         "random 8,000 / 1,000 at range ratio 0 (mean 3,981 in / 530 out: the totals 1,273,893 / 169,680); " + _R1,
         Precision(weights="fp8"), model="deepseek-r1", blind=4),
    Case("SGLang Kimi K2 8xB200 TP8 DP-attention, batch 1", COOKBOOK.format(page="Moonshotai/Kimi-K2.md"), "b200",
         "decode", Layout(tp=2, ep=1, moe_tp=8), 1 / 8, Workload(195, 276), Options(), 1000 / 18.40, "tok/s/user",
         "1 / the mean TPOT (18.40 ms) of 10 ShareGPT requests at concurrency 1 (mean 195 in / 276 out: the totals "
         "1,951 / 2,755); the one sequence in one attention group, read as 1/8 sequence per GPU; "
         + _KIMI.format(moe="experts split TP 8 (no --ep)"), Precision(weights="fp8"), model="kimi-k2", blind=4),
    Case("SGLang Kimi K2 8xB200 TP8 DP4 EP4, concurrency 100", COOKBOOK.format(page="Moonshotai/Kimi-K2.md"), "b200",
         "colocated", Layout(tp=2, ep=4, moe_tp=2), 89.60 / 8, Workload(297, 194),
         Options(balancedness=ASSUMED_PLAIN, prefill="separate"), 1113.25 / 8, "tok/s/GPU",
         "output tok/s (1,113.25) / 8 GPUs of 1,000 ShareGPT requests at max concurrency 100 (89.60 in flight on "
         "average; mean 297 in / 194 out: the totals 296,642 / 193,831); "
         + _KIMI.format(moe="experts split TP 2 x EP 4 (--ep 4), no redundant experts"),
         Precision(weights="fp8"), model="kimi-k2", blind=4),
    Case("SGLang Qwen3-235B 8xB200 TP8 BF16, batch 1, 1K/8K", COOKBOOK.format(page="Qwen/Qwen3.md"), "b200",
         "decode", Layout(8, 1, 0), 1 / 8, Workload(610, 4445), Options(), 1000 / 10.23, "tok/s/user",
         "1 / the mean TPOT (10.23 ms) of 10 requests at concurrency 1, random 1,000 in / 8,000 out at range ratio 0 "
         "(mean 610 in / 4,445 out: the totals 6,101 / 44,452); " + _QWEN, Precision(weights="bf16"),
         model="qwen3-235b-a22b", blind=4),
    Case("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 100, 1K/1K", COOKBOOK.format(page="Qwen/Qwen3.md"), "b200",
         "colocated", Layout(8, 1, 0), 90.50 / 8, Workload(500, 504), Options(prefill="separate"), 2738.78 / 8, "tok/s/GPU",
         "output tok/s (2,738.78) / 8 GPUs of 500 requests at max concurrency 100 (90.50 in flight on average), "
         "random 1,000 / 1,000 at range ratio 0 (mean 500 in / 504 out: the totals 249,831 / 252,162); " + _QWEN,
         Precision(weights="bf16"), model="qwen3-235b-a22b", blind=4),
    Case("SGLang DeepSeek-V3 8xMI300X DP-attention, batch 1, EAGLE MTP 3",
         COOKBOOK.format(page="DeepSeek/DeepSeek-V3.md"), "mi300x", "decode", Layout(tp=1, ep=1, moe_tp=8), 1 / 8, Workload(197, 278),
         Options(mtp_accept=2.61, mtp_draft=3), 1000 / 25.04, "tok/s/user",
         "1 / the mean TPOT (25.04 ms) of 10 ShareGPT requests at concurrency 1 (mean 197 in / 278 out: the totals "
         "1,972 / 2,784); DeepSeek-V3 FP8 at --tp 8 --dp 8 --enable-dp-attention (eight attention groups of one GPU, "
         "experts split TP 8, no --ep; the one sequence read as 1/8 per GPU); EAGLE MTP with 3 steps, top-k 1, 4 draft "
         "tokens read as 3 drafts a step at the run's accept length 2.61; SGLang 0.5.7, BF16 KV, CUDA graphs",
         Precision(weights="fp8"), blind=4),
    Case("SGLang DeepSeek-R1 8xH20-3e TP8, concurrency 8 (untuned fused MoE)", SGL_6835, "h20", "colocated",
         Layout(8, 1, 0), 8 / 8, Workload(515, 268), Options(prefill="separate"), 53_590 / 200.99 / 8, "tok/s/GPU",
         "output tokens (53,590) / duration (200.99 s) / 8 GPUs of 200 random prompts at concurrency 8 (1,024 in / 512 "
         "out at bench_serving's default range ratio 0: mean 515 / 268, the run's totals 103,005 / 53,590); the H20-3e "
         "read as the H20 with 141 GB at 4.8 TB/s (hw_overrides); FP8 weights, BF16 KV, experts split TP 8 (the "
         "Triton fused MoE on default configs; the PR adds tuned ones), CUDA graphs",
         Precision(weights="fp8"), model="deepseek-r1", hw_overrides=H20_3E, blind=4),
]

# Predicted when recorded (the model of main at 850fd9a, while a model change made without seeing these
# figures was under way): name -> tokens/s in the case's unit.
RECORDED = {
    'TensorRT-LLM 8xH200 TP8 FP8, batch 1, 1.6K/600': 112.8,
    'TensorRT-LLM 8xH200 TP8 EP4 FP8, batch 1, 8K/600': 110.5,
    'TensorRT-LLM 8xH200 TP8 EP8 FP8, concurrency 8, 1.6K/600': 68.2,
    'TensorRT-LLM 8xB200 TP8 EP4 FP4, batch 1, 1.6K/600': 114.6,
    'TensorRT-LLM 8xB200 TP8 FP4, batch 1, 8K/600': 114.6,
    'SGLang 8xB200 TP8 FP8, batch 1, 1K/1K': 114.6,
    'SGLang 8xB200 TP8 FP8, concurrency 100, 1K/1K': 491.1,
    'SGLang 8xB200 TP8 FP8, concurrency 64, 8K/1K': 239.5,
    'SGLang Kimi K2 8xB200 TP8 DP-attention, batch 1': 83.5,
    'SGLang Kimi K2 8xB200 TP8 DP4 EP4, concurrency 100': 311.7,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, batch 1, 1K/8K': 87.9,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 100, 1K/1K': 521.0,
    'SGLang DeepSeek-V3 8xMI300X DP-attention, batch 1, EAGLE MTP 3': 157.7,
    'SGLang DeepSeek-R1 8xH20-3e TP8, concurrency 8 (untuned fused MoE)': 35.4,
}
