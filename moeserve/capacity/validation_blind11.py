"""The eleventh blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 985e947, by someone who did not change the model, while model
changes were being made by others who did not see them; none of them was used to choose a mechanism or a
factor. Each case says which reading of its source was taken where the source is silent (`assumed`). No
figure here is used by another part; two sources are earlier parts' (InferenceX issue #870 in blinds 2 and
3, the SGLang cookbook in blind 4) at rows those parts did not take.

Sources:
- SemiAnalysis InferenceX issue #870 ('deepseek sglang h200 experimental', github.com/SemiAnalysisAI/InferenceX/
  issues/870, 2026-03-05), the 1k/1k concurrency sweep of DeepSeek-R1-0528 FP8 on 8 H200 with SGLang v0.5.7 at
  'TP=8, EP=1': mean TPOT 12.8 / 17.2 / 25.6 / 34.6 ms and output throughput a GPU 74.6 / 111.9 / 151.1 / 223.6
  tok/s at concurrency 8 / 16 / 32 / 64. Blind 2 took the TPOT at 8 and 32 and the throughput at 64; this part
  takes the TPOT at 16 and 64 and the throughput at 8, 16 and 32.
- The SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c, 2026-05-01), the 'Speed
  Benchmark' sections of docs/autoregressive/DeepSeek/DeepSeek-R1.md (8 B200, DeepSeek-R1-0528 FP8,
  `--tp 8`, SGLang 0.5.6.post1) and Qwen/Qwen3.md (8 B200, Qwen3-235B-A22B-Instruct-2507 BF16, `--tp 8`,
  SGLang 0.5.6): bench_serving outputs with random prompts (1,000 / 1,000, 1,000 / 8,000 and 8,000 / 1,000 at
  range ratio 0) at max concurrency 1, 16 and 64, each with its totals, its mean TPOT, output throughput and
  mean requests in flight ('Concurrency:'). Blind 4 took the DeepSeek-R1 1K/1K rows at 1 and 100 and the 8K/1K
  row at 64, and the Qwen3 1K/8K row at 1 and 1K/1K row at 100; this part takes rows it did not.
- SGLang PR #14982 ('[Feature] Add DCP support for GQA with flashinfer', github.com/sgl-project/sglang/pull/14982),
  its baseline: Qwen3-235B-A22B-Instruct-2507 on 8 H20 at TP8 ('We tested Qwen3-235B-A22B-Instruct-2507 on H20
  with 32k/4k'; '- TP8'), bench_serving at max concurrency 1, 10 requests, 'Total input tokens: 124262', 'Total
  generated tokens: 20099', 'Benchmark duration (s): 217.32', 'Concurrency: 1.00'. Read as one request's
  end-to-end latency, 217.32 s / 10 = 21,732 ms (the mean E2E line of the output was not read).

Figures looked at and not taken: LMSYS's 'Deploying DeepSeek on GB300 NVL72: Big Wins in Long-Context
Inference' (2026-02-19; 226.2 tok/s a GPU at 128K/8K: disaggregated over prefill and decode pools whose sizes
are in charts, not text); InferenceX's 'Best GPU for DeepSeek-R1-0528' post (its rows not taken by blind 8 are
dynamo-trt disaggregated, MTP and pool sizes not in the post, or AMD); the PR #14982 DCP rows and SGLang PR
#14194's (decode context parallelism: configure has no such split); antgroup/sglang PR #19 (a TP8 DeepSeek-V3.1
run at 4K/1K, its card not stated in what was read); vLLM PRs #19315 and #19401 (Qwen3-235B on H20-3e before
tuned fused-MoE configs: their result blocks could not be read whole); SGLang PR #11730 (Qwen3-235B FP8 on
H200 with a speculative draft of accept length 2.15, the draft depth and the layout not read); SGLang PRs
#7762 and #10027 (DeepSeek-R1 W4AFP8: INT4 weights); the cookbook's Kimi-K2.5 H200 rows (INT4) and
DeepSeek-V3.1 rows (MI300X); gpustack's DeepSeek-V3.2 page (sparse attention, not modelled). No H800 figure
with a stated layout and concurrency was found in the time given.

Readings common to all: a mean TPOT is predicted as 1 / TPOT of decode at the run's requests in flight over
the GPUs (other requests' prefills interleaved with it are left out, as the earlier parts do); an output
throughput of a run under bench_serving's --max-concurrency as colocated with prefill "separate" (SGLang's
scheduler runs prefill batches apart from decode without --enable-mixed-chunk; the rule blind 6 set and
blinds 2, 4 and 8 follow) at the run's mean requests in flight over the GPUs; prompts and outputs at the
run's means (its totals over its requests; InferenceX's at 0.9 of the set length, its range ratio 0.8); KV
cache in BF16 and no speculative decoding unless the launch sets them; experts split TP over the GPUs (no
--ep); CUDA graphs; no redundant experts.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

IX_870 = ("SemiAnalysis InferenceX issue #870 ('deepseek sglang h200 experimental', 2026-03-05), the 1k/1k sweep of "
          "DeepSeek-R1-0528 FP8 on 8 H200, SGLang v0.5.7")
COOKBOOK = "SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c), {page}, 'Speed Benchmark'"
SGL_14982 = ("SGLang PR #14982 ('[Feature] Add DCP support for GQA with flashinfer', github.com/sgl-project/sglang/"
             "pull/14982), the TP8 run at concurrency 1")

_IX = Workload(922, 922)  # InferenceX's random lengths uniform in [0.8 L, L]: mean 0.9 L
_IX_H200 = ("DeepSeek-R1-0528 FP8 on 8 H200, SGLang v0.5.7 at TP=8, EP=1 (experts split TP 8, one attention group), "
            "BF16 KV, no MTP, CUDA graphs; mean prompt and output 922 tokens (1,024 at range ratio 0.8)")
_R1 = ("DeepSeek-R1-0528 FP8 on 8 B200 at --tp 8 (experts split TP 8, one attention group), SGLang 0.5.6.post1, "
       "BF16 KV, no MTP, CUDA graphs")
_QWEN = ("Qwen3-235B-A22B-Instruct-2507 (BF16) on 8 B200 at --tp 8 (experts split TP 8, one attention group), "
         "SGLang 0.5.6, BF16 KV, CUDA graphs")
_R1_PAGE = COOKBOOK.format(page="DeepSeek/DeepSeek-R1.md")
_QWEN_PAGE = COOKBOOK.format(page="Qwen/Qwen3.md")
_FP8, _BF16 = Precision(weights="fp8"), Precision(weights="bf16")


def _ix_user(conc: int, tpot: float) -> Case:
    return Case(f"InferenceX, SGLang 8xH200 TP8, concurrency {conc}, 1K/1K, TPOT", IX_870, "h200", "decode",
                Layout(8, 1, 0), conc / 8, _IX, Options(), 1000 / tpot, "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) at concurrency {conc}; " + _IX_H200, model="deepseek-r1", blind=11)


def _ix_tput(conc: int, out: float) -> Case:
    return Case(f"InferenceX, SGLang 8xH200 TP8, concurrency {conc}, 1K/1K, throughput", IX_870, "h200", "colocated",
                Layout(8, 1, 0), conc / 8, _IX, Options(prefill="separate"), out, "tok/s/GPU",
                f"the output tok/s a GPU ({out}) at concurrency {conc}, read as {conc} in flight; " + _IX_H200,
                model="deepseek-r1", blind=11)


def _user(name: str, page: str, conc: float, w: Workload, tpot: float, totals: str, who: str, prec: Precision,
          model: str) -> Case:
    return Case(name, page, "b200", "decode", Layout(8, 1, 0), conc / 8, w, Options(), 1000 / tpot, "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) at {conc} requests in flight on average ({totals}); " + who, prec,
                model=model, blind=11)


BLIND11 = [
    _ix_user(16, 17.2),
    _ix_user(64, 34.6),
    _ix_tput(8, 74.6),
    _ix_tput(16, 111.9),
    _ix_tput(32, 151.1),
    _user("SGLang 8xB200 TP8 FP8, concurrency 16, 1K/1K", _R1_PAGE, 13.93, Workload(496, 509), 17.56,
          "80 requests at max concurrency 16, random 1,000 / 1,000 at range ratio 0: mean 496 in / 509 out, the "
          "totals 39,668 / 40,725", _R1, _FP8, "deepseek-r1"),
    _user("SGLang 8xB200 TP8 FP8, batch 1, 1K/8K", _R1_PAGE, 1, Workload(610, 4445), 9.21,
          "10 requests at max concurrency 1, random 1,000 / 8,000: mean 610 in / 4,445 out, the totals 6,101 / "
          "44,452", _R1, _FP8, "deepseek-r1"),
    _user("SGLang 8xB200 TP8 FP8, concurrency 16, 1K/8K", _R1_PAGE, 14.07, Workload(496, 3978), 15.42,
          "80 requests at max concurrency 16, random 1,000 / 8,000: mean 496 in / 3,978 out, the totals 39,668 / "
          "318,226", _R1, _FP8, "deepseek-r1"),
    _user("SGLang 8xB200 TP8 FP8, batch 1, 8K/1K", _R1_PAGE, 1, Workload(4194, 421), 9.26,
          "10 requests at max concurrency 1, random 8,000 / 1,000: mean 4,194 in / 421 out, the totals 41,941 / "
          "4,210", _R1, _FP8, "deepseek-r1"),
    _user("SGLang 8xB200 TP8 FP8, concurrency 16, 8K/1K", _R1_PAGE, 14.25, Workload(3750, 520), 19.06,
          "80 requests at max concurrency 16, random 8,000 / 1,000: mean 3,750 in / 520 out, the totals 300,020 / "
          "41,589", _R1, _FP8, "deepseek-r1"),
    Case("SGLang 8xB200 TP8 FP8, concurrency 64, 1K/8K, throughput", _R1_PAGE, "b200", "colocated", Layout(8, 1, 0),
         57.03 / 8, Workload(497, 4065), Options(prefill="separate"), 2207.16 / 8, "tok/s/GPU",
         "output tok/s (2,207.16) / 8 GPUs of 320 requests at max concurrency 64 (57.03 in flight on average), random "
         "1,000 / 8,000 at range ratio 0 (mean 497 in / 4,065 out: the totals 158,939 / 1,300,705); " + _R1, _FP8,
         model="deepseek-r1", blind=11),
    _user("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 16, 1K/1K", _QWEN_PAGE, 13.61, Workload(496, 509), 16.36,
          "80 requests at max concurrency 16, random 1,000 / 1,000 at range ratio 0: mean 496 in / 509 out, the "
          "totals 39,668 / 40,725", _QWEN, _BF16, "qwen3-235b-a22b"),
    _user("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 16, 8K/1K", _QWEN_PAGE, 13.90, Workload(3750, 520), 16.81,
          "80 requests at max concurrency 16, random 8,000 / 1,000: mean 3,750 in / 520 out, the totals 300,020 / "
          "41,589", _QWEN, _BF16, "qwen3-235b-a22b"),
    Case("SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 1K/8K, throughput", _QWEN_PAGE, "b200", "colocated",
         Layout(8, 1, 0), 56.35 / 8, Workload(497, 4065), Options(prefill="separate"), 2387.34 / 8, "tok/s/GPU",
         "output tok/s (2,387.34) / 8 GPUs of 320 requests at max concurrency 64 (56.35 in flight on average), random "
         "1,000 / 8,000 at range ratio 0 (mean 497 in / 4,065 out: the totals 158,939 / 1,300,705); " + _QWEN, _BF16,
         model="qwen3-235b-a22b", blind=11),
    Case("SGLang Qwen3-235B 8xH20 TP8 BF16, batch 1, 32K/4K", SGL_14982, "h20", "decode", Layout(8, 1, 0), 1 / 8,
         Workload(12426, 2010), Options(), 217_320 / 10, "ms/request",
         "one request's end-to-end latency: the run's duration (217.32 s) over its 10 requests at concurrency 1.00 "
         "(the gaps between requests left in); random prompts of at most 32K / 4K tokens, mean 12,426 in / 2,010 out "
         "(the totals 124,262 / 20,099); Qwen3-235B-A22B-Instruct-2507 in BF16 (the checkpoint named; no FP8 "
         "suffix) on 8 H20 (96 GB assumed: the PR says 'H20') at TP 8 with the experts split TP 8 (no --ep), the "
         "prompt prefilled in one pass; BF16 KV, CUDA graphs; SGLang of the PR's day (release not stated)",
         _BF16, model="qwen3-235b-a22b", blind=11),
]

# Predicted when recorded (the model of main at 985e947, while model changes made without seeing these
# figures were under way): name -> the model's figure in the case's unit.
RECORDED = {
    'InferenceX, SGLang 8xH200 TP8, concurrency 16, 1K/1K, TPOT': 59.2,
    'InferenceX, SGLang 8xH200 TP8, concurrency 64, 1K/1K, TPOT': 34.2,
    'InferenceX, SGLang 8xH200 TP8, concurrency 8, 1K/1K, throughput': 73.4,
    'InferenceX, SGLang 8xH200 TP8, concurrency 16, 1K/1K, throughput': 109.2,
    'InferenceX, SGLang 8xH200 TP8, concurrency 32, 1K/1K, throughput': 156.4,
    'SGLang 8xB200 TP8 FP8, concurrency 16, 1K/1K': 77.9,
    'SGLang 8xB200 TP8 FP8, batch 1, 1K/8K': 114.6,
    'SGLang 8xB200 TP8 FP8, concurrency 16, 1K/8K': 76.6,
    'SGLang 8xB200 TP8 FP8, batch 1, 8K/1K': 114.6,
    'SGLang 8xB200 TP8 FP8, concurrency 16, 8K/1K': 74.4,
    'SGLang 8xB200 TP8 FP8, concurrency 64, 1K/8K, throughput': 316.3,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 16, 1K/1K': 68.7,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 16, 8K/1K': 68.2,
    'SGLang Qwen3-235B 8xB200 TP8 BF16, concurrency 64, 1K/8K, throughput': 344.3,
    'SGLang Qwen3-235B 8xH20 TP8 BF16, batch 1, 32K/4K': 27805.9,
}
