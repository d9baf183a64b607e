"""The nineteenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 5148a94 (its step model is that of a193eec: the commits since touch
configure's input checks, traces and docs, and blinds 17 and 18 reproduce there), by someone who did not change
the model; none of them was used to choose a mechanism or a factor. Each case says which reading of its source
was taken where the source is silent (`assumed`). It was searched for GB200 / GB300 NVL72, H800, Kimi K2 and
Qwen3-235B figures and single-user latency (TensorRT-LLM's tech blogs and recipe database, NVIDIA Dynamo's docs
and recipes, the SGLang cookbook and its config-driven benchmark pages, the vLLM recipes and blog, InferenceX's
issues and posts, SGLang / vLLM / TensorRT-LLM pull requests and issues). No figure here is used by another part;
its one source is blinds 2 and 6's, at rows neither took, read as blind 6 reads that table.

Source:
- TensorRT-LLM PR #11612 ('[None][feat] Add Qwen3-235B-A22B Pareto configs to recipe selector',
  github.com/NVIDIA/TensorRT-LLM/pull/11612, 2026-02-21), its 'Full Pareto Table' (columns Model | Precision |
  GPU | ISL | OSL | Concurrency | Gen TPS/User | Output TPS | Record Hash), the GB200 1,024 / 1,024 rows:
  '| qwen3-235b-A22b | FP4 | GB200 | 1024 | 1024 | 2 | 218.8070 | 397.8568 |', '| ... | 4 | 189.9888 | 658.2504 |',
  '| ... | 8 | 167.2644 | 1187.5262 |', '| ... | 16 | 130.9665 | 1763.6052 |'. Blind 2 took the concurrency-1 Gen
  TPS/User (247.1619), blind 6 the Gen TPS/User at 4, 8, 16 and 32 and the Output TPS at 32 (3,091.9155); this part
  takes the Gen TPS/User at concurrency 2 and the Output TPS at 2, 4, 8 and 16.

Figures looked at and not taken: PR #11612's concurrency-1 Output TPS (212.5164: at one request in flight the
same run as the Gen TPS/User blind 2 took, as blind 13 judges the cookbook's concurrency-1 throughputs) and its
1K/8K and 8K/1K rows past concurrency 1 (past the part of the stored thread that could be read; blind 8 left the
concurrency-1 rows, whose config the database gives at TP 1, 4 and 8); TensorRT-LLM's recipe database
(docs/source/_static/config_db.json: configs and concurrencies, no measured figures); TensorRT-LLM tech blog 19
(DWDP on GB200 NVL72, DeepSeek-R1 NVFP4: a context-only iteration breakdown of DEP4 at 'max_num_tokens = 32768'
whose 1,319.85 us 'iteration latency' cannot be read as one step of that many tokens, and end-to-end gains only as
ratios over Pareto points in a chart), tech blog 18 (NVLinkOneSided all-to-all: kernel timings) and the 'ADP
Scheduler Optimization' post (the DeepSeek-V3 NVFP4 GB200 run of tech blog 10, which docs/capacity.md already
analyses); NVIDIA Dynamo's 'Kimi-K2.5 Feature-Stack Benchmark' (24 GB200, Kimi-K2.5-NVFP4: operating points read
approximately off a Pareto plot, an agentic trace of ~200K-token multi-turn contexts whose cache hits are not given)
and its DeepSeek-R1 GB200 recipes (deployment files, no result table); InferenceX issue #870's B200 SGLang sweep
past its throughput rows (its mean TPOT row is past the part of the stored thread that could be read) and the
InferenceXv2 post (Pareto curves and interpolated ratios); the SGLang cookbook's Kimi-K2.5 / K2.6 H200 rows
(Moonshot's INT4 weights, as blinds 11 and 13 judge them) and its newer config-driven benchmark pages (DeepSeek-V4,
Kimi K3, Qwen3.5 / 3.6 / 3.8: models configure does not have); the vLLM recipes' Kimi-K2-Thinking 8xH200 runs
(INT4 weights); SGLang PRs #5571, #4918 and #6220 (DeepSeek-V3 DP-attention runs on H200: results as an image or
past the part that could be read), #5839 (Qwen3-235B BF16 on H20 at TP 8 before and after tuned fused-MoE
configs: its 235B table is past the part that could be read) and #7445 (Qwen3-235B-FP8 at TP 4: the card is not
named); SGLang issue #3196 (8 H200: tokens counted as words by its script); vLLM issue #11539 (SGLang batch 1 on
DeepSeek-V3: the card is not in the readable part). No H800 figure, none of Kimi K2 outside INT4 weights, and no
GB200 figure beyond PR #11612's with a stated layout and concurrency was found in the stored material that no part
had taken.

Readings common to all (blind 6's reading of this table): the PR gives no layout per row; the layout of its
concurrency-1 config (1k1k_tp4_conc1.yaml: attention TP 4, experts over EP 4 with the TRTLLM MoE backend, FP8 KV)
is assumed at every concurrency up to 32; NVIDIA's NVFP4 checkpoint read as every linear layer FP4; requests of
1,024 in / 1,024 out. Gen TPS/User is the generation rate of one user, predicted as 1 / TPOT of decode at the
concurrency over the 4 GPUs; Output TPS is the instance's output tokens a second (at concurrency 1 it is below
the generation rate a user, 212.5 against 247.2: a rate over whole requests with their prefill), divided by the 4
GPUs and predicted as colocated at the concurrency over them, TensorRT-LLM's in-flight batching mixing the prefills
into the decode steps (prefill "mixed", the model's default); CUDA graphs; no speculative decoding; no redundant
experts.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind6 import _QWEN_GB200, TRT_11612
from moeserve.capacity.validation_cases import Case

_FP4 = Precision(weights="fp4", kv="fp8")


def _gen_tps_user(conc: int, tps_user: float) -> Case:
    return Case(f"TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency {conc}, 1K/1K", TRT_11612, "gb200",
                "decode", Layout(4, 4, 0), conc / 4, Workload(1024, 1024), Options(), tps_user, "tok/s/user",
                f"generation tok/s per user ({tps_user}) at concurrency {conc}, 1,024 in / 1,024 out; " + _QWEN_GB200,
                _FP4, model="qwen3-235b-a22b", blind=19)


def _output_tps(conc: int, output_tps: float) -> Case:
    return Case(f"TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency {conc}, 1K/1K, throughput", TRT_11612,
                "gb200", "colocated", Layout(4, 4, 0), conc / 4, Workload(1024, 1024), Options(), output_tps / 4,
                "tok/s/GPU",
                f"Output TPS ({output_tps:,}) / 4 GPUs at concurrency {conc} ({conc / 4:g} a GPU), 1,024 in / 1,024 "
                "out (the column is per instance, as blind 6 reads it); prefill and decode on the same GPUs, "
                "TensorRT-LLM's prefills riding in the decode steps; " + _QWEN_GB200, _FP4, model="qwen3-235b-a22b",
                blind=19)


BLIND19 = [
    _gen_tps_user(2, 218.8070),
    _output_tps(2, 397.8568),
    _output_tps(4, 658.2504),
    _output_tps(8, 1187.5262),
    _output_tps(16, 1763.6052),
]

# Predicted when recorded (the model of main at 5148a94): name -> the model's figure in the case's unit.
RECORDED = {
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 2, 1K/1K': 97.1,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 2, 1K/1K, throughput': 48.5,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 4, 1K/1K, throughput': 94.9,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 8, 1K/1K, throughput': 177.3,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 16, 1K/1K, throughput': 317.8,
}
