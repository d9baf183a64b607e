"""The fifth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 55bf35c, while a model change was being made by someone who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`). No source here is used by another part.

Sources:
- dstack blog 'DeepSeek R1 inference performance: MI300X vs. H200' (dstack.ai/blog/h200-mi300x-deepskeek-benchmark,
  2025-03-18) with its raw data and launch tasks in github.com/dstackai/benchmarks (Deepseek-R1/README.md and
  Deepseek-R1/raw_data/online_results.csv at commit 7f37e66): DeepSeek-R1 (FP8 checkpoint) on 8 H200 and 8 MI300X;
  SGLang 0.4.3.post2 (H200, --tp 8 --enable-dp-attention), vLLM 0.7.4.dev (H200, FlashMLA) and 0.7.3 (MI300X
  ROCm build) at --tensor-parallel-size 8, TensorRT-LLM's PyTorch backend (commit 9b931c0, trtllm-serve --tp_size 8
  --ep_size 4); bench_serving with 500 prompts of exactly 3,200 in / 800 out (--random-range-ratio 1) at max
  concurrency 4 to 128; the CSV gives each run's mean TPOT, output throughput and mean requests in flight.
- SGLang PR #5849 ('add fused moe config for qwen3moe fp8/bf16', github.com/sgl-project/sglang/pull/5849,
  2025-04-28): Qwen3-235B-A22B (BF16) and Qwen3-235B-A22B-FP8 at --tp 8 and --tp 4, 100 random prompts of fixed
  length (--random-range-ratio 1) sent at 10 a second, output token throughput before the PR's configs.
- SGLang PR #5846 ('[qwen3] qwen3moe_tune_h20 fp8 tp4', github.com/sgl-project/sglang/pull/5846, 2025-04-28):
  Qwen3-235B-A22B-FP8 on 4 H20 at TP 4, output token throughput before the PR's configs.
- vLLM PR #17535 ('[FEAT] [ROCm]: Add Qwen/Qwen3-235B-A22B-FP8 TP4 triton fused moe config',
  github.com/vllm-project/vllm/pull/17535, 2025-05-01): benchmark_throughput.py (offline) with 200 prompts at
  --tensor-parallel-size 4, FP8 KV, before the PR's tuned config.

Readings common to all: a mean TPOT is predicted as 1 / TPOT of decode at the run's concurrency over the GPUs
(other requests' prefills interleaved with it are left out, as the earlier parts do); an output throughput of
a run that interleaves prefill with decode on the same GPUs as colocated at the run's mean requests in flight
over the GPUs; prompts and outputs of fixed length where the run fixes them; KV cache in BF16 and no
speculative decoding unless the launch line sets them; no redundant experts.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import SGLANG_UNMIXED, Case


DSTACK = ("dstack blog 'DeepSeek R1 inference performance: MI300X vs. H200' (2025-03-18) with its raw data, "
          "github.com/dstackai/benchmarks Deepseek-R1/raw_data/online_results.csv at commit 7f37e66")
SGL_5849 = "SGLang PR #5849 (github.com/sgl-project/sglang/pull/5849), the runs before its fused-MoE configs"
SGL_5846 = ("SGLang PR #5846 (github.com/sgl-project/sglang/pull/5846), Qwen3-235B-A22B-FP8 on H20 at TP 4, the run "
            "before its fused-MoE configs")
VLLM_17535 = ("vLLM PR #17535 (github.com/vllm-project/vllm/pull/17535), Qwen3-235B-A22B-FP8 at TP 4 on ROCm, "
              "benchmark_throughput before its tuned config")

_DS = "DeepSeek-R1 FP8 checkpoint, 500 prompts of exactly 3,200 in / 800 out (--random-range-ratio 1); "
_VLLM_H200 = ("vLLM 0.7.4.dev at --tensor-parallel-size 8 (attention TP 8, experts split TP 8), FlashMLA, BF16 KV "
              "(no --kv-cache-dtype), CUDA graphs (vLLM's default)")
_SGL_H200 = ("SGLang 0.4.3.post2 at --tp 8 --enable-dp-attention: eight attention groups of one GPU, experts split "
             "TP 8 (no --enable-ep-moe); the run's sequences spread evenly over the groups; BF16 KV, CUDA graphs")
_TRT_H200 = ("TensorRT-LLM PyTorch backend (commit 9b931c0) trtllm-serve --tp_size 8 --ep_size 4: attention TP 8 (no "
             "attention DP set), experts split TP 2 x EP 4, no redundant experts; no CUDA graphs (no "
             "extra_llm_api_options: that backend captured graphs only when use_cuda_graph was set); BF16 KV")
_VLLM_MI300X = ("vLLM 0.7.3 ROCm build (rocm/vllm-dev:vllm-ds3-staging-0217) at --tensor-parallel-size 8 (experts "
                "split TP 8), BF16 KV, HIP graphs (vLLM's default)")

_QWEN_5849 = ("output tok/s ({pub:,}) / {tp} GPUs of 100 random prompts of exactly {isl:,} in / {osl:,} out "
              "(--random-range-ratio 1) sent at 10 a second: read as all 100 in flight on one TP-{tp} instance "
              "(they arrive within ~10 s of a run of {dur:.0f} s, each far longer than the arrivals; the ramp is left "
              "out); {fmt} weights, experts split TP {tp} (the Triton fused MoE on default configs, the 'before' "
              "column), BF16 KV, CUDA graphs; the card is not named by the PR: H200 read from SGLang's triton_3_2_0 "
              "config for the shape of its 'qwen3_235b_fp8_tp2' row, E=128,N=768,device_name=NVIDIA_H200 (the "
              "drive's other PRs name H20 or A800), and from its BF16 TP 4 and FP8 TP 2 rows needing 118 GB a GPU")


def _qwen_5849(name: str, fmt: str, tp: int, isl: int, osl: int, published: float) -> Case:
    text = _QWEN_5849.format(pub=published, tp=tp, isl=isl, osl=osl, dur=100 * osl / published, fmt=fmt.upper())
    return Case(name, SGL_5849, "h200", "colocated", Layout(tp, 1, 0), 100 / tp, Workload(isl, osl), SGLANG_UNMIXED,
                published / tp, "tok/s/GPU", text, Precision(weights=fmt), model="qwen3-235b-a22b", blind=5)


def _vllm_mi300x_qwen(name: str, isl: int, osl: int, published: float) -> Case:
    text = (f"output tok/s ({published:,}) / 4 GPUs of vLLM's offline benchmark_throughput.py with 200 prompts of "
            f"exactly {isl:,} in / {osl:,} out: all 200 in flight (vLLM's default 256 sequences; their FP8 KV, "
            "~15-30 GB a GPU, fits), prefill and decode interleaved; Qwen3-235B-A22B-FP8 at --tensor-parallel-size 4 "
            "(experts split TP 4, the Triton fused MoE on default configs: the 'Before Tuning' column; "
            "VLLM_ROCM_USE_AITER=0), --kv-cache-dtype fp8, HIP graphs up to 32,768 tokens; the card MI300X is not "
            "named by this PR: read from its twin PR #17530 (same author, day and command, 'for MI300X') and from "
            "the config it adds, E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8")
    return Case(name, VLLM_17535, "mi300x", "colocated", Layout(4, 1, 0), 200 / 4, Workload(isl, osl), Options(),
                published / 4, "tok/s/GPU", text, Precision(weights="fp8", kv="fp8"), model="qwen3-235b-a22b",
                blind=5)


BLIND5 = [
    Case("vLLM 8xH200 TP8, concurrency 4, 3.2K/800", DSTACK, "h200", "decode", Layout(8, 1, 0), 4 / 8,
         Workload(3200, 800), Options(), 1000 / 25.73, "tok/s/user",
         "1 / the mean TPOT (25.73 ms) at max concurrency 4 (4.00 in flight); " + _DS + _VLLM_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("vLLM 8xH200 TP8, concurrency 64, 3.2K/800", DSTACK, "h200", "colocated", Layout(8, 1, 0), 63.13 / 8,
         Workload(3200, 800), Options(), 758.38 / 8, "tok/s/GPU",
         "output tok/s (758.38) / 8 GPUs at max concurrency 64 (63.13 in flight on average); " + _DS + _VLLM_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("SGLang 8xH200 DP-attention, concurrency 8, 3.2K/800", DSTACK, "h200", "decode",
         Layout(tp=1, ep=1, moe_tp=8), 7.94 / 8, Workload(3200, 800), Options(), 1000 / 43.82, "tok/s/user",
         "1 / the mean TPOT (43.82 ms) at max concurrency 8 (7.94 in flight); " + _DS + _SGL_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("SGLang 8xH200 DP-attention, concurrency 128, 3.2K/800", DSTACK, "h200", "colocated",
         Layout(tp=1, ep=1, moe_tp=8), 125.12 / 8, Workload(3200, 800), Options(prefill="separate"), 802.54 / 8, "tok/s/GPU",
         "output tok/s (802.54) / 8 GPUs at max concurrency 128 (125.12 in flight on average); " + _DS + _SGL_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("TensorRT-LLM 8xH200 TP8 EP4, concurrency 4, 3.2K/800", DSTACK, "h200", "decode",
         Layout(tp=8, ep=4, moe_tp=2), 4 / 8, Workload(3200, 800),
         Options(cuda_graphs=False, balancedness=ASSUMED_PLAIN), 1000 / 55.12, "tok/s/user",
         "1 / the mean TPOT (55.12 ms) at max concurrency 4; " + _DS + _TRT_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("TensorRT-LLM 8xH200 TP8 EP4, concurrency 128, 3.2K/800", DSTACK, "h200", "colocated",
         Layout(tp=8, ep=4, moe_tp=2), 116.65 / 8, Workload(3200, 800),
         Options(cuda_graphs=False, balancedness=ASSUMED_PLAIN), 835.20 / 8, "tok/s/GPU",
         "output tok/s (835.20) / 8 GPUs at max concurrency 128; requests in flight 116.65 on average (mean E2E "
         "latency 111.74 s x 500 requests / 478.93 s: the CSV's concurrency column is broken for this backend, "
         "1,192); " + _DS + _TRT_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("vLLM 8xMI300X TP8, concurrency 4, 3.2K/800", DSTACK, "mi300x", "decode", Layout(8, 1, 0), 4 / 8,
         Workload(3200, 800), Options(), 1000 / 46.20, "tok/s/user",
         "1 / the mean TPOT (46.20 ms) at max concurrency 4 (4.00 in flight); " + _DS + _VLLM_MI300X,
         Precision(weights="fp8"), model="deepseek-r1", blind=5),
    Case("vLLM 8xMI300X TP8, concurrency 128, 3.2K/800", DSTACK, "mi300x", "colocated", Layout(8, 1, 0),
         125.08 / 8, Workload(3200, 800), Options(), 914.74 / 8, "tok/s/GPU",
         "output tok/s (914.74) / 8 GPUs at max concurrency 128 (125.08 in flight on average); " + _DS
         + _VLLM_MI300X, Precision(weights="fp8"), model="deepseek-r1", blind=5),
    _qwen_5849("SGLang Qwen3-235B 8xH200 TP8 BF16, 100 requests, 1K/2K", "bf16", 8, 1000, 2000, 2689),
    _qwen_5849("SGLang Qwen3-235B 8xH200 TP8 BF16, 100 requests, 5K/1K", "bf16", 8, 5000, 1000, 1376),
    _qwen_5849("SGLang Qwen3-235B 4xH200 TP4 FP8, 100 requests, 1K/2K", "fp8", 4, 1000, 2000, 2792),
    _qwen_5849("SGLang Qwen3-235B 4xH200 TP4 FP8, 100 requests, 5K/1K", "fp8", 4, 5000, 1000, 1860),
    Case("SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, 1K/2K (untuned fused MoE)", SGL_5846, "h20", "colocated",
         Layout(4, 1, 0), 100 / 4, Workload(1000, 2000), SGLANG_UNMIXED, 1733.18 / 4, "tok/s/GPU",
         "output tok/s (1,733.18, the 'Before' column) / 4 GPUs; the PR gives no command: it refers to the Qwen3 "
         "tuning drive (issue #5740) whose runs of that day (PR #5849: the same three lengths 1000-2000, 5000-1000, "
         "10000-500) send 100 random prompts of exactly 1,000 in / 2,000 out at 10 a second, read as all 100 in "
         "flight on one TP-4 instance (a run of ~115 s); FP8 weights, experts split TP 4 (Triton fused MoE on default "
         "configs), BF16 KV (their ~15 GB a GPU fits the H20's 96 GB beside 59 GB of weights), CUDA graphs",
         Precision(weights="fp8"), model="qwen3-235b-a22b", blind=5),
    _vllm_mi300x_qwen("vLLM Qwen3-235B 4xMI300X TP4 FP8, offline 200 prompts, 1K/2K", 1000, 2000, 2020.06),
    _vllm_mi300x_qwen("vLLM Qwen3-235B 4xMI300X TP4 FP8, offline 200 prompts, 5K/1K", 5000, 1000, 956.43),
]

# Predicted when recorded (the model of main at 55bf35c, while a model change made without seeing these
# figures was under way): name -> tokens/s in the case's unit.
RECORDED = {
    'vLLM 8xH200 TP8, concurrency 4, 3.2K/800': 94.0,
    'vLLM 8xH200 TP8, concurrency 64, 3.2K/800': 191.5,
    'SGLang 8xH200 DP-attention, concurrency 8, 3.2K/800': 57.8,
    'SGLang 8xH200 DP-attention, concurrency 128, 3.2K/800': 157.0,
    'TensorRT-LLM 8xH200 TP8 EP4, concurrency 4, 3.2K/800': 86.0,
    'TensorRT-LLM 8xH200 TP8 EP4, concurrency 128, 3.2K/800': 258.1,
    'vLLM 8xMI300X TP8, concurrency 4, 3.2K/800': 96.2,
    'vLLM 8xMI300X TP8, concurrency 128, 3.2K/800': 292.8,
    'SGLang Qwen3-235B 8xH200 TP8 BF16, 100 requests, 1K/2K': 406.8,
    'SGLang Qwen3-235B 8xH200 TP8 BF16, 100 requests, 5K/1K': 245.3,
    'SGLang Qwen3-235B 4xH200 TP4 FP8, 100 requests, 1K/2K': 817.4,
    'SGLang Qwen3-235B 4xH200 TP4 FP8, 100 requests, 5K/1K': 494.7,
    'SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, 1K/2K (untuned fused MoE)': 327.3,
    'vLLM Qwen3-235B 4xMI300X TP4 FP8, offline 200 prompts, 1K/2K': 1595.5,
    'vLLM Qwen3-235B 4xMI300X TP4 FP8, offline 200 prompts, 5K/1K': 839.6,
}
