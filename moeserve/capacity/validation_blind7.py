"""The seventh blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at ea09f12, while model changes were being made by others who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`). No figure here is used by another part,
and its source is new to the table.

Source:
- SemiAnalysis InferenceX blog 'B200 NVFP4 vs H200 INT4 on Kimi K2.5/K2.6: Up to 2.95x Better Performance per
  Dollar' (2026-05-26; github.com/SemiAnalysisAI/InferenceX-app,
  packages/app/content/blog/b200-nvfp4-vs-h200-int4-kimi-k2-vllm-perf-per-dollar.mdx at commit 26a3586),
  its table 'B200 vLLM NVFP4 (TP=4 + TP=8)': Kimi K2.5 (the Kimi K2 backbone: DeepSeek-V3 architecture, 384
  routed experts, 61 layers, MLA) as NVIDIA's NVFP4 checkpoint on one 8-GPU B200 node, vLLM v0.21.0
  ('Both SKUs run the same vllm/vllm-openai:v0.21.0 container'), ISL 8192 / OSL 1024, measured 2026-05-19 (GHA
  run 26118912054), with its launch script benchmarks/single_node/kimik2.5_fp4_b200.sh of
  github.com/SemiAnalysisAI/InferenceX (commit 04107b3: --tensor-parallel-size $TP, --max-num-seqs $CONC,
  --gpu-memory-utilization 0.90, no --enable-expert-parallel, no --kv-cache-dtype, 10 x CONC prompts at
  --max-concurrency CONC and the run's RANDOM_RANGE_RATIO). The post's H200 and B200 INT4 rows (Moonshot's native
  INT4 weights, W4A16) are left out: configure has no INT4 weight format.

Figures looked at and not taken: the same site's 'GB200 NVL72 vs B200 on DeepSeek R1 670B' post (2026-05-23,
Dynamo TensorRT-LLM, disaggregated, MTP on): its MTP acceptance is not published, so its tok/s/user cannot be
read as a decode step; its 'New H200 TensorRT-LLM Results' post gives no sequence lengths.

Readings common to all: tok/s/user is the table's (1,000 / its TPOT: 125.51 = 1,000 / 7.97 ms), predicted as
1 / TPOT of decode at the run's concurrency over the GPUs of one instance (other requests' prefills interleaved
with it are left out, as the earlier parts do); tok/s/GPU is InferenceX's total (input + output) throughput a
GPU, so its output share is OSL / (ISL + OSL) = 1,024 / 9,216 of it (the range ratio scales both lengths
alike), predicted as colocated at the run's requests in flight over the GPUs, vLLM's chunked prefill riding in
the decode steps (no separate prefill passes); InferenceX's random lengths uniform in [0.8 L, L] (blind 2's
reading of RANDOM_RANGE_RATIO 0.8): mean prompt 7,373 and output 922 tokens; NVIDIA's NVFP4 checkpoint read as
NVFP4 routed experts with attention, shared expert and the dense layer left in BF16 (Moonshot's checkpoint
quantises only the routed experts; assumed kept so); KV cache in BF16 (no --kv-cache-dtype; the
checkpoint's KV format not read); experts split TP over the instance's GPUs (no --enable-expert-parallel);
CUDA graphs (vLLM's default); no speculative decoding; the vision encoder idle (text prompts). At TP 4 the
weights take most of a B200's memory: the model's BF16 KV holds fewer than the 32 and 64 sequences read in
flight at those rows (vLLM would queue some, or the checkpoint's KV is FP8); they are kept at the published
concurrency, as blind 6 keeps its 100-request rows.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

IX_KIMI = ("SemiAnalysis InferenceX blog 'B200 NVFP4 vs H200 INT4 on Kimi K2.5/K2.6' (2026-05-26, InferenceX-app "
           "commit 26a3586), its table 'B200 vLLM NVFP4 (TP=4 + TP=8)', 8K/1K, vLLM v0.21.0")

# NVFP4 routed experts, the rest of the linear layers in BF16 (assumed), BF16 KV
_NVFP4_EXPERTS = Precision(weights="bf16", moe="fp4")
_WORKLOAD = Workload(7373, 922)  # 8,192 / 1,024 at InferenceX's range ratio 0.8: means 0.9 L
_KIMI = ("Kimi K2.5 (nvidia/Kimi-K2.5-NVFP4) on {tp} B200 of one node at --tensor-parallel-size {tp}, vLLM v0.21.0, "
         "--max-num-seqs {conc}, 10 x {conc} prompts at --max-concurrency {conc}; ISL 8,192 / OSL 1,024 at range "
         "ratio 0.8 (means 7,373 / 922); attention TP {tp}, experts split TP {tp} (no --enable-expert-parallel in "
         "the script); NVFP4 routed experts, attention, shared expert and dense layer in BF16 (assumed), BF16 KV "
         "(no --kv-cache-dtype), CUDA graphs")


def _user(tp: int, conc: int, tps_user: float, tpot: float) -> Case:
    return Case(f"vLLM Kimi K2.5 {tp}xB200 TP{tp} NVFP4, concurrency {conc}, 8K/1K", IX_KIMI, "b200", "decode",
                Layout(tp, 1, 0), conc / tp, _WORKLOAD, Options(), tps_user, "tok/s/user",
                f"the table's tok/s/user ({tps_user}; TPOT {tpot} ms) at concurrency {conc}; "
                + _KIMI.format(tp=tp, conc=conc), _NVFP4_EXPERTS, model="kimi-k2", blind=7)


def _tput(tp: int, conc: int, total: float) -> Case:
    return Case(f"vLLM Kimi K2.5 {tp}xB200 TP{tp} NVFP4, concurrency {conc}, 8K/1K, throughput", IX_KIMI, "b200",
                "colocated", Layout(tp, 1, 0), conc / tp, _WORKLOAD, Options(), total * 1024 / 9216, "tok/s/GPU",
                f"output tok/s a GPU: the table's total tok/s/GPU ({total:,}) x 1,024 / 9,216 at concurrency {conc}, "
                f"read as {conc} in flight; prefill in vLLM's chunks interleaved with decode; "
                + _KIMI.format(tp=tp, conc=conc), _NVFP4_EXPERTS, model="kimi-k2", blind=7)


BLIND7 = [
    _user(8, 4, 125.51, 7.97),
    _user(4, 4, 111.08, 9.00),
    _user(4, 8, 90.66, 11.03),
    _user(4, 16, 67.40, 14.84),
    _user(4, 32, 46.83, 21.35),
    _user(4, 64, 32.19, 31.07),
    _tput(8, 4, 532.0),
    _tput(4, 4, 947.4),
    _tput(4, 8, 1537.2),
    _tput(4, 16, 2318.7),
    _tput(4, 32, 3202.7),
    _tput(4, 64, 3879.3),
]

# Predicted when recorded (the model of main at ea09f12, while model changes made without seeing these
# figures were under way): name -> tokens/s in the case's unit.
RECORDED = {
    'vLLM Kimi K2.5 8xB200 TP8 NVFP4, concurrency 4, 8K/1K': 108.4,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 4, 8K/1K': 98.3,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 8, 8K/1K': 80.8,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 16, 8K/1K': 60.9,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 32, 8K/1K': 43.2,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, 8K/1K': 30.3,
    'vLLM Kimi K2.5 8xB200 TP8 NVFP4, concurrency 4, 8K/1K, throughput': 50.9,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 4, 8K/1K, throughput': 91.7,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 8, 8K/1K, throughput': 144.3,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 16, 8K/1K, throughput': 206.5,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 32, 8K/1K, throughput': 275.3,
    'vLLM Kimi K2.5 4xB200 TP4 NVFP4, concurrency 64, 8K/1K, throughput': 357.0,
}
