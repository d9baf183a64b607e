"""The thirtieth blind part of the validation table (docs/capacity.md): published figures found and recorded with
the predictions of the model of main at ec80b35, by someone who did not change the model; none of them was used to
choose a mechanism or a factor. Each case says which reading of its source was taken where the source is silent
(`assumed`); every reading was decided before any prediction here was computed.

It was searched for speculative decoding on models without MTP layers: Qwen3-235B-A22B (2507, FP8 / BF16 / NVFP4)
and Kimi K2 (K2, K2-Instruct-0905, K2-Thinking, K2.5) run with an EAGLE-3 draft head, and DeepSeek-R1/V3 with an
EAGLE-3 head instead of its own MTP, on configure's cards, where the source states the mean acceptance length
together with the layout, card, lengths and concurrency. No such figure was found (see 'Figures looked at and not
taken'). What the search did find is one source that publishes EAGLE-3 runs of Kimi-K2.5 beside the same setup
without speculation, on MI355X, without an acceptance length; this part records the figures of that source that
need none: its five no-speculation rows. They are new to the validation (no part names the source; blinds 23 and
24 left Kimi-K2.5-MXFP4 figures because its layer formats were not read from a stored source, which ATOM's vLLM
recipe now gives, below). The EAGLE-3 rows of the same table are left until their acceptance is published.

Source (quoted as the stored copy prints it):
- AMD ROCm blog 'Accelerating Large-Scale LLM Inference on AMD Instinct(TM) MI350X/MI355X with Eagle3 and AMD Quark'
  (rocm.blogs.amd.com/artificial-intelligence/eagle3-speculative-decoding, github.com/ROCm/rocm-blogs
  blogs/artificial-intelligence/eagle3-speculative-decoding/README.md, 3 Jul 2026): 'The following draft results
  section lists only the 1K/1K workload, with ISL=1024 and OSL=1024. Speedup is computed as Eagle3 throughput
  divided by the corresponding no-speculative-decoding baseline throughput. Kimi-K2.5 results use AMD Instinct
  MI355X, TP=4, random prompts, `num_prompts=10 x concurrency`, `num_warmups=2 x concurrency`, and 10 seeds per
  cell. The merged Kimi table lists BF16 and FP8 draft paths side by side; the BF16 vLLM v0.19.0 sweep uses
  MML=2248, while the FP8 sweep uses MML=2304.'; 'Docker images: BF16 sweep uses `vllm/vllm-openai-rocm:v0.19.0`
  (MML=2248); FP8 sweep uses `vllm/vllm-openai-rocm:nightly-fb1ac806c55a6dc96fe92261b80c8550e9c39d2f`
  (MML=2304).'; 'Target model: [`amd/Kimi-K2.5-MXFP4`](https://huggingface.co/amd/Kimi-K2.5-MXFP4).'; 'The target
  MXFP4 model uses the ROCm FP4 ASM path via `VLLM_ROCM_USE_AITER_FP4_ASM_GEMM=1`.'; its table '| Concurrency |
  No-spec (tok/s/GPU) | BF16 Eagle3 (tok/s/GPU) | FP8 Eagle3 (tok/s/GPU) |', '| 4 | 82.7 | 157.0 (1.90x) | 165.2
  (2.00x) |', '| 8 | 142.2 | 269.1 (1.89x) | 270.1 (1.90x) |', '| 16 | 220.5 | 399.6 (1.81x) | 412.7 (1.87x)
  |', '| 32 | 342.2 | 627.6 (1.83x) | 633.8 (1.85x) |', '| 64 | 533.3 | 901.6 (1.69x) | 936.6 (1.76x) |'; and of
  the runs: 'The proposed InferenceX configurations cover common fixed sequence-length scenarios, including 1K/1K,
  1K/8K, and 8K/1K prompt/output patterns, with tensor-parallel and expert-parallel search points such as TP/EP =
  4/4 and 8/8.' This part takes the five 'No-spec' figures.
- The recipe the blog's runs are InferenceX's (its PRs #1116 and #1515): benchmarks/single_node/fixed_seq_len/
  kimik2.5_fp4_mi355x_vllm_eagle3.sh (github.com/SemiAnalysisAI/InferenceX at 7d40518): `vllm serve "$MODEL"
  --tensor-parallel-size="$TP" --enable-expert-parallel --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.90}"
  --max-model-len "$MAX_MODEL_LEN" --max-num-seqs "$CONC" --long-prefill-token-threshold 8192
  --max-num-batched-tokens 16384 --mm-encoder-tp-mode data --no-enable-prefix-caching --speculative-config
  "$SPECULATIVE_CONFIG" --trust-remote-code` with VLLM_ROCM_USE_AITER=1 and VLLM_ROCM_QUICK_REDUCE_QUANTIZATION=INT4,
  no --kv-cache-dtype; the client `run_benchmark_serving ... --backend vllm --input-len "$ISL" --output-len "$OSL"
  --random-range-ratio "$RANDOM_RANGE_RATIO" --num-prompts "$((CONC * 10))" --max-concurrency "$CONC"` (InferenceX's
  benchmark_lib.sh, which adds `--num-warmups "$((2 * max_concurrency))"` and `--ignore-eos`, the blog's
  '10 x concurrency' and '2 x concurrency').
- The checkpoint's formats: ROCm/ATOM recipes/atom_vllm/Kimi-K2.5.md (github.com/ROCm/ATOM at 01058ca): 'We adopt
  [amd/Kimi-K2.5-MXFP4-AttnFP8](https://huggingface.co/amd/Kimi-K2.5-MXFP4-AttnFP8) for better performance by
  leveraging FP8 weights for attention layers', i.e. amd/Kimi-K2.5-MXFP4 keeps its attention out of FP8.

Figures looked at and not taken:
- The same table's 'BF16 Eagle3' and 'FP8 Eagle3' columns (ten figures): the blog states no acceptance length,
  rate or draft length for them (the recipe's default is `num_speculative_tokens` 3 with real, 'standard',
  rejection on random prompts; 'Acceptance rate stays roughly stable' of its 8K/1K section gives no number);
  its MiniMax-M2.5 table (not a configure model). InferenceX's kimik2.5_fp4_mi355x_vllm_mtp_fixed_AR.sh (EAGLE-3
  with vLLM's synthetic acceptance rates, which would fix the acceptance) has no published result found.
- AMD ROCm blog 'Faster Kimi-K2.5-W4A8 Decoding with EAGLE3 on AMD Instinct MI325X' (TPOT 42.73 -> 27.41 ms at
  concurrency 40, accept length 3.93 of 4): MI325X is not a configure card, and W4A8 (INT4 weights) is not a
  configure format.
- SGLang PR #19689 (Kimi-K2.5 EAGLE-3 on 8 H200 at --tp-size 8, 3 steps / 4 draft tokens: acceptance lengths per
  benchmark; INT4 weights, throughputs not in what could be read); vLLM PR #35966 (Kimi-K2.5 EAGLE-3 at TP 8,
  'acceptance rate is 51.78%' with 4 draft tokens: INT4 weights, no card or throughput); SGLang PR #23461 (AMD
  Kimi-K2.5 EAGLE-3, a bench_serving block at concurrency 4: card, weights and acceptance not in what could be
  read); ROCm/ATOM PR #631 (Kimi-K2.5-MXFP4 EAGLE-3 at -tp 8: launch lines only in what could be read).
- AQ-MedAI/Kimi-K2-Instruct-eagle3's card ('up to 1.8x peak throughput ... configured with bs=8, steps=3, topk=1,
  num_draft_tokens=4', acceptance lengths 3.372 / 3.165 / 3.490): its throughputs are charts; card and layout not
  stated. lmsys/SGLang-EAGLE3-Qwen3-235B-A22B-Instruct-2507-SpecForge-Meituan, nebius/EAGLE3-Qwen3-235B-A22B-
  Instruct-2507, RedHatAI/Qwen3-235B-A22B-Instruct-2507-speculator.eagle3, nvidia/Kimi-K2.5-Thinking-Eagle3 and
  nvidia/Kimi-K2.6-Eagle3 cards: acceptance lengths without a serving figure (or throughput as charts). LMSYS's
  SpecBundle post (2025-12-23) and SpecForge's dashboard: charts on a dashboard the store does not hold (as blind
  20 found).
- TensorRT-LLM PR #5206 ('[feat] Add EAGLE3 support for Qwen3': 'TP8EP8 BS1', TPOT 4.6880 ms, '[AR] AVERAGE: 1.81'
  over 32 queries): the card, precision, draft length and lengths are not in what could be read. TensorRT-LLM PR
  #6477 (Qwen3-235B + EAGLE-3 CI: accuracy only). SpecForge PR #378 (DeepSeek-V3 EAGLE-3 on 'NVIDIA H20 (141GB) x
  8', an H20-3e, not configure's h20; its result table not in what could be read).
- lightseekorg/tokenspeed PR #795 (Kimi K2.7-Code NVFP4 on 4 GB200, baseline vs EAGLE 3.1 with mean acceptance
  lengths at concurrency 16) and InferenceX's Kimi K2.6 / K2.7 / K3 EAGLE-3 AgentX configs with synthetic
  acceptance: models configure does not have (as blinds 13 and 17 judge K2.6 / K2.7-Code), B300 cards, or agentic
  traces.

Readings (decided before the model was run): Kimi-K2.5 (Kimi K2's language model: configure's kimi-k2; its vision
encoder is idle on text prompts) as amd/Kimi-K2.5-MXFP4, read as MXFP4 routed experts with attention, shared expert
and dense layer in BF16 (ATOM's recipe above; blind 23's reading of AMD's Kimi-K2-Thinking-MXFP4), KV in BF16 (the
recipe sets no --kv-cache-dtype: vLLM's 'auto'); the card as the blog names it, configure's mi355x; 'TP=4' as one
instance on 4 GPUs with attention TP 4 and, since the baseline is the speculative runs' 'corresponding' one and the
recipe serves with --enable-expert-parallel ('TP/EP = 4/4'), whole experts over EP 4 without redundant ones
(balancedness 0.70, ASSUMED_PLAIN, as blinds 16, 17 and 23 read EP without them); the baseline's image not stated
(the BF16 sweep's v0.19.0 assumed); 'tok/s/GPU' as output tokens a second over the 4 GPUs (read so because the
blog's unit names no input and its speed-ups are of generation; the ATOM run of blind 23, Kimi-K2-Thinking-MXFP4
on 4 MI355X at concurrency 4, printed 329.18 output tok/s, 82.3 a GPU, where this table prints 82.7); the closed
loop (--max-concurrency, 10 x concurrency prompts after 2 x concurrency warm-ups) read at its concurrency in
flight, concurrency / 4 a GPU (--max-num-seqs is the concurrency); lengths uniform in [0.8 L, L] at InferenceX's
RANDOM_RANGE_RATIO 0.8 (blinds 22, 24, 25 and 29), means 922 in and out; vLLM V1's scheduler with prefill chunks in
the decode steps (prefill "mixed", configure's default, --max-num-batched-tokens 16384 not an input); CUDA graphs
at decode (vLLM's default); no speculative decoding; no prefix-cache hits (random prompts, prefix caching off);
KV memory at configure's default 0.9 of the card; the AITER kernels, the FP4 ASM GEMM path and the INT4 quick
all-reduce not modelled apart; the 10 seeds a cell as one mean.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

AMD_EAGLE3 = ("AMD ROCm blog 'Accelerating Large-Scale LLM Inference on AMD Instinct MI350X/MI355X with Eagle3 and "
              "AMD Quark' (rocm.blogs.amd.com, github.com/ROCm/rocm-blogs, 2026-07-03), its Kimi K2.5 table's "
              "'No-spec' column, served by vLLM with InferenceX's recipe (kimik2.5_fp4_mi355x_vllm_eagle3.sh at "
              "7d40518)")

_KIMI_MXFP4_BF16KV = Precision(weights="bf16", moe="fp4", kv="bf16")  # amd/Kimi-K2.5-MXFP4, vLLM's 'auto' KV
_SETUP = ("Kimi-K2.5 as amd/Kimi-K2.5-MXFP4 (MXFP4 routed experts; attention, shared expert and dense layer in "
          "BF16) on 4 MI355X, vLLM (v0.19.0 assumed) at --tensor-parallel-size 4 --enable-expert-parallel "
          "(attention TP 4, whole experts over EP 4, no redundant experts: balancedness 0.70), KV in BF16 (no "
          "--kv-cache-dtype), prefix caching off, CUDA graphs at decode, prefill chunks in the decode steps "
          "(vLLM V1), no speculative decoding; lengths uniform in [0.8 L, L] at 1,024 (range ratio 0.8): means 922 "
          "in and out; 10 x concurrency prompts after 2 x concurrency warm-ups, --max-concurrency read as that "
          "many in flight")


def _nospec(conc: int, out: float) -> Case:
    return Case(f"vLLM Kimi-K2.5-MXFP4 4xMI355X TP4 EP4, concurrency {conc}, 1K/1K, no speculation, throughput",
                AMD_EAGLE3, "mi355x", "colocated", Layout(4, 4, 0), conc / 4, Workload(922, 922),
                Options(balancedness=ASSUMED_PLAIN), out, "tok/s/GPU",
                f"the table's 'No-spec (tok/s/GPU)' ({out}) read as output tok/s over the instance's 4 GPUs at "
                f"concurrency {conc} ({conc / 4:g} a GPU); " + _SETUP,
                _KIMI_MXFP4_BF16KV, model="kimi-k2", blind=30)


# (concurrency, 'No-spec (tok/s/GPU)'), the blog's rows in its order
_ROWS = [(4, 82.7), (8, 142.2), (16, 220.5), (32, 342.2), (64, 533.3)]

BLIND30 = [_nospec(*row) for row in _ROWS]

# Predicted when recorded (the model of main at ec80b35): name -> the model's figure in the case's unit.
RECORDED = {
    'vLLM Kimi-K2.5-MXFP4 4xMI355X TP4 EP4, concurrency 4, 1K/1K, no speculation, throughput': 94.4,
    'vLLM Kimi-K2.5-MXFP4 4xMI355X TP4 EP4, concurrency 8, 1K/1K, no speculation, throughput': 154.6,
    'vLLM Kimi-K2.5-MXFP4 4xMI355X TP4 EP4, concurrency 16, 1K/1K, no speculation, throughput': 236.7,
    'vLLM Kimi-K2.5-MXFP4 4xMI355X TP4 EP4, concurrency 32, 1K/1K, no speculation, throughput': 349.3,
    'vLLM Kimi-K2.5-MXFP4 4xMI355X TP4 EP4, concurrency 64, 1K/1K, no speculation, throughput': 538.6,
}
