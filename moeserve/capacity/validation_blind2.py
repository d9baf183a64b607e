"""The second blind part of the validation table (docs/capacity.md): published figures found and
recorded, with the predictions of the model as it then stood, before the model changes that followed
them; none of them chose a factor. The vLLM GB200 offloaded prefill's miss informed the partial-offload
mechanism (docs/capacity.md, "What changed"), so that case is no longer independent of it. Each case
says which reading of its source was taken where the source is silent (`assumed`).

Sources:
- SemiAnalysis InferenceX issue #870 ('deepseek sglang h200 experimental', 2026-03-05/06): concurrency
  sweeps run by its CI. H200: DeepSeek-R1-0528 FP8, SGLang v0.5.7, TP 8 (experts split TP 8), BF16 KV,
  FlashInfer MLA; B200: DeepSeek-R1-0528-FP4-V2, SGLang v0.5.6, TP 8 with experts over EP 8 (no DP
  attention), FP8 KV, TRT-LLM MLA and FlashInfer-TRTLLM MoE. Prompts and outputs uniform in
  [0.8 x 1,024, 1,024] tokens (InferenceX's RANDOM_RANGE_RATIO 0.8: mean 922), 10 x concurrency requests.
- tenstorrent/tt-inference-server issue #356 ('DeepSeek-R1-0528: GPU Benchmarks', 2025-07-09): 16 H100
  over InfiniBand with SGLang, concurrency 1.
- SGLang PR #13466 ('[Piecewise CUDA Graph] Support Kimi-K2', 2025-11-18): Kimi-K2-Instruct-0905 at
  --tp 8, bench_serving 1,024 in / 16 out, concurrency 1.
- TensorRT-LLM PR #11612 ('Add Qwen3-235B-A22B Pareto configs to recipe selector', 2026-02-21) and the
  config it adds, examples/configs/database/Qwen/Qwen3-235B-A22B/GB200/1k1k_tp4_conc1.yaml.
- vLLM blog 'Driving vLLM WideEP and Large-Scale Serving Toward Maturity on Blackwell (Part I)'
  (blog.vllm.ai, 2026-02-03): 26.2K prefill tokens per GPU second on prefill instances of 2 GB200 with
  weights offloaded, 2K input.
- vLLM blog 'DeepSeek on GB300' (blog.vllm.ai, 2026-02-13): DeepSeek-R1 NVFP4 at EP 2 on 2 GB300,
  22,476 prefill tokens per GPU second (ISL 2K, OSL 1, 256 prompts).

Where a figure is a throughput of a run that interleaves prefill with decode (a benchmark against one
colocated instance), it is predicted as colocated; a mean TPOT is predicted as 1 / TPOT of decode.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

IX_870 = "SemiAnalysis InferenceX issue #870 (github.com/SemiAnalysisAI/InferenceX/issues/870)"
TT_356 = "tenstorrent/tt-inference-server issue #356, 16 H100 (SGLang + InfiniBand) sweep"
SGL_13466 = "SGLang PR #13466 (github.com/sgl-project/sglang/pull/13466), Kimi-K2-Instruct-0905 --tp 8"
TRT_11612 = ("TensorRT-LLM PR #11612 (github.com/NVIDIA/TensorRT-LLM/pull/11612) with its config "
             "examples/configs/database/Qwen/Qwen3-235B-A22B/GB200/1k1k_tp4_conc1.yaml")
VLLM_GB200 = "vLLM blog 'Driving vLLM WideEP and Large-Scale Serving Toward Maturity on Blackwell (Part I)' (2026-02-03)"
VLLM_GB300 = "vLLM blog 'DeepSeek on GB300' (blog.vllm.ai/2026/02/13/gb300-deepseek.html)"

# InferenceX's random prompts: uniform in [0.8 L, L], mean 0.9 L
_IX = Workload(922, 922)
# NVIDIA's DeepSeek-R1 NVFP4 checkpoints: NVFP4 experts and dense FFNs, FP8 attention projections
R1_FP4 = Precision(weights="fp8", moe="fp4", dense="fp4", kv="fp8", dispatch="fp4")
_IX_H200 = ("DeepSeek-R1-0528 FP8, SGLang v0.5.7 --tp 8 (experts split TP 8, one attention group: the "
            "all-reduces, no dispatch), BF16 KV, no MTP, CUDA graphs; mean prompt and output 922 tokens")
_IX_B200 = ("DeepSeek-R1-0528-FP4-V2 (NVFP4 experts and dense FFNs, FP8 attention), SGLang v0.5.6 --tp 8 --ep 8 "
            "(attention TP 8, whole experts over 8 ranks), FP8 KV, no MTP; mean prompt and output 922 tokens")

BLIND2 = [
    Case("InferenceX, SGLang 8xH200 TP8, concurrency 8, 1K/1K", IX_870, "h200", "decode", Layout(8, 1, 0), 1.0,
         _IX, Options(), 1000 / 12.8, "tok/s/user", "1 / the mean TPOT (12.8 ms); " + _IX_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=2),
    Case("InferenceX, SGLang 8xH200 TP8, concurrency 32, 1K/1K", IX_870, "h200", "decode", Layout(8, 1, 0), 4.0,
         _IX, Options(), 1000 / 25.6, "tok/s/user", "1 / the mean TPOT (25.6 ms); " + _IX_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=2),
    Case("InferenceX, SGLang 8xH200 TP8, concurrency 64, 1K/1K", IX_870, "h200", "colocated", Layout(8, 1, 0), 8.0,
         _IX, Options(prefill="separate"), 223.6, "tok/s/GPU", "output tok/s per GPU; " + _IX_H200,
         Precision(weights="fp8"), model="deepseek-r1", blind=2),
    Case("InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 4, 1K/1K", IX_870, "b200", "colocated", Layout(8, 8, 0), 0.5,
         _IX, Options(balancedness=ASSUMED_PLAIN, prefill="separate"), 59.7, "tok/s/GPU",
         "output tok/s per GPU; no redundant experts (balancedness 0.70 assumed); " + _IX_B200, R1_FP4,
         model="deepseek-r1", blind=2),
    Case("InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 32, 1K/1K", IX_870, "b200", "colocated", Layout(8, 8, 0), 4.0,
         _IX, Options(balancedness=ASSUMED_PLAIN, prefill="separate"), 282.4, "tok/s/GPU",
         "output tok/s per GPU; no redundant experts (balancedness 0.70 assumed); " + _IX_B200, R1_FP4,
         model="deepseek-r1", blind=2),
    Case("SGLang 16xH100 TP16 over InfiniBand, batch 1", TT_356, "h100", "decode", Layout(16, 1, 0), 1 / 16,
         Workload(1024, 128), Options(), 1000 / 23.2, "tok/s/user",
         "1 / TPOT (23.2 ms) at 1,024 in / 128 out, concurrency 1; DeepSeek-R1-0528 FP8, BF16 KV, no MTP; TP 16 "
         "over two nodes assumed (SGLang's multi-node default; the issue gives no launch line)",
         Precision(weights="fp8"), model="deepseek-r1", blind=2),
    Case("SGLang Kimi K2 8xH200 TP8, batch 1", SGL_13466, "h200", "decode", Layout(8, 1, 0), 1 / 8,
         Workload(1024, 16), Options(), 1000 / 11.376, "tok/s/user",
         "1 / the mean TPOT (11.376 ms) at 1,024 in / 16 out, concurrency 1; FP8 weights (the checkpoint's), BF16 KV, "
         "experts split TP 8, CUDA graphs at decode; H200 inferred from the log (0.53 GB left for KV after ~129 GB "
         "of weights a GPU: only a 141 GB card fits Kimi K2 at TP 8)", Precision(weights="fp8"), model="kimi-k2",
         blind=2),
    Case("TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, batch 1", TRT_11612, "gb200", "decode", Layout(4, 4, 0), 1 / 4,
         Workload(1024, 1024), Options(), 247.1619, "tok/s/user",
         "generation tok/s per user at concurrency 1, 1K/1K (the PR's table); attention TP 4, experts over EP 4 "
         "(TRTLLM MoE backend), FP8 KV (the config), NVIDIA's NVFP4 checkpoint read as every linear layer FP4",
         Precision(weights="fp4", kv="fp8"), model="qwen3-235b-a22b", blind=2),
    Case("vLLM GB200 prefill, 2-GPU instances, weights offloaded", VLLM_GB200, "gb200", "prefill", Layout(1, 2, 0), 8192,
         Workload(2048, 1), Options(offload=True, balancedness=ASSUMED_PLAIN), 26_200, "tok/s/GPU",
         "26.2K prefill tokens per GPU second on prefill instances of 2 GB200 (DP 2 + EP 2) with the weight offloading "
         "the post describes; NVFP4 experts, FP8 attention GEMMs and KV, NVFP4 dispatch; 8,192 tokens per rank per "
         "step assumed (vLLM's default max-num-batched-tokens for a server); no redundant experts", R1_FP4,
         model="deepseek-r1", blind=2),
    Case("vLLM GB300 prefill, EP2, NVFP4", VLLM_GB300, "gb300", "prefill", Layout(1, 2, 0), 8192,
         Workload(2048, 1), Options(balancedness=ASSUMED_PLAIN), 22_476, "tok/s/GPU",
         "prefill-only throughput (ISL 2K, OSL 1, 256 prompts) of DeepSeek-R1-0528-NVFP4 on 2 GB300 at EP 2 (DP "
         "attention assumed), weights resident; 8,192 tokens per rank per step assumed (vLLM's default); no "
         "redundant experts", R1_FP4, model="deepseek-r1", blind=2),
]

# Predicted when recorded (the model of main at 3daf704, before any change made after finding these
# figures): name -> tokens/s in the case's unit. docs/capacity.md reports these as the 'recorded' column.
RECORDED = {
    'InferenceX, SGLang 8xH200 TP8, concurrency 8, 1K/1K': 77.5,
    'InferenceX, SGLang 8xH200 TP8, concurrency 32, 1K/1K': 44.0,
    'InferenceX, SGLang 8xH200 TP8, concurrency 64, 1K/1K': 256.7,
    'InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 4, 1K/1K': 53.5,
    'InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 32, 1K/1K': 279.5,
    'SGLang 16xH100 TP16 over InfiniBand, batch 1': 114.4,
    'SGLang Kimi K2 8xH200 TP8, batch 1': 111.7,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, batch 1': 87.7,
    'vLLM GB200 prefill, 2-GPU instances, weights offloaded': 6390.9,
    'vLLM GB300 prefill, EP2, NVFP4': 27796.9,
}
