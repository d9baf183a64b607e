"""The third blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 529c01b, while a model change was being made by someone who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`).

Sources:
- vLLM recipes, moonshotai/Kimi-K2.md (github.com/vllm-project/recipes, added 2025-09-25 in commit
  5959bb0): 'FP8 Benchmark on 16xH800', the expected output of 8 requests of 1,000 in / 512 out at 1
  request a second; the recipe's TP 8 x PP 2 launch line serves one sequence at a time (--max-num-seqs 1).
- SemiAnalysis InferenceX issue #870 ('deepseek sglang h200 experimental', 2026-03-05): the
  concurrency-4 run of DeepSeek-R1-0528 FP8 on 8 H200 (SGLang v0.5.7, TP 8) at 1k/8k and 8k/1k.
- gpustack docs, performance-lab/deepseek-r1/h200.md (2025-10-15) and qwen3-235b-a22b/h100.md
  (2025-11-12), github.com/gpustack/gpustack: 'random 32K input' runs of vLLM v0.11.0, 100 prompts of
  32,000 tokens (100 generated) sent at once.
- SGLang PR #7687 ('Add H200 fused MoE kernel configs for DeepSeek-V3 in triton 3.3.1', 2025-07-01):
  DeepSeek-V3 on two H200 nodes at --tp 16, 200 prompts of 1,024 in / 512 out at concurrency 8.
- SGLang PR #7631 ('Add H20 fused MoE kernel configs for Dpsk & Qwen3', 2025-06-29): DeepSeek-V3-0324 on 8
  H20 at --tp 8, 200 random prompts (1,024 / 512 at most) at concurrency 8, the run without the PR's
  tuned fused-MoE configs.
- vLLM blog 'Driving vLLM WideEP and Large-Scale Serving Toward Maturity on Blackwell (Part I)'
  (blog.vllm.ai, 2026-02-03): 10.1K decode tokens per GPU second on one decode instance of 8 GB200.
- vLLM blog 'DeepSeek-V3.2 on GB300: Performance Breakthrough' (blog.vllm.ai, 2026-02-13):
  DeepSeek-R1-0528-NVFP4 at EP 2 on 2 GB300, 3,072 output tokens per GPU second at ISL 2K / OSL 1K.
- AMD ROCm blog 'Practical, Fault-Robust Distributed Inference for DeepSeek on AMD MI300X'
  (rocm.blogs.amd.com, 2025-11-12): 32.3k input tokens per second per node on the prefill side of a
  2P2D instance (2,000-token prompts), vLLM with AITER and MoRI-EP.
- TensorRT-LLM's performance overview (docs/source/developer-guide/perf-overview.md at commit 03e27c7),
  rows blind 1 did not take: trtllm-bench max throughput, output tokens per GPU second, colocated.
- Qwen's 'Speed Benchmark' (Qwen3 docs, docs/source/getting_started/speed_benchmark.md in
  github.com/QwenLM/Qwen3, 2025-05-20): the Qwen3-235B-A22B rows on H20 that blind 1 and the held-out
  part did not take (SGLang 0.4.6.post1, batch 1, 2,048 generated tokens).

Readings common to all: a throughput of a run that interleaves prefill with decode on the same GPUs is
predicted as colocated; a mean TPOT as 1 / TPOT of decode; a run whose time is almost all prefill (the
32K-prompt runs: 100 output tokens per 32,000 input) as prefill, in chunks of the engine's default
tokens per step (vLLM's 8,192 for a server on a card of 70 GB or more) spread over the TP group.
"""
from __future__ import annotations


from moeserve.capacity.balance import ASSUMED_PLAIN, ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind import PERF, QWEN3_KV_TEXT, R1_V2, _qwen, qwen3_modelopt
from moeserve.capacity.validation_blind2 import R1_FP4
from moeserve.capacity.validation_cases import Case

VLLM_K2 = ("vLLM recipes, moonshotai/Kimi-K2.md (github.com/vllm-project/recipes, commit 5959bb0), "
           "'FP8 Benchmark on 16xH800'")
IX_870 = "SemiAnalysis InferenceX issue #870 (github.com/SemiAnalysisAI/InferenceX/issues/870)"
GPUSTACK_R1 = ("gpustack docs 'Optimizing DeepSeek-R1 Throughput on NVIDIA H200 GPUs' "
               "(github.com/gpustack/gpustack docs/performance-lab/deepseek-r1/h200.md, 2025-10-15)")
GPUSTACK_QWEN = ("gpustack docs 'Optimizing Qwen3-235B-A22B Throughput on NVIDIA H100 GPUs' "
                 "(github.com/gpustack/gpustack docs/performance-lab/qwen3-235b-a22b/h100.md, 2025-11-12)")
SGL_7687 = "SGLang PR #7687 (github.com/sgl-project/sglang/pull/7687), DeepSeek-V3 on 2 x 8 H200 at --tp 16"
SGL_7631 = ("SGLang PR #7631 (github.com/sgl-project/sglang/pull/7631), DeepSeek-V3-0324 on 8 H20, the run without "
            "MoE config")
VLLM_GB200 = ("vLLM blog 'Driving vLLM WideEP and Large-Scale Serving Toward Maturity on Blackwell (Part I)' "
              "(2026-02-03)")
VLLM_GB300 = ("vLLM blog 'DeepSeek-V3.2 on GB300: Performance Breakthrough' "
              "(blog.vllm.ai/2026/02/13/gb300-deepseek.html)")
AMD_MI300X = ("AMD ROCm blog 'Practical, Fault-Robust Distributed Inference for DeepSeek on AMD MI300X' "
              "(rocm.blogs.amd.com, 2025-11-12)")

# InferenceX's random prompts: uniform in [0.8 L, L], mean 0.9 L (1,024 -> 922, 8,192 -> 7,373)
_IX_H200 = ("DeepSeek-R1-0528 FP8, SGLang v0.5.7 --tp 8 (experts split TP 8), BF16 KV, no MTP, CUDA graphs; "
            "mean prompt {isl:,} and output {osl:,} tokens (InferenceX's 0.8 range ratio); concurrency 4 on 8 GPUs")
_GPUSTACK = ("input tokens / duration / {n} GPUs of the run of 100 prompts of 32,000 tokens sent at once, prefilled "
             "in vLLM's default chunks of 8,192 tokens per step ({b:,} per GPU of the TP group); the 100 generated "
             "tokens a request (0.3% of the tokens) and the tail of decode left out; {rest}")
_PERF_QWEN = ("Qwen3-235B-A22B; attention data-parallel, experts over the {n} GPUs; batch: the largest whose KV "
              "cache fits (concurrency not published); " + QWEN3_KV_TEXT + "FP8 checkpoint")


def _perf(name: str, hw: str, n: int, isl: int, osl: int, published: float, prec: Precision, model: str) -> Case:
    """A row of TensorRT-LLM's perf overview, read as blind 1 reads it (validation_blind.py)."""
    if model == "deepseek-r1":
        text = (f"DeepSeek-R1-0528; attention data-parallel, experts over the {n} GPUs, no redundant experts; "
                "batch: the largest whose KV cache fits (concurrency not published); FP8 KV (the page's config); "
                + ("NVFP4-v2 checkpoint" if prec.moe_weights == "fp4" else "FP8 checkpoint"))
    else:
        text, prec = _PERF_QWEN.format(n=n), qwen3_modelopt(prec)
    return Case(name, PERF, hw, "colocated", Layout(1, n, 0), None, Workload(isl, osl),
                Options(balancedness=ASSUMED_REPLICATED), published, "tok/s/GPU", text, prec, model=model,
                batch_rule="fit", blind=3)


BLIND3 = [
    Case("vLLM Kimi K2 16xH800 TP8 x PP2, batch 1", VLLM_K2, "h800", "decode", Layout(8, 1, 0, pp=2), 1 / 16,
         Workload(1000, 512), Options(), 1000 / 30.78, "tok/s/user",
         "1 / the mean TPOT (30.78 ms) of 8 requests of 1,000 in / 512 out; the recipe's TP 8 x PP 2 launch "
         "(--max-num-seqs 1: one sequence at a time, which the 58 s mean TTFT of requests sent 1 a second shows): one "
         "sequence on 16 GPUs, the two pipeline stages one after the other (recorded, before the model had pipeline "
         "parallelism, as one TP-8 pass through all 61 layers without the hop between the nodes); FP8 weights "
         "(--quantization fp8), FP8 KV (--kv-cache-dtype fp8), CUDA graphs",
         Precision(weights="fp8", kv="fp8"), model="kimi-k2", blind=3),
    Case("InferenceX, SGLang 8xH200 TP8, concurrency 4, 1K/8K", IX_870, "h200", "decode", Layout(8, 1, 0), 4 / 8,
         Workload(922, 7373), Options(), 1000 / 10.93, "tok/s/user",
         "1 / the mean TPOT (10.93 ms); " + _IX_H200.format(isl=922, osl=7373), Precision(weights="fp8"),
         model="deepseek-r1", blind=3),
    Case("InferenceX, SGLang 8xH200 TP8, concurrency 4, 8K/1K", IX_870, "h200", "decode", Layout(8, 1, 0), 4 / 8,
         Workload(7373, 922), Options(), 1000 / 12.05, "tok/s/user",
         "1 / the mean TPOT (12.05 ms); " + _IX_H200.format(isl=7373, osl=922), Precision(weights="fp8"),
         model="deepseek-r1", blind=3),
    Case("vLLM 8xH200 TP8 prefill, 32K prompts", GPUSTACK_R1, "h200", "prefill", Layout(8, 1, 0), 8192 / 8,
         Workload(32000, 1), Options(), 3_199_900 / 206.90 / 8, "tok/s/GPU",
         _GPUSTACK.format(n=8, b=1024, rest="the baseline 'vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8' (experts "
                          "split TP 8), FP8 weights, BF16 KV"),
         Precision(weights="fp8"), model="deepseek-r1", blind=3),
    Case("vLLM Qwen3-235B 8xH100 TP8 BF16 prefill, 32K prompts", GPUSTACK_QWEN, "h100", "prefill", Layout(8, 1, 0),
         8192 / 8, Workload(32000, 1), Options(), 3_200_000 / 141.60 / 8, "tok/s/GPU",
         _GPUSTACK.format(n=8, b=1024, rest="the baseline 'vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 -tp 8' "
                          "(BF16, experts split TP 8), BF16 KV"),
         Precision(weights="bf16"), model="qwen3-235b-a22b", blind=3),
    Case("vLLM Qwen3-235B 4xH100 TP4 FP8 prefill, 32K prompts", GPUSTACK_QWEN, "h100", "prefill", Layout(4, 1, 0),
         16384 / 4, Workload(32000, 1), Options(), 3_200_000 / 208.79 / 4, "tok/s/GPU",
         "input tokens / duration / 4 GPUs of the run of 100 prompts of 32,000 tokens sent at once against one "
         "instance of the optimized 'vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 4 "
         "--max-num-batched-tokens 16384' (the page runs two such instances on 8 GPUs: 'x2'); 16,384 tokens per step "
         "(4,096 per GPU of the TP group); FP8 weights, BF16 KV; the 100 generated tokens a request left out",
         Precision(weights="fp8"), model="qwen3-235b-a22b", blind=3),
    Case("SGLang DeepSeek-V3 2x8 H200 TP16, concurrency 8", SGL_7687, "h200", "colocated", Layout(16, 1, 0), 8 / 16,
         Workload(1024, 512), Options(prefill="separate"), 200 * 512 / 409.60 / 16, "tok/s/GPU",
         "output tokens (200 x 512) / the duration with the PR's configs (409.60 s) / 16 GPUs; prompts exactly 1,024 "
         "in / 512 out (--random-range-ratio 1), concurrency 8 over one TP-16 group across two nodes; FP8 weights, "
         "BF16 KV, experts split TP 16 (the Triton fused MoE the PR tunes), no DP attention, CUDA graphs",
         Precision(weights="fp8"), blind=3),
    Case("SGLang DeepSeek-V3 8xH20 TP8, concurrency 8 (untuned fused MoE)", SGL_7631, "h20", "colocated",
         Layout(8, 1, 0), 8 / 8, Workload(515, 268), Options(prefill="separate"), 53_590 / 171.49 / 8, "tok/s/GPU",
         "output tokens / duration (171.49 s) / 8 GPUs of 200 prompts at concurrency 8; the random lengths of "
         "bench_serving's default range ratio 0 (uniform up to 1,024 in / 512 out) give 103,005 input tokens (the PR) "
         "and 53,590 output tokens (the same seed's total in SGLang PR #6885): means 515 / 268; FP8 weights, BF16 KV, "
         "experts split TP 8, --context-length 4096; the Triton fused-MoE kernels ran on default configs (the PR adds "
         "tuned ones)",
         Precision(weights="fp8"), blind=3),
    Case("vLLM GB200 decode, DP8 EP8, 2K/2K", VLLM_GB200, "gb200", "decode", Layout(1, 8, 0), None,
         Workload(2048, 2048), Options(balancedness=ASSUMED_PLAIN), 10_100, "tok/s/GPU",
         "10.1K decode tokens per GPU second on one decode instance of 8 GB200 (DP 8 + EP 8) at 2K in / 2K out; "
         "batch: the largest that fits ('the decode batch size that fully utilizes GPU memory'); NVFP4 experts and "
         "dense FFNs, FP8 attention GEMMs (the post's NVFP4 o_proj costed with them) and KV, NVFP4 dispatch; no "
         "redundant experts and no dual-batch overlap (neither named for GB200)", R1_FP4, model="deepseek-r1",
         batch_rule="fit", blind=3),
    Case("vLLM GB300 EP2 NVFP4, 2K/1K mixed", VLLM_GB300, "gb300", "colocated", Layout(1, 2, 0), 500,
         Workload(2048, 1024), Options(balancedness=ASSUMED_PLAIN), 3_072, "tok/s/GPU",
         "output tokens per GPU second (3,072 TGS) of DeepSeek-R1-0528-NVFP4 on 2 GB300 at EP 2 (-dp 2 "
         "--enable-expert-parallel), vLLM v0.14.1, prefill and decode on the same GPUs; concurrency not published: "
         "500 sequences per GPU assumed (the 1,000-prompt runs hold at most 1,000 at once); 8,192 tokens per prefill "
         "chunk (vLLM's default); no redundant experts", R1_FP4, model="deepseek-r1", blind=3),
    Case("vLLM MI300X prefill, EP16 over two nodes, 2K input", AMD_MI300X, "mi300x", "prefill", Layout(1, 16, 0),
         8192, Workload(2000, 1), Options(balancedness=ASSUMED_PLAIN), 32_300 / 8, "tok/s/GPU",
         "32.3k input tokens per second per node of the two prefill nodes of a 2P2D instance, 2,000-token prompts; DP "
         "attention with EP 16 across the two nodes assumed (the post's EP16 design); 8,192 tokens per rank per step "
         "assumed (vLLM's default); FP8 weights (per-token/per-channel FP8 GEMMs), FP8 MLA KV; no redundant experts "
         "and no dual-batch overlap (both future work in the post)", Precision(weights="fp8", kv="fp8"), blind=3),
    _perf("TensorRT-LLM perf overview, GB200 DEP4, 1K/8K", "gb200", 4, 1024, 8192, 4_379, R1_V2, "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, H200 DEP8, 1K/32K", "h200", 8, 1024, 32768, 438, Precision(kv="fp8"),
          "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, Qwen3-235B H200 DEP4 FP8, 1K/8K", "h200", 4, 1024, 8192, 1_417,
          Precision(weights="fp8"), "qwen3-235b-a22b"),
    _perf("TensorRT-LLM perf overview, Qwen3-235B H100 DEP8 FP8, 1K/1K", "h100", 8, 1024, 1024, 1_935,
          Precision(weights="fp8"), "qwen3-235b-a22b"),
    _qwen(14336, "fp8", 4, 514.23, blind=3),
    _qwen(63488, "bf16", 8, 1493.91, blind=3),
    _qwen(129042, "fp8", 4, 1319.66, blind=3),
]

# Predicted when recorded (the model of main at 529c01b, while a model change made without seeing these
# figures was under way): name -> tokens/s in the case's unit.
RECORDED = {
    'vLLM Kimi K2 16xH800 TP8 x PP2, batch 1': 108.7,
    'InferenceX, SGLang 8xH200 TP8, concurrency 4, 1K/8K': 93.2,
    'InferenceX, SGLang 8xH200 TP8, concurrency 4, 8K/1K': 90.5,
    'vLLM 8xH200 TP8 prefill, 32K prompts': 3769.2,
    'vLLM Qwen3-235B 8xH100 TP8 BF16 prefill, 32K prompts': 3272.8,
    'vLLM Qwen3-235B 4xH100 TP4 FP8 prefill, 32K prompts': 6687.0,
    'SGLang DeepSeek-V3 2x8 H200 TP16, concurrency 8': 38.1,
    'SGLang DeepSeek-V3 8xH20 TP8, concurrency 8 (untuned fused MoE)': 36.2,
    'vLLM GB200 decode, DP8 EP8, 2K/2K': 10967.0,
    'vLLM GB300 EP2 NVFP4, 2K/1K mixed': 4103.8,
    'vLLM MI300X prefill, EP16 over two nodes, 2K input': 7229.0,
    'TensorRT-LLM perf overview, GB200 DEP4, 1K/8K': 4665.3,
    'TensorRT-LLM perf overview, H200 DEP8, 1K/32K': 552.9,
    'TensorRT-LLM perf overview, Qwen3-235B H200 DEP4 FP8, 1K/8K': 808.0,
    'TensorRT-LLM perf overview, Qwen3-235B H100 DEP8 FP8, 1K/1K': 969.6,
    'Qwen3-235B-A22B, H20 TP4 FP8, batch 1, 14,336-token prompt': 525.1,
    'Qwen3-235B-A22B, H20 TP8 BF16, batch 1, 63,488-token prompt': 1676.6,
    'Qwen3-235B-A22B, H20 TP4 FP8, batch 1, 129,042-token prompt': 1558.5,
}
