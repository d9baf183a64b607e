"""The twenty-ninth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 6e92d8a (whose step model is that of d5e4167), by someone who did not
change the model; none of them was used to choose a mechanism or a factor. Each case says which reading of its
source was taken where the source is silent (`assumed`); every reading was decided before any prediction here was
computed. It was searched for InferenceX image-bump pull requests ('[Klaud Cold] Update <config> ... image ...')
whose baseline tables give DeepSeek-R1/V3, Kimi K2 or Qwen3-235B rows on configure's cards, Hopper first. It holds
one source, new to the validation (no part names it): InferenceX PR #3288, the baseline of DeepSeek-R1-0528 FP8 on
8 H200 with SGLang v0.5.12 (2026-05-17). Earlier parts' H200 SGLang rows of InferenceX (blinds 2, 3 and 11) are
another run (issue #870, SGLang v0.5.7, March 2026); blind 25 read the same benchmark on B200.

Source (quoted as the stored copies print them):
- SemiAnalysis InferenceX PR #3288 ('[Klaud Cold] Update dsr1-fp8-h200-sglang SGLang image to v0.5.20-cu130',
  github.com/SemiAnalysisAI/InferenceX/pull/3288, description of 2026-09-19), its baseline table: '**Baseline:**
  2026-05-17 · `lmsysorg/sglang:v0.5.12-cu130`  Mean latency · Sources: [API 1](https://inferencex.semianalysis.com/
  api/v1/benchmarks?model=DeepSeek-R1-0528&date=2026-05-17&exact=true)', '| Point | Total tok/s/GPU ↑ | Output
  tok/s/GPU ↑ | TTFT ms ↓ | TPOT ms ↓ |', '| 1k/1k c4 TP8 EP1 48133a | 98.83 | 49.17 | 157.77 | 9.7 |', '| 1k/1k c8
  TP8 EP1 85bc51 | 164.13 | 82.37 | 165.36 | 11.73 |', '| 1k/1k c16 TP8 EP1 e9941e | 254.58 | 126.62 | 197.84 | 15.28
  |', '| 1k/1k c32 TP8 EP1 d4aede | 353.72 | 177.14 | 307.02 | 21.8 |', '| 1k/1k c64 TP8 EP1 a70803 | 519.71 | 259.8 |
  359.75 | 29.77 |', '| 8k/1k c4 TP8 EP1 4cf10c | 387.58 | 43.12 | 373.26 | 10.94 |', '| 8k/1k c8 TP8 EP1 971fce |
  607.86 | 68.33 | 490.53 | 13.88 |', '| 8k/1k c16 TP8 EP1 5ce1a6 | 847.33 | 93.89 | 688.2 | 20.02 |', '| 8k/1k c32
  TP8 EP1 b44470 | 1,082.12 | 121.01 | 979.34 | 31.37 |', '| 8k/1k c64 TP8 EP1 c0064a | 1,360.88 | 150.98 | 2,245.58 |
  49.33 |'. InferenceX PR #3173 (the v0.5.19 bump of the same config, 2026-09-16) names the run: 'the frozen
  2026-05-17 public baseline (producer run 25980019087 / attempt 2, head `2caa27420c`) contains ten TP8/EP1 points'
  (its first, '1024/1024 c4 TP8 EP1 `48133a`', the hash of PR #3288's first row).
- The run's setup, from the InferenceX repository at that head, 2caa27420 (2026-05-17, 'Update dsr1-fp8-h200-sglang
  SGLang image to v0.5.12-cu130', merged as aa2df9534, PR #1423; the files below are the same at both):
  .github/configs/nvidia-master.yaml, 'dsr1-fp8-h200-sglang' (`image: lmsysorg/sglang:v0.5.12-cu130`, `model:
  deepseek-ai/DeepSeek-R1-0528`, `runner: h200`, `precision: fp8`, `framework: sglang`, `multinode: false`; 1024 /
  1024 and 8192 / 1024 each `{ tp: 8, conc-start: 4, conc-end: 64 }`, no ep or dp-attn key);
  benchmarks/single_node/dsr1_fp8_h200.sh (unchanged since 2026-05-12): `python3 -m sglang.launch_server --model-path
  $MODEL ... --tensor-parallel-size=$TP --data-parallel-size=1 --disable-radix-cache --max-running-requests 512
  --cuda-graph-max-bs 512` (1024 / 1024; `256` and `256` otherwise) `--chunked-prefill-size 32768 --max-prefill-tokens
  32768 --mem-fraction-static 0.82 --attention-backend flashinfer --stream-interval 10 --decode-log-interval 1`, no
  --kv-cache-dtype, no --ep-size, no speculative flag; the client `run_benchmark_serving ... --backend vllm --input-len
  "$ISL" --output-len "$OSL" --random-range-ratio "$RANDOM_RANGE_RATIO" --num-prompts $(( $CONC * 10 ))
  --max-concurrency "$CONC"`, which benchmarks/benchmark_lib.sh runs as `benchmark_serving.py ... --dataset-name
  random ... --request-rate inf --ignore-eos ... --num-warmups "$((2 * max_concurrency))"`, with
  .github/workflows/benchmark-tmpl.yml's `RANDOM_RANGE_RATIO: 0.8`.

Figures looked at and not taken: PR #3288's TTFT and total-throughput columns (the same runs as the output columns;
a TTFT under a closed loop is queueing as much as a step) and its eval rows; PR #3159 (the v0.5.19 bump of the same
config, 2026-09-16), whose table for the same baseline date prints every 8k/1k row 'N/A' (a filter of that session;
PR #3173 names the ten points of the run, PR #3288 prints them); InferenceX PR #3289 (dsr1-fp8-h200-sglang-mtp, MTP
without a published acceptance); PRs #3318 and #2949 (DeepSeek-R1 FP8 on MI325X, not a configure card); PRs #3175 and
#3183 (B300, not a configure card); PRs #3048 and #3159 (MI300X and H200 8k/1k: every row 'N/A'); the disaggregated
and Kimi K2.6 / K3 baselines (#3160, #3185, #3024, #3286, #3082, #3076, #2919, #3220: every row 'N/A', or Kimi K3 /
agentic traces, not configure's models); PR #1383 and #1628 / #1629 (ATOM on MI355X: total throughput only, or MTP 3
without a published acceptance); the Qwen3.5 and GLM baselines (not configure's models). No image-bump PR with a
readable baseline of DeepSeek-R1 on H200 with TensorRT-LLM, on H100 or H20, of Kimi K2 or of Qwen3-235B was found.

Readings (decided before the model was run, as blind 25 reads InferenceX rows): DeepSeek-R1-0528 as configure's
deepseek-r1; the card as the config's runner, configure's h200 profile; one instance of 8 H200 at TP 8, the table's
'Output tok/s/GPU' over its 8 GPUs (1k/1k c4: 49.17 x 8 = 393 tok/s against 4 / 9.7 ms = 412; 8k/1k c64: 150.98 x 8 =
1,208 against 64 / 49.33 ms = 1,297); EP 1 as the experts split TP 8 (Layout(8, 1)), one attention group
(--data-parallel-size=1, no DP attention); the block-scaled FP8 checkpoint, KV in BF16 (no --kv-cache-dtype: SGLang's
'auto' takes the model's activation dtype, as blind 11 reads the same script); no prefix-cache hits (random prompts,
radix cache off); the closed loop (--max-concurrency, 10 x CONC prompts after 2 x CONC warm-ups) read at its
concurrency in flight, conc / 8 a GPU (every concurrency within --max-running-requests); lengths uniform in [0.8 L,
L] at ratio 0.8, means 922 for 1,024 and 7,373 for 8,192 (blinds 22, 24 and 25); a mean TPOT of a run with more than
one request in flight (every row here, 4 to 64) as the colocated TPOT at the same batch (the prefills interleaved with
the decodes stall them and the mean counts the stalls); SGLang v0.5.12's scheduler without --enable-mixed-chunk under
a closed loop, prefill "separate" (eager passes of their own: blinds 11, 15-17, 24 and 25); CUDA graphs at decode
(--cuda-graph-max-bs 512 / 256, above every concurrency); no speculative decoding (no flag); KV memory at configure's
default 0.9 of the card (--mem-fraction-static is not the model's input); the flashinfer MLA attention backend, the
32,768-token prefill chunk and the stream interval are not modelled apart; lengths at their means, their spread not
modelled (as every earlier part).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

IX_3288 = ("SemiAnalysis InferenceX PR #3288 (github.com/SemiAnalysisAI/InferenceX/pull/3288), the baseline table of "
           "2026-05-17, dsr1-fp8-h200-sglang with SGLang v0.5.12 (lmsysorg/sglang:v0.5.12-cu130), producer run "
           "25980019087 at 2caa27420 (as PR #3173 names it), setup at 2caa27420")

_R1 = "deepseek-r1"
_R1_FP8_BF16KV = Precision(weights="fp8", kv="bf16")  # DeepSeek-R1-0528's block-scaled FP8, SGLang's 'auto' KV (BF16)
_LENGTHS = {(1024, 1024): ("1K/1K", Workload(922, 922), 512), (8192, 1024): ("8K/1K", Workload(7373, 922), 256)}
_SETUP = ("DeepSeek-R1-0528 FP8 (block-scaled) on 8 H200, SGLang v0.5.12 at --tensor-parallel-size=8 "
          "--data-parallel-size=1, no --ep-size (attention TP 8, experts split TP 8, one attention group), KV in BF16 "
          "(no --kv-cache-dtype: 'auto'), radix cache off, CUDA graphs (--cuda-graph-max-bs {graphs}, "
          "--max-running-requests {graphs}), no MTP; SGLang's scheduler without mixed chunks (prefill 'separate', "
          "eager); flashinfer MLA attention and the 32,768-token prefill chunk not modelled apart; lengths uniform in "
          "[0.8 L, L] (range ratio 0.8): means {isl:,} / {osl:,}; 10 x concurrency prompts after 2 x concurrency "
          "warm-ups, --max-concurrency read as that many in flight")


def _ix(isl: int, osl: int, conc: int, out: float, tpot: float) -> list[Case]:
    """A row of PR #3288's table: its mean TPOT and its output tok/s a GPU."""
    label, w, graphs = _LENGTHS[(isl, osl)]
    setup = _SETUP.format(graphs=graphs, isl=w.isl, osl=w.osl)
    head = f"InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency {conc}, {label}"
    layout, options, batch = Layout(8, 1, 0), Options(prefill="separate"), conc / 8
    return [
        Case(f"{head}, TPOT", IX_3288, "h200", "colocated", layout, batch, w, options, round(1000 / tpot, 2),
             "tok/s/user", f"1 / the mean TPOT ({tpot} ms), read as the colocated TPOT at {conc} in flight "
             f"({batch:g} a GPU); " + setup, _R1_FP8_BF16KV, model=_R1, blind=29),
        Case(f"{head}, throughput", IX_3288, "h200", "colocated", layout, batch, w, options, out, "tok/s/GPU",
             f"the table's output tok/s a GPU ({out}: the instance's over its 8 GPUs) at concurrency {conc} "
             f"({batch:g} a GPU); " + setup, _R1_FP8_BF16KV, model=_R1, blind=29),
    ]


# (ISL, OSL, concurrency, output tok/s a GPU, mean TPOT ms), PR #3288's rows in its order
_ROWS = [
    (1024, 1024, 4, 49.17, 9.7),
    (1024, 1024, 8, 82.37, 11.73),
    (1024, 1024, 16, 126.62, 15.28),
    (1024, 1024, 32, 177.14, 21.8),
    (1024, 1024, 64, 259.8, 29.77),
    (8192, 1024, 4, 43.12, 10.94),
    (8192, 1024, 8, 68.33, 13.88),
    (8192, 1024, 16, 93.89, 20.02),
    (8192, 1024, 32, 121.01, 31.37),
    (8192, 1024, 64, 150.98, 49.33),
]

BLIND29 = [case for row in _ROWS for case in _ix(*row)]

# Predicted when recorded (the model of main at 6e92d8a): name -> the model's figure in the case's unit.
RECORDED = {
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 4, 1K/1K, TPOT': 91.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 4, 1K/1K, throughput': 45.5,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 8, 1K/1K, TPOT': 73.4,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 8, 1K/1K, throughput': 73.4,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 16, 1K/1K, TPOT': 54.6,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 16, 1K/1K, throughput': 109.2,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 32, 1K/1K, TPOT': 39.1,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 32, 1K/1K, throughput': 156.4,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 64, 1K/1K, TPOT': 28.7,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 64, 1K/1K, throughput': 229.9,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 4, 8K/1K, TPOT': 80.5,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 4, 8K/1K, throughput': 40.2,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 8, 8K/1K, TPOT': 59.4,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 8, 8K/1K, throughput': 59.4,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 16, 8K/1K, TPOT': 40.1,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 16, 8K/1K, throughput': 80.2,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 32, 8K/1K, TPOT': 25.8,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 32, 8K/1K, throughput': 103.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 64, 8K/1K, TPOT': 16.3,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xH200 TP8, concurrency 64, 8K/1K, throughput': 130.5,
}
