"""The twenty-first blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at c3b162f (its step model is that of 5148a94: the commits since touch
nothing in moeserve/capacity but blinds 19 and 20's cases, and both reproduce there), by someone who did not change
the model; none of them was used to choose a mechanism or a factor. Each case says which reading of
its source was taken where the source is silent (`assumed`). It was searched for H20, H800, GB200 / GB300, Kimi K2
and single-user figures with their setup stated, in engines' own technical reports and documentation (RTP-LLM,
LMDeploy, LightLLM, NVIDIA's DGX Cloud benchmarking recipes), SGLang / vLLM / TensorRT-LLM issues and pull requests,
Chinese-language pages and LMSYS's posts. No figure here is used by another part; its one source is new to the
validation.

Source:
- Alibaba (AiCheng Technology), 'RTP-LLM DeepSeek Replay Tech Report' (github.com/alibaba/rtp-llm,
  docs/RTP-LLM-DeepSeek-Replay-Tech-Report.md at commit 055130f, in Chinese; the English version
  docs/_build/html/en/_sources/references/deepseek.md at commit 4d804f4 is quoted here): 'In RTP-LLM testing, using
  4K input/2K output, under 1.6s TTFT and 50ms ITL constraints, we achieved prefill performance of 42.6K TPS per
  H800 node and decode performance of 14.7K TPS per H800 node'; Settings: 'We deployed in Alibaba Cloud Lingjun H800
  RoCE environment using PD separation and distributed EP architecture, setting TP=1, DP=EP=number of GPUs. The
  prefill single-instance specification is 4 nodes with 32 GPUs, and the decode single-instance specification is 18
  nodes with 144 GPUs. During testing, we used 4 prefill instances and 1 decode instance, totaling 272 H800 GPUs.';
  Prefill: 'The prefill instance uses 32 EP deployment. Under extreme pressure, a single GPU executing 2 4K requests
  takes 1.5s, with a throughput of 5333 TPS. The test did not simulate the impact of cache'; Decode: 'The decode
  instance uses 144 EP deployment (128 + 16 redundant). Due to implementation differences, the host takes 2ms less
  time, but the device is slightly slower. The analysis indicates that the reasons are RoCE vs. IB network
  differences, lack of CUDA Graph optimization, and some slow kernel implementations.' and 'At lower concurrency, a
  single user can reach 42 TPS. At 13200 concurrency, the SLA limit of 20 TPS per user is reached, with a single GPU
  throughput of 1850 TPS.'; MicroBatch & Overlapping: 'we fully implemented the Prefill/Decode Micro Batching
  solution and integrated it with DeepEP's overlap mechanism', 'the Dispatch phase transfers FP8 tensors while the
  Combine phase transfers FP16 tensors', for prefill 'the computation/communication of two MicroBatches can
  interleave'. This part takes the prefill 5,333 and the decode 1,850 tokens a GPU second.

Figures looked at and not taken: the report's per-node figures (42.6K and 14.7K: the same two runs times 8) and its
'20 TPS per user' at 13,200 sequences (the same decode step as the 1,850 taken: 1,850 / (13,200 / 144) = 20.2); its
'42 TPS' for a single user 'at lower concurrency' (the concurrency is in a chart, not the text), its EPLB and
kernel-fusion charts (images); RTP-LLM's DeepSeek and Kimi K2 deployment pages (docs/references/deepseek/deploy.md,
references/kimi/deploy.md: H20 / L20 launch lines with MTP and EPLB, no measured figure) and its attention-FFN
disaggregation page (Qwen3 dense models); LMDeploy's DeepSeek-V3 benchmark page (TP 16 on 2 nodes and DP 32 / EP 32
on 4 nodes, per-node throughputs at 2K input and 1K-32K output: the card is not named); NVIDIA's DGX Cloud
benchmarking recipe for DeepSeek-R1 (github.com/NVIDIA/dgxc-benchmarking, deepseek_r1/inference: GB200 / B200 / H100
configs per use case, the results only on its dashboard); a Qwen3-235B-A22B-Instruct-2507-FP8 'Benchmark Report' in
forks of SGLang (test/registered/8-gpu-models, H200 and B200 at TP 8 / EP 2, ITL 12.20 ms at batch 1 on H200: an
unsigned generated report in a fork, its hardware facts wrong, e.g. B200 '~141GB', output lengths 'Variable per
batch size'); SGLang issue #5490 (1P1D DeepSeek-R1 on two H200 machines, 128 requests 1K/1K: the prefill and decode
layouts are not in the readable part), PR #8021 (Kimi K2 fused-MoE configs for H20-3e: no result), PR #2643 and
issue #3956 (earlier parts' judgements stand); vLLM issue #32832 (Kimi K2 on H200 TP 8: INT4 weights, kernel times
only) and PR #36559 (the card is not in the readable part); TensorRT-LLM issues #2928, #3486 and #5766 (users'
reproductions without a result table in the readable part); the Simplismart, Baseten and csdn Kimi K2 pages (NVFP4
or INT4 weights, layouts not stated, or hardware that contradicts itself: an 'H200 80GB'); Tencent's 16 x H20
DeepSeek-V3 figure quoted in a design note (w4a8 INT4 weights). No H20, GB200 / GB300 or Kimi K2 figure with its
setup stated was found that no part had taken.

Readings common to both (decided before the model was run): DeepSeek-V3 as RTP-LLM replays DeepSeek's inference
system (the report aligns with DeepSeek's Day-6 overview): FP8 block-scaled GEMMs and FP8 dispatch, BF16 combine,
BF16 MLA and cache (the default formats, as the fitted part reads DeepSeek's figures; the report's 'some matrix
multiplication moved to BF16' is not modelled); 4K as 4,000 tokens (the report's 5,333 TPS is 2 x 4,000 tokens in
1.5 s) and 2K as 2,000; RoCE read as the H800 profile's scale-out network; two micro-batches (two-batch overlap) in
both phases; no MTP: the report describes its MTP support and the host time it costs but neither lists it in the
test settings nor gives an acceptance, so the runs are read without it, as the fitted part reads the DeepSeek
figures this report set out to match (a run with MTP at an unpublished acceptance could not be predicted); the
engine is RTP-LLM, whose name is not one configure's track record groups by, so the cases count as DeepSeek's
design (the record's reading of a source naming no engine).
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN, ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

RTP = ("Alibaba, 'RTP-LLM DeepSeek Replay Tech Report' (github.com/alibaba/rtp-llm, "
       "docs/RTP-LLM-DeepSeek-Replay-Tech-Report.md at commit 055130f)")

_RTP = ("DeepSeek-V3 on H800 (RoCE read as the profile's scale-out network) as RTP-LLM replays DeepSeek's inference "
        "system: FP8 GEMMs and dispatch, BF16 combine, BF16 MLA and cache; two micro-batches (two-batch overlap); no "
        "MTP (not in the test settings, no acceptance given); 4K as 4,000 tokens (5,333 TPS = 2 x 4,000 / 1.5 s), "
        "2K as 2,000")

BLIND21 = [
    Case("RTP-LLM prefill, H800 EP32, 2 x 4K prompts a GPU", RTP, "h800", "prefill", Layout(1, 32, 0), 8000,
         Workload(4000, 1), Options(tbo=True, cuda_graphs=False, balancedness=ASSUMED_PLAIN), 5333, "tok/s/GPU",
         "5,333 input tokens a GPU second 'under extreme pressure' (42.6K a node); a prefill instance of 32 GPUs at "
         "TP 1, DP = EP = 32; two requests of 4,000 tokens a GPU a step (8,000 tokens, the two micro-batches one "
         "request each), no cache hits ('the test did not simulate the impact of cache'); no redundant experts stated "
         "for prefill (balancedness 0.70 assumed); no CUDA graphs; " + _RTP, blind=21),
    Case("RTP-LLM decode, H800 EP144, 13,200 sequences, 4K/2K", RTP, "h800", "decode", Layout(1, 144, 32),
         13200 / 144, Workload(4000, 2000), Options(tbo=True, cuda_graphs=False, balancedness=ASSUMED_REPLICATED),
         1850, "tok/s/GPU",
         "1,850 output tokens a GPU second at 13,200 sequences in flight over the 144-GPU decode instance (91.7 a "
         "GPU), where a user gets 20 tokens a second; TP 1, DP = EP = 144, '128 + 16 redundant' read as 16 GPUs' "
         "worth of redundant experts (32 redundant, 288 slots, 2 a GPU, as DeepSeek's EP144 decode); EPLB's balance "
         "assumed (0.85); a mean context of the 4,000-token prompt plus half the 2,000-token output (5,000); no CUDA "
         "graphs ('lack of CUDA Graph optimization'); " + _RTP, blind=21),
]

# Predicted when recorded (the model of main at c3b162f): name -> the model's figure in the case's unit.
RECORDED = {
    'RTP-LLM prefill, H800 EP32, 2 x 4K prompts a GPU': 5670.4,
    'RTP-LLM decode, H800 EP144, 13,200 sequences, 4K/2K': 553.8,
}
