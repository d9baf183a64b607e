"""The seventeenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at a193eec (the model of 985e947: no model change since; blind 16's
RECORDED reproduces at a193eec), by someone who did not change the model; none of them was used to choose a
mechanism or a factor. Each case says which reading of its source was taken where the source is silent
(`assumed`). It was searched in GitHub-hosted material only (issue and pull-request threads, files in public
repositories), H800, H20, GB200 and B200 first. No figure here is used by another part; two sources are blind 2's
(InferenceX issue #870, tenstorrent issue #356) at rows no part took, the other five are new to the validation.

Sources (GitHub threads, quoted as the stored copies print them):
- SGLang PR #5068 ('[Fix] DeepEP Compatibility with Low Latency', github.com/sgl-project/sglang/pull/5068,
  2025-04-04), its table 'performance (1 node, auto mode, H20-3e)' of DeepSeek-V3 on one node of 8 H20-3e, launched
  `--tp 8 --enable-deepep-moe --deepep-mode auto --max-running-requests 128 --disable-radix-cache
  --mem-fraction-static 0.9 --stream-output --cuda-graph-max-bs 128` (columns: MoE version, concurrency, input,
  output, requests, input / output / total tok/s): 'DeepEP auto | 127.95 | 1000 | 1000 | 512 | 954.56 | 954.56 |
  1909.13' and 'EPMoE | 127.94 | 1000 | 1000 | 512 | 862.52 | 862.52 | 1725.04'. This part takes both output
  throughputs.
- SGLang issue #6823 ('[Bug] The performance of DeepEP auto on 8*H20-3e is worse than EPMoE and baseline',
  github.com/sgl-project/sglang/issues/6823, 2025-06-03): DeepSeek-R1 on one node of 8 H20-3e ('GPU 0,1,2,3,4,5,6,7:
  NVIDIA H20-3e', 'sglang: 0.4.6.post5'), its table (version, concurrency, input, output, total tok/s, ttft ms, tpot
  ms): 'baseline | 128 | 1024 | 1024 | 3002 | 6465 | 79', 'EPMoE | 128 | 1024 | 1024 | 2577 | 9747 | 90', 'DeepEP auto
  | 128 | 1024 | 1024 | 2033 | 9254 | 117'. This part takes the three throughputs and the three TPOTs.
- SGLang issue #3812 ('Benchmark results of Expert Parallelism on DeepSeek-v3/R1', github.com/sgl-project/sglang/
  issues/3812, 2025-02-24): 'GPU server: 2 * 8 * h800', 'network: ROCE v2 + RDMA', `sglang.bench_serving --backend
  sglang --dataset-name random --num-prompts 600 --random-input 180 --random-output 400 --request-rate 40`, its 'TP16'
  launch (`--model-path /dsv3_fp8_weight --nnodes 2 --tp 16`) and results: '#Input tokens: 55787', '#Output tokens:
  120861', 'Successful requests: 600', 'Benchmark duration (s): 109.94'. The output throughput is taken as 120,861 /
  109.94 s = 1,099.3 tok/s (the printout's throughput lines and its EP16 run are past the part of the stored thread
  that could be read).
- SGLang PR #3602 ('Expert Parallelism (EP) Support for DeepSeek V3/R1', github.com/sgl-project/sglang/pull/3602,
  2025-02-16): 'H200*8 | Input token throughput (tok/s) | Output token throughput (tok/s)', 'EP=8 | 677.82 |
  1468.48', 'TP=8 | 647.60 | 1403.02', from `launch_server --model deepseek-ai/DeepSeek-V3 --tp 8` (with
  `--enable-ep-moe` for EP) and the same bench_serving command as issue #3812 (its input / output ratio, 2.17, is that
  run's 120,861 / 55,787: the same prompts).
- SGLang PR #6821 ('feat: integrate deepgemm into EPMoE', github.com/sgl-project/sglang/pull/6821, 2025-06-03,
  merged): 'two h20 node', DeepSeek-V3 at `--tp-size 16 --enable-dp-attention --dp-size 16 --mem-fraction-static 0.8
  --enable-ep-moe --disable-radix-cache`, `sglang.bench_one_batch_server --batch-size 1 16 32 64 128 --input-len 1024
  --output-len 1024`, its table (batch size, test group, output throughput tok/s): '| 1 | w deepgemm | 30.49 |' and
  '| 16 | w deepgemm | 335.31 |' (the PR's state; the 'w/o deepgemm' rows, 24.95 and 309.32, are the state before
  it). The rows at 32 to 128 are past the part of the stored thread that could be read.
- SemiAnalysis InferenceX issue #870 ('deepseek sglang h200 experimental', github.com/SemiAnalysisAI/InferenceX/
  issues/870), the comment of 2026-03-06 'B200 SGLang DeepSeek FP4 — Concurrency Sweep with GPU Power Analysis':
  'dsr1-fp4-b200-sglang | DeepSeek-R1-0528-FP4-V2 | SGLang v0.5.6 | TP=8 EP=8 | 8x B200 GPUs | 1k/1k ISL/OSL', 'Output
  tput/GPU (tok/s) | 59.7 | 104.8 | 169.3 | 282.4 | 312.5' at concurrency 4, 8, 16, 32 and 64 (mean TTFT '5,719 ⚠️'
  at 64). Blind 2 took 4 and 32; this part takes 8, 16 and 64.
- tenstorrent/tt-inference-server issue #356 ('DeepSeek-R1-0528: GPU Benchmarks', github.com/tenstorrent/
  tt-inference-server/issues/356), the comment of 2025-07-09 'Performance Benchmark Sweeps for DeepSeek-R1-0528 on 16
  H100 (SGLANG + INFINIBAND)' (ISL, OSL, concurrency, requests, TTFT ms, TPOT ms, ...): '128 | 1024 | 1 | 4 | 184.1 |
  23.2 |' and '8192 | 128 | 1 | 2 | 263.9 | 24.0 |'. Blind 2 took the 1024 / 128 row (23.2 ms); this part takes
  these two.

Figures looked at and not taken: PR #5068's 'DeepEP origin' row (the DeepEP path before the PR, 581.94 tok/s) and
its two-node table (past the readable part); issue #3812's EP16 run (not readable); PR #6821's 'w/o deepgemm' rows
(the state the PR replaced) and its batch 32-128 rows (not readable); SGLang PR #5805 (the closed first version of
PR #6821: EP16 on two H20 nodes with MTP at an accept length of 3.04, 3,500 / 1,500 at concurrency 64; its launch
line, and so the attention layout and the draft count, was not readable); SGLang PR #4767 (DeepEP low-latency
mode: launch lines, no figure read); SGLang issue #8561 (DeepSeek-R1 on 6 x 8 H20, P/D with EP against TP 16: the
figures are past the readable part); SGLang PR #9204 (Qwen3-235B-A22B-FP8 on B200, concurrency 10: its TP is not in
the readable part); SGLang PR #5917 (Qwen3-235B-FP8 EP on 8 H200: results as an image); SGLang issue #3361
(DeepSeek-V3 on 2 x 8 H800 at TP 16 with --enable-torch-compile --disable-cuda-graph: configure has no
torch.compile, as blinds 8 and 16 judge such runs; a Qianfan dataset whose lengths are given only as means);
SGLang PR #2643 (v0.4.1.post2 release notes: DeepSeek-V3 batch 1/8/32 and ShareGPT rates, the card not stated in
the readable part); SGLang PRs #13287 (Kimi-K2-Thinking: INT4 weights) and #6121 (Qwen3-30B on A40); vLLM PR
#29346 (DeepSeek-R1 TP 8 with dummy weights, the card not named), issues #28887 / #28882 (DeepSeek-R1 on 8 H200,
vLLM TP 8 against TEP 8: TTFT tables and charts, no throughput figure read) and #23752 (DeepSeek-R1 DP 8 on 8 B200:
the result block not readable whole); vLLM PR #24597 (Kimi K2 at TP 4 with EP: the card not named; as blind 15);
vLLM recipes PR #326 (Kimi-K2.5 NVFP4 on B200: InferenceX rows, blind 9's source); aarora79/agentic-coding-harness-
benchmarks PR #56 (Kimi K2.7-Code: a model configure does not have); a GCP Kimi K2.5 8xH100 result file (INT4
weights); Pai-Megatron-Patch issue #658 (Qwen3-235B training throughput on H800). No GB200 figure and no Kimi K2
figure with a stated layout and batch was found in the GitHub material searched.

Readings common to all: an output throughput of a run that interleaves prefill with decode as colocated, SGLang's
prefill batches apart from the decodes (prefill "separate", the rule blinds 2, 4, 8, 11, 12 and 16 follow), at
the run's requests in flight over the GPUs; a mean TPOT of such a run with more than one request in flight as the
colocated TPOT at the same batch (the reading of c99b6a0, blinds 15 and 16), and of one request alone as 1 / TPOT
of decode; DeepSeek-V3 / R1 as the FP8 block-scaled checkpoint (BF16 KV unless the launch sets one) and NVIDIA's
NVFP4 DeepSeek-R1 as blinds 2 and 3 read it; the H20-3e as blind 4 reads it (the H20 with 141 GB at 4.8 TB/s,
hw_overrides); SGLang 0.4.x-0.4.6's `--tp N` as attention TP N with the experts split TP N, `--tp N --enable-ep-moe`
and `--tp N --enable-deepep-moe` (without DP attention) as attention TP N with whole experts over N ranks, and
`--enable-dp-attention --dp-size N` as N attention groups of one GPU; experts over EP without redundant experts
(balancedness 0.70, ASSUMED_PLAIN); CUDA graphs unless the batch in one forward is above SGLang's graph cap of the
day (160 sequences; assumed, as blind 16); no speculative decoding; an open-loop run whose prompts all arrive within
a fraction of its duration read at all its requests in flight (the burst's peak, blind 8's reading), its lengths the
run's means (its totals over its requests).
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind2 import R1_FP4
from moeserve.capacity.validation_blind4 import H20_3E
from moeserve.capacity.validation_cases import Case

SGL_5068 = ("SGLang PR #5068 '[Fix] DeepEP Compatibility with Low Latency' (github.com/sgl-project/sglang/pull/5068, "
            "2025-04-04), its 1-node H20-3e table")
SGL_6823 = ("SGLang issue #6823 'The performance of DeepEP auto on 8*H20-3e is worse than EPMoE and baseline' "
            "(github.com/sgl-project/sglang/issues/6823, 2025-06-03), SGLang 0.4.6.post5")
SGL_3812 = ("SGLang issue #3812 'Benchmark results of Expert Parallelism on DeepSeek-v3/R1' (github.com/sgl-project/"
            "sglang/issues/3812, 2025-02-24), 2 x 8 H800 over RoCE")
SGL_3602 = ("SGLang PR #3602 'Expert Parallelism (EP) Support for DeepSeek V3/R1' (github.com/sgl-project/sglang/"
            "pull/3602, 2025-02-16), its H200*8 table")
SGL_6821 = ("SGLang PR #6821 'feat: integrate deepgemm into EPMoE' (github.com/sgl-project/sglang/pull/6821, "
            "2025-06-03), two H20 nodes, its 'w deepgemm' rows")
IX_870 = ("SemiAnalysis InferenceX issue #870 (github.com/SemiAnalysisAI/InferenceX/issues/870), its B200 SGLang "
          "DeepSeek FP4 concurrency sweep of 2026-03-06")
TT_356 = ("tenstorrent/tt-inference-server issue #356 (github.com/tenstorrent/tt-inference-server/issues/356), 16 H100 "
          "(SGLang + InfiniBand) sweep of 2025-07-09")

_FP8 = Precision(weights="fp8")
_EP = dict(balancedness=ASSUMED_PLAIN)

# --- SGLang PR #5068: DeepSeek-V3, 8 H20-3e, 512 requests of 1,000 / 1,000 at concurrency 128
_5068 = ("DeepSeek-V3 (FP8 checkpoint) on one node of 8 H20-3e (read as the H20 with 141 GB at 4.8 TB/s), {how}: "
         "attention TP 8, whole experts over 8 ranks (no DP attention), no redundant experts (balancedness 0.70 "
         "assumed); BF16 KV; CUDA graphs (--cuda-graph-max-bs 128); 512 requests of 1,000 in / 1,000 out (fixed: the "
         "table's input and output throughputs are equal) at the table's concurrency {conc} ({batch:.1f} a GPU); "
         "output tok/s ({out:,}) / 8 GPUs, colocated, prefill batches apart from decode (SGLang without "
         "--enable-mixed-chunk)")


def _pr5068(version: str, how: str, conc: float, out: float) -> Case:
    return Case(f"SGLang DeepSeek-V3 8xH20-3e TP8 {version}, concurrency 128, 1K/1K", SGL_5068, "h20", "colocated",
                Layout(8, 8, 0), conc / 8, Workload(1000, 1000), Options(prefill="separate", **_EP), out / 8,
                "tok/s/GPU", _5068.format(how=how, conc=conc, batch=conc / 8, out=out), _FP8, hw_overrides=H20_3E,
                blind=17)


# --- SGLang issue #6823: DeepSeek-R1, 8 H20-3e, concurrency 128, 1,024 / 1,024
_6823 = ("DeepSeek-R1 (FP8 checkpoint) on one node of 8 H20-3e (read as the H20 with 141 GB at 4.8 TB/s), SGLang "
         "0.4.6.post5, '{version}' read as {launch} (the issue's launch lines are past the part that could be read); "
         "BF16 KV; CUDA graphs (128 in one batch, under the graph cap); concurrency 128 (16 a GPU) of 1,024 in / "
         "1,024 out, read as fixed (the table's lengths; its own TPOT, TTFT and throughput agree: 128 x 2,048 tokens "
         "/ (6.5 s + 1,023 x 79 ms) = 3,003 tok/s against the 3,002 printed); prefill batches apart from decode "
         "(SGLang without --enable-mixed-chunk)")
_LAUNCH = {"baseline": ("`--tp 8` (attention TP 8, experts split TP 8)", Layout(8, 1, 0), {}),
           "EPMoE": ("`--tp 8 --enable-ep-moe` (attention TP 8, whole experts over 8 ranks; no redundant experts, "
                     "balancedness 0.70 assumed)", Layout(8, 8, 0), _EP),
           "DeepEP auto": ("`--tp 8 --enable-deepep-moe --deepep-mode auto` as PR #5068 launches it (attention TP 8, "
                           "whole experts over 8 ranks through DeepEP; no redundant experts, balancedness 0.70 "
                           "assumed)", Layout(8, 8, 0), _EP)}


def _issue6823(version: str, total: float, tpot: float, unit: str) -> Case:
    launch, layout, ep = _LAUNCH[version]
    what = ("throughput" if unit == "tok/s/GPU" else "TPOT")
    published = total / 2 / 8 if unit == "tok/s/GPU" else 1000 / tpot
    how = (f"output tok/s a GPU: the total {total:,} tok/s x 1,024 / 2,048 / 8 GPUs" if unit == "tok/s/GPU" else
           f"1 / the TPOT ({tpot} ms), read as the mean of a run with other requests' prefills among the decodes: "
           "the colocated TPOT")
    return Case(f"SGLang DeepSeek-R1 8xH20-3e {version}, concurrency 128, 1K/1K, {what}", SGL_6823, "h20", "colocated",
                layout, 128 / 8, Workload(1024, 1024), Options(prefill="separate", **ep), published, unit,
                how + "; " + _6823.format(version=version, launch=launch), _FP8, model="deepseek-r1",
                hw_overrides=H20_3E, blind=17)


# --- SGLang issue #3812 / PR #3602: DeepSeek-V3, 600 random prompts at 40 a second
_BURST_W = Workload(93, 201)  # 55,787 / 120,861 tokens over 600 prompts (random lengths below 180 / 400)
_BURST = ("600 random prompts (bench_serving's default range ratio: lengths below the set 180 / 400; the run's totals "
          "55,787 / 120,861, means 93 / 201) sent at 40 a second, all within 15 s of a run of {dur}: read as all 600 "
          "in flight ({batch:.1f} a GPU; the burst's peak, blind 8's reading); no CUDA graphs: 600 sequences in one "
          "batch are above SGLang 0.4.3's graph cap (160; assumed); prefill batches apart from decode (SGLang without "
          "--enable-mixed-chunk); DeepSeek-V3 FP8 checkpoint, BF16 KV")


def _pr3602(ep: bool, out: float) -> Case:
    layout = Layout(8, 8, 0) if ep else Layout(8, 1, 0)
    launch = ("`--tp 8 --enable-ep-moe` (attention TP 8, whole experts over 8 ranks; no redundant experts, "
              "balancedness 0.70 assumed)" if ep else "`--tp 8` (attention TP 8, experts split TP 8)")
    return Case(f"SGLang DeepSeek-V3 8xH200 {'EP8' if ep else 'TP8'}, 600 random at 40 req/s", SGL_3602, "h200",
                "colocated", layout, 600 / 8, _BURST_W,
                Options(prefill="separate", cuda_graphs=False, **(_EP if ep else {})), out / 8, "tok/s/GPU",
                f"output tok/s ({out:,}) / 8 GPUs; 8 H200, SGLang of February 2025 (0.4.3), {launch}; "
                + _BURST.format(dur="about 82 s (120,861 / 1,468)", batch=600 / 8), _FP8, blind=17)


# --- SGLang PR #6821: DeepSeek-V3 on two H20 nodes, DP attention 16 + EP 16, bench_one_batch_server 1,024 / 1,024
_6821 = ("DeepSeek-V3 (FP8 checkpoint) on two nodes of 8 H20 (96 GB), `--tp-size 16 --enable-dp-attention --dp-size "
         "16 --enable-ep-moe`: sixteen attention groups of one GPU, whole experts over 16 ranks (EPMoE, DeepGEMM "
         "grouped GEMMs: the PR's 'w deepgemm' state), no redundant experts (balancedness 0.70 assumed), BF16 KV, CUDA "
         "graphs; sglang.bench_one_batch_server, one batch of {b} request{s} of 1,024 in / 1,024 out ({per} a GPU: "
         "requests spread one a DP rank); its output throughput read as decode (the batch's one prefill is about 1% of "
         "the run, left out)")


def _pr6821(batch: int, out: float) -> Case:
    per = "1/16" if batch == 1 else f"{batch // 16}"
    text = _6821.format(b=batch, s="" if batch == 1 else "s", per=per)
    if batch == 1:
        return Case("SGLang DeepSeek-V3 2x8 H20 DP16 EP16, batch 1, 1K/1K", SGL_6821, "h20", "decode", Layout(1, 16, 0),
                    1 / 16, Workload(1024, 1024), Options(**_EP), out, "tok/s/user",
                    f"the output throughput of one request ({out} tok/s) read as 1 / its TPOT; " + text, _FP8,
                    blind=17)
    return Case(f"SGLang DeepSeek-V3 2x8 H20 DP16 EP16, batch {batch}, 1K/1K", SGL_6821, "h20", "decode",
                Layout(1, 16, 0), batch / 16, Workload(1024, 1024), Options(**_EP), out / 16, "tok/s/GPU",
                f"output tok/s ({out:,}) / 16 GPUs; " + text, _FP8, blind=17)


# --- InferenceX issue #870: SGLang v0.5.6, DeepSeek-R1 NVFP4 on 8 B200, TP 8 / EP 8, 1K/1K (as blind 2 reads it)
_IX = Workload(922, 922)  # range ratio 0.8: means 0.9 L
_IX_B200 = ("DeepSeek-R1-0528-FP4-V2 (NVFP4 experts and dense FFNs, FP8 attention), SGLang v0.5.6 --tp 8 --ep 8 "
            "(attention TP 8, whole experts over 8 ranks), FP8 KV, no MTP; mean prompt and output 922 tokens "
            "(InferenceX's range ratio 0.8); 10 x concurrency prompts at --max-concurrency; prefill batches apart from "
            "decode; no redundant experts (balancedness 0.70 assumed); as blind 2 reads the sweep's 4 and 32 rows")


def _ix(conc: int, out: float, note: str = "") -> Case:
    return Case(f"InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency {conc}, 1K/1K", IX_870, "b200", "colocated",
                Layout(8, 8, 0), conc / 8, _IX, Options(prefill="separate", **_EP), out, "tok/s/GPU",
                f"output tok/s a GPU ({out}) at concurrency {conc} ({conc / 8:g} a GPU){note}; " + _IX_B200, R1_FP4,
                model="deepseek-r1", blind=17)


# --- tenstorrent issue #356: DeepSeek-R1-0528 on 16 H100 over InfiniBand, SGLang, concurrency 1 (as blind 2)
def _tt(isl: int, osl: int, tpot: float) -> Case:
    name = f"{isl // 1024}K" if isl >= 1024 else str(isl)
    out = f"{osl // 1024}K" if osl >= 1024 else str(osl)
    return Case(f"SGLang 16xH100 TP16 over InfiniBand, batch 1, {name}/{out}", TT_356, "h100", "decode",
                Layout(16, 1, 0), 1 / 16, Workload(isl, osl), Options(), 1000 / tpot, "tok/s/user",
                f"1 / TPOT ({tpot} ms) at {isl:,} in / {osl:,} out, concurrency 1; DeepSeek-R1-0528 FP8, BF16 KV, no "
                "MTP; TP 16 over two nodes assumed (SGLang's multi-node default; the issue gives no launch line), as "
                "blind 2 reads the sweep's 1,024 / 128 row", _FP8, model="deepseek-r1", blind=17)


BLIND17 = [
    _pr5068("DeepEP auto", "`--tp 8 --enable-deepep-moe --deepep-mode auto` (DeepEP: normal dispatch for prefill, "
            "low-latency for decode)", 127.95, 954.56),
    _pr5068("EPMoE", "its 'EPMoE' row read as the same launch line with --enable-ep-moe in place of the DeepEP flags "
            "(assumed: the PR prints no line for it)", 127.94, 862.52),
    _issue6823("baseline", 3002, 79, "tok/s/GPU"),
    _issue6823("EPMoE", 2577, 90, "tok/s/GPU"),
    _issue6823("DeepEP auto", 2033, 117, "tok/s/GPU"),
    _issue6823("baseline", 3002, 79, "tok/s/user"),
    _issue6823("EPMoE", 2577, 90, "tok/s/user"),
    _issue6823("DeepEP auto", 2033, 117, "tok/s/user"),
    Case("SGLang DeepSeek-V3 2x8 H800 TP16, 600 random at 40 req/s", SGL_3812, "h800", "colocated", Layout(16, 1, 0),
         600 / 16, _BURST_W, Options(prefill="separate", cuda_graphs=False), 120_861 / 109.94 / 16, "tok/s/GPU",
         "output tok/s a GPU: the run's 120,861 generated tokens / its 109.94 s / 16 GPUs (1,099.3 tok/s; "
         "bench_serving ignores EOS by default, so the generated total is the requested one; all 600 requests "
         "succeeded); two nodes of 8 H800 over RoCE, SGLang of February 2025 (0.4.3), `--tp 16 --nnodes 2` (attention "
         "TP 16, experts split TP 16 over both nodes); " + _BURST.format(dur="110 s", batch=600 / 16), _FP8, blind=17),
    _pr3602(True, 1468.48),
    _pr3602(False, 1403.02),
    _pr6821(1, 30.49),
    _pr6821(16, 335.31),
    _ix(8, 104.8),
    _ix(16, 169.3),
    _ix(64, 312.5, "; the run's mean TTFT, 5,719 ms (flagged in the source), shows requests waiting for admission: "
        "kept at the published concurrency, as blind 6 keeps its rows"),
    _tt(128, 1024, 23.2),
    _tt(8192, 128, 24.0),
]

# Predicted when recorded (the model of main at a193eec): name -> the model's figure in the case's unit.
RECORDED = {
    'SGLang DeepSeek-V3 8xH20-3e TP8 DeepEP auto, concurrency 128, 1K/1K': 141.3,
    'SGLang DeepSeek-V3 8xH20-3e TP8 EPMoE, concurrency 128, 1K/1K': 141.2,
    'SGLang DeepSeek-R1 8xH20-3e baseline, concurrency 128, 1K/1K, throughput': 141.7,
    'SGLang DeepSeek-R1 8xH20-3e EPMoE, concurrency 128, 1K/1K, throughput': 141.2,
    'SGLang DeepSeek-R1 8xH20-3e DeepEP auto, concurrency 128, 1K/1K, throughput': 141.2,
    'SGLang DeepSeek-R1 8xH20-3e baseline, concurrency 128, 1K/1K, TPOT': 8.9,
    'SGLang DeepSeek-R1 8xH20-3e EPMoE, concurrency 128, 1K/1K, TPOT': 8.8,
    'SGLang DeepSeek-R1 8xH20-3e DeepEP auto, concurrency 128, 1K/1K, TPOT': 8.8,
    'SGLang DeepSeek-V3 2x8 H800 TP16, 600 random at 40 req/s': 231.6,
    'SGLang DeepSeek-V3 8xH200 EP8, 600 random at 40 req/s': 461.6,
    'SGLang DeepSeek-V3 8xH200 TP8, 600 random at 40 req/s': 461.6,
    'SGLang DeepSeek-V3 2x8 H20 DP16 EP16, batch 1, 1K/1K': 24.5,
    'SGLang DeepSeek-V3 2x8 H20 DP16 EP16, batch 16, 1K/1K': 16.8,
    'InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 8, 1K/1K': 90.3,
    'InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 16, 1K/1K': 149.1,
    'InferenceX, SGLang 8xB200 TP8 EP8 FP4, concurrency 64, 1K/1K': 374.4,
    'SGLang 16xH100 TP16 over InfiniBand, batch 1, 128/1K': 74.0,
    'SGLang 16xH100 TP16 over InfiniBand, batch 1, 8K/128': 74.0,
}
