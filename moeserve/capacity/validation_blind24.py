"""The twenty-fourth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at d5e4167, by someone who did not change the model; none of them was
used to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is
silent (`assumed`). It was searched for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B figures on H20, H100, H200, H800,
B200, GB200, GB300, MI300X and MI355X with their setup stated (ROCm ATOM's recipes in its subfolders and at their
later versions, its benchmark dashboard's data, InferenceX's repository). No figure here is used by another part:
its source, the data of ATOM's nightly benchmark dashboard (rocm.github.io/ATOM/benchmark-dashboard) as the
repository's gh-pages branch commits it, is new to the validation (blind 23 named the dashboard and did not read
it). The data name the card of every run ('GPU: AMD Instinct MI355X | VRAM: 288GB'), its image and its run; the
launches and the client are those of the workflows and configuration files of the repository at the commit each
run's entry names. It brings an engine pairing no part has: SGLang with ATOM's model implementations
(SGLANG_EXTERNAL_MODEL_PACKAGE=atom.plugin.sglang.models), beside ATOM's own server (blind 23) and vLLM with ATOM's
plugin (blind 22).

Sources (github.com/ROCm/ATOM, branch gh-pages, file benchmark-dashboard/data.js, 'window.BENCHMARK_DATA', entries
written by benchmark-action/github-action-benchmark from .github/scripts/plugin_benchmark_to_dashboard.py, whose
metric 'throughput (tok/s)' is the client's output_throughput, 'Total Tput (tok/s)' its total_token_throughput and
'TPOT (ms)' its mean_tpot_ms, one instance's figures; '_tp' and '_gpu_count' the instance's):
- ATOM's own server, the data.js of gh-pages commit a6a3d2045 ('Update SGLang benchmark dashboard data',
  2026-05-23), the entry of ATOM commit 4181e4249 (2026-05-22), every metric's extra 'Run:
  https://github.com/ROCm/ATOM/actions/runs/26302748704 | GPU: AMD Instinct MI355X | VRAM: 288GB | ROCm: 7.2.3 |
  Docker: rocm/atom-dev:nightly_202605221558'. (a) 'ATOM::DeepSeek-R1-0528' (_tp 8, _gpu_count 8): '1024/1024 c=4
  throughput (tok/s) 356.7', 'TPOT (ms) 10.68'; '1024/1024 c=64 throughput (tok/s) 2824.4', 'TPOT (ms) 21.81';
  '1024/1024 c=256 throughput (tok/s) 5974.97', 'TPOT (ms) 41.12'; '8192/1024 c=4 throughput (tok/s) 325.72', 'TPOT
  (ms) 11.66'; '8192/1024 c=64 throughput (tok/s) 1782.34', 'TPOT (ms) 34.15'. (b) 'ATOM::DeepSeek-R1-0528-MXFP4'
  (_tp 4, _gpu_count 4): '1024/1024 c=4 throughput (tok/s) 428.73', 'TPOT (ms) 8.63'; '1024/1024 c=64 throughput
  (tok/s) 2750.98', 'TPOT (ms) 22.28'; '8192/1024 c=64 throughput (tok/s) 1546.27', 'TPOT (ms) 39.32'. Their launch
  (.github/benchmark/models.json at 4181e4249): 'DeepSeek-R1-0528' path 'deepseek-ai/DeepSeek-R1-0528', args
  '--kv_cache_dtype fp8 -tp 8'; 'DeepSeek-R1-0528-MXFP4' path 'amd/DeepSeek-R1-0528-MXFP4-MTP-MoEFP4', args
  '--kv_cache_dtype fp8 -tp 4'; both runner 'atom-mi355-8gpu.predownload', no env vars, no bench args;
  .github/scripts/atom_test.sh runs `python -m atom.entrypoints.openai_server --model ... <args>` and
  `python -m atom.benchmarks.benchmark_serving ... --backend=vllm --dataset-name=random --random-input-len=$ISL
  --random-output-len=$OSL --random-range-ratio=$RANDOM_RANGE_RATIO --max-concurrency=$CONC --num-prompts=$(( $CONC
  * 10 )) --trust-remote-code --num-warmups=$(( $CONC * 2 )) --request-rate=inf --ignore-eos`, with
  .github/benchmark/nightly_params.json's '"random_range_ratio": 0.8' for 1024 / 1024 and 8192 / 1024.
- SGLang with ATOM's models, the same data.js, the entry of ATOM commit db136a4e5 (2026-05-23; the one of 552bfcfd9
  holds the same run without its concurrency-4 1024 / 1024 row), extra 'Run:
  https://github.com/ROCm/ATOM/actions/runs/26298064239 | GPU: AMD Instinct MI355X | VRAM: 288GB | ROCm: 7.2.3 |
  Docker: rocm/atom-dev:sglang-v0.5.10-nightly_20260520', 'ATOM-SGLang::DeepSeek-R1-0528' (_tp 8, _gpu_count 8):
  '1024/1024 c=4 throughput (tok/s) 366.45', 'TPOT (ms) 10.47'; '1024/1024 c=64 throughput (tok/s) 2805.5', 'TPOT
  (ms) 21.97'; '8192/1024 c=4 throughput (tok/s) 337.67', 'TPOT (ms) 11.25'; '8192/1024 c=64 throughput (tok/s)
  1899', 'TPOT (ms) 32.02'. Its launch (.github/benchmark/sglang_benchmark_models.json at 552bfcfd9, 'DeepSeek-R1-0528
  FP8 TP8'): path 'deepseek-ai/DeepSeek-R1-0528', extra_args '--trust-remote-code --tensor-parallel-size 8', env
  'AITER_QUICK_REDUCE_QUANTIZATION=INT4', 'SGLANG_AITER_FP8_PREFILL_ATTN=0', 'SGLANG_USE_AITER=1',
  'ATOM_ENABLE_DS_QKNORM_QUANT_FUSION=1'; .github/scripts/atom_sglang_test.sh launches `python3 -m
  sglang.launch_server` with its default server args '--trust-remote-code --kv-cache-dtype fp8_e4m3
  --mem-fraction-static 0.8 --page-size 1 --disable-radix-cache' and SGLANG_EXTERNAL_MODEL_PACKAGE
  'atom.plugin.sglang.models'; .github/workflows/atom-sglang-benchmark.yaml's client is benchmark_serving.py
  --backend=sglang --dataset-name=random, '--random-range-ratio "${RANDOM_RANGE_RATIO}"' (its default param list
  '1024,1024,4,0.8;...;8192,1024,64,0.8'), --num-prompts CONC x 10, --max-concurrency CONC, --num-warmups 2 x CONC,
  --request-rate=inf --ignore-eos.
- vLLM with ATOM's plugin, the data.js of gh-pages commit 1cb95c18d (2026-05-15), the entry of ATOM commit
  e77a5ce1a (2026-05-14), extra 'Run: https://github.com/ROCm/ATOM/actions/runs/25803366838 | GPU: AMD Instinct
  MI355X | VRAM: 288GB | ROCm: 7.2.3 | Docker: rocm/atom-dev:vllm-v0.19.0-nightly_20260512',
  'ATOM-vLLM::Kimi-K2-Thinking-MXFP4-tp8': '1024/1024 c=4 throughput (tok/s) 430.08', 'TPOT (ms) 8.85'; '1024/1024
  c=64 throughput (tok/s) 3091.22', 'TPOT (ms) 19.93'; '8192/1024 c=64 throughput (tok/s) 2309.73', 'TPOT (ms)
  26.3'. Its launch (.github/benchmark/oot_benchmark_models.json at e77a5ce1a, 'Kimi-K2-Thinking-MXFP4 TP8 (MET)'):
  path 'amd/Kimi-K2-Thinking-MXFP4-AttnFP8', '--trust-remote-code --tensor-parallel-size 8
  --max-num-batched-tokens 16384 --max-model-len 16384', env 'AITER_QUICK_REDUCE_QUANTIZATION=INT4';
  .github/scripts/atom_oot_test.sh runs `vllm serve` with '--async-scheduling', '--compilation-config
  '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'', '--kv-cache-dtype fp8', '--no-enable-prefix-caching'; the client
  of .github/workflows/atom-vllm-benchmark.yaml is --dataset-name=random with the range ratio of its input
  (default '0.8'), --num-prompts CONC x 10, --max-concurrency CONC, --num-warmups 2 x CONC, --ignore-eos. The
  checkpoint's formats: recipes/atom_vllm/Kimi-K2-Thinking.md, 'We adopt amd/Kimi-K2-Thinking-MXFP4-AttnFP8 for
  better performance by leveraging FP8 weights for attention layers'.
The checkpoint amd/DeepSeek-R1-0528-MXFP4-MTP-MoEFP4's formats: recipes/DeepSeek-R1.md (commit d9465a5ca,
'docs(recipe): add DeepSeek R1 MXFP4 v2 case (#1126)', 2026-06-22): 'the MTP-MoEFP4 checkpoint keeps an FP8
per-channel override for self-attention layers, while the v2 checkpoint uses the global MXFP4 per-group
quantization config without a separate attention override'.
The rows agree with the runs they describe: by Little's law the ATOM DeepSeek-R1 FP8 1024 / 1024 row at 64 (2,824.4
output tok/s = 3.06 requests a second of 922 tokens, each 0.20 s + 921 x 21.81 ms = 20.3 s) keeps 62.2 requests in
flight, and its 8192 / 1024 row at 64 (1.93 a second, each 1.03 s + 921 x 34.15 ms = 32.5 s) 62.8.

Figures looked at and not taken: the dashboard's other concurrencies of the same runs (8, 16, 32, 128, 256: left
for variety, not chosen by their values; the model was run only on the rows above, chosen before), its TTFT
metrics (queueing of the run, not a step); every MTP row ('DeepSeek-R1-0528 MTP3', '-MXFP4 MTP3', ATOM-SGLang
'-mtp1' / '-mtp3'): the dashboard's 'MTP avg toks/fwd' is measured on its GSM8K accuracy run, not on the random
prompts of the throughput runs; 'ATOM-SGLang::DeepSeek-R1-0528-MXFP4-*', '-tp4-dp4-ep4', '-tp8-ep8' (left for
variety: one SGLang series); 'ATOM::Kimi-K2.5-MXFP4' and 'ATOM-vLLM::Kimi-K2.5-MXFP4-aw-tp4' (Kimi-K2.5-MXFP4's
layer formats not stated in a stored source, as blind 23 found; the 'aw' runs' client not read); the dashboard's
Qwen3-235B entries (GSM8K accuracy only); 'ATOM::DeepSeek-R1-PD-1P4-1D8' (a P/D run whose layout is not read here);
the vLLM-ATOM 'Kimi-K2-Thinking-MXFP4-tp4' series (left for variety: one Kimi series); DeepSeek-V3.2 / V4, GLM,
MiniMax, Qwen3.5 / Next, gpt-oss, Llama (models configure does not have). ATOM's recipes: recipes/DeepSeek-R1.md at
its later versions (4fdb4f5fe, 2026-03-28, to 09bea8b20, 2026-08-17) prints the precision as 'FP8 (TP8, FP8 KV
Cache)', settling blind 23's BF16 / FP8 doubt, but still 'Performance on 8xMI300X GPUs' under a launch heading 'on
8xMI300X/MI355X GPUs' with 'ATOM: main branch' while ATOM's benchmark runners are MI355X (its figures, 4,274 and
6,039 output tok/s at 128 and 256, are close to the MI355X dashboard's 4,371.72 and 5,974.97): the card is still not
settled by the text, and it is not taken; recipes/atom_sglang/DeepSeek-R1.md, atom_vllm/DeepSeek-R1.md,
atom_vllm/Qwen-235B.md, atom_vllm/Kimi-K2-Thinking.md and atom_vllm/Kimi-K2.5.md (every version: launch and client
commands and GSM8K accuracy, no performance figure); recipes/mesh/kimi-k2.md (a P/D launch recipe, no figure);
recipes/TBO.md (GPT-OSS-120B only); recipes/DeepSeek-R1-MXFP4-MI355X-Jons (a competition entry of
DeepSeek-R1-0528-MXFP4 on 8 MI355X at 8192 / 1024, every submitted run with MTP 3, '--method mtp
--num-speculative-tokens 3', and no acceptance published; its ITL / TPOT ratio would only imply one). InferenceX
(SemiAnalysisAI/InferenceX at 843c6254f): no committed result table for DeepSeek-R1, Kimi K2 or Qwen3-235B (its
results are ingested to a database; the committed JSON are GLM-5, Qwen3.5 and MiniMax decode-SLO sweeps, and a Kimi
K2.5 INT4 MTP run). No new H20, H800, GB200 / GB300 or B200 figure with its setup stated was found that no part had
taken.

Readings common to all (decided before the model was run): the card as the data name it, MI355X (configure's
profile); an output throughput ('throughput (tok/s)') as colocated at the run's concurrency over the instance's
GPUs (the closed loop keeps that many in flight, as Little's law above confirms) and a mean TPOT as the colocated
TPOT at the same batch (the reading of blinds 15-17 and 23: the mean TPOT counts the prefills' interference);
lengths uniform in [0.8 L, L] at ratio 0.8 (the benchmarks' random dataset): means 922 for 1,024 and 7,373 for
8,192 (blind 22's reading), their spread not modelled; no speculative decoding; no prefix-cache hits (random
prompts; SGLang's radix cache and vLLM's prefix caching disabled); CUDA / HIP graphs at decode; no redundant
experts and no expert parallelism (none of the launches sets it: experts split TP over the instance). ATOM's own
server (the 'ATOM::' rows): its scheduler at 4181e4249 (atom/model_engine/scheduler.py, 'lip: TODO for
prefill/decode mixed batch') runs every waiting prompt that fits the 16,384-token budget as a forward of its own and
returns before any decode, and its default compilation level 3 (atom/model_engine/arg_utils.py, `level: int = 3`)
compiles the forward: prefill "separate-compiled" (blind 23's reading as corrected); FP8 KV (--kv_cache_dtype fp8).
DeepSeek-R1-0528 as block-scaled FP8 linear layers, FP8 KV, experts split TP 8. DeepSeek-R1-0528-MXFP4-MTP-MoEFP4 as
MXFP4 linear layers (routed and shared experts, dense MLPs: the global MXFP4 config) with FP8 self-attention (the
override the recipe names), FP8 KV, experts split TP 4 over 4 GPUs; its MTP layer not run (no --method). SGLang
with ATOM's models (the 'ATOM-SGLang::' rows): SGLang's scheduler without --enable-mixed-chunk under a closed loop,
prefill "separate" (eager, as blinds 15-17 read SGLang; ATOM's model code run under SGLang's graph runner at decode
only); DeepSeek-R1-0528 FP8 with FP8 KV (fp8_e4m3), experts split TP 8; the INT4 quick all-reduce and the
QK-norm / quant fusion not modelled. vLLM with ATOM's plugin (the 'ATOM-vLLM::' rows): vLLM's scheduler, prefill
"mixed" (configure's default; its 16,384-token step budget is the engine's, configure's chunk is 8,192, not an
input); Kimi-K2-Thinking (Kimi K2's architecture: configure's kimi-k2) as amd/Kimi-K2-Thinking-MXFP4-AttnFP8: MXFP4
routed experts, FP8 attention projections (the recipe's 'FP8 weights for attention layers'), shared expert and
dense layer in BF16 (as blind 23 read the checkpoint it derives from), FP8 KV, experts split TP 8; the ratio the
nightly default 0.8 (the dashboard names no ratio).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

_DASH = "ROCm/ATOM benchmark dashboard data (github.com/ROCm/ATOM, branch gh-pages, benchmark-dashboard/data.js"
ATOM_NIGHTLY = (_DASH + " at a6a3d2045, 2026-05-23), ATOM entry of 4181e4249, run "
                "github.com/ROCm/ATOM/actions/runs/26302748704 (MI355X, rocm/atom-dev:nightly_202605221558)")
ATOM_SGL_NIGHTLY = (_DASH + " at a6a3d2045, 2026-05-23), ATOM-SGLang entry of db136a4e5, run "
                    "github.com/ROCm/ATOM/actions/runs/26298064239 (MI355X, "
                    "rocm/atom-dev:sglang-v0.5.10-nightly_20260520)")
ATOM_VLLM_NIGHTLY = (_DASH + " at 1cb95c18d, 2026-05-15), ATOM-vLLM entry of e77a5ce1a, run "
                     "github.com/ROCm/ATOM/actions/runs/25803366838 (MI355X, "
                     "rocm/atom-dev:vllm-v0.19.0-nightly_20260512)")

_LENGTHS = {(1024, 1024): ("1K/1K", Workload(922, 922)), (8192, 1024): ("8K/1K", Workload(7373, 922))}
_RATIO = ("lengths uniform in [0.8 L, L] (ratio 0.8): mean 0.9 L; 10 x concurrency prompts after 2 x concurrency "
          "warm-ups")

_R1_FP8 = Precision(weights="fp8", kv="fp8")
_R1_MXFP4 = Precision(weights="fp4", attn="fp8", kv="fp8")
_KIMI = Precision(weights="bf16", moe="fp4", attn="fp8", kv="fp8")

# (label, source, layout, options, precision, model, setup)
_SERIES = {
    "ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8": (
        ATOM_NIGHTLY, Layout(8, 1, 0), Options(prefill="separate-compiled"), _R1_FP8, "deepseek-r1",
        "DeepSeek-R1-0528 FP8 (block-scaled FP8 linear layers) on 8 MI355X with ATOM's server at -tp 8 "
        "(experts split TP 8), FP8 KV, CUDA graphs at decode, no speculative decoding; ATOM's scheduler runs each "
        "prefill as a forward of its own while the decodes wait, compiled (prefill 'separate-compiled'); " + _RATIO),
    "ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4": (
        ATOM_NIGHTLY, Layout(4, 1, 0), Options(prefill="separate-compiled"), _R1_MXFP4, "deepseek-r1",
        "amd/DeepSeek-R1-0528-MXFP4-MTP-MoEFP4 on 4 MI355X with ATOM's server at -tp 4 (experts split TP 4): MXFP4 "
        "routed and shared experts and dense MLPs (the global MXFP4 config), FP8 self-attention (the checkpoint's "
        "override), FP8 KV, CUDA graphs at decode, no speculative decoding; prefill 'separate-compiled' as ATOM's "
        "server runs it; " + _RATIO),
    "SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8": (
        ATOM_SGL_NIGHTLY, Layout(8, 1, 0), Options(prefill="separate"), _R1_FP8, "deepseek-r1",
        "DeepSeek-R1-0528 FP8 on 8 MI355X with SGLang (v0.5.10 nightly) running ATOM's model implementation, "
        "--tensor-parallel-size 8 (experts split TP 8), FP8 KV (fp8_e4m3), radix cache disabled, CUDA graphs at "
        "decode, no speculative decoding; SGLang's scheduler without mixed chunks (prefill 'separate', eager); "
        + _RATIO),
    "vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8": (
        ATOM_VLLM_NIGHTLY, Layout(8, 1, 0), Options(), _KIMI, "kimi-k2",
        "Kimi-K2-Thinking as amd/Kimi-K2-Thinking-MXFP4-AttnFP8 on 8 MI355X with vLLM (v0.19.0 nightly) and ATOM's "
        "plugin at --tensor-parallel-size 8 (experts split TP 8): MXFP4 routed experts, FP8 attention, shared "
        "expert and dense layer in BF16, FP8 KV, prefix caching off, FULL_AND_PIECEWISE CUDA graphs, async "
        "scheduling, no speculative decoding; vLLM's scheduler (prefill 'mixed'); " + _RATIO),
}


def _pair(series: str, isl: int, osl: int, conc: int, out: float, tpot: float) -> list[Case]:
    source, layout, options, precision, model, setup = _SERIES[series]
    label, w = _LENGTHS[(isl, osl)]
    gpus = layout.tp
    head = f"{series}, concurrency {conc}, {label}"
    return [
        Case(f"{head}, TPOT", source, "mi355x", "colocated", layout, conc / gpus, w, options, round(1000 / tpot, 2),
             "tok/s/user",
             f"1 / the mean TPOT ('{isl}/{osl} c={conc} TPOT (ms) {tpot}'), read as the colocated TPOT at {conc} in "
             f"flight ({conc / gpus:g} a GPU); " + setup, precision, model=model, blind=24),
        Case(f"{head}, throughput", source, "mi355x", "colocated", layout, conc / gpus, w, options,
             round(out / gpus, 2), "tok/s/GPU",
             f"'{isl}/{osl} c={conc} throughput (tok/s) {out}' (output tokens, one instance) / {gpus} GPUs at "
             f"concurrency {conc}; " + setup, precision, model=model, blind=24),
    ]


# (series, ISL, OSL, concurrency, output tok/s of the instance, mean TPOT ms)
_ROWS = [
    ("ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 1024, 1024, 4, 356.7, 10.68),
    ("ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 1024, 1024, 64, 2824.4, 21.81),
    ("ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 1024, 1024, 256, 5974.97, 41.12),
    ("ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 8192, 1024, 4, 325.72, 11.66),
    ("ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 8192, 1024, 64, 1782.34, 34.15),
    ("ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4", 1024, 1024, 4, 428.73, 8.63),
    ("ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4", 1024, 1024, 64, 2750.98, 22.28),
    ("ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4", 8192, 1024, 64, 1546.27, 39.32),
    ("SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 1024, 1024, 4, 366.45, 10.47),
    ("SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 1024, 1024, 64, 2805.5, 21.97),
    ("SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 8192, 1024, 4, 337.67, 11.25),
    ("SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8", 8192, 1024, 64, 1899, 32.02),
    ("vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8", 1024, 1024, 4, 430.08, 8.85),
    ("vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8", 1024, 1024, 64, 3091.22, 19.93),
    ("vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8", 8192, 1024, 64, 2309.73, 26.3),
]

BLIND24 = [case for row in _ROWS for case in _pair(*row)]

# Predicted when recorded (the model of main at d5e4167): name -> the model's figure in the case's unit.
RECORDED = {
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 1K/1K, TPOT': 104.9,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 1K/1K, throughput': 52.4,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 1K/1K, TPOT': 44.8,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 1K/1K, throughput': 358.6,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 256, 1K/1K, TPOT': 28.3,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 256, 1K/1K, throughput': 905.0,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 8K/1K, TPOT': 99.2,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 8K/1K, throughput': 49.6,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 8K/1K, TPOT': 29.3,
    'ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 8K/1K, throughput': 234.5,
    'ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4, concurrency 4, 1K/1K, TPOT': 102.5,
    'ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4, concurrency 4, 1K/1K, throughput': 102.5,
    'ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4, concurrency 64, 1K/1K, TPOT': 42.1,
    'ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4, concurrency 64, 1K/1K, throughput': 673.9,
    'ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4, concurrency 64, 8K/1K, TPOT': 27.7,
    'ATOM DeepSeek-R1-0528 MXFP4 4xMI355X TP4, concurrency 64, 8K/1K, throughput': 442.6,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 1K/1K, TPOT': 102.7,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 1K/1K, throughput': 51.3,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 1K/1K, TPOT': 39.3,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 1K/1K, throughput': 314.1,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 8K/1K, TPOT': 99.2,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 4, 8K/1K, throughput': 49.6,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 8K/1K, TPOT': 29.3,
    'SGLang-ATOM DeepSeek-R1-0528 FP8 8xMI355X TP8, concurrency 64, 8K/1K, throughput': 234.5,
    'vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8, concurrency 4, 1K/1K, TPOT': 111.6,
    'vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8, concurrency 4, 1K/1K, throughput': 55.8,
    'vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8, concurrency 64, 1K/1K, TPOT': 54.8,
    'vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8, concurrency 64, 1K/1K, throughput': 438.0,
    'vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8, concurrency 64, 8K/1K, TPOT': 34.0,
    'vLLM-ATOM Kimi-K2-Thinking MXFP4 8xMI355X TP8, concurrency 64, 8K/1K, throughput': 272.4,
}
