"""The thirty-fourth blind part of the validation table (docs/capacity.md): published figures found and recorded with
the predictions of the model of main at 4bd7c0e, by someone who did not change the model; none of them was used to
choose a mechanism or a factor. Each case says which reading of its source was taken where the source is silent
(`assumed`); every reading was decided before any prediction here was computed.

It was searched for research papers of 2025-2026 (arXiv, conference papers, their project pages and artifact
repositories) on MoE serving, expert parallelism, prefill/decode and attention-FFN disaggregation, speculative
decoding and scheduling that measure vLLM / SGLang / TensorRT-LLM baselines of DeepSeek-V3/R1, Kimi K2 or
Qwen3-235B-A22B on configure's cards with their setup stated, in tables or in the text. The stored web pages give an
arXiv paper's opening only (its abstract and introduction), so a paper's tables could be read only where a copy of
its text, its LaTeX or its artifact repository is stored among the public repositories; those found print their
serving results as charts, or give ratios only, or stop before their results (see 'Figures looked at and not
taken'). No paper figure could be taken. The one source taken is the SGLang team's technical report on chunked
pipeline parallelism for million-token prompts, which builds on research designs (Mooncake, TeraPipe, BladeLLM),
states its testbed, layouts, chunking and launch commands, and prints its TTFTs in its text and in a table; no part
names it. All its figures are single-request long-prompt prefills on H20, a regime no earlier part holds with
pipeline parallelism.

Source (quoted as the stored copy prints it):
- LMSYS / SGLang team (Shangming Cai), 'Pipeline Parallelism in SGLang: Scaling to Million-Token Contexts and Beyond'
  (lmsys.org/blog/2026-01-15-chunked-pipeline; github.com/lm-sys/lm-sys.github.io, blog/2026-01-15-chunked-pipeline.md
  at commit 0d43c00), section 'Performance Impact': 'Our experimental testbed is a small cluster of 6 H20 nodes (8 x
  96GB VRAM GPUs). Due to limited testing resources, experiments with a PP degree of 8 for DeepSeek-V3.1 were not
  conducted. Additionally, for the PP size = 1 configuration of DeepSeek-V3.1, we used a standalone H20 node (8 x
  141GB VRAM GPUs) to obtain the baseline performance for an input token length of 128K (OOM will occur on the 96GB
  VRAM version). To better verify the throughput performance when the pipeline is saturated, we benchmarked and
  measured the average of 16 consecutive requests during the throughput test.' 'Note: We use the notation DCK to
  denote the chunked prefill size setup when enabling the dynamic chunking, and σ stands for the smooth factor of
  dynamic chunking. To conduct experiments with extremely long contexts, we overwrote the context length of the
  aforementioned model to 1 million, solely for performance analysis.' Subsection 'Reduced TTFT and Scaling Out for
  1 million ITL': 'For the Qwen3-235B-A22B-FP8, the baseline TTFT of ~55.5s (PP1 TP4) is reduced to ~10.5s under the
  PP8 TP4 configuration, representing a latency improvement of approximately 81.1%. And for the DeepSeek-V3.1, the
  baseline TTFT of ~48.5s (PP1 TP8) is reduced to ~15.5s under the PP4 TP8 configuration, depicting a latency
  improvement of approximately 67.9%.' 'we benchmarked the TTFT across varying input token lengths for
  Qwen3-235B-A22B-FP8 with PP8 (32 NVIDIA H20 GPUs)', 'Table 1: TTFT vs. Input Token Length for Qwen3-235B-A22B-FP8
  with PP8 TP4 on H20': '| Input Token Length | 128K | 256K | 512K | 1M |', '| TTFT (s) | 10.54 | 32.68 | 114.33 |
  420.91 |'. 'Getting Started': 'Note: required SGLang release version >= v0.5.7', and the launch examples
  'Serving DeepSeek-V3.1 with 128K Input Token Length (32 GPUs total) Using 8-way Tensor Parallelism and 4-way
  Pipeline Parallelism': `python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.1 --trust-remote-code
  --nnodes 4 --node-rank 0 --tp 8 --pp-size 4 ... --mem-fraction-static 0.8 --attention-backend fa3 ...
  --max-running-requests 128 --chunked-prefill-size 4096` (fixed) and, 'with dynamic chunking', `export
  SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR=0.65` ... `--chunked-prefill-size 12288 --enable-dynamic-chunking`; 'Serving
  Qwen3-235B-A22B-FP8 with 128K Input Token Length (32 GPUs total) Using 4-way Tensor Parallelism and 8-way Pipeline
  Parallelism': `--model-path Qwen/Qwen3-235B-A22B-FP8 ... --tp 4 --pp-size 8 ... --mem-fraction-static 0.8
  --attention-backend fa3 ... --chunked-prefill-size 6144` (fixed) and `export SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR=
  0.8` ... `--chunked-prefill-size 18432 --enable-dynamic-chunking`. Section 3 of the report: SGLang 'partitions the
  prompt into smaller "chunks" (e.g., 4K or 6K tokens). These chunks flow through the pipeline stages like
  micro-batches'; dynamic chunking reduces the next chunk size as the prefix grows, 'the dynamic predictor
  automatically ensures subsequent chunks are at least 1/4 of this initial size'; 'Bubble Ratio = (P - 1) / (P - 1 +
  M)'. The TL;DR's chart title: 'Prefill Throughput (Batch Size = 1) of DeepSeek-V3.1 on H20'.

Figures looked at and not taken:
- This report's throughput speed-ups and efficiencies ('6.14x for PP8 (32 GPUs) compared to PP1 (4 GPUs)', 'DeepSeek
  DCK 12K (3.31x)', 'static 4K variant (3.20x)', 'TP32 solution (2.54x)', '18.4%' / '30.5%' margins, strong scaling
  efficiencies 76.9%, 69.6% and 82.8%): ratios, their absolute throughputs only in charts (Figs. 7-9); its TTFT charts
  (Figs. 10-11) at other PP sizes and chunk settings; its draft in the same repository (blog/2026-01-07-chunked-
  pipeline.md: DeepSeek-V3.1 PP4 TP8 '~15.7s'), superseded by the published '~15.5s'.
- MoE-Prefill (arXiv 2605.02960, a copy of its HTML text stored in a public repository): Qwen3-235B-A22B on 8 H100
  (BF16 / FP8) and 8 H200 (FP8) against vLLM v0.11.0's DP+EP, DP+TP, TP+EP, TP+TP and PP+PP on a prefill-only
  workload; every throughput is in charts (Figs. 9-12), the text gives ratios (1.35-1.37x) and MFUs only.
- MixServe (a fragment of its text stored in a public repository: DeepSeek-R1 and Qwen3-235B on 2 x 8 H20 against
  vLLM at TP 8 [PP 2], TP 8 + DP 2 / EP 16 and TP 4 + DP 4 / EP 16, and Tutel, on ShareGPT): the stored fragment
  ends at its setup, before any result.
- Semi-PD (kungfup/semi_pd_horse: SGLang `--tp 8` DeepSeek-V3 baseline on math_500 at request rates 5-10): its
  repository holds the scripts only; the paper's results are latency-rate charts.
- Frontier (arXiv 2605.21312, NetX-lab/Frontier: a simulator validated against runs on 16 H800): the measured runs
  are not printed in the repository; simulated figures are a model's. The attention-FFN disaggregation papers 'How
  Far Can Disaggregation Go?' (arXiv 2605.28302) and 'Theoretically Optimal Attention/FFN Ratios in Disaggregated LLM
  Serving' (arXiv 2601.21351): simulated or analytic.
- UCCL-EP (uccl-project/uccl, ep/README.md and ep/bench/vllm/README.md): dispatch / combine bandwidths and latencies
  on H200 / B200 / MI300X (kernels, not serving); its vLLM EP deployment guide prints no result.
- MoE-CAP (Auto-CAP/MoE-CAP: a Qwen3-235B 4K/1K config and an H100 BF16 launch script, no results) and its arXiv page
  and Expert-as-a-Service (arXiv 2509.17863): stored copies end at the abstract (blind 20's judgement stands).
- An 'OEPLB' experiment report in a public repository (Qwen3-235B-A22B-FP8 on 8 H20, SGLang 0.5.6.post2 `--tp 8 --dp
  8 --ep-size 8 --enable-dp-attention --moe-a2a-backend deepep`, baseline 4.474 req/s of '~1500 tok' prompts with
  max_tokens=1 at CONC=1024, mean TTFT 12,294 ms): not a paper, its prompt lengths approximate (characters for its
  Prover set), and inconsistent by Little's law (4.474 req/s x 12.3 s = 55 requests in flight, not a 1,024 cap).
- LMSYS / NVIDIA 'Improving DeepEP MoE Load Balance in SGLang with Waterfill and LPLB' (2026-06-26): relative gains
  for DeepSeek-V3/R1 (+1.48% to +7.34%), absolute figures only for DeepSeek V4 (not a model configure has).
- Paper-summary sites (pith.science, arxivlens, themoonlight): second-hand; the 13 x 8 H800 SGLang v0.4.8 study
  (blinds 18 and 20's judgement stands); SGLang's Ascend best-practice tables (not configure's cards).

Readings (decided before the model was run):
- 128K, 256K, 512K and 1M read as 131,072, 262,144, 524,288 and 1,048,576 tokens (binary, as SGLang's random
  benchmark lengths are given); one request at a time ('Batch Size = 1'): each TTFT is one prompt's prefill alone,
  no decode beside it, no prefix-cache hit, prompt length exactly as stated (isl_cv 0).
- Each TTFT is read as the prefill throughput of the deployment: prompt tokens / TTFT / the deployment's GPUs
  (tok/s/GPU, phase "prefill"), its prompt prefilled in chunks of the chunked-prefill size, each chunk one prefill
  step of the attention TP group (the chunk / tp tokens a GPU, the convention of the fitted H20 TP 8 prefill and blind
  28), attending to the chunks before it (configure's chunked prefill). With PP the chunks of the one prompt flow
  through the stages as micro-batches; configure's prefill throughput with pp stages is that of a full pipeline
  (a chunk's pass through all stages with a chunk in every stage), so the fill and drain of one prompt's pipeline
  (the report's bubble ratio (P - 1) / (P - 1 + M)) is not in the prediction: where the prompt has few chunks against
  the stages, the published TTFT holds that bubble.
- Chunk sizes: PP1 runs at the fixed chunk of the report's launch example for the model (Qwen3-235B-A22B-FP8 6,144
  tokens: 1,536 a GPU of TP 4; DeepSeek-V3.1 4,096: 512 a GPU of TP 8); the PP runs at the report's dynamic-chunking
  launch (Qwen PP8 TP4 'DCK 18K', initial chunk 18,432: 4,608 a GPU; DeepSeek PP4 TP8 'DCK 12K', 12,288: 1,536 a
  GPU), read at the initial chunk (dynamic chunking shrinks later chunks, to no less than a quarter, not modelled).
  Table 1 and the '~10.5s' PP8 TP4 figure read as that dynamic-chunking launch.
- Layouts: SGLang `--tp N --pp-size P` without expert-parallel flags: attention TP N with the experts split TP N
  (Layout(N, 1, 0, pp=P)), P stages over the nodes (PP8 TP4: two stages a node of 8; PP4 TP8: one stage a node).
- Formats: Qwen/Qwen3-235B-A22B-FP8 as FP8 block-scaled weights with a BF16 KV cache (no --kv-cache-dtype), model
  'qwen3-235b-a22b'; deepseek-ai/DeepSeek-V3.1 (DeepSeek-V3's architecture, its FP8 block-scaled checkpoint) with a
  BF16 KV cache, model 'deepseek-v3'; the FA3 attention backend not modelled apart.
- SGLang >= v0.5.7; prefill steps run eager (SGLang captures CUDA graphs for decode only); no speculative decoding;
  --mem-fraction-static 0.8 as memory_fraction 0.8; the context length overridden to 1M not modelled apart.
- Cards: the H20 96 GB (configure's h20); the DeepSeek-V3.1 PP1 TP8 node of '8 x 141GB' H20s as the H20-3e as blind
  4 reads it (141 GB at 4.8 TB/s: memory and bandwidth overridden, the compute the H20's).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

SGL_PP = ("LMSYS / SGLang team, 'Pipeline Parallelism in SGLang: Scaling to Million-Token Contexts and Beyond' "
          "(lmsys.org/blog/2026-01-15-chunked-pipeline; github.com/lm-sys/lm-sys.github.io, "
          "blog/2026-01-15-chunked-pipeline.md at commit 0d43c00), 'Performance Impact'")

H20_141G = (("memory_gb", 150.75), ("memory_bandwidth_gbs", 4800))  # the H20 with 141 GB at 4.8 TB/s, as blind 4
_QWEN_FP8 = Precision(weights="fp8")  # Qwen/Qwen3-235B-A22B-FP8, BF16 KV
_DSV31 = Precision(weights="fp8")  # deepseek-ai/DeepSeek-V3.1, FP8 block-scaled, BF16 KV
_OPT = Options(cuda_graphs=False, memory_fraction=0.8)  # eager prefill steps, --mem-fraction-static 0.8

_COMMON = ("one prompt alone (batch size 1), prefilled in chunks, each a prefill step of the attention TP group "
           "attending to the chunks before it; no decode beside it, no prefix-cache hit; SGLang >= v0.5.7 at "
           "`--tp {tp} --pp-size {pp}` on {gpus} {card}: attention TP {tp} with the experts split TP {tp}{stages}; "
           "{model}; FA3 attention, eager prefill steps, no speculative decoding, --mem-fraction-static 0.8")
_QWEN = "Qwen/Qwen3-235B-A22B-FP8 (FP8 block-scaled weights, BF16 KV)"
_DS = "deepseek-ai/DeepSeek-V3.1 (DeepSeek-V3's architecture, FP8 block-scaled weights, BF16 KV)"
_BUBBLE = ("; with PP the prompt's chunks flow through the stages as micro-batches, and the fill and drain of its "
           "one-prompt pipeline is not in configure's prefill throughput (a full pipeline, a chunk in every stage)")


def _case(name: str, hw: str, tp: int, pp: int, isl: int, ttft_s: float, chunk: int, how: str, model: str,
          prec: Precision, what: str, overrides: tuple = ()) -> Case:
    gpus = tp * pp
    stages = (f", {pp} pipeline stages of {tp} GPUs over {gpus // 8} nodes of 8" if pp > 1 else ", one stage")
    card = "H20 (141 GB)" if overrides else "H20 (96 GB)"
    setup = _COMMON.format(tp=tp, pp=pp, gpus=gpus, card=card, stages=stages, model=what)
    return Case(name, SGL_PP, hw, "prefill", Layout(tp, 1, 0, pp=pp), chunk / tp, Workload(isl, 1), _OPT,
                round(isl / ttft_s / gpus, 2), "tok/s/GPU",
                f"{isl:,} prompt tokens / the TTFT ({ttft_s} s) / {gpus} GPUs; {how}, read at {chunk:,} tokens a "
                f"step ({chunk // tp:,} a GPU of the TP {tp} group); " + setup + (_BUBBLE if pp > 1 else ""),
                prec, model=model, hw_overrides=overrides, blind=34)


_Q_PP1 = "the fixed chunked-prefill size of the report's Qwen launch example (6,144)"
_Q_DCK = "the report's dynamic-chunking Qwen launch ('DCK 18K', σ 0.8), its initial chunk"
_D_PP1 = "the fixed chunked-prefill size of the report's DeepSeek launch example (4,096)"
_D_DCK = "the report's dynamic-chunking DeepSeek launch ('DCK 12K', σ 0.65), its initial chunk"
_QM, _DM = "qwen3-235b-a22b", "deepseek-v3"

BLIND34 = [
    _case("SGLang Qwen3-235B FP8 4xH20 TP4 PP1, one 128K prompt, TTFT", "h20", 4, 1, 131072, 55.5, 6144, _Q_PP1,
          _QM, _QWEN_FP8, _QWEN + " ('the baseline TTFT of ~55.5s (PP1 TP4)')"),
    _case("SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 128K prompt, TTFT", "h20", 4, 8, 131072, 10.54, 18432, _Q_DCK,
          _QM, _QWEN_FP8, _QWEN + " (Table 1, 128K: 10.54 s; the text's '~10.5s under the PP8 TP4 configuration')"),
    _case("SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 256K prompt, TTFT", "h20", 4, 8, 262144, 32.68, 18432, _Q_DCK,
          _QM, _QWEN_FP8, _QWEN + " (Table 1, 256K: 32.68 s)"),
    _case("SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 512K prompt, TTFT", "h20", 4, 8, 524288, 114.33, 18432, _Q_DCK,
          _QM, _QWEN_FP8, _QWEN + " (Table 1, 512K: 114.33 s)"),
    _case("SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 1M prompt, TTFT", "h20", 4, 8, 1048576, 420.91, 18432, _Q_DCK,
          _QM, _QWEN_FP8, _QWEN + " (Table 1, 1M: 420.91 s; the context length overridden to 1M)"),
    _case("SGLang DeepSeek-V3.1 8xH20-141G TP8 PP1, one 128K prompt, TTFT", "h20", 8, 1, 131072, 48.5, 4096, _D_PP1,
          _DM, _DSV31, _DS + " ('the baseline TTFT of ~48.5s (PP1 TP8)' on 'a standalone H20 node (8 x 141GB VRAM "
          "GPUs)', read as the H20-3e: 141 GB at 4.8 TB/s)", overrides=H20_141G),
    _case("SGLang DeepSeek-V3.1 32xH20 TP8 PP4, one 128K prompt, TTFT", "h20", 8, 4, 131072, 15.5, 12288, _D_DCK,
          _DM, _DSV31, _DS + " ('~15.5s under the PP4 TP8 configuration')"),
]

# Predicted when recorded (the model of main at 4bd7c0e): name -> the model's figure in the case's unit.
RECORDED = {
    'SGLang Qwen3-235B FP8 4xH20 TP4 PP1, one 128K prompt, TTFT': 504.6,
    'SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 128K prompt, TTFT': 503.5,
    'SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 256K prompt, TTFT': 278.9,
    'SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 512K prompt, TTFT': 147.4,
    'SGLang Qwen3-235B FP8 32xH20 TP4 PP8, one 1M prompt, TTFT': 75.9,
    'SGLang DeepSeek-V3.1 8xH20-141G TP8 PP1, one 128K prompt, TTFT': 148.2,
    'SGLang DeepSeek-V3.1 32xH20 TP8 PP4, one 128K prompt, TTFT': 151.3,
}
