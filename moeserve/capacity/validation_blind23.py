"""The twenty-third blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at ccf8b77, by someone who did not change the model; none of them was
used to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is
silent (`assumed`). It was searched for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B figures on H20, H100, H200, H800,
B200, GB200, GB300, MI300X and MI355X with their setup stated (ROCm ATOM's recipes, pull requests and CI, InferenceX
pull requests, SGLang / vLLM / TensorRT-LLM issues and pull requests). No figure here is used by another part; its
source, the usage guides ('recipes') of AMD's ATOM engine, is new to the validation (blind 22 took ATOM's vLLM
plugin benchmark of PR #409, not these), and ATOM's own server is an engine no earlier part has: its name is not one
configure's track record groups by, so the cases count as the record's reading of a source naming no engine (as
blind 21's RTP-LLM ones do).

Sources (github.com/ROCm/ATOM, the files as the repository's history holds them):
- recipes/Qwen3-235b.md ('Qwen3-235B-A22B Usage Guide', added in commit fd0c7352f, '[recipe] Add qwen3 235b recipe
  (#111)', 2026-01-14, unchanged since): 'we focus on deploying the fp8 model of Qwen3-235B-A22B on MI355 in this
  guide', 'Serving on 8xMI355 GPUs': `python -m atom.entrypoints.openai_server --model
  Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 8 --kv_cache_dtype fp8 --enable-expert-parallel --max-model-len 16384
  --max-num-batched-tokens 20000` with AITER_QUICK_REDUCE_QUANTIZATION=INT4 and
  ATOM_ENABLE_QK_NORM_ROPE_CACHE_QUANT_FUSION=1; its benchmark `python -m atom.benchmarks.benchmark_serving ...
  --dataset-name=random --random-input-len=${ISL} --random-output-len=${OSL} --random-range-ratio 1.0
  --num-prompts=$(( $CONC * 4 )) --max-concurrency=$CONC --request-rate=inf --ignore-eos`; 'The performance number for
  both 4 and 8 ranks are provided as a reference, with the following environment: docker image:
  rocm/atom:rocm_7.2_preview_gfx950_latest, pulled on 1/7/2026. ATOM: the one comes with the image, main branch,
  commit 2f713064'. Its table (ISL | OSL | Concurrency | Num Prompts, then Mean TTFT (ms) | Mean TPOT (ms) | Total
  Throughput under 'TP8 + EP8' and again under 'TP4 + EP4'): '| 1000 | 1000 | 256 | 1024 | 2452.83 | 20.55 |
  22239.78 | 3214.23 | 27.79 | 16506.71 |', '| 1000 | 1000 | 128 | 512 | 1326.08 | 16.47 | 14380.66 | 1743.22 |
  21.15 | 11182.11 |', '| 4000 | 1000 | 128 | 512 | 4656.93 | 21.32 | 24632.52 | 6215.98 | 26.79 | 19388.74 |',
  '| 4000 | 1000 | 64 | 256 | 2444.89 | 17.52 | 16024.13 | 3252.3 | 19.88 | 13837.46 |', '| 10000 | 1000 | 64 | 256
  | 6144.75 | 22.8 | 24318.56 | 8340.75 | 26.84 | 20015.67 |', '| 10000 | 1000 | 32 | 128 | 3208.08 | 19.08 |
  15799.19 | 4330.11 | 21.44 | 13663.56 |'. This part takes every mean TPOT and total throughput of both columns.
- recipes/Kimi-K2-Thinking.md ('Kimi-K2 Usage Guide', added in commit c91d1c131, '[Model] add kimi-k2-thinking fp4
  support (#167)', 2026-02-07; its table unchanged since): 'this guide will focus on deploying the MXFP4 version of
  this model (refer to https://huggingface.co/amd/Kimi-K2-Thinking-MXFP4)', 'Serving on 4xMI355 GPUs':
  `HIP_VISIBLE_DEVICES=0,1,2,3`, `python -m atom.entrypoints.openai_server --model amd/Kimi-K2-Thinking-MXFP4
  --trust-remote-code -tp 4 --kv_cache_dtype fp8`; its benchmark as above with `--random-range-ratio 0.8
  --num-prompts=$(( $CONC * 10 ))`; 'The performance number on 4 ranks is provided as a reference, with the
  following environment: docker image: rocm/atom:rocm_7.2_preview_gfx950_latest. ATOM: guanbao/kimi_k2_fp4 branch,
  commit 29e40d7. AITER: main branch, commit 3b2346f.' Its table (ISL | OSL | Concurrency | Num Prompts | Mean TTFT
  (ms) | Mean TPOT (ms) | Output Throughput | Total Throughput): '| 1024 | 1024 | 4 | 40 | 117.68 | 11.65 | 329.18 |
  661.59 |', '| 1024 | 1024 | 8 | 80 | 134.22 | 13.08 | 592 | 1179.62 |', '| 1024 | 1024 | 16 | 160 | 173.87 |
  15.46 | 1000.21 | 2011.07 |', '| 1024 | 1024 | 32 | 320 | 273.36 | 18.81 | 1632.74 | 3260.31 |', '| 1024 | 1024 |
  64 | 640 | 319.94 | 25.13 | 2444.08 | 4889.26 |', '| 1024 | 1024 | 128 | 1280 | 500.68 | 36.77 | 3349.54 |
  6706.44 |'. This part takes every mean TPOT and output throughput.
The two tables agree with the runs they describe: by Little's law the Qwen TP 8 1000 / 1000 row at concurrency 256
(11,120 output tok/s = 11.12 requests a second, each 2.45 s + 999 x 20.55 ms = 23.0 s) keeps 255.5 requests in
flight, and the Kimi row at 128 (3,349.54 / 922 = 3.63 requests a second, each 0.50 s + 921 x 36.77 ms = 34.4 s)
124.9.

Figures looked at and not taken: the Qwen and Kimi tables' TTFT columns (queueing of the run, not a step); ATOM's
recipes/DeepSeek-R1.md tables (DeepSeek-R1-0528 FP8 at TP 8, 1024 / 1024 at concurrency 128 and 256: 'Performance
on 8xMI300X GPUs' under a launch heading 'on 8xMI300X/MI355X GPUs', the precision first printed 'BF16 (TP8, FP8 KV
Cache)' for the FP8 checkpoint and 'ATOM: main branch', while ATOM's benchmark runners are MI355X: which card ran
them is not settled by the text) and their MTP3 rows (no acceptance published); recipes/Kimi-K2.md (Kimi-K2.5 /
K2.7-Code MXFP4: launch lines, no result table); the recipes of GLM-5, GPT-OSS, MiniMax, Qwen3-Next / 3.5 and
DeepSeek-V4 (models configure does not have: not read); ATOM PR #466 (Qwen3-Next); ATOM's nightly benchmark (its
results on a dashboard not read here); InferenceX PR #1383 (Kimi-K2.5 MXFP4 on MI355X with ATOM at TP 4, total
throughput a GPU of an InferenceX run of 2026-04-01 and of an ATOM CI run of 2026-05-11: no TPOT, the ATOM CI run's
launch not tied to it in the PR, and Kimi-K2.5-MXFP4's layer formats not read from a stored source), PRs #1628 /
#1629 (MTP 3, no acceptance; blind 22), #1389 / #1411 (Qwen3.5) and #1412 (gpt-oss); ROCm/aiter PR #3520
(Kimi-K2.5-MXFP4 with FP8 attention at TP 4, output / total throughput and TPOT at 4-32: no launch line or card in
the excerpt read, an attention variant whose formats differ from the checkpoint's). No new H20, H800, GB200 / GB300
or B200 figure with its setup stated was found that no part had taken.

Readings common to all (decided before the model was run): the card as the recipes name it, MI355X (configure's
profile); ATOM's own server (atom.entrypoints.openai_server) as its scheduler ran then: at commits 2f7130649 and
29e40d7e9 (and until May 2026) Scheduler.schedule prefills every waiting prompt that fits the step budget
(--max-num-batched-tokens, 20,000 for Qwen and the default 16,384 for Kimi) as a forward of its own and returns
before any decode ('TODO for prefill/decode mixed batch'), so the decodes wait out each prefill: prefill "separate"
(configure's reading of such a scheduler under a closed loop, the one SGLang's runs take; its pass split at
configure's 8,192-token budget, not an input, where ATOM would run one pass of a 10,000-token prompt); a mean TPOT
of a run with many requests in flight as the colocated TPOT at the same batch (the prefill passes stall the
decodes and the benchmark's mean TPOT counts the stalls: the reading of c99b6a0 and blinds 15-17); an output
throughput as colocated at the run's concurrency over the instance's GPUs (the closed loop keeps that many in
flight, as Little's law above confirms); a total throughput (input + output, the benchmark's 'Total Throughput') as
output at OSL / (ISL + OSL) of it; CUDA graphs at decode (ATOM's default capture sizes,
'[1,2,4,8,16,32,48,64,128,256]' at both commits, reach the largest batch here; its default compilation level 3 runs the
forward torch.compile'd, piecewise); no
speculative decoding; no prefix-cache hits (random prompts). Qwen: Qwen3-235B-A22B-Instruct-2507-FP8 as
block-scaled FP8 linear layers, FP8 KV (--kv_cache_dtype fp8); 'TP8 + EP8' as attention TP 8 with whole experts
over EP 8 in one instance, 'TP4 + EP4' as the same on 4 GPUs (the guide prints only the 8-GPU launch; the 4-rank
one is read as it with -tp 4), no redundant experts (balancedness 0.70, ASSUMED_PLAIN, as blinds 16 and 17 read EP
without them); lengths fixed at the set ones (range ratio 1.0); the INT4 quick all-reduce and the fused QK-norm /
RoPE / cache-quant kernel not modelled. Kimi: Kimi-K2-Thinking (Kimi K2's architecture: configure's kimi-k2) as
AMD's MXFP4 checkpoint, read as MXFP4 routed experts (w4a4) with attention, shared expert and dense layer in BF16
(Moonshot's checkpoint quantises only the routed experts, and ATOM's loader of PR #167 reads the checkpoint's
exclude list for self-attention and shared experts), FP8 KV, experts split TP 4 (no --enable-expert-parallel);
lengths uniform in [0.8 L, L] (ATOM's benchmark_serving at ratio 0.8: np.random.randint(int(L x 0.8), L + 1)),
mean 922 in and out.

Read again after it was recorded, by the change it led to (so this part is not evidence for that change): ATOM's
default compilation level 3 (atom/model_engine/arg_utils.py at both commits, `level: int = 3`, PIECEWISE) runs the
forward torch.compile'd, so its prefill passes are read as `separate-compiled` (their kernels at their floors, no
eager host time) where they were recorded as `separate` (eager, with SGLang's measured host time a layer). RECORDED
keeps the predictions of the reading recorded.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

ATOM_QWEN = ("ROCm/ATOM recipes/Qwen3-235b.md ('Qwen3-235B-A22B Usage Guide', github.com/ROCm/ATOM, commit fd0c7352f, "
             "2026-01-14), its 'Performance baseline' table")
ATOM_KIMI = ("ROCm/ATOM recipes/Kimi-K2-Thinking.md ('Kimi-K2 Usage Guide', github.com/ROCm/ATOM, commit c91d1c131, "
             "2026-02-07), its 'Performance baseline' table")
_QWEN = ("Qwen3-235B-A22B-Instruct-2507-FP8 on MI355X with ATOM's server (image "
         "rocm/atom:rocm_7.2_preview_gfx950_latest of 2026-01-07, ATOM 2f713064), block-scaled FP8 weights, FP8 KV, "
         "whole experts over EP without redundant ones (balancedness 0.70), CUDA graphs at decode, no speculative "
         "decoding; ATOM's scheduler runs each prefill as a forward of its own while the decodes wait, compiled "
         "(prefill 'separate-compiled'); fixed lengths (range ratio 1.0), 4 x concurrency prompts")
_KIMI = ("Kimi-K2-Thinking as amd/Kimi-K2-Thinking-MXFP4 on 4 MI355X at -tp 4 with ATOM's server (ATOM 29e40d7), MXFP4 "
         "routed experts with attention, shared expert and dense layer in BF16, FP8 KV, experts split TP 4 (no "
         "--enable-expert-parallel), CUDA graphs at decode, no speculative decoding; ATOM's scheduler runs each prefill "
         "as a forward of its own while the decodes wait, compiled (prefill 'separate-compiled'); lengths uniform in [0.8 L, L] at 1,024: "
         "mean 922; 10 x concurrency prompts")
_QWEN_FP8 = Precision(weights="fp8", kv="fp8")
_KIMI_MXFP4 = Precision(weights="bf16", moe="fp4", kv="fp8")
_QWEN_O = Options(prefill="separate-compiled", balancedness=ASSUMED_PLAIN)
_KIMI_O = Options(prefill="separate-compiled")


def _label(isl: int) -> str:
    return f"{isl // 1000}K/1K"


def _qwen_tpot(gpus: int, isl: int, conc: int, tpot: float) -> Case:
    return Case(f"ATOM Qwen3-235B-FP8 {gpus}xMI355X TP{gpus} EP{gpus}, concurrency {conc}, {_label(isl)}, TPOT",
                ATOM_QWEN, "mi355x", "colocated", Layout(gpus, gpus, 0), conc / gpus, Workload(isl, 1000), _QWEN_O,
                round(1000 / tpot, 2), "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) of the 'TP{gpus} + EP{gpus}' column at concurrency {conc}, "
                f"{isl:,} in / 1,000 out, read as the colocated TPOT at {conc} in flight ({conc / gpus:g} a GPU); "
                + _QWEN,
                _QWEN_FP8, model="qwen3-235b-a22b", blind=23)


def _qwen_tput(gpus: int, isl: int, conc: int, total: float) -> Case:
    out = total * 1000 / (isl + 1000) / gpus
    return Case(f"ATOM Qwen3-235B-FP8 {gpus}xMI355X TP{gpus} EP{gpus}, concurrency {conc}, {_label(isl)}, throughput",
                ATOM_QWEN, "mi355x", "colocated", Layout(gpus, gpus, 0), conc / gpus, Workload(isl, 1000), _QWEN_O,
                round(out, 2), "tok/s/GPU",
                f"the 'TP{gpus} + EP{gpus}' column's Total Throughput ({total:,} tok/s, input and output, one "
                f"instance) x 1,000 / {isl + 1000:,} (output's share) / {gpus} GPUs at concurrency {conc}; " + _QWEN,
                _QWEN_FP8, model="qwen3-235b-a22b", blind=23)


def _kimi_tpot(conc: int, tpot: float) -> Case:
    return Case(f"ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency {conc}, 1K/1K, TPOT", ATOM_KIMI, "mi355x",
                "colocated", Layout(4, 1, 0), conc / 4, Workload(922, 922), _KIMI_O, round(1000 / tpot, 2),
                "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) at concurrency {conc}, read as the colocated TPOT at {conc} in flight "
                f"({conc / 4:g} a GPU); " + _KIMI, _KIMI_MXFP4, model="kimi-k2", blind=23)


def _kimi_tput(conc: int, output: float) -> Case:
    return Case(f"ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency {conc}, 1K/1K, throughput", ATOM_KIMI, "mi355x",
                "colocated", Layout(4, 1, 0), conc / 4, Workload(922, 922), _KIMI_O, round(output / 4, 2), "tok/s/GPU",
                f"Output Throughput ({output:,} tok/s, one instance) / 4 GPUs at concurrency {conc}; " + _KIMI,
                _KIMI_MXFP4, model="kimi-k2", blind=23)


# (ISL, concurrency, TP8+EP8 mean TPOT ms, TP8+EP8 total tok/s, TP4+EP4 mean TPOT ms, TP4+EP4 total tok/s)
_QWEN_ROWS = [(1000, 256, 20.55, 22239.78, 27.79, 16506.71), (1000, 128, 16.47, 14380.66, 21.15, 11182.11),
              (4000, 128, 21.32, 24632.52, 26.79, 19388.74), (4000, 64, 17.52, 16024.13, 19.88, 13837.46),
              (10000, 64, 22.8, 24318.56, 26.84, 20015.67), (10000, 32, 19.08, 15799.19, 21.44, 13663.56)]
# (concurrency, mean TPOT ms, output tok/s)
_KIMI_ROWS = [(4, 11.65, 329.18), (8, 13.08, 592), (16, 15.46, 1000.21), (32, 18.81, 1632.74), (64, 25.13, 2444.08),
              (128, 36.77, 3349.54)]

BLIND23 = ([_qwen_tpot(8, isl, conc, t8) for isl, conc, t8, _, _, _ in _QWEN_ROWS]
           + [_qwen_tput(8, isl, conc, tot8) for isl, conc, _, tot8, _, _ in _QWEN_ROWS]
           + [_qwen_tpot(4, isl, conc, t4) for isl, conc, _, _, t4, _ in _QWEN_ROWS]
           + [_qwen_tput(4, isl, conc, tot4) for isl, conc, _, _, _, tot4 in _QWEN_ROWS]
           + [_kimi_tpot(conc, tpot) for conc, tpot, _ in _KIMI_ROWS]
           + [_kimi_tput(conc, out) for conc, _, out in _KIMI_ROWS])

# Predicted when recorded (the model of main at ccf8b77): name -> the model's figure in the case's unit.
RECORDED = {
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 256, 1K/1K, TPOT': 29.9,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 128, 1K/1K, TPOT': 42.3,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 128, 4K/1K, TPOT': 39.1,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 64, 4K/1K, TPOT': 51.9,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 64, 10K/1K, TPOT': 37.7,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 32, 10K/1K, TPOT': 51.5,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 256, 1K/1K, throughput': 955.7,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 128, 1K/1K, throughput': 677.4,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 128, 4K/1K, throughput': 626.3,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 64, 4K/1K, throughput': 415.3,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 64, 10K/1K, throughput': 301.9,
    'ATOM Qwen3-235B-FP8 8xMI355X TP8 EP8, concurrency 32, 10K/1K, throughput': 206.1,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 256, 1K/1K, TPOT': 26.4,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 128, 1K/1K, TPOT': 35.7,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 128, 4K/1K, TPOT': 32.3,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 64, 4K/1K, TPOT': 41.4,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 64, 10K/1K, TPOT': 29.7,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 32, 10K/1K, TPOT': 40.0,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 256, 1K/1K, throughput': 1691.0,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 128, 1K/1K, throughput': 1141.9,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 128, 4K/1K, throughput': 1032.0,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 64, 4K/1K, throughput': 663.0,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 64, 10K/1K, throughput': 474.8,
    'ATOM Qwen3-235B-FP8 4xMI355X TP4 EP4, concurrency 32, 10K/1K, throughput': 319.9,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 4, 1K/1K, TPOT': 98.6,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 8, 1K/1K, TPOT': 82.1,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 16, 1K/1K, TPOT': 63.0,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 32, 1K/1K, TPOT': 45.5,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 64, 1K/1K, TPOT': 32.3,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 128, 1K/1K, TPOT': 23.9,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 4, 1K/1K, throughput': 98.6,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 8, 1K/1K, throughput': 164.1,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 16, 1K/1K, throughput': 251.8,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 32, 1K/1K, throughput': 363.8,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 64, 1K/1K, throughput': 516.9,
    'ATOM Kimi-K2-Thinking MXFP4 4xMI355X TP4, concurrency 128, 1K/1K, throughput': 764.6,
}
