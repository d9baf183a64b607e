"""The fifteenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at c99b6a0 (the model of 985e947 and 23785e5), by someone who did not
change the model; none of them was used to choose a mechanism or a factor. Each case says which reading of its
source was taken where the source is silent (`assumed`). It was searched in the SGLang / LMSYS and vLLM
communities and in Chinese-language sources, H20 and H800 first, then Kimi K2. No figure here is used by another
part; every source is an earlier part's, at figures no part took, but SGLang issue #8151, which is new.

Sources:
- LMSYS / Ant Group, 'Together with SGLang: Best Practices for Serving DeepSeek-R1 on H20-96G' (2025-09-26;
  github.com/lm-sys/lm-sys.github.io, blog/2025-09-26-sglang-ant-group.md at commit 2896b37), its 'Investigation
  for EP size': 'at BS=8, EP32 delivers 293 token/s vs. 278 token/s for EP16' and 'at BS=32, EP16 achieves 675
  token/s vs. 585 token/s for EP32' (per GPU, decode instances of DP-attention with DeepEP low-latency EP over 2
  or 4 nodes of 8 H20-96G, SGLang v0.5.2, one MTP draft). The held-out part took the EP32 batch-8 293, the EP16
  batch-32 675 (its 'InferX Pro' row), the batch-1 43 and the prefill; this part takes the EP16 batch-8 278 and the
  EP32 batch-32 585.
- SGLang PR #8047 ('H20 tune config for Kimi', github.com/sgl-project/sglang/pull/8047, 2025-07-15), its 'origin
  Kimi Performance' run: Kimi K2 on two nodes of 8 H20 at TP 16, 'Max request concurrency: 32', 'Successful
  requests: 128', 'Total input tokens: 219978', 'Total generated tokens: 92883', 'Output token throughput (tok/s):
  418.08', 'Concurrency: 27.69'. Blind 1 took its median inter-token latency (56.61 ms); this part takes its
  output throughput.
- SGLang issue #8151 ('[Roadmap] Kimi-K2 performance enhancement on H20 GPU', github.com/sgl-project/sglang/issues/
  8151, 2025-07-18): 'the performance of Kimi k2 under TP16 is very poor, in the input and output 3500/1500
  scenarios, to meet the SLO for TTFT < 5s and TPOT < 50ms single card total throughput can only reach 36
  token/s'.
- SGLang PR #5846 ('[qwen3] qwen3moe_tune_h20 fp8 tp4', github.com/sgl-project/sglang/pull/5846, 2025-04-28), its
  table 'H20/235B-FP8/TP4' of output token throughput before and after the PR's fused-MoE configs: '1000-2000 |
  1733.18 | 1966.39', '5000-1000 | 835.71 | 836.04', '10000-500 | 328.75 | 331.29'. Blinds 5 and 6 took the
  'Before' 1000-2000 and 5000-1000; this part takes the 'After' 1000-2000 and 10000-500.
- The SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c, 2026-05-01), the 'Speed Benchmark'
  sections of docs/autoregressive/DeepSeek/DeepSeek-R1.md (8 B200, DeepSeek-R1-0528 FP8, --tp 8, SGLang 0.5.6.post1),
  Qwen/Qwen3.md (8 B200, Qwen3-235B-A22B-Instruct-2507 BF16, --tp 8, SGLang 0.5.6) and Moonshotai/Kimi-K2.md (8 B200,
  Kimi-K2-Instruct, --tp 8 --dp 4 --enable-dp-attention --ep 4 for throughput, SGLang 0.5.6.post1): bench_serving
  outputs with their totals, rows blinds 4 and 11 did not take: DeepSeek-R1's mean TPOT at max concurrency 100
  (1K/1K, 40.11 ms) and 64 (1K/8K, 25.94 ms; 8K/1K, 39.93 ms); Qwen3's mean TPOT at concurrency 1 (1K/1K, 10.12 ms;
  8K/1K, 10.31 ms), 16 (1K/8K, 14.82 ms), 100 (1K/1K, 32.94 ms) and 64 (1K/8K, 23.66 ms; 8K/1K, 32.50 ms) and its
  8K/1K output throughput at 64 (1,790.43 tok/s); Kimi K2's mean TPOT at max concurrency 100 (97.23 ms).

Figures looked at and not taken: the Ant Group post's MTP study at higher draft counts (52 token/s at batch 1 and
554 at batch 32: its text gives both settings as 'steps=1, topK=1, draft-tokens=2', so the draft count of the run
is not stated) and its prefill and decode charts (images); PR #5846's 'After' 5000-1000 (836.04, within 0.04% of
blind 6's 'Before' row of the same run) and 'Before' 10000-500 (328.75, within 0.8% of the 'After' taken); PR
#8047's mean inter-token latency (65.16 ms: blind 1 took the run's median); SGLang PR #8118 (DeepSeek-R1 on 8 H20
at EP 8 against W4AFP8 at TP 8, 1K/1K at concurrency 128: the EP 8 result block could not be read whole from the
stored copies; the TP 8 run is INT4 weights); SGLang PRs #18144 / #21043 (FP8 and W4AFP8 at DP 1 and 2: card,
lengths and concurrency not in what could be read), #13287 (Kimi-K2-Thinking: INT4 weights) and #14194 (DCP8 runs;
its baseline not readable whole); vLLM PR #24597 (Kimi K2 FP8 at TP 4 with EP, 7.5K/7.5K at 128: the card is not
named) and the vLLM recipes' Kimi-K2 16xH800 output throughput (30.84 tok/s: one sequence at a time, the same
measurement as the TPOT blind 3 took); LMSYS's Kimi K2 128xH200 post (both figures taken by the held-out part);
the SGLang cookbook's DeepSeek-V3 page (MI300X) and its DeepSeek-R1 and Qwen3 concurrency-1 and -16 output
throughputs (at one request in flight the same measurement as the TPOTs taken); a Chinese H200 comparison of vLLM
0.7.3 and SGLang 0.4.3.post2 with EvalScope (juejin.cn/post/7481488031548932115: its results are past the part of
the page that could be read) and the article-mirror sites that copy such posts with numbers that contradict the
hardware (as blind 12 found). No H800 figure with a stated layout and concurrency was found beyond the earlier
parts'.

Readings common to all: an output throughput of a run under bench_serving's closed loop (--max-concurrency) as
colocated with SGLang's prefill batches apart from the decodes (prefill "separate", the rule blind 6 set) at the
run's mean requests in flight ('Concurrency:') over the GPUs; a mean TPOT of such a run with more than one request
in flight as the colocated TPOT at the same batch (other requests' prefills included, as a serving benchmark's mean
TPOT counts them: the reading of c99b6a0), and at one request in flight as 1 / TPOT of decode; prompts and outputs
at the run's means (its totals over its requests; bench_serving's random lengths at range ratio 0 spread below the
set length, the spread left out); KV cache in BF16 and no speculative decoding unless the launch sets them; no
redundant experts; CUDA graphs. The Ant Group figures as the held-out part reads that post (decode at the stated
batch a GPU, one MTP draft accepting 1.85, FP8 MLA, swapAB, single-batch overlap, balancedness 0.70). PR #5846's
rows as blinds 5 and 6 read that table (100 prompts of fixed length at 10 a second, all 100 read in flight on one
TP-4 instance, SGLang's chunked prefill stalling the decodes).
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import ANT, SGLANG_UNMIXED, SWAPAB, Case

SGL_8047 = ("SGLang PR #8047 'H20 tune config for Kimi' (github.com/sgl-project/sglang/pull/8047, 2025-07-15), the "
            "'origin Kimi Performance' run")
SGL_8151 = ("SGLang issue #8151 '[Roadmap] Kimi-K2 performance enhancement on H20 GPU' (github.com/sgl-project/sglang/"
            "issues/8151, 2025-07-18)")
SGL_5846 = ("SGLang PR #5846 (github.com/sgl-project/sglang/pull/5846), Qwen3-235B-A22B-FP8 on H20 at TP 4, the "
            "'After' column (the PR's fused-MoE configs)")
COOKBOOK = "SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c), {page}, 'Speed Benchmark'"
_R1_PAGE = COOKBOOK.format(page="DeepSeek/DeepSeek-R1.md")
_QWEN_PAGE = COOKBOOK.format(page="Qwen/Qwen3.md")
_KIMI_PAGE = COOKBOOK.format(page="Moonshotai/Kimi-K2.md")

_FP8, _BF16 = Precision(weights="fp8"), Precision(weights="bf16")
_SEPARATE = Options(prefill="separate")
_R1 = ("DeepSeek-R1-0528 FP8 on 8 B200 at --tp 8 (experts split TP 8, one attention group), SGLang 0.5.6.post1, "
       "BF16 KV, no MTP, CUDA graphs")
_QWEN = ("Qwen3-235B-A22B-Instruct-2507 (BF16) on 8 B200 at --tp 8 (experts split TP 8, one attention group), "
         "SGLang 0.5.6, BF16 KV, CUDA graphs")
_ANT = ("the post's EP-size study of decode instances (DP attention, DeepEP low-latency EP, SGLang v0.5.2) on 8 "
        "H20-96G a node, read as the held-out part reads the post: one MTP draft accepting 1.85 (the post: 1.8-1.9), "
        "FP8 MLA (KV FP8), DeepGEMM swapAB (32-row tiles), single-batch overlap, balancedness 0.70 ('>70% load "
        "balance ratio'), no redundant experts stated; 4,096 in / 1,536 out (its benchmark setting)")


def _ant(ep: int, batch: int, published: float) -> Case:
    return Case(f"Ant Group H20 decode, EP{ep}, batch {batch}, MTP", ANT, "h20", "decode", Layout(1, ep, 0), batch,
                Workload(4096, 1536), Options(mtp_accept=1.85, mtp_draft=1, balancedness=0.70, sbo=True), published,
                "tok/s/GPU", f"{published:g} token/s a GPU at batch {batch} a GPU over EP {ep} ({ep // 8} nodes); "
                + _ANT, Precision(kv="fp8"), hw_overrides=SWAPAB, blind=15)


def _tpot(name: str, page: str, conc: float, w: Workload, tpot: float, totals: str, who: str, prec: Precision,
          model: str) -> Case:
    """A cookbook row's mean TPOT: decode at one request in flight, else the colocated TPOT (prefills included)."""
    one = conc <= 1
    return Case(name, page, "b200", "decode" if one else "colocated", Layout(8, 1, 0), conc / 8, w,
                Options() if one else _SEPARATE, 1000 / tpot, "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) at {conc} requests in flight on average ({totals}); "
                + ("one request at a time: decode alone; " if one else
                   "the colocated TPOT, SGLang's prefill batches of the other requests apart from the decodes "
                   "included; ") + who, prec, model=model, blind=15)


def _qwen_h20(isl: int, osl: int, published: float) -> Case:
    out = f"{osl // 1000}K" if osl >= 1000 else f"{osl}"
    return Case(f"SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, {isl // 1000}K/{out} (tuned fused MoE)", SGL_5846,
                "h20", "colocated", Layout(4, 1, 0), 100 / 4,
                Workload(isl, osl), SGLANG_UNMIXED, published / 4, "tok/s/GPU",
                f"output tok/s ({published:,}, the 'After' column: the PR's tuned Triton fused-MoE configs) / 4 GPUs; "
                "the PR gives no command: read as blinds 5 and 6 read its 'Before' rows (the Qwen3 tuning drive's "
                f"runs of that day, PR #5849: 100 random prompts of exactly {isl:,} in / {osl:,} out sent at 10 a "
                "second, read as all 100 in flight on one TP-4 instance, SGLang's chunked prefill stalling the "
                "decodes); FP8 weights, experts split TP 4, BF16 KV, CUDA graphs"
                + ("; at 10K-token prompts the model's KV memory holds fewer than the 100 read in flight (SGLang "
                   "would queue some); kept at the read concurrency, as blind 6 keeps its 100-request rows"
                   if isl >= 10000 else ""), _FP8, model="qwen3-235b-a22b", blind=15)


BLIND15 = [
    _ant(16, 8, 278),
    _ant(32, 32, 585),
    Case("SGLang Kimi K2, H20 TP16, concurrency 32 (untuned fused MoE), throughput", SGL_8047, "h20", "colocated",
         Layout(16, 1, 0), 27.69 / 16, Workload(1719, 726), _SEPARATE, 418.08 / 16, "tok/s/GPU",
         "output tok/s (418.08) / 16 GPUs of 128 requests at max concurrency 32 (27.69 in flight on average) on one "
         "TP-16 instance (two H20 nodes); mean 1,719 in / 726 out (the totals 219,978 / 92,883 over 128); FP8 weights, "
         "experts split TP 16 (the Triton fused MoE on default configs: the PR adds tuned ones), BF16 KV; SGLang's "
         "prefill batches apart from the decodes (bench_serving's closed loop); H20 of 96 GB", _FP8, model="kimi-k2",
         blind=15),
    Case("SGLang Kimi K2, H20 TP16, 3.5K/1.5K at TPOT 50 ms, throughput", SGL_8151, "h20", "colocated",
         Layout(16, 1, 0), None, Workload(3500, 1500, ttft_slo_ms=5000, tpot_slo_ms=50), _SEPARATE,
         36 * 1500 / 5000, "tok/s/GPU",
         "'single card total throughput' 36 token/s read as bench_serving's total (input + output) token throughput a "
         "GPU, so its output share 1,500 / 5,000 of it (10.8 output tok/s a GPU); TP 16 over two nodes of 8 H20 (96 GB "
         "assumed: the issue says 'H20'), experts split TP 16, FP8 weights, BF16 KV; 3,500 in / 1,500 out; the batch "
         "the largest whose TPOT meets the stated 50 ms (the TTFT < 5 s bound not applied by the batch rule); SGLang's "
         "prefill batches apart from the decodes (a concurrency sweep of bench_serving assumed); whether the fused-MoE "
         "configs of PR #8047 (merged three days before) were in the run is not stated", _FP8, model="kimi-k2",
         blind=15),
    _qwen_h20(1000, 2000, 1966.39),
    _qwen_h20(10000, 500, 331.29),
    _tpot("SGLang 8xB200 TP8 FP8, concurrency 100, 1K/1K, TPOT", _R1_PAGE, 92.26, Workload(500, 504), 40.11,
          "500 requests at max concurrency 100, random 1,000 / 1,000 at range ratio 0: mean 500 in / 504 out, the "
          "totals 249,831 / 252,162", _R1, _FP8, "deepseek-r1"),
    _tpot("SGLang 8xB200 TP8 FP8, concurrency 64, 1K/8K, TPOT", _R1_PAGE, 57.03, Workload(497, 4065), 25.94,
          "320 requests at max concurrency 64, random 1,000 / 8,000: mean 497 in / 4,065 out, the totals 158,939 / "
          "1,300,705", _R1, _FP8, "deepseek-r1"),
    _tpot("SGLang 8xB200 TP8 FP8, concurrency 64, 8K/1K, TPOT", _R1_PAGE, 59.45, Workload(3981, 530), 39.93,
          "320 requests at max concurrency 64, random 8,000 / 1,000: mean 3,981 in / 530 out, the totals 1,273,893 / "
          "169,680", _R1, _FP8, "deepseek-r1"),
    _tpot("SGLang Qwen3-235B 8xB200 TP8 BF16, batch 1, 1K/1K", _QWEN_PAGE, 1, Workload(610, 421), 10.12,
          "10 requests at max concurrency 1, random 1,000 / 1,000: mean 610 in / 421 out, the totals 6,101 / 4,210",
          _QWEN, _BF16, "qwen3-235b-a22b"),
    _tpot("SGLang Qwen3-235B 8xB200 TP8 BF16, batch 1, 8K/1K", _QWEN_PAGE, 1, Workload(4194, 421), 10.31,
          "10 requests at max concurrency 1, random 8,000 / 1,000: mean 4,194 in / 421 out, the totals 41,941 / 4,210",
          _QWEN, _BF16, "qwen3-235b-a22b"),
    _tpot("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 16, 1K/8K, TPOT", _QWEN_PAGE, 13.85, Workload(496, 3978),
          14.82, "80 requests at max concurrency 16, random 1,000 / 8,000: mean 496 in / 3,978 out, the totals "
          "39,668 / 318,226", _QWEN, _BF16, "qwen3-235b-a22b"),
    _tpot("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 100, 1K/1K, TPOT", _QWEN_PAGE, 90.50, Workload(500, 504),
          32.94, "500 requests at max concurrency 100, random 1,000 / 1,000: mean 500 in / 504 out, the totals "
          "249,831 / 252,162", _QWEN, _BF16, "qwen3-235b-a22b"),
    _tpot("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 1K/8K, TPOT", _QWEN_PAGE, 56.35, Workload(497, 4065),
          23.66, "320 requests at max concurrency 64, random 1,000 / 8,000: mean 497 in / 4,065 out, the totals "
          "158,939 / 1,300,705", _QWEN, _BF16, "qwen3-235b-a22b"),
    _tpot("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 8K/1K, TPOT", _QWEN_PAGE, 58.63, Workload(3981, 530),
          32.50, "320 requests at max concurrency 64, random 8,000 / 1,000: mean 3,981 in / 530 out, the totals "
          "1,273,893 / 169,680", _QWEN, _BF16, "qwen3-235b-a22b"),
    Case("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 8K/1K, throughput", _QWEN_PAGE, "b200", "colocated",
         Layout(8, 1, 0), 58.63 / 8, Workload(3981, 530), _SEPARATE, 1790.43 / 8, "tok/s/GPU",
         "output tok/s (1,790.43) / 8 GPUs of 320 requests at max concurrency 64 (58.63 in flight on average), random "
         "8,000 / 1,000 at range ratio 0 (mean 3,981 in / 530 out: the totals 1,273,893 / 169,680); " + _QWEN, _BF16,
         model="qwen3-235b-a22b", blind=15),
    Case("SGLang Kimi K2 8xB200 TP8 DP4 EP4, concurrency 100, TPOT", _KIMI_PAGE, "b200", "colocated",
         Layout(tp=2, ep=4, moe_tp=2), 89.60 / 8, Workload(297, 194),
         Options(balancedness=ASSUMED_PLAIN, prefill="separate"), 1000 / 97.23, "tok/s/user",
         "1 / the mean TPOT (97.23 ms) of 1,000 ShareGPT requests at max concurrency 100 (89.60 in flight on average; "
         "mean 297 in / 194 out: the totals 296,642 / 193,831), the colocated TPOT, SGLang's prefill batches of the "
         "other requests apart from the decodes included; Kimi-K2-Instruct (FP8 checkpoint) on 8 B200 at --tp 8 --dp 4 "
         "--enable-dp-attention --ep 4: four attention groups of TP 2, experts split TP 2 x EP 4, no redundant "
         "experts; SGLang 0.5.6.post1, BF16 KV, CUDA graphs (as blind 4 reads the same run's throughput)", _FP8,
         model="kimi-k2", blind=15),
]

# Predicted when recorded (the model of main at c99b6a0): name -> the model's figure in the case's unit.
RECORDED = {
    'Ant Group H20 decode, EP16, batch 8, MTP': 290.3,
    'Ant Group H20 decode, EP32, batch 32, MTP': 640.7,
    'SGLang Kimi K2, H20 TP16, concurrency 32 (untuned fused MoE), throughput': 36.2,
    'SGLang Kimi K2, H20 TP16, 3.5K/1.5K at TPOT 50 ms, throughput': 38.7,
    'SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, 1K/2K (tuned fused MoE)': 332.0,
    'SGLang Qwen3-235B 4xH20 TP4 FP8, 100 requests, 10K/500 (tuned fused MoE)': 73.8,
    'SGLang 8xB200 TP8 FP8, concurrency 100, 1K/1K, TPOT': 27.9,
    'SGLang 8xB200 TP8 FP8, concurrency 64, 1K/8K, TPOT': 44.4,
    'SGLang 8xB200 TP8 FP8, concurrency 64, 8K/1K, TPOT': 30.4,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, batch 1, 1K/1K': 97.4,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, batch 1, 8K/1K': 97.4,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 16, 1K/8K, TPOT': 67.3,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 100, 1K/1K, TPOT': 32.0,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 1K/8K, TPOT': 48.9,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 8K/1K, TPOT': 34.3,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 8K/1K, throughput': 251.2,
    'SGLang Kimi K2 8xB200 TP8 DP4 EP4, concurrency 100, TPOT': 18.9,
}
