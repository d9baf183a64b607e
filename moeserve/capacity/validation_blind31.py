"""The thirty-first blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at b3b484a, by someone who did not change the model; none of them was used
to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is silent
(`assumed`); every reading was decided before any prediction here was computed.

It was searched for performance pull requests of SGLang, vLLM and TensorRT-LLM (2025-2026) that paste serving
benchmark blocks before and after a change, for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B on configure's cards, H20,
H800, H200 and GB200 first. Most such pull requests found are already earlier parts' sources or judgements, or their
result blocks lie past the part of the thread the stored copy lets one read (see 'Figures looked at and not taken').
One new source could be read with its setup whole: vLLM PR #40392's validation run of Kimi-K2-Thinking-MXFP4 on 4
MI355X at concurrency 4. It is thin (two figures of one run) and recorded with its doubt stated.

Source (quoted as the stored copy prints it):
- vLLM PR #40392 ('[Performance][DSR1]: Fused RoPE+KVCache+q_concat for MLA', github.com/vllm-project/vllm/pull/
  40392, merged), the comment of rbrugaro-amd of 2026-04-30: 'Validation on **Kimi-K2-Thinking-MXFP4** (TP=4,
  MI355X)'; '## Server startup' `vllm serve /data/workloads-inference/models/Kimi-K2-Thinking-MXFP4
  --tensor-parallel-size=4 --gpu-memory-utilization=0.94 --dtype=auto --kv-cache-dtype=fp8
  --max-num-batched-tokens=8192 --attention-backend ROCM_AITER_MLA -cc.pass_config.fuse_rope_kvcache_cat_mla=True
  \\   # False for baseline -cc.use_inductor_graph_partition=True --no-enable-prefix-caching
  --disable-uvicorn-access-log --trust-remote-code`; '## Benchmark serving' `vllm bench serve --model ...
  --trust-remote-code --percentile-metrics tpot,itl,e2el --ignore-eos --dataset-name random --random-input-len 1024
  --random-output-len 1024 --max-concurrency {4,32} --num-prompts {40,320} --num-warmups 3`; then '### Concurrency 32
  (320 prompts, 64 warmups)', '#### Fused (`fuse_rope_kvcache_cat_mla=True`)' (its block past the readable part).
  The same comment's continuation (the stored copy's 'turn 9 by rbrugaro-amd, continued') prints a block: 'Successful
  requests: 40', 'Maximum request concurrency: 4', 'Benchmark duration (s): 99.29', 'Total input tokens: 40960',
  'Total generated tokens: 40960', 'Output token throughput (tok/s): 412.52', 'Peak concurrent requests: 8.00',
  'Mean TPOT (ms): 9.50', 'Median TPOT (ms): 9.48', 'Mean ITL (ms): 9.83', 'Mean E2EL (ms): 9928.25', followed by
  '#### C=4 Delta' and a table '| Metric | Fused | Baselin...' (the rest past the readable part).

Figures looked at and not taken:
- vLLM PR #40392's concurrency-32 blocks, its C=4 and C=32 delta tables and its DeepSeek-R1 runs of the description:
  past the readable part.
- vLLM PR #28992 ('[Kernels] Improve H200 Fused MoE Config', DeepSeek-V3.1 at -tp 8 on 8 GPUs, `vllm bench serve`
  with 2-token prompts and 100 outputs at concurrency 4-128: a clean decode sweep before and after): the stored copy
  stops at the first block's 'Output token throughput (tok/s):', before any number.
- vLLM PR #23504 (DeepSeek-V3 FP8 EP32 on H200: 'now ~10% throughput improvement', its numbers past the readable
  part); vLLM PR #30971 (DeepSeek-R1-NVFP4 on 4 GB200 at TP 4 + EP with 32 redundant experts, 1,024 / 128 at
  concurrency 4,096: its result blocks past the readable part, the per-kernel comparison as images).
- SGLang PR #11322 (ROCm rope, `sglang.bench_one_batch` of DeepSeek-V3.1 at --tp 8 with dummy weights, 1,024 / 1,024
  at batch 1-128, before and after): the card (MI300X or MI355X) is not named in the readable part, and only the
  'before' rows at batch 1, 2 and 4 can be read.
- SGLang PR #2735 (DeepSeek-V3 --tp 8 on H200, gsm8k 8-shot at parallel 2000: output 1,676.993 -> 1,782.633 token/s):
  the prompt and output lengths are not stated (gsm8k's own). SGLang PR #5113 (a table of concurrency 1-16 rows
  whose model, card and lengths are in parts not readable). SGLang issue #5985 (DeepSeek-V3 --tp 8 on H200 with
  SGLang v0.4.5.post3, baseline against DP attention + DeepGEMM + torch.compile): its results past the readable part.
- SGLang PR #6220 and PR #7039 (BBuf, DeepSeek-V3 --tp 8 --enable-dp-attention --dp-size 8, 100 prompts at 10 a
  second, four length pairs, before and after): the card is not named and the tables lie past the readable part
  (blind 19's judgement of #6220 stands). SGLang PR #17133 (DeepSeek-V3.1 TP 8 on H20, TPOT at batch 1-256 before
  and after swapAB configs): its table past the readable part (blind 12's judgement stands).
- ROCm/aiter PR #3520 (Kimi-K2.5-MXFP4-AttnFP8 at TP 4, baseline against tuned GEMMs at concurrency 4-32): neither
  the card nor the lengths are stated (the total / output ratio of 11 implies about 10:1). vLLM PR #44437
  (DeepSeek-R1 MXFP4 on 8 MI350X: not a configure card). vLLM PR #47757 (GLM-5.2) and the Kimi K3 / K2.6 / K2.7 and
  Qwen3.5 / 3.6 / 3.8 and DeepSeek-V4 pull requests: models configure does not have.
- Already earlier parts' sources or judgements, re-found: SGLang PRs #5846, #5839, #6885, #6835, #7631, #7687,
  #7621, #8047, #10027, #13287, #14194, #14982, #4918, #5571, #2643, issues #3361, #3906, #3956, #8151, #8657;
  vLLM PRs #19205, #19315, #19401, #24597, #29346, #36559, #43232; InferenceX issue #870; ROCm/ATOM PR #409;
  TensorRT-LLM PR #11612; tenstorrent issue #356.
No new H20, H800, H200 or GB200 figure with card, layout, lengths and load all readable was found in the time given.

Readings (decided before the model was run): Kimi-K2-Thinking (Kimi K2's architecture: configure's kimi-k2) as
amd/Kimi-K2-Thinking-MXFP4 read as blind 23 reads it (MXFP4 routed experts; attention, shared expert and dense layer
in BF16), KV in FP8 (--kv-cache-dtype=fp8); the card as the comment names it, configure's mi355x; --tensor-parallel-
size=4 without --enable-expert-parallel as attention TP 4 with the experts split TP 4 (Layout(4, 1)), one instance;
the block of 40 requests at 'Maximum request concurrency: 4' read as the comment's concurrency-4 run (40 prompts,
1,024 / 1,024 with --ignore-eos: 40,960 tokens each way, as printed); which of the two arms it is (fused RoPE + KV-cache
write, or the baseline without the pass) is not certain: it is the block printed just before the 'C=4 Delta' table,
and the comment prints the fused arm first at concurrency 32, so it is read as the baseline arm; the fusion pass is
not modelled apart either way, so both arms are the same setup to configure; the closed loop (--max-concurrency 4,
40 prompts after 3 warm-ups) read at 4 in flight, 1 a GPU; lengths fixed at 1,024 in and out (vLLM's random dataset
at its default range ratio; the totals confirm it); vLLM V1's scheduler with prefill chunks riding in the decode steps
(prefill "mixed", configure's default; --max-num-batched-tokens 8192 not an input); CUDA graphs at decode (vLLM's
default, with the inductor graph partition); no speculative decoding; no prefix-cache hits (prefix caching off);
KV memory at configure's default 0.9 of the card; the AITER MLA backend not modelled apart; the mean TPOT of a run
with 4 in flight read as the colocated TPOT at that batch, and 'Output token throughput' over the 4 GPUs as the
colocated output tok/s a GPU.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

VLLM_40392 = ("vLLM PR #40392 ('[Performance][DSR1]: Fused RoPE+KVCache+q_concat for MLA', github.com/vllm-project/"
              "vllm/pull/40392), the 2026-04-30 comment 'Validation on Kimi-K2-Thinking-MXFP4 (TP=4, MI355X)', its "
              "concurrency-4 block")

_KIMI_MXFP4 = Precision(weights="bf16", moe="fp4", kv="fp8")  # amd/Kimi-K2-Thinking-MXFP4 as blind 23 reads it
_SETUP = ("Kimi-K2-Thinking as amd/Kimi-K2-Thinking-MXFP4 (MXFP4 routed experts; attention, shared expert and dense "
          "layer in BF16) on 4 MI355X, vLLM of late April 2026 at --tensor-parallel-size=4 without "
          "--enable-expert-parallel (attention TP 4, experts split TP 4), KV in FP8 (--kv-cache-dtype=fp8), ROCm AITER "
          "MLA attention, prefix caching off, CUDA graphs at decode, prefill chunks in the decode steps (vLLM V1, "
          "--max-num-batched-tokens 8192), no speculative decoding; 40 prompts of exactly 1,024 in / 1,024 out "
          "(--ignore-eos; 40,960 tokens each way) at --max-concurrency 4 after 3 warm-ups, read as 4 in flight (1 a "
          "GPU); the block read as the baseline arm (without the fused RoPE + KV-cache pass: the block printed just "
          "before the 'C=4 Delta' table, the fused arm printed first), the pass not modelled apart either way")
_W = Workload(1024, 1024)
_NAME = "vLLM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 4, 1K/1K"

BLIND31 = [
    Case(f"{_NAME}, TPOT", VLLM_40392, "mi355x", "colocated", Layout(4, 1, 0), 4 / 4, _W, Options(),
         round(1000 / 9.50, 2), "tok/s/user",
         "1 / the mean TPOT (9.50 ms), read as the colocated TPOT at 4 in flight (1 a GPU); " + _SETUP,
         _KIMI_MXFP4, model="kimi-k2", blind=31),
    Case(f"{_NAME}, throughput", VLLM_40392, "mi355x", "colocated", Layout(4, 1, 0), 4 / 4, _W, Options(),
         round(412.52 / 4, 2), "tok/s/GPU",
         "'Output token throughput (tok/s): 412.52' over the instance's 4 GPUs (103.13) at concurrency 4 (1 a GPU); "
         + _SETUP, _KIMI_MXFP4, model="kimi-k2", blind=31),
]

# Predicted when recorded (the model of main at b3b484a): name -> the model's figure in the case's unit.
RECORDED = {
    'vLLM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 4, 1K/1K, TPOT': 101.3,
    'vLLM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 4, 1K/1K, throughput': 101.3,
}
