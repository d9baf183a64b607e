"""The sixth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at e32201f, while model changes were being made by others who
did not see them; none of them was used to choose a mechanism or a factor. Each case says which reading
of its source was taken where the source is silent (`assumed`). No figure here is used by another part;
two sources are earlier parts' (TensorRT-LLM PR #11612 in blind 2, SGLang PRs #5849 and #5846 in blind 5)
at rows those parts did not take.

Sources:
- SGLang PR #7621 ('[b200] support trt-llm allreduce fuse rms_norm_add kernel',
  github.com/sgl-project/sglang/pull/7621, comment of 2025-06-28 headed 'b200'): DeepSeek-V3 on B200,
  test/srt/parse_results.py's summary of bench_serving runs on main ('dsv3_main.jsonl') at max concurrency
  1 and 4: mean TPOT 7.617 and 9.524 ms, input and output throughput equal (128.105 and 406.393 tok/s).
- TensorRT-LLM PR #11612 ('Add Qwen3-235B-A22B Pareto configs to recipe selector',
  github.com/NVIDIA/TensorRT-LLM/pull/11612, 2026-02-21), its 'Full Pareto Table': Qwen3-235B-A22B FP4 on
  GB200 at 1,024 in / 1,024 out, Gen TPS/User at concurrency 4, 8, 16 and 32 and Output TPS at 32 (blind 2 took the
  concurrency-1 row).
- vLLM PR #43232 ('Xqa decode kernels', github.com/vllm-project/vllm/pull/43232, comment of 2026-06-03 'ran on
  b200 again'): Qwen3-235B-A22B-Instruct-2507-FP8 on B200 at --tensor-parallel-size 4, --kv-cache-dtype fp8,
  vllm bench serve with 128 random prompts of 30,000 in / 1,000 out (--ignore-eos) at max concurrency 64.
- SGLang PR #6885 ('Add H20 fused MoE kernel tuning configs for DeepSeek-R1/V3',
  github.com/sgl-project/sglang/pull/6885, 2025-06-05): DeepSeek-V3-0324 on 8 H20 at --tp 8, 200 random
  prompts (1,024 / 512 at most) at concurrency 8, the run without the PR's configs (blind 3 reads only this
  run's output-token total, to complete PR #7631's).
- SGLang PR #5849 ('add fused moe config for qwen3moe fp8/bf16', github.com/sgl-project/sglang/pull/5849,
  2025-04-28): the qwen3_235b_tp4 (BF16) rows before the PR's configs (blind 5 took the TP-8 BF16 and TP-4 FP8
  rows).
- SGLang PR #5846 ('[qwen3] qwen3moe_tune_h20 fp8 tp4', github.com/sgl-project/sglang/pull/5846, 2025-04-28):
  Qwen3-235B-A22B-FP8 on 4 H20, the 5000-1000 'Before' row (blind 5 took the 1000-2000 row).

Readings common to all: a mean TPOT (or TensorRT-LLM's generation tokens per second a user) is predicted as
1 / TPOT of decode at the run's concurrency over the GPUs (other requests' prefills interleaved with it are
left out, as the earlier parts do); an output throughput of a run that interleaves prefill with decode on the
same GPUs as colocated at the run's requests in flight over the GPUs; prompts and outputs of fixed length
where the run fixes them, else bench_serving's mean; KV cache in BF16 and no speculative decoding unless the
launch line sets them; no redundant experts.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import SGLANG_UNMIXED, Case


SGL_7621 = ("SGLang PR #7621 (github.com/sgl-project/sglang/pull/7621), the 'b200' comment of 2025-06-28: DeepSeek-V3 "
            "on main, parse_results.py's summary of dsv3_main.jsonl")
TRT_11612 = ("TensorRT-LLM PR #11612 (github.com/NVIDIA/TensorRT-LLM/pull/11612), Qwen3-235B-A22B FP4 on GB200, "
             "its Full Pareto Table at 1K/1K")
VLLM_43232 = ("vLLM PR #43232 (github.com/vllm-project/vllm/pull/43232), the B200 run of 2026-06-03, "
              "Qwen3-235B-A22B-Instruct-2507-FP8 at TP 4")
SGL_6885 = ("SGLang PR #6885 (github.com/sgl-project/sglang/pull/6885), DeepSeek-V3-0324 on 8 H20 at --tp 8, the run "
            "without MoE config")
SGL_5849 = ("SGLang PR #5849 (github.com/sgl-project/sglang/pull/5849), the qwen3_235b_tp4 runs before its fused-MoE "
            "configs")
SGL_5846 = ("SGLang PR #5846 (github.com/sgl-project/sglang/pull/5846), Qwen3-235B-A22B-FP8 on H20 at TP 4, the "
            "5000-1000 run before its fused-MoE configs")

_DSV3_B200 = ("DeepSeek-V3 (FP8 checkpoint) on 8 B200, SGLang main of late June 2025; the launch line is not in the "
              "comment: --tp 8 assumed (experts split TP 8, one attention group; the PR fuses the TP all-reduce with "
              "RMSNorm, which needs TP), BF16 KV, CUDA graphs; the lengths are not printed either: input throughput "
              "equals output throughput, so prompts and outputs are of one length, and at concurrency 1 the output "
              "rate 128.105 tok/s = L / (193.7 ms TTFT + L x 7.617 ms) gives L = 1,025: 1,024 in / 1,024 out "
              "(--random-range-ratio 1) assumed")
_QWEN_GB200 = ("the PR's table gives no layout per row; the layout of its concurrency-1 config (1k1k_tp4_conc1.yaml, "
               "blind 2's reading: attention TP 4, experts over EP 4 with the TRTLLM MoE backend, FP8 KV) assumed at "
               "every concurrency up to 32 (the database's other GB200 1K/1K config, tp8_conc1024, is for 1,024 "
               "sequences); NVIDIA's NVFP4 checkpoint read as every linear layer FP4")
_QWEN_5849 = ("output tok/s ({pub:,}) / 4 GPUs of 100 random prompts of exactly {isl:,} in / {osl:,} out "
              "(--random-range-ratio 1) sent at 10 a second: read as all 100 in flight on one TP-4 instance (they "
              "arrive within ~10 s of a run of {dur:.0f} s); Qwen3-235B-A22B BF16 weights (118 GB a GPU at TP 4), "
              "experts split TP 4 (the Triton fused MoE on default configs, the 'before' column), BF16 KV, CUDA "
              "graphs; the card is not named by the PR: H200 read as blind 5 reads it (SGLang's triton_3_2_0 config "
              "'E=128,N=768,device_name=NVIDIA_H200' for this shape, and BF16 at TP 4 needing 118 GB a GPU); 100 "
              "sequences' BF16 KV beside those weights is more than the model's memory takes (SGLang may have "
              "queued some), kept at 100 as blind 5 reads the sibling rows")


def _qwen_5849(name: str, isl: int, osl: int, published: float) -> Case:
    text = _QWEN_5849.format(pub=published, isl=isl, osl=osl, dur=100 * osl / published)
    return Case(name, SGL_5849, "h200", "colocated", Layout(4, 1, 0), 100 / 4, Workload(isl, osl), SGLANG_UNMIXED,
                published / 4, "tok/s/GPU", text, Precision(weights="bf16"), model="qwen3-235b-a22b", blind=6)


def _qwen_gb200(conc: int, tps_user: float) -> Case:
    return Case(f"TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency {conc}, 1K/1K", TRT_11612, "gb200",
                "decode", Layout(4, 4, 0), conc / 4, Workload(1024, 1024), Options(), tps_user, "tok/s/user",
                f"generation tok/s per user ({tps_user}) at concurrency {conc}, 1,024 in / 1,024 out; " + _QWEN_GB200,
                Precision(weights="fp4", kv="fp8"), model="qwen3-235b-a22b", blind=6)


BLIND6 = [
    Case("SGLang DeepSeek-V3 8xB200 TP8, batch 1, 1K/1K", SGL_7621, "b200", "decode", Layout(8, 1, 0), 1 / 8,
         Workload(1024, 1024), Options(), 1000 / 7.617, "tok/s/user",
         "1 / the mean TPOT (7.617 ms) at max concurrency 1; " + _DSV3_B200, Precision(weights="fp8"), blind=6),
    Case("SGLang DeepSeek-V3 8xB200 TP8, concurrency 4, 1K/1K", SGL_7621, "b200", "decode", Layout(8, 1, 0), 4 / 8,
         Workload(1024, 1024), Options(), 1000 / 9.524, "tok/s/user",
         "1 / the mean TPOT (9.524 ms) at max concurrency 4; " + _DSV3_B200, Precision(weights="fp8"), blind=6),
    Case("SGLang DeepSeek-V3 8xB200 TP8, concurrency 4, 1K/1K, throughput", SGL_7621, "b200", "colocated",
         Layout(8, 1, 0), 4 / 8, Workload(1024, 1024), Options(prefill="separate"), 406.393 / 8, "tok/s/GPU",
         "output tok/s (406.393) / 8 GPUs at max concurrency 4, read as 4 in flight; prefill and decode on the same "
         "GPUs; " + _DSV3_B200, Precision(weights="fp8"), blind=6),
    _qwen_gb200(4, 189.9888),
    _qwen_gb200(8, 167.2644),
    _qwen_gb200(16, 130.9665),
    _qwen_gb200(32, 111.7814),
    Case("TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 32, 1K/1K, throughput", TRT_11612, "gb200",
         "colocated", Layout(4, 4, 0), 32 / 4, Workload(1024, 1024), Options(), 3091.9155 / 4, "tok/s/GPU",
         "Output TPS (3,091.9155) / 4 GPUs at concurrency 32, 1,024 in / 1,024 out (the column is per instance: at "
         "concurrency 1 it is below the generation rate a user, 212.5 against 247.2, as a rate over whole requests "
         "with their prefill is); prefill and decode on the same GPUs; " + _QWEN_GB200,
         Precision(weights="fp4", kv="fp8"), model="qwen3-235b-a22b", blind=6),
    Case("vLLM Qwen3-235B 4xB200 TP4 FP8, concurrency 64, 30K/1K", VLLM_43232, "b200", "colocated", Layout(4, 1, 0),
         64 / 4, Workload(30_000, 1000), Options(), 847.07 / 4, "tok/s/GPU",
         "output tok/s (847.07) / 4 GPUs of 128 random prompts of 30,000 in / 1,000 out (--ignore-eos; vllm bench "
         "serve's default range ratio 0 fixes the lengths: 3,840,000 input and 128,000 output tokens) at max "
         "concurrency 64 (peak 68 in flight), read as 64 in flight; prefill in chunks interleaved with decode; "
         "FP8 block-scaled weights, experts split TP 4 (no --enable-expert-parallel), --kv-cache-dtype fp8, "
         "--enable-prefix-caching (random prompts share no prefix), CUDA graphs; vLLM of June 2026",
         Precision(weights="fp8", kv="fp8"), model="qwen3-235b-a22b", blind=6),
    Case("SGLang DeepSeek-V3 8xH20 TP8, concurrency 8 (untuned fused MoE, June 2025)", SGL_6885, "h20", "colocated",
         Layout(8, 1, 0), 8 / 8, Workload(515, 268), Options(prefill="separate"), 53_590 / 202.64 / 8, "tok/s/GPU",
         "output tokens (53,590) / duration (202.64 s) / 8 GPUs of 200 prompts at max concurrency 8, read as 8 in "
         "flight; bench_serving's default range ratio 0 (uniform up to 1,024 in / 512 out): the run's totals "
         "103,005 / 53,590, means 515 / 268; FP8 weights, BF16 KV, experts split TP 8, --disable-radix-cache; the "
         "Triton fused MoE on default configs (the PR adds tuned ones); the card read as the 96 GB H20 (the title and "
         "its config's device_name=NVIDIA_H20)",
         Precision(weights="fp8"), blind=6),
    _qwen_5849("SGLang Qwen3-235B 4xH200 TP4 BF16, 100 requests, 1K/2K", 1000, 2000, 2103),
    _qwen_5849("SGLang Qwen3-235B 4xH200 TP4 BF16, 100 requests, 5K/1K", 5000, 1000, 1040),
    Case("SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, 5K/1K (untuned fused MoE)", SGL_5846, "h20", "colocated",
         Layout(4, 1, 0), 100 / 4, Workload(5000, 1000), SGLANG_UNMIXED, 835.71 / 4, "tok/s/GPU",
         "output tok/s (835.71, the 'Before' column) / 4 GPUs; the PR gives no command: read as the drive's runs of "
         "that day (PR #5849's 5000-1000: 100 random prompts of exactly 5,000 in / 1,000 out sent at 10 a second), "
         "all 100 in flight on one TP-4 instance (a run of ~120 s); FP8 weights, experts split TP 4 (Triton fused "
         "MoE on default configs), BF16 KV (100 x 6,000 tokens, ~29 GB a GPU beside 59 GB of weights, at the edge "
         "of the H20's 96 GB: SGLang may have held some requests back), CUDA graphs",
         Precision(weights="fp8"), model="qwen3-235b-a22b", blind=6),
]

# Predicted when recorded (the model of main at e32201f, while model changes made without seeing these
# figures were under way): name -> tokens/s in the case's unit.
RECORDED = {
    'SGLang DeepSeek-V3 8xB200 TP8, batch 1, 1K/1K': 114.6,
    'SGLang DeepSeek-V3 8xB200 TP8, concurrency 4, 1K/1K': 103.8,
    'SGLang DeepSeek-V3 8xB200 TP8, concurrency 4, 1K/1K, throughput': 51.6,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 4, 1K/1K': 95.2,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 8, 1K/1K': 89.2,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 16, 1K/1K': 80.3,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 32, 1K/1K': 73.1,
    'TensorRT-LLM Qwen3-235B 4xGB200 TP4 EP4 FP4, concurrency 32, 1K/1K, throughput': 572.7,
    'vLLM Qwen3-235B 4xB200 TP4 FP8, concurrency 64, 30K/1K': 252.6,
    'SGLang DeepSeek-V3 8xH20 TP8, concurrency 8 (untuned fused MoE, June 2025)': 35.3,
    'SGLang Qwen3-235B 4xH200 TP4 BF16, 100 requests, 1K/2K': 550.9,
    'SGLang Qwen3-235B 4xH200 TP4 BF16, 100 requests, 5K/1K': 348.0,
    'SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, 5K/1K (untuned fused MoE)': 188.8,
}
