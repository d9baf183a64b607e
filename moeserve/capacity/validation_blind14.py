"""The fourteenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at c99b6a0 (its step model is that of 985e947 and 23785e5), by someone
who did not change the model; none of them was used to choose a mechanism or a factor. Each case says which
reading of its source was taken where the source is silent (`assumed`). It was searched for figures published by
NVIDIA or run on TensorRT-LLM / NVIDIA Dynamo (TensorRT-LLM's tech blogs, docs and deployment guides, NVIDIA's
developer blogs, Dynamo's docs and recipes, MLPerf, InferenceX). No figure here
is used by another part; both sources are earlier parts' (the perf overview of blinds 1, 3 and 10 at another
release, the best-practice doc of the fitted and held-out parts at a figure they did not take).

Sources:
- NVIDIA, TensorRT-LLM docs 'Performance Overview' of release 1.2 (docs/source/developer-guide/perf-overview.md in
  github.com/NVIDIA/TensorRT-LLM, the version whose hardware list notes 'As of `release/1.2`, support for B300 and
  GB300 is in beta', published as nvidia.github.io/TensorRT-LLM/1.2.0/developer-guide/perf-overview.html): new
  trtllm-bench max-throughput measurements, 'Output Throughput per GPU (tokens/sec/GPU)', every figure different
  from the earlier release's table at commit 03e27c7 that blinds 1, 3 and 10 took. Requests of fixed lengths
  ('--input-stdev=0 --output-stdev=0') queued at once (3,000 at 1024/1024, 1,500 at 8192/1024 and 1024/8192,
  1,000 at 32768/1024 and 1024/32768); the same llm_options as 03e27c7's: DeepSeek R1 'attention_dp_config:
  batching_wait_iters: 0, enable_balance: true, timeout_iters: 60', 'enable_attention_dp: true', 'moe_config:
  backend: CUTLASS', 'kv_cache_config: dtype: fp8', CUDA graphs with padding up to 8,192; Qwen3 MoE
  'enable_attention_dp: true' and CUDA graphs, no KV format. Models: nvidia/DeepSeek-R1-0528-NVFP4-v2 and
  nvidia/Qwen3-235B-A22B-FP4 (Blackwell), deepseek-ai/DeepSeek-R1-0528 and nvidia/Qwen3-235B-A22B-FP8 (Hopper).
  Its 'Deepseek R1 0528' table, (ISL/OSL): B200 DEP4 (FP4) | GB200 DEP4 (FP4) | H200 DEP8 (FP8): '1024/1024 |
  5,757 | 4,989 | 1,724', '1024/8192 | 4,228 | 4,474 | 1,335', '1024/32768 | 1,472 | 1,582 |', '8192/1024 |
  1,176 | 1,276 |'. Its 'Qwen3 235B A22B' table, B200 DEP4 (FP4) | GB200 DEP4 (FP4) | H200 DEP4 (FP8):
  '1024/1024 | 6,423 | 6,777 | 3,494', '1024/8192 | 3,881 | 3,955 | 1,677', '1024/32768 | 1,216 | 1,240 |',
  '8192/1024 | 1,518 | 1,575 | 679', '32768/1024 | 326 | 342 | 143'. (The B300 and GB300 columns between them are
  left out, below.)
- NVIDIA, TensorRT-LLM docs 'How to get best performance on DeepSeek-R1 in TensorRT LLM'
  (docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md at commit 01c4ece), its 'B200
  min-latency' run: 'Batch = 1, ISL = 1K, OSL = 2K, num_requests = 10 from real dataset', `trtllm-bench --model
  nvidia/DeepSeek-R1-FP4 throughput --num_requests 10 --concurrency 1 --max_batch_size 1 --tp 8 --ep 2` with
  'moe_config: backend: TRTLLM' and 'speculative_config: decoding_type: MTP, num_nextn_predict_layers: 3',
  TRTLLM_ENABLE_PDL=1; its expected results: 'Per User Output Throughput (tokens/sec/user): 274.7188', 'Total
  Latency (ms): 74561.7520', 'Average request latency (ms): 7456.1219'. The fitted and held-out parts took this
  doc's H200 min-latency and B200/H200 max-throughput runs, blind 1 tech blog 1's 299 TPS/user row; this B200
  min-latency run was taken by none.

Figures looked at and not taken: the release-1.2 perf overview's B300 and GB300 columns (the page: 'support for
B300 and GB300 is in beta, and performance data should not be considered finalized'; B300 is no configure card);
an earlier stored version of the perf overview whose DeepSeek-R1 B200/GB200 figures differ from 03e27c7's (e.g.
1024/1024 '5,610 | 6,169') but whose release could not be tied to it (no commit or release note in the stored
copy; its H200 and Qwen3 figures are 03e27c7's); the v1.0 perf overview (docs/source/performance/perf-overview.md,
'NEW for v1.0'), whose Qwen3-235B-A22B table (B200 / H200 / H100, 'TP8', total output tok/s at 128/128 to
20000/2000) cannot be read as a layout: its header says TP8 while the only MoE options it prints set
enable_attention_dp (nested inside cuda_graph_config) and its expert split ('--ep $ep_size') is not printed, and
attention TP against DP changes Qwen3's KV capacity several-fold, so the reading would decide the figure; its
v0.17 version (no MoE model of configure's). TensorRT-LLM tech blog 10 (ADP balance: DeepSeek V3 on 8 GB200 at
DEP 8, 25,664 / 33,499 / 34,140 TPS): docs/capacity.md already analyses that run with the model (its 1.70-1.77x
balancing gain), so it is not out of sample. Tech blog 1's other rows (the MTP table's 1.92-3.01 acceptance rows,
the optimisation ladder 67 ... 368 TPS/user): docs/capacity.md reads draft costs and kernel gains off them (the
MTP table's 0.4-0.5 ms a draft, 168 to 173 with PDL, 299 to 340), and the ladder's intermediate states were
never released. Tech blogs 3 (4,600 TPS/GPU at 1K/2K, no concurrency; blind 10), 5 (disaggregated serving:
Pareto charts only), 8 and 14 (wide EP on GB200: charts only, numbers not printed), 15 (DeepSeek-V3.2: sparse
attention, not modelled), 20 (relative gains; blind 9). TensorRT-LLM's deployment guides for DeepSeek-R1,
Kimi K2 Thinking and Qwen3 print '[result]' placeholders, not measurements. NVIDIA's developer blogs ('NVIDIA
Blackwell Delivers World-Record DeepSeek-R1 Inference Performance', 'Delivering Massive Performance Leaps for
Mixture of Experts Inference on NVIDIA Blackwell'): charts and relative gains, layouts not stated. NVIDIA Dynamo's
docs and recipes (ai-dynamo/dynamo: recipes/deepseek-r1/trtllm/agg/b200, kimi-k2.5 trtllm recipes; the
DeepSeek-V3.2 WideEP routing A/B on 32 GB200): deployment files and a results video, no numeric table (V3.2's
sparse attention is not modelled either). MLPerf Inference v5.1 DeepSeek-R1: NVIDIA's submission configs
(layout, batch) were not found in a stored source. InferenceX: its Dynamo-TensorRT-LLM rows run MTP at an
unpublished acceptance (e.g. issue #1691's 10,012 tok/s a GPU on 32 B200 at MTP 1), its TensorRT-LLM single-node
H200 row is blind 8's. No NVIDIA figure on H20 or H800, and none of Kimi K2 with a stated layout and batch, was
found.

Readings common to all: a perf-overview row as blinds 1, 3 and 10 read that page (colocated: trtllm-bench's
in-flight batching interleaves prefill with decode on the same GPUs; attention data-parallel with the experts
over the instance's GPUs, no redundant experts, EPLB's balance assumed as theirs (ASSUMED_REPLICATED); the batch
the largest whose KV cache fits at the default 0.90 of free memory, the page publishing no concurrency and no
longer mentioning 0.95; DeepSeek-R1-0528 as NVIDIA's NVFP4-v2 checkpoint on Blackwell (NVFP4 experts, dense FFNs
and all-to-all, FP8 attention and KV) and FP8 with FP8 KV on Hopper; Qwen3-235B-A22B as nvidia/Qwen3-235B-A22B-FP4
with every linear layer FP4 on Blackwell and nvidia/Qwen3-235B-A22B-FP8 on Hopper, KV in BF16 (the page's Qwen3
options set no KV format; the reading the earlier parts kept; since corrected to the checkpoints' FP8 KV,
validation_blind.MODELOPT_QWEN3_KV, with RECORDED kept); CUDA graphs; no MTP). The min-latency run as
tech blog 1's rows are read (the held-out H200 min-latency and blind 1's 299 rows): attention TP 8, experts TP 4 x
EP 2, NVFP4 experts and dense FFNs with BF16 attention, KV and MTP layers, three MTP drafts at the blog's strict
acceptance 2.82 (the doc's 'real dataset' acceptance is not printed), the 1K prompt prefilled in one pass.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind import QWEN3_KV_TEXT, R1_V2, qwen3_modelopt
from moeserve.capacity.validation_cases import Case

PERF_12 = ("NVIDIA, TensorRT-LLM docs 'Performance Overview' of release 1.2 (nvidia.github.io/TensorRT-LLM/1.2.0/"
           "developer-guide/perf-overview.html; trtllm-bench max throughput)")
BEST_PERF = ("NVIDIA, TensorRT-LLM docs 'How to get best performance on DeepSeek-R1 in TensorRT LLM' (B200 "
             "min-latency, Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md at 01c4ece)")

_FP4 = Precision(weights="fp4")  # nvidia/Qwen3-235B-A22B-FP4, as blinds 1 and 10 read it
_FP8 = Precision(weights="fp8")
_R1_FP8 = Precision(kv="fp8")  # deepseek-ai/DeepSeek-R1-0528 with the page's FP8 KV
_R1 = "deepseek-r1"
_Q = "qwen3-235b-a22b"


def _perf(hw: str, n: int, isl: int, osl: int, published: float, model: str) -> Case:
    """A row of the release-1.2 perf overview, read as blinds 1, 3 and 10 read the page."""
    fp4 = hw != "h200"
    if model == _R1:
        prec = R1_V2 if fp4 else _R1_FP8
        what = "DeepSeek-R1-0528"
        text = (f"DeepSeek-R1-0528; attention data-parallel, experts over the {n} GPUs, no redundant experts; "
                "batch: the largest whose KV cache fits (concurrency not published); FP8 KV (the page's config); "
                + ("NVFP4-v2 checkpoint" if fp4 else "FP8 checkpoint"))
    else:
        prec = qwen3_modelopt(_FP4 if fp4 else _FP8)
        what = "Qwen3-235B"
        text = (f"Qwen3-235B-A22B; attention data-parallel, experts over the {n} GPUs; batch: the largest whose KV "
                "cache fits (concurrency not published); " + QWEN3_KV_TEXT
                + ("NVFP4 checkpoint, every linear layer FP4" if fp4 else "FP8 checkpoint"))
    fmt = "FP4" if fp4 else "FP8"
    name = f"TensorRT-LLM 1.2 perf overview, {what} {hw.upper()} DEP{n} {fmt}, {isl // 1024}K/{osl // 1024}K"
    return Case(name, PERF_12, hw, "colocated", Layout(1, n, 0), None, Workload(isl, osl),
                Options(balancedness=ASSUMED_REPLICATED), published, "tok/s/GPU",
                f"output tok/s a GPU ({published:,}) of trtllm-bench at {isl:,} in / {osl:,} out; " + text, prec,
                model=model, batch_rule="fit", blind=14)


BLIND14 = [
    _perf("b200", 4, 1024, 1024, 5_757, _R1),
    _perf("b200", 4, 1024, 8192, 4_228, _R1),
    _perf("b200", 4, 1024, 32768, 1_472, _R1),
    _perf("b200", 4, 8192, 1024, 1_176, _R1),
    _perf("gb200", 4, 1024, 1024, 4_989, _R1),
    _perf("gb200", 4, 1024, 8192, 4_474, _R1),
    _perf("gb200", 4, 1024, 32768, 1_582, _R1),
    _perf("gb200", 4, 8192, 1024, 1_276, _R1),
    _perf("h200", 8, 1024, 1024, 1_724, _R1),
    _perf("h200", 8, 1024, 8192, 1_335, _R1),
    _perf("b200", 4, 1024, 1024, 6_423, _Q),
    _perf("b200", 4, 1024, 8192, 3_881, _Q),
    _perf("b200", 4, 1024, 32768, 1_216, _Q),
    _perf("b200", 4, 8192, 1024, 1_518, _Q),
    _perf("b200", 4, 32768, 1024, 326, _Q),
    _perf("gb200", 4, 1024, 1024, 6_777, _Q),
    _perf("gb200", 4, 1024, 8192, 3_955, _Q),
    _perf("gb200", 4, 1024, 32768, 1_240, _Q),
    _perf("gb200", 4, 8192, 1024, 1_575, _Q),
    _perf("gb200", 4, 32768, 1024, 342, _Q),
    _perf("h200", 4, 1024, 1024, 3_494, _Q),
    _perf("h200", 4, 1024, 8192, 1_677, _Q),
    _perf("h200", 4, 8192, 1024, 679, _Q),
    _perf("h200", 4, 32768, 1024, 143, _Q),
    Case("TensorRT-LLM, 8xB200 min-latency TP8 EP2, MTP 3, 1K/2K request", BEST_PERF, "b200", "decode",
         Layout(tp=8, ep=2, moe_tp=4), 1 / 8, Workload(1024, 2048), Options(mtp_accept=2.82, mtp_draft=3),
         7_456.1219, "ms/request",
         "one request's latency ('Average request latency (ms): 7456.1219'; 274.7 tok/s a user) of 10 requests at "
         "concurrency 1 and max batch 1, 1K in / 2K out: the prompt prefilled in one pass, then 2,047 decode steps; "
         "attention TP 8, MoE split TP 4 x EP 2 (--tp 8 --ep 2), TRTLLM MoE backend; three MTP layers at tech blog "
         "1's strict acceptance 2.82 (the doc's real-dataset acceptance is not printed); nvidia/DeepSeek-R1-FP4 read "
         "as tech blog 1's recipe: NVFP4 experts and dense FFNs, BF16 attention, KV and MTP layers",
         Precision(weights="fp4", attn="bf16", mtp="bf16"), model=_R1, blind=14),
]

# Predicted when recorded (the model of main at c99b6a0): name -> the model's figure in the case's unit.
RECORDED = {
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 B200 DEP4 FP4, 1K/1K': 5703.0,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 B200 DEP4 FP4, 1K/8K': 4230.5,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 B200 DEP4 FP4, 1K/32K': 1374.8,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 B200 DEP4 FP4, 8K/1K': 861.6,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 GB200 DEP4 FP4, 1K/1K': 6288.5,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 GB200 DEP4 FP4, 1K/8K': 4701.2,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 GB200 DEP4 FP4, 1K/32K': 1526.4,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 GB200 DEP4 FP4, 8K/1K': 953.6,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 H200 DEP8 FP8, 1K/1K': 1251.3,
    'TensorRT-LLM 1.2 perf overview, DeepSeek-R1-0528 H200 DEP8 FP8, 1K/8K': 1509.1,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B B200 DEP4 FP4, 1K/1K': 4870.7,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B B200 DEP4 FP4, 1K/8K': 2081.2,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B B200 DEP4 FP4, 1K/32K': 609.9,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B B200 DEP4 FP4, 8K/1K': 755.9,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B B200 DEP4 FP4, 32K/1K': 141.3,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B GB200 DEP4 FP4, 1K/1K': 5127.6,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B GB200 DEP4 FP4, 1K/8K': 2181.8,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B GB200 DEP4 FP4, 1K/32K': 639.3,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B GB200 DEP4 FP4, 8K/1K': 804.3,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B GB200 DEP4 FP4, 32K/1K': 151.9,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B H200 DEP4 FP8, 1K/1K': 1749.8,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B H200 DEP4 FP8, 1K/8K': 831.8,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B H200 DEP4 FP8, 8K/1K': 279.3,
    'TensorRT-LLM 1.2 perf overview, Qwen3-235B H200 DEP4 FP8, 32K/1K': 55.3,
    'TensorRT-LLM, 8xB200 min-latency TP8 EP2, MTP 3, 1K/2K request': 7077.8,
}
