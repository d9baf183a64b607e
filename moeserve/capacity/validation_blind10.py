"""The tenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 985e947 by someone who did not change the model; none of
them was used to choose a mechanism or a factor. Each case says which reading of its source was taken
where the source is silent (`assumed`). No figure here is used by another part; both sources are earlier
parts' (blinds 1 and 3), at rows those parts did not take, read as they read them.

Sources:
- NVIDIA, TensorRT-LLM docs 'Performance Overview' (docs/source/developer-guide/perf-overview.md at commit 03e27c7,
  the same tables at 585c756): trtllm-bench max-throughput runs, 'Per GPU Output Throughput (tps/gpu)', requests
  of fixed lengths ('--input-stdev=0 --output-stdev=0') queued at once (3,000 at 1K/1K, 1,500 at 8K/1K and 1K/8K,
  1,000 at 32K/1K and 1K/32K), the page's llm_options: DeepSeek R1 'enable_attention_dp: true', 'moe_config:
  backend: CUTLASS', 'kv_cache_config: dtype: fp8'; Qwen3 MoE 'enable_attention_dp: true' and no KV format; CUDA
  graphs with padding; '--kv_cache_free_gpu_mem_fraction 0.95' in many cases, else 0.90. Its DeepSeek R1 0528
  table, rows blinds 1 and 3 did not take: B200 DEP4 (FP4) 1024/8192 '3,862' and 1024/32768 '1,451', GB200 DEP4
  (FP4) 1024/32768 '1,465' and 8192/1024 '1,192'; its Qwen3 235B A22B table: B200 DEP4 (FP4) 1024/8192 '3,389',
  1024/32768 '1,255', 8192/1024 '1,410', 32768/1024 '319'; GB200 DEP4 (FP4) 1024/8192 '3,423', 8192/1024 '1,464',
  32768/1024 '333'; H200 DEP4 (FP8) 32768/1024 '134'; H100 DEP8 (FP8) 1024/8192 '873'.
- Qwen, 'Speed Benchmark' (Qwen3 docs, docs/source/getting_started/speed_benchmark.md in github.com/QwenLM/Qwen3,
  last changed in c7f51a1, 2025-05-20), its 'Qwen3-235B-A22B (SGLang)' table on H20 96GB (SGLang 0.4.6.post1,
  batch 1, 2,048 generated tokens, speed = (prompt + generated tokens) / time), the rows blind 1, blind 3 and the
  held-out part did not take: '6144 | BF16 | 8 | 289.03 | TP=8', '14336 | BF16 | 8 | 546.73 | TP=8' and
  '63488 | FP8 | 4 | 1269.34 | TP=4'.

Figures looked at and not taken: the perf overview's 1000/1000 rows (the 1024/1024 run within 1%, already in
blind 1), its Llama, GPT-OSS and Qwen3-30B tables (models configure does not ship) and its RTX 6000 Pro tables (no
profile); Qwen's GPTQ-INT4 rows (configure has no INT4 weights); TensorRT-LLM tech blog 3 ('Optimizing DeepSeek R1
Throughput on NVIDIA Blackwell GPUs': 4,600 TPS/GPU at 1K/2K on 8 B200, the held-out best-practice runs' setting,
with no concurrency given); TensorRT-LLM PRs #11595, #16254 and #16809 (recipe-database refreshes for DeepSeek-R1
on B200 and H200: configs and concurrencies, no measured table in what could be read); TensorRT-LLM issues
#3486 and #3594 (users' reproductions, the latter's figures only as images); tenstorrent/tt-inference-server
issue #356's first 16xH100 sweep (TPOT 31.2 ms at concurrency 1: the comment names no engine, and blind 2 took
the sweep that names SGLang); LMDeploy issue #2960 (DeepSeek-V3 on 8 H20 and H800: memory only, no speed). No
H800 figure, and no H20 figure beyond Qwen's, with a stated layout and concurrency was found in the time given.

Readings common to all: a perf-overview row as blinds 1 and 3 read it (colocated: prefill interleaved with decode
on the same GPUs; attention data-parallel with the experts over the instance's GPUs, no redundant experts and
EPLB's balance assumed as theirs; the batch the largest whose KV cache fits, the page not publishing the
concurrency; DeepSeek-R1-0528 as NVIDIA's NVFP4-v2 checkpoint on Blackwell (NVFP4 experts, dense FFNs and
all-to-all, FP8 attention and KV) and FP8 on Hopper; Qwen3-235B-A22B as nvidia/Qwen3-235B-A22B-FP4 with every
linear layer FP4 on Blackwell and nvidia/Qwen3-235B-A22B-FP8 on Hopper, BF16 KV (the page's Qwen3 options set
no KV format; since corrected to the checkpoints' FP8 KV, validation_blind.MODELOPT_QWEN3_KV, with RECORDED kept)); a Qwen speed row as blind 1 reads it ((prompt + 2,048) / the request's time: the prompt in one
prefill pass, then 2,047 decode steps of one sequence over the TP group; BF16 KV; CUDA graphs at decode).
"""
from __future__ import annotations


from moeserve.capacity.balance import ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind import PERF, QWEN3_KV_TEXT, R1_V2, _qwen, qwen3_modelopt
from moeserve.capacity.validation_cases import Case

_FP4 = Precision(weights="fp4")  # nvidia/Qwen3-235B-A22B-FP4, as blind 1 reads it
_FP8 = Precision(weights="fp8")


def _perf(name: str, hw: str, n: int, isl: int, osl: int, published: float, prec: Precision, model: str) -> Case:
    """A row of TensorRT-LLM's perf overview, read as blinds 1 and 3 read it."""
    if model == "deepseek-r1":
        text = (f"DeepSeek-R1-0528; attention data-parallel, experts over the {n} GPUs, no redundant experts; "
                "batch: the largest whose KV cache fits (concurrency not published); FP8 KV (the page's config); "
                + ("NVFP4-v2 checkpoint" if prec.moe_weights == "fp4" else "FP8 checkpoint"))
    else:
        text = (f"Qwen3-235B-A22B; attention data-parallel, experts over the {n} GPUs; batch: the largest whose KV "
                "cache fits (concurrency not published); " + QWEN3_KV_TEXT
                + ("NVFP4 checkpoint, every linear layer FP4" if prec.weights == "fp4" else "FP8 checkpoint"))
        prec = qwen3_modelopt(prec)
    return Case(name, PERF, hw, "colocated", Layout(1, n, 0), None, Workload(isl, osl),
                Options(balancedness=ASSUMED_REPLICATED), published, "tok/s/GPU", text, prec, model=model,
                batch_rule="fit", blind=10)


_R1 = "deepseek-r1"
_Q = "qwen3-235b-a22b"

BLIND10 = [
    _perf("TensorRT-LLM perf overview, B200 DEP4, 1K/8K", "b200", 4, 1024, 8192, 3_862, R1_V2, _R1),
    _perf("TensorRT-LLM perf overview, B200 DEP4, 1K/32K", "b200", 4, 1024, 32768, 1_451, R1_V2, _R1),
    _perf("TensorRT-LLM perf overview, GB200 DEP4, 1K/32K", "gb200", 4, 1024, 32768, 1_465, R1_V2, _R1),
    _perf("TensorRT-LLM perf overview, GB200 DEP4, 8K/1K", "gb200", 4, 8192, 1024, 1_192, R1_V2, _R1),
    _perf("TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 1K/8K", "b200", 4, 1024, 8192, 3_389, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 1K/32K", "b200", 4, 1024, 32768, 1_255, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 8K/1K", "b200", 4, 8192, 1024, 1_410, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 32K/1K", "b200", 4, 32768, 1024, 319, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 1K/8K", "gb200", 4, 1024, 8192, 3_423, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 8K/1K", "gb200", 4, 8192, 1024, 1_464, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 32K/1K", "gb200", 4, 32768, 1024, 333, _FP4, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B H200 DEP4 FP8, 32K/1K", "h200", 4, 32768, 1024, 134, _FP8, _Q),
    _perf("TensorRT-LLM perf overview, Qwen3-235B H100 DEP8 FP8, 1K/8K", "h100", 8, 1024, 8192, 873, _FP8, _Q),
    _qwen(6144, "bf16", 8, 289.03, blind=10),
    _qwen(14336, "bf16", 8, 546.73, blind=10),
    _qwen(63488, "fp8", 4, 1269.34, blind=10),
]

# Predicted when recorded (the model of main at 985e947): name -> tokens/s in the case's unit.
RECORDED = {
    'TensorRT-LLM perf overview, B200 DEP4, 1K/8K': 4230.5,
    'TensorRT-LLM perf overview, B200 DEP4, 1K/32K': 1374.8,
    'TensorRT-LLM perf overview, GB200 DEP4, 1K/32K': 1526.4,
    'TensorRT-LLM perf overview, GB200 DEP4, 8K/1K': 953.6,
    'TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 1K/8K': 2081.2,
    'TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 1K/32K': 609.9,
    'TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 8K/1K': 755.9,
    'TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 32K/1K': 141.3,
    'TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 1K/8K': 2181.8,
    'TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 8K/1K': 804.3,
    'TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 32K/1K': 151.9,
    'TensorRT-LLM perf overview, Qwen3-235B H200 DEP4 FP8, 32K/1K': 55.3,
    'TensorRT-LLM perf overview, Qwen3-235B H100 DEP8 FP8, 1K/8K': 537.9,
    'Qwen3-235B-A22B, H20 TP8 BF16, batch 1, 6,144-token prompt': 298.3,
    'Qwen3-235B-A22B, H20 TP8 BF16, batch 1, 14,336-token prompt': 574.5,
    'Qwen3-235B-A22B, H20 TP4 FP8, batch 1, 63,488-token prompt': 1396.4,
}
