"""The twentieth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 0b1b550 (its step model is that of 5148a94: the commits since touch
blind 19's cases, configure's CLI and docs, and blind 19 reproduces there), by someone who did not change the
model; none of them was used to choose a mechanism or a factor. Each case says which reading of its source was
taken where the source is silent (`assumed`). It was searched in research papers and technical reports (arXiv
pages, papers' GitHub repositories and the reports they carry, simulators' validation tables, vendor and cloud
benchmark reports) for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B serving figures with their setup stated. No figure
here is used by another part; its sources are new to the validation (the Step-3 report was looked at by blind 18,
which could not read past its abstract).

Sources:
- StepFun, 'Step-3 is Large yet Affordable: Model-system Co-design for Cost-effective Decoding' (arXiv 2507.19427,
  July 2025; the report as github.com/stepfun-ai/Step3, Step3-Sys-Tech-Report.pdf at commit bd28efa), section 7.3
  'End-to-End Performance': 'Its official blog reports sustained average decoding throughput of 1,850 tokens/GPU/s
  (TGS) on H800, with 4,989 context on average. A higher peak performance in profiling is reported in [3], at 2,324
  TGS with 4,096 context length on H800. Both numbers are obtained under 20 tokens/s decoding SLA.' and its Table 8
  ('Performance comparison with reported number of DSv3 under 20 tokens/s decoding SLA. TGS: Tokens/GPU/s'; Model,
  Context Len (avg), # Hopper GPUs, Peak TGS): 'DSv3-profile [3] 4096 128 2324'. The abstract: '(4K context, FP8,
  no MTP) ... DeepSeek-V3's 2,324 in the same setup'. [3] is DeepSeek's profile data.
- Alibaba (Alimama AI Infra Team & Future Living Lab), 'InferSim: A Lightweight LLM Inference Performance
  Simulator' (github.com/alibaba/InferSim, README.md at commit 0d2b567; its technical report is an attachment the
  store does not hold), 'Simulation Result' (Model | GPU | Prefill TGS(Actual) | Prefill TGS(Sim) | Decode
  TGS(Actual) | Decode TGS(Sim) | Notes): '| DeepSeek-V3 | H800 | 7839 | 9034 | 2324 | 2675 | Actual data from
  [deepseek/profile-data](https://github.com/deepseek-ai/profile-data/). Simulated with same setup: ...|'. Its
  example scripts for that row (example/deepseek-v3/dsv3_prefill.sh and dsv3_decode.sh, as a fork,
  roshini0108/InferSim at 54de7f7, stores them): H800, '--world-size 32' with '--max-prefill-tokens 8192' and
  '--enable-tbo' (two micro-batches of 8,192), and '--world-size 128' with '--decode-bs 64' and '--enable-tbo'.
- The setup both quote, DeepSeek's 'Profiling Data in DeepSeek Infra' (github.com/deepseek-ai/profile-data,
  README.md at commit ae7fc07): 'we simulate an absolutely balanced MoE routing strategy for profiling'; prefilling
  'employs EP32 and TP1 (in line with DeepSeek V3/R1 's actual online deployment), with a prompt length set to 4K
  and a batch size of 16K tokens per GPU', 'two micro-batches to overlap computation and all-to-all
  communication'; decoding 'employs EP128, TP1, and a prompt length of 4K (closely matching the actual online
  deployment configuration), with a batch size of 128 requests per GPU', 'also leverages two micro-batches'. The
  profile publishes traces, not throughputs: the figures are Step-3's and InferSim's readings of them (InferSim's
  7,839 prefill TGS is 16,384 tokens over a 2.09 s step; both give 2,324 for decode, 128 tokens over a 55.1 ms step).

Figures looked at and not taken: Step-3's 'DSv3-blog' row (1,850 TGS at 4,989 context on 144 GPUs: DeepSeek's
Day-6 figure the fitted part took) and its own rows (Step-3, a model configure does not have); its Table 9 (time
per attention layer of DeepSeek-V3's MLA on 4 H800 / H20 at batch 256, 8K and 32K: one layer's attention with its
projections, not a serving figure configure predicts) and section 4's costs (theoretical); InferSim's Qwen3-30B-A3B
and Qwen3-8B rows (models configure does not have) and its simulated columns (a model's figures); the 13 x 8 H800
SuperPod study of SGLang v0.4.8 P/D disaggregation (HKUST / HKGAI technical report, Hugging Face community blog
2025-07-19 and its Chinese version, whose full text the code corpus holds; blind 18 could not read past its start):
its model is 'our own finetuned DeepSeek V3 (0324) alike model', its P2D2 table's decode-side layout is not stated
per row and 'the output throughput is bounded by TTFT, hence the measurement is not accurate' (the author), its
colocated 'H800 x 2' appendix gives no layout for those runs (the scripts' TP 16 / DP 1 defaults are the P/D roles')
and its batch-1 row (5.53 tok/s, 181 ms a token at 128 / 128) reads as something other than a decode step; its
P4D6 / P4D9 / (P3x3)D4 results are charts; the Kimi K2 technical report (github.com/MoonshotAI/Kimi-K2: the PDF is
too large for the store) and Qwen3's (QwenLM/Qwen3: no serving figure); MegaScale-Infer (arXiv 2504.02263: Mixtral,
DBRX and an in-house 317B MoE), Expert-as-a-Service (arXiv 2509.17863), SpecForge / SpecBundle (arXiv 2603.18567
and LMSYS's 2025-12-23 post: Qwen3-235B and Kimi K2 EAGLE-3 speed-ups as charts on a dashboard the store does not
hold), the MoE-CAP benchmark (arXiv 2412.07067) and the other arXiv pages found (the stored copies end at the
abstract; none prints a DeepSeek, Kimi K2 or Qwen3-235B serving figure with its setup there); Mooncake's
performance pages (A10 and Qwen3-8B / 14B runs; its Qwen3-235B H800 HiCache run as charts of TTFT);
aiconfigurator's docs (predicted against predicted); NVIDIA NIM's benchmarking page (Llama only), Vultr's B200
inference cookbook (Nemotron, MiniMax, GLM-5, DeepSeek V3.2) and HPC-AI's SGLang speculative-decoding tutorial
(results past the stored part). No H20, H200, B200 or GB200 figure of these models with its setup stated was
found in a paper or technical report that no part had taken, and none of Kimi K2 or Qwen3-235B.

Readings common to all: DeepSeek-V3 as DeepSeek serves it (FP8 block-scaled GEMMs and dispatch, MLA in BF16 with
a BF16 cache, the Day-6 overview's formats, as the fitted part reads its figures); the profile's 'absolutely
balanced MoE routing' as balancedness 1.0; its two micro-batches as two-batch overlap; prefill without CUDA graphs
(the fitted prefill's reading) and decode with them; no MTP (Step-3: '(4K context, FP8, no MTP) ... in the same
setup'; the profile README names none); the figure as the research prototype's trace read by a third party,
predicted as the step of the engine mode configure has for it (DeepSeek's own engine, the fitted part's reading).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

STEP3 = ("StepFun, 'Step-3 is Large yet Affordable: Model-system Co-design for Cost-effective Decoding' (arXiv "
         "2507.19427, Table 8 'DSv3-profile'), and Alibaba's InferSim README (github.com/alibaba/InferSim), both "
         "reading DeepSeek's profile-data (github.com/deepseek-ai/profile-data)")
INFERSIM = ("Alibaba, 'InferSim: A Lightweight LLM Inference Performance Simulator' (github.com/alibaba/InferSim, "
            "README 'Simulation Result', Prefill TGS(Actual)), reading DeepSeek's profile-data "
            "(github.com/deepseek-ai/profile-data)")

_PROFILE = ("DeepSeek's profile of its own inference engine on H800 (the research prototype's trace, read by a third "
            "party; predicted as DeepSeek's engine, as the fitted part reads the Day-6 figures): FP8 GEMMs and "
            "dispatch, BF16 MLA and cache; 'absolutely balanced MoE routing' (balancedness 1.0); two micro-batches "
            "(two-batch overlap); no MTP")

BLIND20 = [
    Case("DeepSeek profile prefill, H800 EP32, 4K prompts, 16K tokens a GPU", INFERSIM, "h800", "prefill",
         Layout(1, 32, 32), 16384, Workload(4096, 1), Options(tbo=True, cuda_graphs=False, balancedness=1.0), 7839,
         "tok/s/GPU",
         "Prefill TGS(Actual) 7,839 (input tokens a GPU second); the profile: EP32, TP1, prompts of 4K (4,096, all "
         "alike, no cache hits) and 16K tokens a GPU a step (16,384) in two micro-batches; 32 redundant experts "
         "(288 slots, 9 a GPU: the online deployment the profile says it is in line with, as the fitted prefill "
         "reads it); no CUDA graphs; " + _PROFILE, blind=20),
    Case("DeepSeek profile decode, H800 EP128, batch 128, 4K context", STEP3, "h800", "decode", Layout(1, 128, 0), 128,
         Workload(4096, 1), Options(tbo=True, decode_context=4096, balancedness=1.0), 2324, "tok/s/GPU",
         "peak TGS 2,324 (output tokens a GPU second; Step-3 Table 8, InferSim's Decode TGS(Actual)); the profile: "
         "EP128, TP1, 128 requests a GPU, a context of 4K (Step-3: 4,096 on average) for every sequence; no redundant "
         "experts (256 routed experts, 2 a GPU: 288 slots do not split over 128 ranks, and balanced routing needs "
         "none); CUDA graphs; " + _PROFILE, blind=20),
]

# Predicted when recorded (the model of main at 0b1b550): name -> the model's figure in the case's unit.
RECORDED = {
    'DeepSeek profile prefill, H800 EP32, 4K prompts, 16K tokens a GPU': 6629.0,
    'DeepSeek profile decode, H800 EP128, batch 128, 4K context': 2082.9,
}
