"""The thirteenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at b3c7409, by someone who did not change the model; none of them
was used to choose a mechanism or a factor. Each case says which reading of its source was taken where the
source is silent (`assumed`). It was searched for vLLM figures (blind 11 found none), with llm-d, NVIDIA
Dynamo, Red Hat and MLPerf sources besides. No figure here is used by another part; one source is blinds 2
and 3's, at figures they did not take, the other is new to the validation. All are of vLLM with wide EP
(data-parallel attention, experts over EP) on a disaggregated deployment, each figure one side's.

Sources (the vLLM blog, github.com/vllm-project/vllm-project.github.io, its posts and their figures' images):
- 'vLLM Large Scale Serving: DeepSeek @ 2.2k tok/s/H200 with Wide-EP' (2025-12-17, _posts/2025-12-17-large-scale-
  serving.md): community benchmarks on a CoreWeave H200 cluster (InfiniBand, ConnectX-7), DeepSeek-style MoE
  served with wide EP ('EP combined with DP'), the gain from ~1.5k to 2.2k tok/s a GPU put down to kernel work and
  'the implementation of Dual Batch Overlap (DBO) for decode'. Its two charts: 'Prefill Throughput, 2000 ISL, 1 OSL,
  Inf request rate', prompt tok/s a GPU at EP size 8, 16 and 32 (prefill_throughput.png), and 'Decode Throughput,
  2000 ISL, 2000 OSL (avg), 256 Concurrent Requests / EP Rank', output tok/s a GPU at expert-parallel size 32, 72
  and 96 (decode_throughput.png). The bars carry no labels; they are read off the charts' scales from the images'
  pixels (0 at row 608, 8,000 or 2,500 at the top gridline, row 156.5): prefill about 6,520 / 7,020 / 5,100 and
  decode about 2,180 / 2,070 / 1,970 (within about 20 and 6 tok/s).
- 'Driving vLLM WideEP and Large-Scale Serving Toward Maturity on Blackwell (Part I)' (2026-02-03, _posts/2026-02-
  03-dsr1-gb200-part1.md): its table 'Deployment setup | H200 | GB200': 'Prefill | 16 GPUs | 8 GPUs (4 instances x 2
  GPUs)', 'Decode | 32 GPUs | 8 GPUs (1 instance x 8 GPUs)', and the chart 'Prefill and Decode Throughput Comparison
  between H200 and GB200, 2000 ISL, 2000 OSL' (topline_comparison.png) with labelled bars: H200 prefill 7000,
  decode 2200; GB200 26214 and 10108 (blinds 2 and 3 took the GB200 pair). Its chart 'Decode Throughput with
  Various Workloads on GB200' (decode_throughput_various.png; 'maintaining the same parallelism setup while varying
  the decode batch size that fully utilizes GPU memory'), labelled: 10108 (2000 ISL, 2000 OSL), 11035 (2000 / 1000),
  11182 (2000 / 100), 12534 (1000 / 1000). This part takes the last three and the H200 pair as labelled, and the
  December post's other four bars as read.

Figures looked at and not taken: the vLLM blog 'DeepSeek-V3.2 on GB300' (blinds 2 and 3 took its R1 EP2 pair; its
H200/B300/GB300 comparison is a chart whose H200 layout is not stated, B300 is not a configure card, and V3.2's
sparse attention is not modelled); 'Efficient Decode Context Parallelism' (2026-08-07: Kimi K2.6 NVFP4 on 8 B200
at TP 8, up to 1,863 tok/s a GPU, replaying an agentic trace of ~67K-token prompts with shared prefixes, whose
cache hits and spread are not given as figures); 'vLLM tops Artificial Analysis' (DeepSeek V3.2, B300, MTP);
'DeepSeek V4' and 'Kimi K3' (models configure does not have); the FP8 KV-cache post (Llama and gpt-oss only);
llm-d's wide-ep-lws guide (the launch lines of the H200 runs: DP x EP with DeepEP, no batch or result figures;
the stored versions could not be tied to the December runs); MLPerf Inference v5.1 / v6.0 DeepSeek-R1 (the
press figures, e.g. 8,064 tok/s a GB300 in the server scenario, are TensorRT-LLM's with attention DP, wide EP,
disaggregation and MTP whose sizes and the dataset's mean lengths were not found in a stored source; an Impala
AI offline 8xB200 report gives no layout); NVIDIA Dynamo's and Red Hat's posts found (figures only as relative
gains or charts without layouts); vLLM PRs #19315 / #19401 (blinds 11 and 12: result blocks not readable whole)
and #26887 / #37340 / #36795 (Qwen3-Next, Qwen3.5 and Qwen3-32B: models configure does not have); vLLM issue
#20890 (Qwen3-235B on A100: results as an image). No vLLM figure on H20 or H800 with a stated layout was found.

Readings common to all: DeepSeek-R1 ('DeepSeek-style MoE models including DeepSeek R1/V3/V3.1'); on H200 the FP8
checkpoint (DeepSeek-R1-0528, as llm-d's guide serves) with BF16 KV (vLLM's default 'auto'), on GB200 as blind 3
reads the same post (NVFP4 experts and dense FFNs, FP8 attention GEMMs and KV, NVFP4 dispatch); every instance
DP attention with the experts over EP (no TP); no redundant experts (EPLB is described, not named for these runs:
balancedness as blind 3's, ASSUMED_PLAIN); CUDA graphs; no MTP. A prefill figure is the prefill side's input
tokens a GPU, predicted as prefill at vLLM's default 8,192 tokens a rank a step (the reading of blinds 2 and 3),
without overlap (DBO is named for decode). A decode figure is the decode side's output tokens a GPU, predicted as
decode at 256 sequences a GPU on H200 (the chart's 256 concurrent requests an EP rank) with two micro-batches
(DBO, named for decode), and on GB200 at the largest batch that fits ('the decode batch size that fully
utilizes GPU memory', batch_rule "fit") without overlap, as blind 3 reads it; lengths as the charts state them
(2,000 / 2,000 and so on; blind 3 read the text's '2K' as 2,048). A decode context of prompt + half the output
(the model's default).
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind2 import R1_FP4
from moeserve.capacity.validation_cases import Case

VLLM_H200 = ("vLLM blog 'vLLM Large Scale Serving: DeepSeek @ 2.2k tok/s/H200 with Wide-EP' (blog.vllm.ai, "
             "2025-12-17), its prefill and decode charts")
VLLM_GB200 = ("vLLM blog 'Driving vLLM WideEP and Large-Scale Serving Toward Maturity on Blackwell (Part I)' "
              "(blog.vllm.ai, 2026-02-03)")
VLLM_GB200_H200 = VLLM_GB200 + ", its H200 deployment table and H200/GB200 comparison chart"

_FP8 = Precision(weights="fp8")
_PLAIN = dict(balancedness=ASSUMED_PLAIN)
_H200 = ("DeepSeek-R1-0528 FP8 on a CoreWeave H200 cluster over InfiniBand, vLLM wide EP (DP attention, experts over "
         "EP, DeepEP), BF16 KV, CUDA graphs, no MTP, no redundant experts")


def _h200_prefill(ep: int, published: float, how: str) -> Case:
    return Case(f"vLLM H200 wide-EP prefill, EP{ep}, 2K input", VLLM_H200, "h200", "prefill", Layout(1, ep, 0), 8192,
                Workload(2000, 1), Options(**_PLAIN), published, "tok/s/GPU",
                f"prompt tok/s a GPU at EP size {ep} ({how}), 2,000 in / 1 out at an infinite request rate; 8,192 "
                "tokens a rank a step (vLLM's default); no two-batch overlap (DBO is named for decode); " + _H200,
                _FP8, model="deepseek-r1", blind=13)


def _h200_decode(ep: int, published: float, source: str, how: str) -> Case:
    return Case(f"vLLM H200 wide-EP decode, EP{ep}, 256 a GPU, 2K/2K", source, "h200", "decode", Layout(1, ep, 0), 256,
                Workload(2000, 2000), Options(tbo=True, **_PLAIN), published, "tok/s/GPU",
                f"output tok/s a GPU of the decode side at expert-parallel size {ep} ({how}), 2,000 in / 2,000 out "
                "(avg), 256 concurrent requests an EP rank; two micro-batches (the post's DBO for decode); " + _H200,
                _FP8, model="deepseek-r1", blind=13)


def _gb200_decode(isl: int, osl: int, published: float) -> Case:
    return Case(f"vLLM GB200 decode, DP8 EP8, {isl // 1000}K/{osl if osl < 1000 else f'{osl // 1000}K'}", VLLM_GB200,
                "gb200", "decode", Layout(1, 8, 0), None, Workload(isl, osl), Options(**_PLAIN), published, "tok/s/GPU",
                f"decode tokens a GPU second ({published:,}, the labelled bar of 'Decode Throughput with Various "
                f"Workloads on GB200') on one decode instance of 8 GB200 (DP 8 + EP 8) at {isl:,} in / {osl:,} out; "
                "batch: the largest that fits ('the decode batch size that fully utilizes GPU memory'); NVFP4 experts "
                "and dense FFNs, FP8 attention GEMMs and KV, NVFP4 dispatch; no redundant experts and no dual-batch "
                "overlap (neither named for GB200), as blind 3 reads the post's 2K/2K bar", R1_FP4,
                model="deepseek-r1", batch_rule="fit", blind=13)


BLIND13 = [
    _gb200_decode(2000, 1000, 11_035),
    _gb200_decode(2000, 100, 11_182),
    _gb200_decode(1000, 1000, 12_534),
    _h200_decode(32, 2_200, VLLM_GB200_H200, "the labelled H200 bar, 2200, of the 2026 post's comparison chart; its "
                 "table: 'Decode | 32 GPUs'; the December chart's EP 32 bar reads about 2,180"),
    _h200_decode(72, 2_070, VLLM_H200, "read off the December chart's scale: about 2,070"),
    _h200_decode(96, 1_970, VLLM_H200, "read off the December chart's scale: about 1,970"),
    _h200_prefill(8, 6_520, "read off the December chart's scale: about 6,520"),
    Case("vLLM H200 wide-EP prefill, EP16, 2K input", VLLM_GB200_H200, "h200", "prefill", Layout(1, 16, 0), 8192,
         Workload(2000, 1), Options(**_PLAIN), 7_000, "tok/s/GPU",
         "prefill tok/s a GPU (the labelled H200 bar, 7000, of the 2026 post's comparison chart at 2,000 in; its "
         "table: 'Prefill | 16 GPUs'; the December chart's EP 16 bar, 2,000 in / 1 out, reads about 7,020), read as "
         "one EP 16 instance; 8,192 tokens a rank a step (vLLM's default); no two-batch overlap (DBO is named for "
         "decode); " + _H200, _FP8, model="deepseek-r1", blind=13),
    _h200_prefill(32, 5_100, "read off the December chart's scale: about 5,100"),
]

# Predicted when recorded (the model of main at b3c7409): name -> the model's figure in the case's unit.
RECORDED = {
    'vLLM GB200 decode, DP8 EP8, 2K/1K': 12568.0,
    'vLLM GB200 decode, DP8 EP8, 2K/100': 14053.9,
    'vLLM GB200 decode, DP8 EP8, 1K/1K': 14818.5,
    'vLLM H200 wide-EP decode, EP32, 256 a GPU, 2K/2K': 3062.0,
    'vLLM H200 wide-EP decode, EP72, 256 a GPU, 2K/2K': 2635.6,
    'vLLM H200 wide-EP decode, EP96, 256 a GPU, 2K/2K': 2567.3,
    'vLLM H200 wide-EP prefill, EP8, 2K input': 6308.9,
    'vLLM H200 wide-EP prefill, EP16, 2K input': 5651.2,
    'vLLM H200 wide-EP prefill, EP32, 2K input': 4111.1,
}
