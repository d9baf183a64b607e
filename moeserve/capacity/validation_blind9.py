"""The ninth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 61249df, while model changes were being made by others who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`). No figure here is used by another part;
the vLLM recipe is blind 3's source, at runs blind 3 did not take (it took the 16xH800 run only).

Sources:
- SemiAnalysis InferenceX blog 'Best GPU for Kimi-K2.5 Inference — Benchmarks & Comparison (April 2026)'
  (2026-04-06; github.com/SemiAnalysisAI/InferenceX-app, packages/app/content/blog/best-gpu-for-kimik2.5-inference.mdx
  at commit 2d1d3d6), its B200 rows: 8k/1k 'NVIDIA B200 | FP4 | vllm | 4,020.9 | $0.13 | 645.9 | 34.1 | 64 |
  2026-03-27' and 1k/1k 'NVIDIA B200 | FP4 | vllm | 1,112.5 | 189.1 | 28.7 | 64 | 2026-03-27' (throughput a GPU,
  [$/Mtok,] median TTFT ms, median TPOT ms, concurrency, date), with the run matrix and launch script of that
  date in github.com/SemiAnalysisAI/InferenceX (commit 626932a, 2026-03-27: .github/configs/nvidia-master.yaml
  'kimik2.5-fp4-b200-vllm', image vllm/vllm-openai:v0.17.0, model nvidia/Kimi-K2.5-NVFP4, concurrency 64 only in
  the search space '{ tp: 4, ep: 4, conc-start: 4, conc-end: 64 }'; benchmarks/single_node/kimik2.5_fp4_b200.sh:
  --tensor-parallel-size $TP, --gpu-memory-utilization 0.90, --max-num-seqs $CONC, --no-enable-prefix-caching, no
  --enable-expert-parallel and no --kv-cache-dtype, 10 x CONC prompts at --max-concurrency CONC). The table does
  not print TP; TP 4 is the matrix's only layout at concurrency 64, and the published figures agree with it (64 /
  34.1 ms = 1,877 output tok/s, 469 a GPU at TP 4 against the table's 447). This post is a month before blind 7's
  (vLLM v0.17.0 against v0.21.0). Its H200 rows are Moonshot's INT4 checkpoint (configure has no INT4 weights).
- vLLM recipes, moonshotai/Kimi-K2.md (github.com/vllm-project/recipes at commit 71aa849, 2025-10-05), 'FP8
  Benchmark on 16xH200': `vllm bench serve --dataset-name random --random-input-len 8000 --random-output-len 1000
  --request-rate 10000 --num-prompts 16 --ignore-eos`, its expected output without -dcp ('Total input tokens:
  128000', 'Total generated tokens: 16000', 'Benchmark duration (s): 62.75', 'Output token throughput (tok/s):
  254.99', 'Mean TTFT (ms): 4278.46', 'Mean TPOT (ms): 58.15'). The 16 requests are sent at once but all run
  together to the end: their mean latency (4.28 s + 999 x 58.15 ms = 62.4 s) over the 62.75 s run puts 15.9 of
  them in flight on average, so the run is read at 16 requests (1 a GPU). The recipe's launch line for 16 GPUs
  is TP 8 x PP 2 with FP8 KV (its --max-num-seqs 1 cannot be the one used: the run holds 16 at once).

Figures looked at and not taken: the recipe's '-dcp 8' run (decode context parallelism: configure has no
such split of the KV cache); the vLLM recipe DeepSeek-V3.md's expected output (one request, 7,902 / 1,000 tokens,
TPOT 15.85 ms: the page gives both an 8xH200 FP8 and a 4xB200 FP4 launch and does not say which produced it);
the SGLang cookbook's Kimi-K2.5 H200 runs (Moonshot's INT4 weights) and DeepSeek-V3.1 runs (MI300X); vLLM's blog
'Large Scale Serving: DeepSeek @ 2.2k tok/s/H200 with Wide-EP' (2025-12-17; the layout is llm-d's, not in the
post); TensorRT-LLM tech blog 20 (CUDA-graph batch sizes on GB200: relative gains only) and its Qwen3
deployment guide (no figures); InferenceX's 'Ultra-High Interactivity' post (GLM-5 only). No H800 or H20
figure with a stated layout and concurrency was found in the time given; Chinese vendors' English posts
searched had none.

Readings common to all: a median or mean TPOT is predicted as 1 / TPOT of decode at the run's requests in
flight over the GPUs of one instance (other requests' prefills interleaved with it are left out, as the earlier
parts do); an output throughput as colocated at the same batch, vLLM's prefill chunks riding in the decode steps;
InferenceX's throughput a GPU is input + output, so its output share is OSL / (ISL + OSL) (1,024 / 9,216 at 8k/1k,
1,024 / 2,048 at 1k/1k; its range ratio 0.8 scales both lengths alike: means 0.9 L); NVIDIA's Kimi-K2.5 NVFP4
checkpoint read as blind 7 reads it (NVFP4 routed experts, the rest in BF16, BF16 KV); experts split TP over the
GPUs (no --enable-expert-parallel); CUDA graphs (vLLM's default); no speculative decoding; the vision encoder idle.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

IX_KIMI_APRIL = ("SemiAnalysis InferenceX blog 'Best GPU for Kimi-K2.5 Inference' (2026-04-06, InferenceX-app commit "
                 "2d1d3d6), its B200 FP4 vllm rows (2026-03-27) with the run matrix and "
                 "benchmarks/single_node/kimik2.5_fp4_b200.sh of InferenceX at commit 626932a")
VLLM_K2_H200 = ("vLLM recipes, moonshotai/Kimi-K2.md (github.com/vllm-project/recipes, commit 71aa849), "
                "'FP8 Benchmark on 16xH200', the run without -dcp")

_NVFP4_EXPERTS = Precision(weights="bf16", moe="fp4")  # blind 7's reading of nvidia/Kimi-K2.5-NVFP4
_KIMI = ("Kimi K2.5 (nvidia/Kimi-K2.5-NVFP4) on 4 B200 of one node, vLLM v0.17.0 (the matrix's image), 10 x 64 "
         "prompts at --max-concurrency 64 (--max-num-seqs 64), ISL {isl:,} / OSL 1,024 at range ratio 0.8 (means "
         "{misl:,} / 922); TP 4 (assumed: the matrix's only layout at concurrency 64; the table prints none), "
         "experts split TP 4 (no --enable-expert-parallel), 16 sequences a GPU; NVFP4 routed experts, the rest in "
         "BF16 (assumed, as blind 7), BF16 KV (no --kv-cache-dtype), no prefix caching, CUDA graphs")


def _kimi_user(isl: int, misl: int, tpot: float) -> Case:
    return Case(f"InferenceX vLLM v0.17 Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, {isl // 1024}K/1K",
                IX_KIMI_APRIL, "b200", "decode", Layout(4, 1, 0), 64 / 4, Workload(misl, 922), Options(),
                1000 / tpot, "tok/s/user",
                f"1 / the median TPOT ({tpot} ms), read as the mean; " + _KIMI.format(isl=isl, misl=misl),
                _NVFP4_EXPERTS, model="kimi-k2", blind=9)


def _kimi_tput(isl: int, misl: int, total: float) -> Case:
    return Case(f"InferenceX vLLM v0.17 Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, {isl // 1024}K/1K, throughput",
                IX_KIMI_APRIL, "b200", "colocated", Layout(4, 1, 0), 64 / 4, Workload(misl, 922), Options(),
                total * 1024 / (isl + 1024), "tok/s/GPU",
                f"output tok/s a GPU: the table's throughput a GPU ({total:,}, input + output) x 1,024 / "
                f"{isl + 1024:,}, read as 64 in flight; prefill in vLLM's chunks interleaved with decode; "
                + _KIMI.format(isl=isl, misl=misl), _NVFP4_EXPERTS, model="kimi-k2", blind=9)


_K2_H200 = ("Kimi-K2-Instruct FP8 (block-scaled checkpoint) on 16 H200 (two nodes), vLLM (the recipe's `uv pip install "
            "-U vllm` of October 2025), 16 random prompts of 8,000 / 1,000 tokens (--ignore-eos) sent at once, read as "
            "16 in flight (15.9 on average from the published latencies), 1 a GPU; TP 8 x PP 2 (assumed: the recipe's "
            "16-GPU TP launch line, whose --max-num-seqs 1 the run cannot have used), FP8 KV (--kv-cache-dtype fp8 of "
            "that line), CUDA graphs")

BLIND9 = [
    _kimi_user(8192, 7373, 34.1),
    _kimi_user(1024, 922, 28.7),
    _kimi_tput(8192, 7373, 4020.9),
    _kimi_tput(1024, 922, 1112.5),
    Case("vLLM Kimi K2 16xH200 TP8 x PP2 FP8, 16 requests, 8K/1K", VLLM_K2_H200, "h200", "decode",
         Layout(8, 1, 0, pp=2), 16 / 16, Workload(8000, 1000), Options(), 1000 / 58.15, "tok/s/user",
         "1 / the mean TPOT (58.15 ms); " + _K2_H200, Precision(weights="fp8", kv="fp8"), model="kimi-k2", blind=9),
    Case("vLLM Kimi K2 16xH200 TP8 x PP2 FP8, 16 requests, 8K/1K, throughput", VLLM_K2_H200, "h200", "colocated",
         Layout(8, 1, 0, pp=2), 16 / 16, Workload(8000, 1000), Options(), 254.99 / 16, "tok/s/GPU",
         "output tok/s (254.99) / 16 GPUs, the 16 prefills of 8,000 tokens in vLLM's chunks inside the run; "
         + _K2_H200, Precision(weights="fp8", kv="fp8"), model="kimi-k2", blind=9),
]

# Predicted when recorded (the model of main at 61249df, while model changes made without seeing these
# figures were under way): name -> tokens/s in the case's unit.
RECORDED = {
    'InferenceX vLLM v0.17 Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, 8K/1K': 30.3,
    'InferenceX vLLM v0.17 Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, 1K/1K': 37.4,
    'InferenceX vLLM v0.17 Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, 8K/1K, throughput': 349.2,
    'InferenceX vLLM v0.17 Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, 1K/1K, throughput': 569.1,
    'vLLM Kimi K2 16xH200 TP8 x PP2 FP8, 16 requests, 8K/1K': 72.2,
    'vLLM Kimi K2 16xH200 TP8 x PP2 FP8, 16 requests, 8K/1K, throughput': 61.6,
}
