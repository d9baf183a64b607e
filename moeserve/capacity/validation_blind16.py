"""The sixteenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at c99b6a0 (the model of 985e947 and 23785e5; c99b6a0 reads a
colocated case in tok/s/user as the colocated TPOT), by someone who did not change the model; none of them was
used to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is
silent (`assumed`). It was searched for cloud providers', server makers' and third-party benchmarkers' figures.
No figure here is used by another part; one source is blind 3's and blind 8's (gpustack's performance lab), at
runs of a page of which blind 3 took others, one is the InferenceX benchmark's (blinds 2, 3, 7, 8, 9 and 11 took
other posts and runs of it), at a post no part took, and two are new to the validation.

Sources:
- DataCrunch (a GPU cloud), its engineering blog's sources in github.com/datacrunch-research/blogs (at commit
  f5752e8):
  1. deepseek-v3-h200-deployment/deepseek-v3-h200-deployment.md ('DeepSeek V3 LLM NVIDIA H200 GPU Inference
     Benchmarking', datacrunch.io/blog, January 2025; 'We are testing the latest sglang v0.4.1'), section '2.2.1
     FP8': `python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --quantization fp8
     --kv-cache-dtype fp8_e5m2 --trust-remote-code --enable-dp-attention` on 8 H200, `sglang.bench_serving
     --dataset-name random --random-range-ratio 1 --random-input 1024 --random-output 1024` at --request-rate 1,
     2, 4 and 8 (300, 600, 1,200 and 2,400 prompts). Its table (RPS | prompts | median E2E ms | median TTFT ms |
     median TPOT ms | median ITL ms | output tok/s): '1 | 300 | 147,735.43 | 563.41 | 143.71 | 101.78 | 773.15',
     '2 | 600 | 234,757.13 | 684.33 | 228.78 | 149.46 | 1401.77', '4 | 1200 | 376,040.67 | 865.26 | 366.48 |
     287.95 | 2214.76', '8 | 2400 | 692,710.83 | 1358.77 | 675.95 | 515.18 | 2864.31'. This part takes the median
     TPOT at 1, 2 and 4 requests a second.
  2. deepseek-sglang-optimiz/deepseek-sglang-optimiz.md ('DeepSeek V3 SGLang Optimizations', datacrunch.io/blog,
     April 2025; 'the versions used for this technical blog is sglang: v0.4.3.post2'; the machine's H200s named in
     its logs: 'root@cluster-h200-02-f2', 'device_name=NVIDIA_H200') with the values of its charts in
     deepseek-sglang-optimiz/plot-script.py: DeepSeek-V3 on 8 H200 at --tp 8; `sglang.bench_one_batch
     --batch-size 1 --input 256 --output 32 ... --tp 8 --torch-compile-max-bs 1 --cuda-graph-max-bs 1` (no
     --enable-torch-compile), total latency '1.256' s (of 7.322 / 1.256 / 1.011 s); `sglang.bench_serving
     --random-input 256 --random-output 32 --random-range-ratio 1 --num-prompts 1` against a plain `--tp 8` server,
     end-to-end latency '928.08' ms ('Standard Serving'); and its DP-attention benchmark, 10,000 prompts of 512 in
     / 1 out ('Prefill') and of 1 in / 512 out ('Decode') sent at once against `--tp 8` and `--tp 8
     --enable-dp-attention`, throughput '10770.74, 13132.59, 5518.66, 8966.88' tok/s (prefill standard, prefill
     DP attention, decode standard, decode DP attention).
- SemiAnalysis InferenceX blog 'SGLang 0.5.6 on B200 DeepSeek R1 FP4: Up to 1.8x at Low Concurrency' (2026-05-02,
  inferencex.semianalysis.com/blog/sglang-0-5-6-b200-deepseek-r1-fp4-up-to-1-8x; InferenceX-app PR #289): 'B200
  running SGLang 0.5.6 on DeepSeek R1 NVFP4 reaches 907 tok/s/GPU at concurrency 4 on the 8k/1k workload, up 1.79x
  from 508 tok/s/GPU on 0.5.5. Both runs use the same 16 GPU pool at TP 4 / EP 4. The only change was the Docker
  image being updated from lmsysorg/sglang:v0.5.5-cu129-amd64 to lmsysorg/sglang:v0.5.6-cu129-amd64', the bump
  landing 2025-12-31. The run matrix and launch script of that day (github.com/SemiAnalysisAI/InferenceX at commit
  d27433d: .github/configs/nvidia-master.yaml 'dsr1-fp4-b200-sglang', model nvidia/DeepSeek-R1-0528-FP4-V2,
  '{ tp: 4, ep: 4, conc-start: 4, conc-end: 128 }' at 8192 / 1024; benchmarks/dsr1_fp4_b200_docker.sh:
  --tensor-parallel-size=$TP --data-parallel-size=1 --ep-size $EP_SIZE, --kv-cache-dtype fp8_e4m3,
  --chunked-prefill-size 16384, --quantization modelopt_fp4, --moe-runner-backend flashinfer_trtllm,
  --attention-backend trtllm_mla, benchmark at --max-concurrency $CONC; the workflow's random-range-ratio default
  '0.8').
- BenHamm's gist 'SGLang B200 Benchmark Sweep — 9 Models on 8×B200 (NVSwitch)' (gist.github.com/BenHamm/
  78563d0d0a08d7cb61b4737392633384, 2026-02-15/16): 8 B200 183GB on NVSwitch, SGLang v0.5.8.post1
  (lmsysorg/sglang:v0.5.8.post1), sglang.bench_serving 'random 1K input / 1K output tokens', 'All models ran with
  their cookbook-recommended configs'. Its results table, 'TPOT (c=1)': 'Qwen3-235B-A22B | 235B / 22B | 8 | BF16 |
  145 | 6.70ms', 'Kimi-K2-Instruct | 1T / ~32B | 8 | BF16 | 128 | 7.54ms', 'DeepSeek-R1-0528-FP4 | 685B / ~37B |
  8 | FP4 | 88 | 5.74ms' (columns: model, params, TP, quant, latency tok/s at c=1, TPOT at c=1).
- gpustack docs, performance-lab/qwen3-235b-a22b/h100.md ('Optimizing Qwen3-235B-A22B Throughput on NVIDIA H100
  GPUs', github.com/gpustack/gpustack at commit 1f37f1b: '8 × NVIDIA H100 SXM GPUs on a single node'; vLLM v0.11.0,
  SGLang v0.5.5.post1), the ShareGPT runs of its sections 1-3 and 5 (`vllm bench serve --dataset-name sharegpt
  --num-prompts 1000`, no rate or concurrency limit: 'Peak concurrent requests: 984.00'), output token throughput:
  vLLM `-tp 8` (Qwen3-235B-A22B-Instruct-2507, BF16) '4015.36'; SGLang `--tp-size 8` (BF16) '3644.72'; vLLM
  Qwen3-235B-A22B-Instruct-2507-FP8 at `-tp 8 --enable-expert-parallel` '3856.59', `-tp 4` '3592.57', `-tp 4
  --enable-expert-parallel` '3376.99' and `-tp 4 --max-num-batched-tokens 16384` '3700.75' (one TP 4 instance:
  the page's summary counts the optimized TP 4 configuration 'x2' on the node's 8 GPUs). Blind 3 took the page's
  32K-prompt runs only.

Figures looked at and not taken: DataCrunch's median TPOT at 8 requests a second (its E2E of 693 s over a 300 s
arrival window: all 2,400 in flight by the end, no steady count), and the output throughputs of its request-rate
runs (below capacity they equal the arrival rate x 1,024 over a run with ramps, not a capacity); its 'BF16' single-
node and its 2 x 8 H200 `--tp 16` rows (--enable-torch-compile with --disable-cuda-graph: configure has no
torch.compile, as blind 8 reads gpustack's torch.compile run); its DeepSeek-R1 post (deepseek-r1-deployment.md:
batch 1, 128 / 256, 20.98 ms a step, run with --enable-torch-compile); the optimizations post's torch.compile
bench_one_batch rows, its speculative run (NextN, acceptance not given), its overlap-scheduler runs (the two
compared runs have different workloads) and its gsm8k runs (lengths not given); InferenceX's other posts of the
stored InferenceX-app (b200-vs-h200, the benchmark roundup: throughput rows of dynamo-trt disaggregated runs or of
blind 8's table), its 'SGLang 0.5.6' post's gains at 64 and 128 (ratios only); the gist's throughput columns (the
peak concurrency is not given) and its 'Latency tok/s (c=1)' (the same runs as the TPOT taken); gpustack's Qwen3
H100 random 4K, 2K and 128-token runs (bursts of queued prefill, as blind 8 judged the DeepSeek page's) and its
A100 page (no profile); Inspur's 'Metabrain R1' NF5688G7 release (SGLang 0.4.3 on 8 H200-class GPUs: 33 tok/s a
user at 1 user, 20 at 16, 10.4 at 64, 3,975.76 tok/s at 1,024: lengths and layout not given, MTP named); Azure's
'Performance analysis of DeepSeek R1 AI Inference using vLLM on ND-H100-v5' (16 H100, AIME prompts: its figures
were not readable in the stored copy) and ND GB200/GB300 v6 posts (Llama 2 70B only); Metrum AI's Dell XE9680
H200/B200 post (Llama only); Luminal's DeepSeek-R1-0528 8xH200 report (engine and concurrency not in the stored
part). No OEM (Dell, Supermicro, Lenovo, HPE) or hyperscaler post with a DeepSeek, Kimi or Qwen3-235B figure and its
layout was found in the stored copies, and no H20, H800 or GB200 figure of these sources.

Readings common to all: a mean or median TPOT of a serving benchmark with other requests' prefills interleaved is
read with the colocated phase (the model of c99b6a0: 1 / its colocated TPOT) and SGLang's prefill "separate" (its
scheduler runs prefill batches apart from decode without --enable-mixed-chunk; the rule blinds 2, 4, 8, 11 and 12
follow); a TPOT of one request alone as 1 / TPOT of decode; an output throughput as colocated at the run's
requests in flight over the GPUs (vLLM's prefill chunks ride in its decode steps); a run whose requests all
prefill (1 output token) as prefill at SGLang's chunked-prefill size of the day (8,192 tokens a step, assumed:
SGLang 0.4.x's default; halved to 4,096 a rank with DP attention, as its server_args then did) over the group; a
run whose requests all decode (1 input token) as decode at the largest batch that fits (batch_rule "fit"); an
open-loop run's requests in flight by Little's law (requests a second x median E2E, which its median TPOT and the
arrival rate confirm: 148 / 0.1437 s = 1,028 tokens a second against 1,024 sent); InferenceX's throughput a GPU
as input + output (blinds 7 and 9), its output share OSL / (ISL + OSL), its lengths at 0.9 of the set ones (range
ratio 0.8); a burst's requests in flight as its peak over the GPUs (blind 8's reading of gpustack); DeepSeek's,
Kimi K2's and Qwen3's checkpoints as their publishers release them (DeepSeek-V3/R1 and Kimi-K2-Instruct FP8
block-scaled, Qwen3-235B-A22B BF16 or its -FP8 release) unless a quantisation is named; NVIDIA's NVFP4 DeepSeek-R1
as blinds 2 and 3 read it; BF16 KV unless the launch sets one; experts split TP over the GPUs unless an EP size is
set, and then no redundant experts (balancedness 0.70, ASSUMED_PLAIN); CUDA graphs unless disabled or the batch is
above SGLang's graph cap of the day; no speculative decoding.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind2 import R1_FP4
from moeserve.capacity.validation_cases import Case

DC_H200 = ("DataCrunch blog 'DeepSeek V3 LLM NVIDIA H200 GPU Inference Benchmarking' (January 2025; github.com/"
           "datacrunch-research/blogs at commit f5752e8, deepseek-v3-h200-deployment.md), '2.2.1 FP8' on 8 H200")
DC_OPT = ("DataCrunch blog 'DeepSeek V3 SGLang Optimizations' (April 2025, SGLang v0.4.3.post2; github.com/"
          "datacrunch-research/blogs at commit f5752e8, deepseek-sglang-optimiz.md and its plot-script.py), 8 H200")
IX_056 = ("SemiAnalysis InferenceX blog 'SGLang 0.5.6 on B200 DeepSeek R1 FP4: Up to 1.8x at Low Concurrency' "
          "(2026-05-02) with the run matrix and benchmarks/dsr1_fp4_b200_docker.sh of github.com/SemiAnalysisAI/"
          "InferenceX at commit d27433d")
GIST = ("BenHamm's gist 'SGLang B200 Benchmark Sweep — 9 Models on 8×B200 (NVSwitch)' (gist.github.com/BenHamm/"
        "78563d0d0a08d7cb61b4737392633384, 2026-02-16), SGLang v0.5.8.post1, its 'TPOT (c=1)' column")
GPUSTACK_QWEN = ("gpustack docs 'Optimizing Qwen3-235B-A22B Throughput on NVIDIA H100 GPUs' (performance-lab/"
                 "qwen3-235b-a22b/h100.md, github.com/gpustack/gpustack at commit 1f37f1b), its ShareGPT runs")

_V3_FP8 = Precision(weights="fp8")
_FP8, _BF16 = Precision(weights="fp8"), Precision(weights="bf16")
_DP8 = Layout(tp=1, ep=1, moe_tp=8)  # SGLang 0.4.x --tp 8 --enable-dp-attention: dp_size = tp_size, experts TP 8
_DC_RPS = ("DeepSeek-V3 (FP8 checkpoint, --quantization fp8) on 8 H200, SGLang v0.4.1 at --tp 8 --enable-dp-attention "
           "(eight attention groups of one GPU, experts split TP 8), FP8 KV (--kv-cache-dtype fp8_e5m2); "
           "{n} prompts of exactly 1,024 in / 1,024 out (--random-range-ratio 1) at {rps} a second; read at "
           "{rps} x the median E2E ({e2e:,} ms) = {inflight:.0f} requests in flight, {batch:.1f} a GPU (Little's "
           "law); prefill batches apart from decode (SGLang without --enable-mixed-chunk); {graphs}")


def _dc_rps(rps: int, n: int, e2e: float, tpot: float, graphs: bool) -> Case:
    inflight = rps * e2e / 1000
    note = ("CUDA graphs (SGLang's default)" if graphs else "no CUDA graphs: the batch a rank is above SGLang's "
            "graph cap of the day (160 sequences; assumed)")
    return Case(f"SGLang DeepSeek-V3 8xH200 DP-attention FP8, {rps} req/s, 1K/1K, TPOT", DC_H200, "h200", "colocated",
                _DP8, inflight / 8, Workload(1024, 1024), Options(prefill="separate", cuda_graphs=graphs),
                1000 / tpot, "tok/s/user",
                f"1 / the median TPOT ({tpot} ms), read as the mean; "
                + _DC_RPS.format(n=n, rps=rps, e2e=e2e, inflight=inflight, batch=inflight / 8, graphs=note),
                Precision(weights="fp8", kv="fp8"), blind=16)


_DC_BURST = ("DeepSeek-V3 (FP8 checkpoint) on 8 H200, SGLang v0.4.3.post2 at {launch}; 10,000 prompts of {w} sent "
             "at once (bench_serving with no rate), the throughput of the run ({tput:,} tok/s, read as {what}) "
             "/ 8 GPUs; BF16 KV; ")


def _dc_burst(kind: str, dp: bool, tput: float) -> Case:
    launch = ("--tp 8 --enable-dp-attention (eight attention groups of one GPU, experts split TP 8)" if dp
              else "--tp 8 (attention TP 8, experts split TP 8)")
    layout = _DP8 if dp else Layout(8, 1, 0)
    name = f"SGLang DeepSeek-V3 8xH200 {'DP-attention' if dp else 'TP8'}, 10,000 at once, {kind}"
    if kind == "prefill 512":
        step = 4096 if dp else 8192 / 8
        return Case(name, DC_OPT, "h200", "prefill", layout, step, Workload(512, 1), Options(), tput / 8,
                    "tok/s/GPU",
                    _DC_BURST.format(launch=launch, w="512 in / 1 out", tput=tput, what="input tokens: 512 of "
                                     "every 513")
                    + ("prefill in chunks of 4,096 tokens a rank (SGLang 0.4.x halves its 8,192 with DP attention)"
                       if dp else "prefill in chunks of 8,192 tokens a step over the TP group (1,024 a GPU)"),
                    _V3_FP8, blind=16)
    return Case(name, DC_OPT, "h200", "decode", layout, None, Workload(1, 512), Options(cuda_graphs=False),
                tput / 8, "tok/s/GPU",
                _DC_BURST.format(launch=launch, w="1 in / 512 out", tput=tput, what="output tokens: 512 of every "
                                 "513")
                + "the batch the largest whose KV cache fits (the 10,000 queue behind it); no CUDA graphs: that "
                "batch is far above SGLang's graph cap of the day (160 at TP 8, 96 a rank with DP attention; assumed)",
                _V3_FP8, batch_rule="fit", blind=16)


_IX_WORKLOAD = Workload(7373, 922)  # 8,192 / 1,024 at range ratio 0.8: means 0.9 L
_IX = ("nvidia/DeepSeek-R1-0528-FP4-V2 on B200 at TP 4 / EP 4 (--tensor-parallel-size 4 --data-parallel-size 1 "
       "--ep-size 4: attention TP 4, whole experts over 4 ranks, no DP attention), read as one 4-GPU instance at "
       "concurrency 4 (1 sequence a GPU); FP8 KV (--kv-cache-dtype fp8_e4m3), NVFP4 experts and dense FFNs, FP8 "
       "attention GEMMs (as blinds 2 and 3 read NVIDIA's NVFP4 checkpoint), NVFP4 dispatch; no redundant experts "
       "(balancedness 0.70 assumed); CUDA graphs; 40 prompts (10 x concurrency) of 8,192 / 1,024 at range ratio 0.8 "
       "(means 7,373 / 922); prefill batches apart from decode (SGLang under --max-concurrency)")


def _ix(version: str, total: float) -> Case:
    return Case(f"InferenceX SGLang {version} DeepSeek-R1 4xB200 TP4 EP4 FP4, concurrency 4, 8K/1K", IX_056, "b200",
                "colocated", Layout(4, 4, 0), 4 / 4, _IX_WORKLOAD,
                Options(balancedness=ASSUMED_PLAIN, prefill="separate"), total * 1024 / 9216, "tok/s/GPU",
                f"output tok/s a GPU: the post's {total:,} tok/s/GPU on SGLang {version} (input + output, as "
                "InferenceX counts it) x 1,024 / 9,216; " + _IX, R1_FP4, model="deepseek-r1", blind=16)


_GIST = ("SGLang v0.5.8.post1 on 8 B200, one request at a time (c=1), random 1K in / 1K out read as 1,024 / 1,024 (the "
         "range ratio is not given; at one sequence the context moves the step little); the table's TP 8 read as "
         "attention TP 8 with the experts split TP 8 (no EP or DP attention stated: the cookbook's generator's "
         "defaults, assumed); one sequence over 8 GPUs; BF16 KV unless noted; CUDA graphs; no speculative decoding; ")


def _gist(name: str, model: str, tpot: float, prec: Precision, what: str) -> Case:
    return Case(f"SGLang {name} 8xB200 TP8, batch 1, 1K/1K", GIST, "b200", "decode", Layout(8, 1, 0), 1 / 8,
                Workload(1024, 1024), Options(), 1000 / tpot, "tok/s/user",
                f"1 / the TPOT at c=1 ({tpot} ms); " + _GIST + what, prec, model=model, blind=16)


_GP = ("output tok/s ({out:,}) / {g} GPUs of the run of 1,000 ShareGPT prompts sent at once (vllm bench serve "
       "--num-prompts 1000, no rate or concurrency limit; 984 successful, mean {isl} in / {osl} out: the totals "
       "{tin:,} / {tout:,}); read as 984 / {g} = {b:.0f} requests in flight a GPU (the published peak, blind 8's "
       "reading); Qwen3-235B-A22B-Instruct-2507{ckpt} on {g} of the node's 8 H100 SXM, {engine}")


def _gpustack(name: str, engine: str, layout: Layout, gpus: int, out: float, tin: int, tout: int, prec: Precision,
              options: Options, ckpt: str) -> Case:
    isl, osl = round(tin / 984), round(tout / 984)
    return Case(f"gpustack Qwen3-235B {gpus}xH100 {name}, ShareGPT 1,000 at once", GPUSTACK_QWEN, "h100", "colocated",
                layout, 984 / gpus, Workload(isl, osl), options, out / gpus, "tok/s/GPU",
                _GP.format(out=out, g=gpus, isl=isl, osl=osl, tin=tin, tout=tout, b=984 / gpus, ckpt=ckpt,
                           engine=engine), prec, model="qwen3-235b-a22b", blind=16)


_VLLM = "vLLM v0.11.0, BF16 KV, CUDA graphs, prefill chunks in the decode steps (vLLM's default budget)"
_PLAIN_EP = "; no redundant experts (balancedness 0.70 assumed)"

BLIND16 = [
    _dc_rps(1, 300, 147_735.43, 143.71, True),
    _dc_rps(2, 600, 234_757.13, 228.78, True),
    _dc_rps(4, 1200, 376_040.67, 366.48, False),
    Case("SGLang DeepSeek-V3 8xH200 TP8, batch 1, 256/32, bench_one_batch", DC_OPT, "h200", "decode", Layout(8, 1, 0),
         1 / 8, Workload(256, 32), Options(), 1256.0, "ms/request",
         "the total latency (1.256 s) of sglang.bench_one_batch --batch-size 1 --input 256 --output 32 --tp 8 "
         "--cuda-graph-max-bs 1 (no --enable-torch-compile; its chart labels it 'Cuda Graph + Torch Compile', the "
         "command is read): the prompt in one prefill, then the other 31 tokens decoded; DeepSeek-V3 (FP8 "
         "checkpoint) on 8 H200, SGLang v0.4.3.post2, attention TP 8, experts split TP 8, BF16 KV, CUDA graphs",
         _V3_FP8, blind=16),
    Case("SGLang DeepSeek-V3 8xH200 TP8, batch 1, 256/32, one request served", DC_OPT, "h200", "decode",
         Layout(8, 1, 0), 1 / 8, Workload(256, 32), Options(), 928.08, "ms/request",
         "the end-to-end latency (928.08 ms, 'Standard Serving') of one request of exactly 256 in / 32 out "
         "(bench_serving --num-prompts 1 --random-range-ratio 1) against `launch_server --tp 8`; DeepSeek-V3 (FP8 "
         "checkpoint) on 8 H200, SGLang v0.4.3.post2, attention TP 8, experts split TP 8, BF16 KV, CUDA graphs",
         _V3_FP8, blind=16),
    _dc_burst("prefill 512", False, 10_770.74),
    _dc_burst("prefill 512", True, 13_132.59),
    _dc_burst("decode 512", False, 5_518.66),
    _dc_burst("decode 512", True, 8_966.88),
    _ix("0.5.5", 508),
    _ix("0.5.6", 907),
    _gist("Qwen3-235B BF16", "qwen3-235b-a22b", 6.70, _BF16, "Qwen3-235B-A22B in BF16 (the table's quant)"),
    _gist("Kimi K2", "kimi-k2", 7.54, _FP8, "Kimi-K2-Instruct read as Moonshot's FP8 block-scaled checkpoint (the "
          "table says BF16; the released weights are FP8, and in BF16 the 1T model would not fit 8 B200)"),
    _gist("DeepSeek-R1 FP4", "deepseek-r1", 5.74, R1_FP4, "DeepSeek-R1-0528-FP4 read as NVIDIA's NVFP4 checkpoint as "
          "blinds 2 and 3 read it (NVFP4 experts and dense FFNs, FP8 attention GEMMs and KV, NVFP4 dispatch)"),
    _gpustack("vLLM TP8 BF16", "vLLM `-tp 8` (attention TP 8, experts split TP 8), " + _VLLM, Layout(8, 1, 0), 8,
              4015.36, 212_894, 193_865, _BF16, Options(), " (BF16)"),
    _gpustack("SGLang TP8 BF16", "SGLang v0.5.5.post1 `--tp-size 8` (attention TP 8, experts split TP 8), BF16 KV, "
              "CUDA graphs; prefill batches apart from decode", Layout(8, 1, 0), 8, 3644.72, 214_137, 193_829, _BF16,
              Options(prefill="separate"), " (BF16)"),
    _gpustack("vLLM TP8 EP8 FP8", "vLLM `-tp 8 --enable-expert-parallel` (attention TP 8, whole experts over 8 ranks), "
              + _VLLM + _PLAIN_EP, Layout(8, 8, 0), 8, 3856.59, 211_761, 192_350, _FP8,
              Options(balancedness=ASSUMED_PLAIN), "-FP8"),
    _gpustack("vLLM TP4 FP8", "vLLM `-tp 4` (one instance: attention TP 4, experts split TP 4), " + _VLLM,
              Layout(4, 1, 0), 4, 3592.57, 212_992, 194_446, _FP8, Options(), "-FP8"),
    _gpustack("vLLM TP4 EP4 FP8", "vLLM `-tp 4 --enable-expert-parallel` (one instance: attention TP 4, whole experts "
              "over 4 ranks), " + _VLLM + _PLAIN_EP, Layout(4, 4, 0), 4, 3376.99, 214_311, 192_752, _FP8,
              Options(balancedness=ASSUMED_PLAIN), "-FP8"),
    _gpustack("vLLM TP4 FP8, 16K batched tokens", "vLLM `-tp 4 --max-num-batched-tokens 16384` (one instance: "
              "attention TP 4, experts split TP 4), BF16 KV, CUDA graphs, prefill chunks in the decode steps; the "
              "16,384-token budget is read at the model's engine chunk (a case takes no chunk size)", Layout(4, 1, 0),
              4, 3700.75, 214_381, 194_148, _FP8, Options(), "-FP8"),
]

# Predicted when recorded (the model of main at c99b6a0): name -> the model's figure in the case's unit.
RECORDED = {
    'SGLang DeepSeek-V3 8xH200 DP-attention FP8, 1 req/s, 1K/1K, TPOT': 20.6,
    'SGLang DeepSeek-V3 8xH200 DP-attention FP8, 2 req/s, 1K/1K, TPOT': 13.1,
    'SGLang DeepSeek-V3 8xH200 DP-attention FP8, 4 req/s, 1K/1K, TPOT': 7.0,
    'SGLang DeepSeek-V3 8xH200 TP8, batch 1, 256/32, bench_one_batch': 309.9,
    'SGLang DeepSeek-V3 8xH200 TP8, batch 1, 256/32, one request served': 309.9,
    'SGLang DeepSeek-V3 8xH200 TP8, 10,000 at once, prefill 512': 3613.0,
    'SGLang DeepSeek-V3 8xH200 DP-attention, 10,000 at once, prefill 512': 5784.0,
    'SGLang DeepSeek-V3 8xH200 TP8, 10,000 at once, decode 512': 1722.4,
    'SGLang DeepSeek-V3 8xH200 DP-attention, 10,000 at once, decode 512': 4488.1,
    'InferenceX SGLang 0.5.5 DeepSeek-R1 4xB200 TP4 EP4 FP4, concurrency 4, 8K/1K': 88.8,
    'InferenceX SGLang 0.5.6 DeepSeek-R1 4xB200 TP4 EP4 FP4, concurrency 4, 8K/1K': 88.8,
    'SGLang Qwen3-235B BF16 8xB200 TP8, batch 1, 1K/1K': 97.4,
    'SGLang Kimi K2 8xB200 TP8, batch 1, 1K/1K': 113.5,
    'SGLang DeepSeek-R1 FP4 8xB200 TP8, batch 1, 1K/1K': 114.6,
    'gpustack Qwen3-235B 8xH100 vLLM TP8 BF16, ShareGPT 1,000 at once': 1232.0,
    'gpustack Qwen3-235B 8xH100 SGLang TP8 BF16, ShareGPT 1,000 at once': 883.5,
    'gpustack Qwen3-235B 8xH100 vLLM TP8 EP8 FP8, ShareGPT 1,000 at once': 1881.9,
    'gpustack Qwen3-235B 4xH100 vLLM TP4 FP8, ShareGPT 1,000 at once': 2619.8,
    'gpustack Qwen3-235B 4xH100 vLLM TP4 EP4 FP8, ShareGPT 1,000 at once': 2716.4,
    'gpustack Qwen3-235B 4xH100 vLLM TP4 FP8, 16K batched tokens, ShareGPT 1,000 at once': 2606.8,
}
