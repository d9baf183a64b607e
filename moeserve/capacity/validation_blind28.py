"""The twenty-eighth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 52b6b74 (whose step model is that of d5e4167), by someone who did not
change the model; none of them was used to choose a mechanism or a factor. Each case says which reading of its
source was taken where the source is silent (`assumed`); every reading was decided before any prediction here was
computed. It holds one source, new to the validation (no part names the fork, its report or its machine): SGLang's
nightly performance test of Qwen3-235B-A22B-Instruct-2507-FP8, run by one user on 8 H200 and on 8 B200.

Source (quoted as the stored copies print them, runs of spaces collapsed to one):
- github.com/m8ngotree/sglang (a fork of sgl-project/sglang), BENCHMARK_REPORT_qwen3_235b_fp8.md at commit
  7ff9c1b7af3b697c6c698cc08fe5a3c6e23d27aa: '**Model**: `Qwen/Qwen3-235B-A22B-Instruct-2507-FP8`', '**Test File**:
  `test/registered/8-gpu-models/test_qwen3_235b_fp8.py`', '| H200 | NVIDIA H200 | 8 | Hopper (SM 9.0) | ~141GB |',
  '| B200 | NVIDIA B200 | 8 | Blackwell (SM 10.0) | ~141GB |', the launch arguments '--tp=8', '--ep=2',
  '--trust-remote-code', 'Environment: `SGLANG_ENABLE_JIT_DEEPGEMM=0`', 'KV cache dtype: `torch.bfloat16`',
  'Model weights: ~27.87 GB per GPU', 'Batch sizes: `[1, 2, 4, 8, 16, 64]`', 'Input sequence length: 4096 tokens',
  'CUDA graphs enabled for decode with 52 different batch sizes', '**Quantization**: FP8 blockwise quantization',
  'lmsysorg/sglang:latest', 'pip install sgl-kernel==0.3.20'. Its tables ('| Batch Size | Input Len | Latency (s) |
  Input Throughput (tok/s) | Output Throughput (tok/s) | ITL (ms) |'):
  H200 '| 1 | 4096 | 6.40 | 26,385.35 | 81.99 | 12.20 |', '| 2 | 4096 | 7.00 | 31,437.49 | 151.93 | 13.16 |',
  '| 4 | 4096 | 6.93 | 32,701.68 | 318.48 | 12.56 |', '| 8 | 4096 | 7.99 | 33,116.18 | 584.96 | 13.68 |',
  '| 16 | 4096 | 9.87 | 33,772.27 | 1,033.36 | 15.48 |', '| **64** | 4096 | 19.32 | 34,194.00 | **2,812.81** |
  22.75 |'; B200 '| 1 | 4096 | 4.00 | 26,133.71 | 133.21 | 7.51 |', '| 2 | 4096 | 4.76 | 15,315.43 | 242.15 | 8.26 |',
  '| 4 | 4096 | 5.02 | 35,009.27 | 450.38 | 8.88 |', '| 8 | 4096 | 5.75 | 39,924.55 | 830.63 | 9.63 |', '| 16 | 4096 |
  7.23 | 40,704.06 | 1,458.53 | 10.97 |', '| **64** | 4096 | 14.15 | 41,842.55 | **4,157.96** | 15.39 |'.
- The test, in the same fork (test/registered/8-gpu-models/test_qwen3_235b_fp8.py, stored at 730b0404c and c284af3):
  `ModelLaunchSettings(QWEN3_235B_MODEL_PATH, tp_size=8, extra_args=base_args)` with base_args '--tp=8', '--ep=2',
  '--trust-remote-code' (the two stored copies add --chat-template / --reasoning-parser flags to the AIME25 variant,
  which the report recommends adding, '# ADD THIS': its own run had the three), and
  `PerformanceTestParams(batch_sizes=[1, 2, 4, 8, 16, 64], profile_dir=...)`: no lengths, no --chunked-prefill-size,
  no speculative decoding, no KV format.
- The runner, sgl-project/sglang python/sglang/test/performance_test_runner.py (stored at 161272f):
  `input_lens: Tuple[int, ...] = (4096,)`, `output_lens: Tuple[int, ...] = (512,)`; its NightlyBenchmarkRunner
  (python/sglang/test/nightly_utils.py, stored at 075543c) runs `python3 -m sglang.bench_one_batch_server ...
  --batch-size ... --input-len ... --output-len ... --pydantic-result-filename=...`. bench_one_batch_server (the
  stored copy with --pydantic-result-filename and --profile-output-dir) warms up once at each batch size (1,024 in /
  16 out), then for each batch size flushes the cache and sends ONE /generate request of B random prompts of 4,096
  token ids (max_new_tokens 512, ignore_eos, streamed), and computes `input_throughput = batch_size * input_len /
  last_ttft` (the TTFT of the last request of the batch to get its first token) and `output_throughput = batch_size
  * output_len / (latency - last_ttft)`; its profiled passes are separate runs after the measured ones. The report's
  ITL is python/sglang/test/nightly_bench_utils.py's `itl = 1 / (output_throughput / batch_size) * 1000`, i.e.
  (latency - TTFT) / 512: the mean decode step of the batch of B.
- The tables agree with that arithmetic in every row: TTFT = B x 4,096 / input throughput (0.155 s at B = 1 on the
  H200, 7.666 s at B = 64) and (latency - TTFT) x output throughput = B x 512 within 0.1% (H200 B = 64: (19.32 -
  7.666) x 2,812.81 = 32,779 against 32,768; B200 B = 16: 8,197 against 8,192), and ITL = 1,000 x B / output
  throughput to the printed 0.01 ms in all twelve rows. So the output length is the runner's 512 and the tables are
  the runner's own numbers.

Weaknesses of the source: it is an unofficial fork's report of a user's own run (the run sheet in the same commit,
POSTMORTEM_qwen3_benchmarking.md, fetches a 'qwen-benchmarking' branch into a user's home directory and runs the
test), not SGLang's published nightly results, and its prose is partly wrong or machine-written: '**Date**:
December 31, 2024' cannot be right (the checkpoint is the July 2025 '2507' release and the setup pins sgl-kernel
0.3.20; read as about the end of 2025, the git date not read); the B200 row's '~141GB' and 'Total VRAM: ~175 GB
(H200/B200)' are wrong (B200 has about 180 GB); 'Output tokens: Variable per batch size' is wrong (the runner's fixed
512, which the tables' arithmetic confirms); 'Model weights dtype: torch.bfloat16 (loaded from FP8 checkpoint)' is
the activation dtype (27.87 GB of weights a GPU is FP8: about 235 GB / 8); its 'FlashInfer selected' attention-backend
prose is not relied on. The SGLang version is not stated beyond
lmsysorg/sglang:latest with the fork's branch installed over it and sgl-kernel 0.3.20 (SGLang of about 0.5.6-0.5.7),
nor whether the H200 and B200 runs used one build. Its accuracy runs failed (AIME25 0.067), blamed on a chat
template: no bearing on speed. Only the tables, which follow the runner's arithmetic, are taken.

Readings (all cases):
- Qwen3-235B-A22B-Instruct-2507-FP8: FP8 block-scaled weights (Precision(weights='fp8')), BF16 KV (the report's KV
  dtype; the launch sets none), model 'qwen3-235b-a22b'.
- `--tp 8 --ep 2` without --enable-dp-attention: attention TP 8 (one attention group; Qwen3-235B's 4 KV heads each
  on 2 ranks) and the experts split EP 2 x MoE-TP 4 (SGLang's moe_tp_size = tp / ep): Layout(tp=8, ep=2, moe_tp=4),
  the form validation_cases.py and blind 14 give TensorRT-LLM's 'TP8 EP2' / 'TP8 EP4' min-latency layouts (world 8 =
  ep x moe_tp, a multiple of tp: Layout.validate accepts it). No redundant experts (SGLang's EP without EPLB):
  balancedness 0.70 (ASSUMED_PLAIN), as blinds 4, 15 and 17 read SGLang's experts over EP without redundancy and as
  configure assumes for ep 2 with no redundant slots.
- SGLang is named in each case's name (the case's engine).
- No speculative decoding, no MTP, no prefix-cache hits (the cache is flushed before each batch; random prompts).

The ITL figures (phase 'decode', unit tok/s/user = 1,000 / ITL ms): the ITL at batch B is the mean decode step of
the batch of B sequences over the 8 GPUs (B / 8 a GPU), read as decode at the workload's 4,096 in / 512 out, whose
decode context (prompt + half the output, 4,352) is the batch's mean KV length over its steps (4,097 to 4,608);
SGLang's scheduler runs a waiting prefill before any decode step (no --enable-mixed-chunk), so every one of the
decode steps timed has all B sequences in it; (latency - TTFT) covers 511 steps and the runner divides by 512 (0.2%,
left as it is). CUDA graphs (Options(cuda_graphs=True): the report's decode graphs; SGLang's 52 captured sizes are
those of its cap of 512, above every B here). This is the reading blind 17 gives bench_one_batch_server's one-batch
runs (PR #6821: decode of the batch) and the earlier parts give one-batch decode figures; the ITL here is the decode
time alone, so no prefill share needs leaving out.

The input-throughput figures (phase 'prefill', unit tok/s/GPU = input throughput / 8), at B = 16 and 64 only: B x
4,096 / the TTFT of the batch's last request. SGLang prefills the B prompts in chunks of its default chunked-prefill
size for the card (server_args' _handle_gpu_memory_settings: 8,192 tokens on cards under 160 GB, the H200; 16,384
above, the B200; the test sets none; max_prefill_tokens 16,384 admits either), each a forward of its own while the
decodes wait; 4,096-token prompts fill a chunk exactly, so each step prefills 2 (H200) or 4 (B200) whole prompts and
the last request's TTFT is 8 or 4 (B = 16) and 32 or 16 (B = 64) such steps one after another, plus the request's
fixed overhead. Read as SGLang's TP 8 prefill steps of that chunk over the node: 1,024 (H200) or 2,048 (B200) tokens
a GPU a step, the reading blind 16 gives SGLang's TP 8 burst prefill ('prefill in chunks of 8,192 tokens a step over
the TP group (1,024 a GPU)') and the held-out Ant Group H20 TP 8 prefill; not one step of the whole batch (B x 4,096
/ 8 tokens a GPU), which the scheduler never runs. Prefill runs eager (SGLang captures decode graphs only):
Options(cuda_graphs=False); at these steps a layer's GPU time is far above the host's time to issue it, so the
eager flag does not move the prediction.

Left out: the input throughputs at B = 1 to 8 (one to four chunk steps: the request's fixed overheads are a large
share of a TTFT of 0.16-0.99 s, a latency more than a throughput), the B200 batch-2 input throughput (15,315 tok/s
against 26,134 at B = 1 and 35,009 at B = 4: a one-off hiccup in that prefill), the output throughputs (the same
decode time as the ITLs: B x 1,000 / ITL) and the latencies (TTFT plus the same decode time), and the accuracy runs.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

SGL_NIGHTLY = ("m8ngotree/sglang (an unofficial SGLang fork), BENCHMARK_REPORT_qwen3_235b_fp8.md at commit 7ff9c1b "
               "(github.com/m8ngotree/sglang): SGLang's nightly performance test test/registered/8-gpu-models/"
               "test_qwen3_235b_fp8.py run on 8 H200 and 8 B200")

_Q = "qwen3-235b-a22b"
_FP8 = Precision(weights="fp8")  # Qwen3-235B-A22B-Instruct-2507-FP8 (block-scaled), BF16 KV
_TP8_EP2 = Layout(tp=8, ep=2, moe_tp=4)  # --tp 8 --ep 2: attention TP 8, experts EP 2 x MoE-TP 4
_W = Workload(4096, 512)  # the runner's defaults: 4,096 in / 512 out
_CHUNK = {"h200": 8192, "b200": 16384}  # SGLang's default chunked-prefill size by card memory

_SETUP = ("Qwen3-235B-A22B-Instruct-2507-FP8 (FP8 block-scaled weights, BF16 KV) on 8 {card} at SGLang `--tp 8 "
          "--ep 2`: attention TP 8, experts split EP 2 x MoE-TP 4, no redundant experts (balancedness 0.70 "
          "assumed); SGLang of about 0.5.6-0.5.7 (lmsysorg/sglang:latest with the fork's branch, sgl-kernel 0.3.20); "
          "no speculative decoding; sglang.bench_one_batch_server through the nightly runner: one batch of {b} "
          "random prompt{s} of 4,096 tokens, 512 out, all sent in one request after a warm-up")


def _itl(hw: str, b: int, itl_ms: float) -> Case:
    card = hw.upper()
    return Case(f"Qwen3-235B FP8 SGLang nightly test 8x{card} TP8 EP2, batch {b}, 4K/512, ITL", SGL_NIGHTLY, hw,
                "decode", _TP8_EP2, b / 8, _W, Options(cuda_graphs=True, balancedness=ASSUMED_PLAIN), 1000 / itl_ms,
                "tok/s/user",
                f"1 / the ITL ({itl_ms:.2f} ms), the report's 1,000 x B / output throughput = (latency - TTFT) / 512: "
                f"the mean decode step of the batch of {b} ({b / 8:g} a GPU) at KV lengths 4,097-4,608 (decode context "
                "4,352, the workload's prompt + half the output); CUDA graphs (the report's decode graphs, cap 512); "
                + _SETUP.format(card=card, b=b, s="" if b == 1 else "s"),
                _FP8, model=_Q, blind=28)


def _prefill(hw: str, b: int, tput: float) -> Case:
    card, chunk = hw.upper(), _CHUNK[hw]
    return Case(f"Qwen3-235B FP8 SGLang nightly test 8x{card} TP8 EP2, batch {b}, 4K/512, input throughput",
                SGL_NIGHTLY, hw, "prefill", _TP8_EP2, chunk / 8, _W,
                Options(cuda_graphs=False, balancedness=ASSUMED_PLAIN), tput / 8, "tok/s/GPU",
                f"input tok/s ({tput:,.2f}) / 8 GPUs: {b} x 4,096 / the TTFT of the batch's last request "
                f"({b * 4096 / tput:.3f} s); SGLang's default chunked prefill for the {card} ({chunk:,} tokens: "
                f"{chunk // 4096} whole prompts a step, {b * 4096 // chunk} steps one after another, the decodes "
                f"waiting) read as prefill steps of {chunk:,} tokens over the TP 8 group ({chunk // 8:,} a GPU), "
                "eager; " + _SETUP.format(card=card, b=b, s="s"),
                _FP8, model=_Q, blind=28)


BLIND28 = [
    _itl("h200", 1, 12.20),
    _itl("h200", 2, 13.16),
    _itl("h200", 4, 12.56),
    _itl("h200", 8, 13.68),
    _itl("h200", 16, 15.48),
    _itl("h200", 64, 22.75),
    _itl("b200", 1, 7.51),
    _itl("b200", 2, 8.26),
    _itl("b200", 4, 8.88),
    _itl("b200", 8, 9.63),
    _itl("b200", 16, 10.97),
    _itl("b200", 64, 15.39),
    _prefill("h200", 16, 33_772.27),
    _prefill("h200", 64, 34_194.00),
    _prefill("b200", 16, 40_704.06),
    _prefill("b200", 64, 41_842.55),
]

# Predicted when recorded (the model of main at 52b6b74): name -> the model's figure in the case's unit.
RECORDED = {
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 1, 4K/512, ITL': 97.2,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 2, 4K/512, ITL': 94.7,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 4, 4K/512, ITL': 87.3,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 8, 4K/512, ITL': 76.3,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 16, 4K/512, ITL': 64.0,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 64, 4K/512, ITL': 46.6,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 1, 4K/512, ITL': 97.4,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 2, 4K/512, ITL': 97.3,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 4, 4K/512, ITL': 93.7,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 8, 4K/512, ITL': 86.4,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 16, 4K/512, ITL': 77.2,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 64, 4K/512, ITL': 60.5,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 16, 4K/512, input throughput': 4750.9,
    'Qwen3-235B FP8 SGLang nightly test 8xH200 TP8 EP2, batch 64, 4K/512, input throughput': 4750.9,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 16, 4K/512, input throughput': 9848.2,
    'Qwen3-235B FP8 SGLang nightly test 8xB200 TP8 EP2, batch 64, 4K/512, input throughput': 9848.2,
}
