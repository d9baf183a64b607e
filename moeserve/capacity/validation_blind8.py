"""The eighth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 294e9ee, while model changes were being made by others who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`). No figure here is used by another part;
gpustack's DeepSeek-R1 H200 page is blind 3's source, at runs blind 3 did not take (it took the 32K-prompt
runs only).

Sources:
- gpustack docs, performance-lab/deepseek-r1/h200.md (github.com/gpustack/gpustack at commit a5c9faf;
  docs.gpustack.ai 'Optimizing DeepSeek-R1 Throughput on NVIDIA H200 GPUs', 2025-11-12), its section
  '1. Choosing the Inference Engine' and '2. Parallelism in SGLang': DeepSeek-R1-0528 (FP8 checkpoint) on one
  node of 8 H200 with vLLM v0.11.0 (`vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8`), SGLang v0.5.3 (`--tp-size 8`,
  and `--tp-size 8 --enable-dp-attention`) and TensorRT-LLM v1.0.0 (`trtllm-serve ... --tp_size 8 --ep_size 8`),
  each measured with `vllm bench serve --dataset-name sharegpt --num-prompts 1000` (no request rate, no
  max concurrency: the 1,000 requests sent at once; 'Peak concurrent requests: 1000.00'): 219,171 input and
  about 200,800 generated tokens, the output token throughput of each run.
- SemiAnalysis InferenceX blog 'Best GPU for DeepSeek-R1-0528 Inference — Benchmarks & Comparison (April
  2026)' (github.com/SemiAnalysisAI/InferenceX-app, packages/app/content/blog/best-gpu-for-dsr1-inference.mdx
  at commit 2d1d3d6, 2026-04-06), its 8k/1k table's H200 row: 'NVIDIA H200 | FP8 | trt | 2,453.9 | $0.16 |
  8,482.4 | 106.1 | 256 | 2026-01-14' (throughput a GPU, $/Mtok, median TTFT ms, median TPOT ms, concurrency,
  date), with its launch script benchmarks/single_node/dsr1_fp8_h200_trt.sh of github.com/SemiAnalysisAI/InferenceX
  (commit 34bc7c4: trtllm-serve --backend pytorch --tp_size $TP --ep_size $EP_SIZE, FP8 KV cache at 0.75 of free
  memory, CUTLASS MoE backend, CUDA graphs up to batch 128 with padding, no speculative decoding, 10 x CONC
  prompts at --max-concurrency CONC and the run's RANDOM_RANGE_RATIO).

Figures looked at and not taken: gpustack's MTP run (its acceptance is not printed as a rate a step) and its
torch.compile run (configure has no torch.compile); its random 4K and 2K runs (bursts of 500 prompts whose
time is mostly queued prefill, their in-flight count not published); the InferenceX post's other NVIDIA
rows (dynamo-trt, disaggregated prefill at thousands of requests, MTP settings not in the post); TensorRT-LLM
PR #11612's 1K/8K and 8K/1K concurrency-1 rows (the recipe database's GB200 configs for those lengths are at
TP 1, 4 and 8 and the PR does not say which produced them).

Readings common to all: an output throughput of a run that interleaves prefill with decode on the same GPUs
is predicted as colocated at the run's requests in flight over the GPUs; a median TPOT as 1 / TPOT of decode
(other requests' prefills interleaved with it are left out, as the earlier parts do); SGLang's runs with
prefill "separate" (its scheduler runs prefill batches apart from decode unless --enable-mixed-chunk is set,
the rule blind 6 set for SGLang colocated runs); vLLM's and TensorRT-LLM's prefill chunks ride in the decode
steps; KV cache in BF16 unless the launch sets it; no speculative decoding; no redundant experts; experts
split TP over the GPUs unless an expert-parallel size is set.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

GPUSTACK_R1 = ("gpustack docs 'Optimizing DeepSeek-R1 Throughput on NVIDIA H200 GPUs' (performance-lab/deepseek-r1/"
               "h200.md, github.com/gpustack/gpustack at commit a5c9faf), engine and parallelism runs on ShareGPT")
IX_DSR1 = ("SemiAnalysis InferenceX blog 'Best GPU for DeepSeek-R1-0528 Inference' (2026-04-06, InferenceX-app commit "
           "2d1d3d6), its 8k/1k H200 trt row (2026-01-14) with benchmarks/single_node/dsr1_fp8_h200_trt.sh")

_FP8 = Precision(weights="fp8")  # DeepSeek-R1-0528's block-scaled FP8 checkpoint, BF16 KV
# ShareGPT: 219,171 input and ~200,800 generated tokens over 1,000 requests
_SHAREGPT = Workload(219, 201)
_GPUSTACK = ("output tok/s ({out:,}) / 8 GPUs of the run of 1,000 ShareGPT prompts sent at once (vllm bench serve "
             "--num-prompts 1000, no rate or concurrency limit; mean prompt 219 and output 201 tokens); read as 125 "
             "requests in flight a GPU (the published peak of 1,000 over 8; assumed: the mean over the run is lower as "
             "the burst drains, and the KV of 1,000 such requests fits); DeepSeek-R1-0528 FP8 on 8 H200, {engine}")


def _gpustack(name: str, engine: str, layout: Layout, out: float, options: Options) -> Case:
    return Case(f"gpustack DeepSeek-R1 8xH200 {name}, ShareGPT 1,000 at once", GPUSTACK_R1, "h200", "colocated",
                layout, 1000 / 8, _SHAREGPT, options, out / 8, "tok/s/GPU",
                _GPUSTACK.format(out=out, engine=engine), _FP8, model="deepseek-r1", blind=8)


# InferenceX 8k/1k at range ratio 0.8: mean prompt 7,373 and output 922 tokens
_IX_WORKLOAD = Workload(7373, 922)
_IX = ("DeepSeek-R1-0528 FP8 on 8 H200, TensorRT-LLM (InferenceX's trt image of 2026-01-14) at concurrency 256, 10 x 256 "
       "prompts of 8,192 / 1,024 at range ratio 0.8 (means 7,373 / 922); TP 8 with EP 8 and attention data-parallel "
       "(assumed: the script takes TP, EP_SIZE and DP_ATTENTION from the run matrix, which the post does not print; "
       "the matrix's throughput end at concurrency 256), 32 sequences a GPU; FP8 KV (the script); CUTLASS MoE, no "
       "redundant experts (balancedness 0.70 assumed); CUDA graphs; no MTP")

BLIND8 = [
    _gpustack("vLLM v0.11.0 TP8", "vLLM v0.11.0 at -tp 8 (attention TP 8, experts split TP 8: no "
              "--enable-expert-parallel), BF16 KV, CUDA graphs", Layout(8, 1, 0), 2621.05, Options()),
    _gpustack("SGLang v0.5.3 TP8", "SGLang v0.5.3 at --tp-size 8 (attention TP 8, experts split TP 8), BF16 KV, "
              "CUDA graphs; prefill batches apart from decode", Layout(8, 1, 0), 3172.46,
              Options(prefill="separate")),
    _gpustack("SGLang v0.5.3 TP8 DP attention", "SGLang v0.5.3 at --tp-size 8 --enable-dp-attention with no --dp "
              "(dp_size 1: one attention group, so read as TP 8 attention with experts split TP 8; assumed), BF16 "
              "KV, CUDA graphs; prefill batches apart from decode", Layout(8, 1, 0), 3414.99,
              Options(prefill="separate")),
    _gpustack("TensorRT-LLM v1.0.0 TP8 EP8", "TensorRT-LLM v1.0.0 trtllm-serve --tp_size 8 --ep_size 8 (attention TP 8, "
              "whole experts over 8 ranks, no attention DP), BF16 KV (no kv_cache_config given; assumed), CUDA graphs "
              "(the PyTorch backend's default), no redundant experts (balancedness 0.70 assumed)", Layout(8, 8, 0),
              1618.94, Options(balancedness=ASSUMED_PLAIN)),
    Case("InferenceX TensorRT-LLM DeepSeek-R1 8xH200 DEP8 FP8, concurrency 256, 8K/1K", IX_DSR1, "h200", "decode",
         Layout(1, 8, 0), 256 / 8, _IX_WORKLOAD, Options(balancedness=ASSUMED_PLAIN), 1000 / 106.1, "tok/s/user",
         "1 / the median TPOT (106.1 ms), read as the mean; " + _IX, Precision(weights="fp8", kv="fp8"),
         model="deepseek-r1", blind=8),
    Case("InferenceX TensorRT-LLM DeepSeek-R1 8xH200 DEP8 FP8, concurrency 256, 8K/1K, throughput", IX_DSR1, "h200",
         "colocated", Layout(1, 8, 0), 256 / 8, _IX_WORKLOAD, Options(balancedness=ASSUMED_PLAIN),
         2453.9 * 1024 / 9216, "tok/s/GPU",
         "output tok/s a GPU: the table's throughput a GPU (2,453.9, input + output as InferenceX counts it) x 1,024 "
         "/ 9,216; prefill chunks in the decode steps; " + _IX, Precision(weights="fp8", kv="fp8"),
         model="deepseek-r1", blind=8),
]

# Predicted when recorded (the model of main at 294e9ee, while model changes made without seeing these
# figures were under way): name -> tokens/s in the case's unit.
RECORDED = {
    'gpustack DeepSeek-R1 8xH200 vLLM v0.11.0 TP8, ShareGPT 1,000 at once': 1271.6,
    'gpustack DeepSeek-R1 8xH200 SGLang v0.5.3 TP8, ShareGPT 1,000 at once': 10.4,
    'gpustack DeepSeek-R1 8xH200 SGLang v0.5.3 TP8 DP attention, ShareGPT 1,000 at once': 10.4,
    'gpustack DeepSeek-R1 8xH200 TensorRT-LLM v1.0.0 TP8 EP8, ShareGPT 1,000 at once': 1397.5,
    'InferenceX TensorRT-LLM DeepSeek-R1 8xH200 DEP8 FP8, concurrency 256, 8K/1K': 26.6,
    'InferenceX TensorRT-LLM DeepSeek-R1 8xH200 DEP8 FP8, concurrency 256, 8K/1K, throughput': 143.7,
}
