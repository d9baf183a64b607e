"""The twenty-second blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 49fc96b (its step model is that of 5148a94: the commits since touch
configure's command line, its sizing and pricing, the profiles' memory sources and the validation's blind parts, and
blinds 19 to 21 reproduce there), by someone who did not change the model; none of them was used to choose a
mechanism or a factor. Each case says which reading of its source was taken where the source is silent
(`assumed`). It was searched for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B figures on H20, H100, H200, H800, B200,
GB200, GB300, MI300X and MI355X with their setup stated (SGLang / vLLM / TensorRT-LLM / ROCm ATOM issues and pull
requests, LMSYS's, vLLM's, NVIDIA's and AMD's posts, InferenceX pull requests, gpustack's performance lab). One
source is new to the validation; the other is the held-out part's, at rows it did not take.

Sources:
- ROCm/ATOM PR #409 ('[plugin][OOT Benchmark] Refine OOT benchmark(manual trigger) to cover key models',
  github.com/ROCm/ATOM/pull/409, merged), its result table from the run github.com/ROCm/ATOM/actions/runs/23703564227
  (columns 'Status | Model | ISL | OSL | Concurrency | Ratio | Mean TTFT (ms) | Mean TPOT (ms) | Total Tput (tok/s)
  | Total Tput / GPU (tok/s) | Notes'), the eleven complete 'DeepSeek-R1 FP8 TP8' rows: '| 1024 | 1024 | 4 | 0.8 |
  132.53 | 11.20 | 686.24 | 85.78 |', '| 1024 | 1024 | 8 | 0.8 | 119.83 | 11.98 | 1288.02 | 161.00 |', '| 1024 |
  1024 | 16 | 0.8 | 126.96 | 13.48 | 2310.45 | 288.81 |', '| 1024 | 1024 | 32 | 0.8 | 177.63 | 17.80 | 3467.16 |
  433.39 |', '| 1024 | 1024 | 64 | 0.8 | 211.02 | 21.27 | 5785.95 | 723.24 |', '| 1024 | 8192 | 4 | 0.8 | 134.96 |
  11.22 | 394.81 | 49.35 |', '| 1024 | 8192 | 8 | 0.8 | 121.80 | 11.86 | 737.23 | 92.15 |', '| 1024 | 8192 | 16 |
  0.8 | 147.79 | 13.48 | 1298.19 | 162.27 |', '| 1024 | 8192 | 32 | 0.8 | 172.41 | 17.32 | 2024.58 | 253.07 |', '|
  1024 | 8192 | 64 | 0.8 | 286.28 | 20.52 | 3398.16 | 424.77 |', '| 8192 | 1024 | 4 | 0.8 | 318.88 | 12.42 | 2750.14 |
  343.77 |'. The engine is vLLM with ATOM's out-of-tree model plugin (AMD's AITER kernels inside vLLM); its launch, as
  the repository's .github/benchmark/oot_benchmark_models.json gives it at commit 072a7d3 (after the PR): model
  'deepseek-ai/DeepSeek-R1-0528', runner 'atom-mi355-8gpu-oot-benchmark', '--trust-remote-code
  --tensor-parallel-size 8 --max-num-batched-tokens 16384 --max-model-len 16384', env
  'AITER_QUICK_REDUCE_QUANTIZATION=INT4'; the client is vLLM's benchmark_serving.py with no extra arguments and the
  random range ratio of the 'Ratio' column (ROCm/ATOM PR #739's table of the same benchmark).
- LMSYS / AMD, 'Accelerating DeepSeek V3 Inference via Multi-Token Prediction in SGLang' (2025-09-02), the random
  dataset table ('| Max Concurrency | Without MTP | With MTP | Speedup |', end-to-end latency in milliseconds a
  request, 'measured 18/08/2025' on '8 AMD MI300X GPUs, with ROCm 6.3.0 and SGLang v0.4.10.post1'): '| 2 | 17162.29 |
  8408.02 | 2.04 |', '| 4 | 17948.3 | 9736.64 | 1.84 |', '| 8 | 19919.06 | 11742.82 | 1.70 |', '| 16 | 23708.94 |
  15483.11 | 1.53 |'. The held-out part took its concurrency-1 row without MTP (17,348.25 ms); this part takes the
  rows without MTP at 2, 4, 8 and 16.

Figures looked at and not taken: PR #409's 8192 / 1024 row at concurrency 8 (cut off in the stored text) and its
TTFT columns (a queueing figure of the run, not a step); the blog's MTP columns (no acceptance published) and its
concurrency 32 / 64 and ShareGPT rows (ShareGPT lengths not given); InferenceX PRs #1628 and #1629 (ATOM on MI355X
with MTP 3, no acceptance published); InferenceX's image-bump PRs for SGLang v0.5.19 (#3010 on H200, #2989 on B200:
their result tables not in the stored text); SGLang PR #14668 (DeepSeek-R1 NVFP4 at DP 4 / EP 4 with the flashinfer
all-to-all: the card, B200 or GB200, not in the readable part); SGLang PRs #9942 and #22394 (results as images, or a
disaggregated recipe whose layout is not stated); tenstorrent's 8 x H100 vLLM rows (AWQ INT4 weights); AMD's ROCm
blog on vLLM for MI355X (charts only); the vLLM recipes for Qwen3-235B and DeepSeek on ROCm and B200 (commands, no
results); the vLLM and LMSYS InferenceMAX posts (gpt-oss and Llama, or figures of GB200 Part II restated); ATOM PR
#750 (DeepSeek-V3.2: sparse attention, not modelled). No new H20, H800, GB300, Kimi K2 (BF16 / FP8) or Qwen3-235B
figure with its setup stated was found.

Readings (decided before the model was run): PR #409's card as MI355X (the benchmark's runner in the repository's
configuration; the PR text does not name it); DeepSeek-R1-0528 in its FP8 checkpoint (block-scaled FP8 linear
layers), KV in BF16 (no --kv-cache-dtype: vLLM's auto), experts split TP 8 (no --enable-expert-parallel), one
attention group, CUDA / HIP graphs, no speculative decoding; prompts and outputs at 0.9 of the set lengths (random
lengths uniform in [0.8 L, L] at ratio 0.8, as the InferenceX parts read them: 922 for 1,024 and 7,373 for 8,192);
a mean TPOT predicted as 1 / TPOT of decode at the concurrency over the 8 GPUs (the other requests' prefills
interleaved with it left out, as the earlier parts do); the 'Total Tput / GPU' counts input and output tokens
(vLLM's total token throughput), so the output tokens a GPU second are that times output / (input + output) of the
mean lengths, predicted as colocated at the concurrency over the 8 GPUs with vLLM V1's mixed steps (the launch's
16,384-token step budget is the engine's: configure's colocated chunk is 8,192, not an input). The blog's rows are
read as the held-out part reads its concurrency-1 row: 1,024 in / 1,024 out (the client command's lengths), FP8
weights, BF16 KV, experts split TP 8, one request's end-to-end latency at the table's concurrency over the 8 GPUs
(the command shown, 300 prompts at one a second, is the same for every row; the table names the concurrency).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import AMD_MTP, Case

ATOM_409 = ("ROCm/ATOM PR #409 ('[plugin][OOT Benchmark] Refine OOT benchmark(manual trigger) to cover key models', "
            "github.com/ROCm/ATOM/pull/409), the run github.com/ROCm/ATOM/actions/runs/23703564227")
_ATOM = ("DeepSeek-R1-0528 FP8 on 8 MI355X (the benchmark's runner in the repository's configuration) at "
         "--tensor-parallel-size 8 (experts split TP 8, one attention group), vLLM with ATOM's plugin, BF16 KV, no "
         "speculative decoding, HIP graphs; lengths uniform in [0.8 L, L] (ratio 0.8): mean 0.9 L")
_FP8 = Precision(weights="fp8")
_LENGTHS = {(1024, 1024): ("1K/1K", Workload(922, 922)), (1024, 8192): ("1K/8K", Workload(922, 7373)),
            (8192, 1024): ("8K/1K", Workload(7373, 922))}


def _user(isl: int, osl: int, conc: int, tpot: float) -> Case:
    label, w = _LENGTHS[(isl, osl)]
    return Case(f"vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency {conc}, {label}, TPOT", ATOM_409, "mi355x", "decode",
                Layout(8, 1, 0), conc / 8, w, Options(), 1000 / tpot, "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) at concurrency {conc}; " + _ATOM, _FP8, model="deepseek-r1", blind=22)


def _tput(isl: int, osl: int, conc: int, total_per_gpu: float) -> Case:
    label, w = _LENGTHS[(isl, osl)]
    out = total_per_gpu * w.osl / (w.isl + w.osl)
    return Case(f"vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency {conc}, {label}, throughput", ATOM_409, "mi355x",
                "colocated", Layout(8, 1, 0), conc / 8, w, Options(), round(out, 2), "tok/s/GPU",
                f"the total tok/s a GPU ({total_per_gpu}, input and output) x {w.osl} / {w.isl + w.osl} (output's share "
                f"of the mean lengths) at concurrency {conc}, read as {conc} in flight, vLLM V1's mixed steps; " + _ATOM,
                _FP8, model="deepseek-r1", blind=22)


def _amd(conc: int, ms: float) -> Case:
    return Case(f"SGLang, 8xMI300X TP8, concurrency {conc}, 1K/1K", AMD_MTP, "mi300x", "decode", Layout(8, 1, 0),
                conc / 8, Workload(1024, 1024), Options(), ms, "ms/request",
                f"end-to-end latency of a request without MTP ({ms:,} ms) at concurrency {conc}, 'measured 18/08/2025' "
                "with SGLang v0.4.10.post1 on ROCm 6.3.0; as the held-out concurrency-1 row: 1,024 in / 1,024 out, "
                "experts split TP 8, FP8 weights, BF16 KV", blind=22)


_ROWS = [(1024, 1024, 4, 11.20, 85.78), (1024, 1024, 8, 11.98, 161.00), (1024, 1024, 16, 13.48, 288.81),
         (1024, 1024, 32, 17.80, 433.39), (1024, 1024, 64, 21.27, 723.24), (1024, 8192, 4, 11.22, 49.35),
         (1024, 8192, 8, 11.86, 92.15), (1024, 8192, 16, 13.48, 162.27), (1024, 8192, 32, 17.32, 253.07),
         (1024, 8192, 64, 20.52, 424.77), (8192, 1024, 4, 12.42, 343.77)]

BLIND22 = ([_user(isl, osl, conc, tpot) for isl, osl, conc, tpot, _ in _ROWS]
           + [_tput(isl, osl, conc, total) for isl, osl, conc, _, total in _ROWS]
           + [_amd(2, 17162.29), _amd(4, 17948.3), _amd(8, 19919.06), _amd(16, 23708.94)])

# Predicted when recorded (the model of main at 49fc96b): name -> the model's figure in the case's unit.
RECORDED = {
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 4, 1K/1K, TPOT': 106.6,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 8, 1K/1K, TPOT': 93.0,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 16, 1K/1K, TPOT': 76.7,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 32, 1K/1K, TPOT': 60.3,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 64, 1K/1K, TPOT': 48.6,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 4, 1K/8K, TPOT': 106.6,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 8, 1K/8K, TPOT': 91.4,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 16, 1K/8K, TPOT': 72.6,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 32, 1K/8K, TPOT': 55.3,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 64, 1K/8K, TPOT': 42.4,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 4, 8K/1K, TPOT': 105.5,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 4, 1K/1K, throughput': 52.9,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 8, 1K/1K, throughput': 91.7,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 16, 1K/1K, throughput': 149.8,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 32, 1K/1K, throughput': 233.0,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 64, 1K/1K, throughput': 368.3,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 4, 1K/8K, throughput': 53.2,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 8, 1K/8K, throughput': 91.3,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 16, 1K/8K, throughput': 144.8,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 32, 1K/8K, throughput': 220.2,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 64, 1K/8K, throughput': 337.1,
    'vLLM-ATOM DeepSeek-R1 8xMI355X TP8, concurrency 4, 8K/1K, throughput': 49.1,
    'SGLang, 8xMI300X TP8, concurrency 2, 1K/1K': 9427.4,
    'SGLang, 8xMI300X TP8, concurrency 4, 1K/1K': 10580.8,
    'SGLang, 8xMI300X TP8, concurrency 8, 1K/1K': 12686.9,
    'SGLang, 8xMI300X TP8, concurrency 16, 1K/1K': 16402.4,
}
