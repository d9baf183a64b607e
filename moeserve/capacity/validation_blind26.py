"""The twenty-sixth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 8327ee4, by someone who did not change the model; none of them was
used to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is
silent (`assumed`). It was searched for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B figures on H20, H200, H800 and H100
with their setup stated. No figure here is used by another part: its one source, the engineering blog of
tanjunchen, is new to the validation. Blind 12 looked at its single-H20 post and left it because its results could
not be read from the stored copy of the web page; this part reads the posts from the blog's repository
(github.com/tanjunchen/tanjunchen_blog), whose Hugo markdown holds the whole result tables. The tables are as first
committed (commits 007d752 and af88697, 2025-04-04, and 78d154d, 2025-03-23); the later commits to the files (to
e2a8750, 2026-08-09) change front matter and a log line only. Read at e1a854b.

Sources (github.com/tanjunchen/tanjunchen_blog, content/post/, quoted as the markdown prints them):
- 2025-04-04-h20-deepseek-r1-sglang-vllm.md, '单机H20(8*96GiB)部署满血DeepSeek-R1(fp8)验证过程' (full DeepSeek-R1 FP8 on
  one H20 machine of 8 x 96 GiB), 2025-04-04 (its error logs dated 03-29): 'GPU：NVIDIA  H20', 'vllm 测试镜像：
  vllm/vllm-openai:v0.8.2', 'sglang 测试镜像：lmsysorg/sglang:ea52b45be1a7'; the weights 'DeepSeek-R1 FP8 模型文件' from
  huggingface.co/deepseek-ai/DeepSeek-R1.
  (a) vLLM: `python3 -m vllm.entrypoints.openai.api_server --model /mnt/models/DeepSeek-R1 --gpu-memory-utilization
  0.95 --tensor-parallel-size 8 ... --max_num_seqs 256 --max-num-batched-tokens 16384 --max_model_len 4096
  --max_seq_len_to_capture 16384 --tokenizer-mode auto --enable-chunked-prefill=False --enable-reasoning
  --reasoning-parser deepseek_r1 --enforce-eager`; client `python3 benchmark_serving.py ... --backend vllm
  --dataset-name random --num-prompts "$numprt" --random-input-len "$inlen" --save-result --random-range-ratio 1.0
  ... --random-output-len "$outlen"` for '["128 128"]' and '["256 256"]' and 'numprt_values=(1 2 4 8 16 32 64 128 200
  256 512 1024)' (no --max-concurrency, no --request-rate, no --ignore-eos); its collection script's Mean Input /
  Output Len are `sum(result['input_lens']) / len(...)` and `sum(result['output_lens']) / len(...)`. Its '测试数据'
  rows (Concurrency | Mean TTFT (ms) | Input Throughput | Output Throughput (tokens/s) | Mean TPOT (ms) | Mean Input
  Len | Mean Output Len) at 128 / 128: '| 1 | 137.49 | 9.04 | 9.04 | 110.35 | 128 | 128 |', '| 2 | 220.46 | 17.19 |
  17.19 | 115.10 | 128 | 128 |', '| 4 | 273.70 | 34.37 | 34.37 | 114.89 | 128 | 128 |', '| 8 | 283.15 | 69.96 |
  69.90 | 112.99 | 128 | 127.88 |', '| 16 | 311.16 | 136.80 | 118.03 | 115.77 | 128 | 110.44 |', '| 32 | 406.02 |
  272.43 | 259.52 | 115.50 | 128 | 121.94 |', '| 64 | 638.28 | 533.76 | 505.68 | 116.10 | 128 | 121.27 |', '| 128 |
  1691.78 | 535.46 | 496.57 | 123.48 | 128 | 118.70 |'.
  (b) SGLang: `nohup python3 -m sglang.launch_server --model-path /mnt/models/DeepSeek-R1 ... --tensor-parallel-size
  8 --trust-remote-code --tokenizer-mode auto --mem-fraction-static 0.90 --context-length 65536 --quantization fp8
  --reasoning-parser deepseek-r1 --chunked-prefill-size 4096` (the default `--tp 8` launch fails with 'Not enough
  memory'); client `python3 -m sglang.bench_serving --backend sglang --dataset-name random ... --random-input
  ${inlen} --random-output ${outlen} --random-range-ratio ${ratio} --num-prompts ${numprt} ... --max-concurrency
  ${numprt}` with 'random_range_ratios=(1.0)', "128 128" and "256 256" at numprt 1 to 1024 (its Mean Input / Output
  Len columns are `result['random_input_len']` / `result['random_output_len']`, the set lengths). Its rows at
  128 / 128: '| 1 | 182.48 | 23.02 | 23.02 | 42.00 | 128 | 128 |', '| 2 | 403.36 | 47.01 | 47.01 | 39.36 |', '| 4 |
  337.92 | 88.69 | 88.69 | 42.43 |', '| 8 | 454.64 | 141.60 | 141.60 | 52.94 |', '| 16 | 761.36 | 221.29 | 221.29 |
  66.34 |', '| 32 | 2746.37 | 298.55 | 298.55 | 85.71 |', '| 64 | 2194.33 | 525.62 | 525.62 | 104.64 |', '| 128 |
  1947.21 | 905.80 | 905.80 | 126.22 |' (each '| 128 | 128 |').
- 2025-04-05-2h20-deepseek-r1-sglang-vllm.md, '双机2*H20(8*96GiB)部署满血DeepSeek-R1(fp8)验证过程' (two H20 machines),
  2025-04-05: the same machine lines and images; RDMA 'mlx5_0' to 'mlx5_8' per node, 'export
  NCCL_IB_HCA=xgbe1,...,xgbe8', 'export NCCL_IB_GID_INDEX=3' (RoCE v2 GIDs; the NICs' speed not printed). Section
  '构建 sglang 双机环境（默认参数）' (default parameters), image lmsysorg/sglang:ea52b45be1a7: `python3 -m
  sglang.launch_server --model-path /mnt/models/DeepSeek-R1 --tp 16 --dist-init-addr $IP_OF_HEAD_NODE:30000 --nnodes
  2 --node-rank 0 --trust-remote-code --host 0.0.0.0 --port 8000` (node-rank 1 on the other); the client as (b)
  (ratio 1.0, --num-prompts = --max-concurrency = numprt, "128 128" and "256 256", numprt 1 to 1024), its collection
  script taking the lengths from input_lens / output_lens. Its '测试结果' rows at 128 / 128: '| 1 | 285.84 | 17.42 |
  17.42 | 55.60 | 128 | 128 |', '| 2 | 321.56 | 33.03 | 33.03 | 58.49 |', '| 4 | 454.82 | 59.35 | 59.35 | 64.34 |',
  '| 8 | 631.93 | 89.40 | 89.40 | 85.20 |', '| 16 | 608.29 | 136.20 | 136.20 | 113.59 |', '| 32 | 838.25 | 198.94 |
  198.94 | 155.46 |', '| 64 | 1062.61 | 290.74 | 290.74 | 213.41 |', '| 128 | 1263.11 | 506.19 | 506.19 | 244.77 |'
  (each '| 128 | 128 |').
- 2025-03-23-h20-deepseek-r1.md, '单台 H20 机器 DeepSeek R1 (FP8)、DeepSeek-R1-Block-INT8 精度测试与性能测试过程', 2025-03-23
  (logs of 03-17 to 03-20): '【卡类型】nvidia-smi -q | grep -i "Product Name"  H20 * 8', nvidia-smi's 'NVIDIA H20'
  rows at '0MiB / 97871MiB' and '/ 500W'; image
  '...lmsysorg-sglang-latest:ea52b45be1a7'; `python3 -m sglang.launch_server --model-path /workspace/DeepSeek-R1
  --served-model-name DeepSeek-R1 --tp 8 --trust-remote-code --host 0.0.0.0 --port 30000 --mem-fraction-static 0.95
  --max-running-requests 32 --context-length 65536 --quantization fp8 --chunked-prefill-size 4096`; its 'sglang
  性能测试响应数据示例' (a sample of the bench_serving output of its sweep script: lengths "3500 1500" and "3000 400",
  'prompt_num=(1 4 8 16 32 64 80 128 256 350 512)', 'random_range_ratios=(0.7 0.8)', --num-prompts = --max-concurrency
  = prompt_num): '"request_rate": "Infinity"', '"max_concurrency": 128', '"random_input_len": 3500',
  '"random_output_len": 1500', '"random_range_ratio": 0.7', '"duration": 577.2790666338988', '"completed": 128',
  '"total_input_tokens": 384124', '"total_output_tokens": 161427', '"output_throughput": 279.6342520113837',
  '"mean_ttft_ms": 220795.97218007257', '"mean_tpot_ms": 107.60915398548093', '"median_tpot_ms":
  107.54734916891869', '"concurrency": 78.99971662978685'.
The rows agree with the runs they describe: SGLang TP 8 at 1 (0.18 s + 127 x 42.00 ms = 5.52 s for 128 tokens: 23.2
tok/s against 23.02), SGLang TP 16 at 128 (128 x 128 tokens / (1.26 s + 127 x 244.77 ms) = 506 tok/s against
506.19), vLLM at 1 (128 / (0.14 s + 127 x 110.35 ms) = 9.04 tok/s, as printed); the capped run's 32 running at its
TPOT make 32 / 107.6 ms = 297 tok/s, against 279.6 with the prefills.

Figures looked at and not taken (the rule, set before the model was run: a run whose mean TTFT is under 5 s, its
prompts admitted and prefilled at once, and for SGLang whose batch is under its CUDA-graph cap of the day, 160
sequences, assumed as blinds 16 and 17 do, which one replay setting could not follow past it): every 256 / 256 row of
the three tables (the same runs at twice the lengths; left for variety: one workload, 128 / 128, read across the
three series, the one whose vLLM outputs run to their set length at low concurrency); the SGLang TP 8 rows at 256 to
1,024 (above the graph cap; mean TTFTs of 3 to 135 s); the vLLM rows at 200 to 1,024 (mean TTFTs of 8 to 217 s) and
its throughputs at 16 to 128 (outputs stopped at EOS, means 110.44 to 121.94 of 128: the run's duration is set by its
longest requests, whose lengths are not published; the TPOTs are taken); the SGLang TP 16 rows at 100 (the printed
script has no such prompt count: its client run is not shown) and at 200 to 1,024 (above the graph cap; TPOTs of 451
to 1,158 ms); the two-machine post's vLLM runs (v0.7.2 image, --tensor-parallel-size 16 --enforce-eager: no result
table) and its first SGLang launch (image 481f2edc18b5, --mem-fraction-static 0.90 --chunked-prefill-size 4096: no
result table); the 2025-03-23 post's sweep (its results only as images, 1.png to 3.png) and its
DeepSeek-R1-Block-INT8 runs (INT8 weights; images); that post's accuracy figures. Other candidates, left as the
search that found this source judged them: SGLang issues #3956 / #4616 (option ablations: most rows with
torch.compile, input + output throughput of a private dataset), #8657 and #3906 (result blocks past the readable
excerpts); Chitu's H20 tables (an engine configure does not plan for); no new H800, Kimi K2 or Qwen3-235B figure with
its setup stated.

Readings common to all (decided before the model was run): the card as the posts print it, H20 of 96 GB (configure's
h20 profile, 97,871 MiB); DeepSeek-R1 as the FP8 block-scaled checkpoint, BF16 KV (no --kv-cache-dtype), no
speculative decoding, no redundant experts, no expert parallelism (no launch sets it: experts split TP over the
instance); the runs of N prompts sent at once with lengths fixed by --random-range-ratio 1.0 read as the single waves
they are: Case.run = (N, "fixed", None) replayed by bench_run (validation_runs.py's reading of such runs: blind 12's
500 prompts at once, blind 16's DataCrunch runs), a TPOT figure as the replay's mean TPOT and a throughput as its
output rate per GPU, the batch the N over the instance's GPUs; bench_serving --max-concurrency = --num-prompts is all
at once; SGLang as the image ea52b45be1a7 of March 2025 (version not printed: about 0.4.4, assumed) at its defaults
where the launch is silent: no DP attention, CUDA graphs at decode (C <= 128 is under its 160 cap), no
--enable-mixed-chunk, so prefill "separate" (validation_runs.py: SGLang's prefills as eager passes of their own while
the decodes wait), the overlap scheduler on (its error log runs tp_worker_overlap_thread.py); the replay's
8,192-token prefill budget stands for SGLang's (4,096 set on one node, 8,192 default on two) and vLLM's 16,384: at
128 / 128 and C <= 64 every prompt fits one budget, at C = 128 SGLang TP 8 takes four chunks of 4,096 and vLLM one
step of 16,384 where the replay takes two of 8,192 (not modelled); memory fractions as launched (0.90 set; 0.79
SGLang's default at --tp 16, server_args.py; vLLM's 0.95). TP 16 over two nodes as blinds 2, 12 and 17 read SGLang's
--tp 16 --nnodes 2: attention TP 16 and experts split TP 16 over both nodes, every all-reduce crossing the scale-out
network (the h20 profile's 400 Gb/s a GPU; the posts print RoCE v2 NICs, not their speed). vLLM v0.8.2 as its V1
engine (assumed: vLLM 0.8's default engine; the V1 oracle of vLLM 0.8.x, EngineArgs._is_v1_supported_oracle, turns
back to V0 for none of --enforce-eager, --enable-chunked-prefill=False or a reasoning parser, and V1 ran
DeepSeek-R1's MLA on v0.8.2: vLLM issue #15590), whose scheduler always chunks and fills a step with the running
decodes first: prefill "mixed" (V0 without chunked prefill would run the prompts as steps of their own first; every
prompt of these runs arrives at once and is prefilled in the run's first step or two, so the reading changes little);
--enforce-eager as cuda_graphs=False; the lengths of a TPOT row 128 in and the run's mean output (outputs stop at
EOS: no --ignore-eos), rounded, as fixed. The capped SGLang run (--max-running-requests 32, 128 prompts at
--max-concurrency 128): the server runs 32 at a time and admits a waiting prompt as one finishes (the mean TTFT of
221 s is the client's queue behind that cap, the requests in flight 79 on average), read as colocated at 32 in flight
(4 a GPU, closed loop: prefill "separate") with the run's mean lengths 3,001 in / 1,261 out (the totals over 128;
uniform in [0.7 L, L] at ratio 0.7, the spread not modelled; the last wave's drain not modelled: the replay cannot
cap running requests); the sample is taken to have run against the launch the post shows beside it (its max
concurrency 128, lengths 3,500 / 1,500 and ratio 0.7 are those of the sweep script).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

_BLOG = "tanjunchen's blog (github.com/tanjunchen/tanjunchen_blog, content/post/"
TJC_1H20 = (_BLOG + "2025-04-04-h20-deepseek-r1-sglang-vllm.md, 2025-04-04, "
            "'单机H20(8*96GiB)部署满血DeepSeek-R1(fp8)验证过程': DeepSeek-R1 FP8 on one machine of 8 H20, vLLM v0.8.2 "
            "and SGLang image ea52b45be1a7)")
TJC_2H20 = (_BLOG + "2025-04-05-2h20-deepseek-r1-sglang-vllm.md, 2025-04-05, "
            "'双机2*H20(8*96GiB)部署满血DeepSeek-R1(fp8)验证过程': DeepSeek-R1 FP8 on two machines of 8 H20 over RoCE, "
            "SGLang image ea52b45be1a7 at its defaults)")
TJC_0323 = (_BLOG + "2025-03-23-h20-deepseek-r1.md, 2025-03-23, '单台 H20 机器 DeepSeek R1 (FP8)、DeepSeek-R1-Block-INT8 "
            "精度测试与性能测试过程': its SGLang bench_serving output sample, image ea52b45be1a7)")

_FP8 = Precision(weights="fp8")
_R1 = ("DeepSeek-R1 (FP8 block-scaled checkpoint), BF16 KV (no --kv-cache-dtype), no speculative decoding, experts "
       "split TP over the instance")
_WAVE = ("{n} prompt{s} of exactly 128 in / {osl} out sent at once ({how}), replayed as one wave (Case.run = ({n}, "
         "'fixed', None)), {per:g} a GPU")
_SGL = ("SGLang image ea52b45be1a7 (March 2025, about 0.4.4: assumed), no DP attention, CUDA graphs at decode, no "
        "--enable-mixed-chunk (prefill 'separate': eager passes of their own while the decodes wait); ")

# (label, source, layout, options, setup)
_SERIES = {
    "tanjunchen SGLang DeepSeek-R1 8xH20 TP8": (
        TJC_1H20, Layout(8, 1, 0), Options(prefill="separate"),
        "8 H20 (96 GB), `--tensor-parallel-size 8` (attention TP 8, experts split TP 8), --mem-fraction-static 0.90, "
        "--chunked-prefill-size 4096 (the replay's 8,192-token budget: every prompt of the run in one or two "
        "chunks); " + _SGL + _R1),
    "tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16": (
        TJC_2H20, Layout(16, 1, 0), Options(prefill="separate", memory_fraction=0.79),
        "two nodes of 8 H20 (96 GB) over RoCE v2 (NIC speed not printed: the h20 profile's 400 Gb/s a GPU), `--tp 16 "
        "--nnodes 2` at SGLang's defaults: attention TP 16 and experts split TP 16 over both nodes, every all-reduce "
        "crossing nodes, --mem-fraction-static 0.79 (its default at TP 16), chunked prefill 8,192 (its default); "
        + _SGL + _R1),
    "tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager": (
        TJC_1H20, Layout(8, 1, 0), Options(cuda_graphs=False, memory_fraction=0.95),
        "8 H20 (96 GB), vLLM v0.8.2 `--tensor-parallel-size 8 --enforce-eager` (attention TP 8, experts split TP 8, "
        "no CUDA graphs: cuda_graphs=False), --gpu-memory-utilization 0.95, --max_num_seqs 256; the V1 engine "
        "assumed (vLLM 0.8's default; --enable-chunked-prefill=False does not turn it back, and V1 always chunks), "
        "its scheduler filling each step with the running decodes first, then prompt chunks (prefill 'mixed'); "
        "no --ignore-eos: outputs stop at EOS, read at the run's mean output length; " + _R1),
}
_HOW = {"tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager": "benchmark_serving.py, no --max-concurrency or rate"}


def _pair(series: str, conc: int, out: float | None, tpot: float, osl: float = 128) -> list[Case]:
    """The run of `conc` prompts of 128 / 128: its mean TPOT and (where `out` is given) its output tok/s."""
    source, layout, options, setup = _SERIES[series]
    gpus = layout.gpus
    osl_r = round(osl)
    how = _HOW.get(series, "bench_serving --num-prompts = --max-concurrency, --random-range-ratio 1.0")
    wave = _WAVE.format(n=conc, s="" if conc == 1 else "s", osl=osl_r, how=how, per=conc / gpus)
    if osl_r != 128:
        wave += f" (the run's mean output {osl} of the 128 asked, read as fixed)"
    w = Workload(128, osl_r)
    run = (conc, "fixed", None)
    head = f"{series}, 128/128, concurrency {conc}"
    cases = [Case(f"{head}, TPOT", source, "h20", "colocated", layout, conc / gpus, w, options,
                  round(1000 / tpot, 2), "tok/s/user",
                  f"1 / the mean TPOT ({tpot:.2f} ms), the replay's mean TPOT; " + wave + "; " + setup, _FP8,
                  model="deepseek-r1", run=run, blind=26)]
    if out is not None:
        cases.append(Case(f"{head}, throughput", source, "h20", "colocated", layout, conc / gpus, w, options,
                          round(out / gpus, 3), "tok/s/GPU",
                          f"output tok/s ({out:.2f}) / {gpus} GPUs, the replay's output rate; " + wave + "; " + setup,
                          _FP8, model="deepseek-r1", run=run, blind=26))
    return cases


# (series, concurrency = prompts, output tok/s of the instance or None (not taken), mean TPOT ms, mean output len)
_ROWS = [
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 1, 23.02, 42.00),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 2, 47.01, 39.36),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 4, 88.69, 42.43),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 8, 141.60, 52.94),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 16, 221.29, 66.34),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 32, 298.55, 85.71),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 64, 525.62, 104.64),
    ("tanjunchen SGLang DeepSeek-R1 8xH20 TP8", 128, 905.80, 126.22),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 1, 17.42, 55.60),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 2, 33.03, 58.49),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 4, 59.35, 64.34),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 8, 89.40, 85.20),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 16, 136.20, 113.59),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 32, 198.94, 155.46),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 64, 290.74, 213.41),
    ("tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16", 128, 506.19, 244.77),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 1, 9.04, 110.35, 128),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 2, 17.19, 115.10, 128),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 4, 34.37, 114.89, 128),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 8, 69.90, 112.99, 127.88),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 16, None, 115.77, 110.44),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 32, None, 115.50, 121.94),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 64, None, 116.10, 121.27),
    ("tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager", 128, None, 123.48, 118.70),
]

# --- the 2025-03-23 post's sample: SGLang TP 8 capped at 32 running requests, 128 prompts of ~3,000 / ~1,260
_CAPPED_W = Workload(3001, 1261)  # 384,124 / 161,427 tokens over 128 requests
_CAPPED = ("8 H20 (96 GB), `--tp 8` (attention TP 8, experts split TP 8), --mem-fraction-static 0.95, "
           "--max-running-requests 32, --chunked-prefill-size 4096 (the model's 8,192-token budget); " + _SGL + _R1 +
           "; 128 prompts (--max-concurrency 128, rate inf) of 3,500 / 1,500 at --random-range-ratio 0.7, the run's "
           "means 3,001 in / 1,261 out (its totals 384,124 / 161,427 over 128), the spread not modelled; the server "
           "runs 32 at a time, admitting a waiting prompt as one finishes (mean TTFT 221 s: the queue behind the cap), "
           "read as colocated at 32 in flight (4 a GPU), the final drain not modelled")
_CAPPED_NAME = "tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 32 running of 128 prompts, 3.5K/1.5K ratio 0.7"
_CAPPED_OPT = Options(prefill="separate", memory_fraction=0.95)

BLIND26 = [case for row in _ROWS for case in _pair(*row)] + [
    Case(f"{_CAPPED_NAME}, TPOT", TJC_0323, "h20", "colocated", Layout(8, 1, 0), 32 / 8, _CAPPED_W, _CAPPED_OPT,
         round(1000 / 107.60915398548093, 2), "tok/s/user",
         "1 / the mean TPOT ('mean_tpot_ms': 107.61 ms), read as the colocated TPOT at 32 in flight; " + _CAPPED,
         _FP8, model="deepseek-r1", blind=26),
    Case(f"{_CAPPED_NAME}, throughput", TJC_0323, "h20", "colocated", Layout(8, 1, 0), 32 / 8, _CAPPED_W,
         _CAPPED_OPT, round(279.6342520113837 / 8, 3), "tok/s/GPU",
         "'output_throughput' (279.63 tok/s) / 8 GPUs, read as colocated at 32 in flight; " + _CAPPED,
         _FP8, model="deepseek-r1", blind=26),
]

# Predicted when recorded (the model of main at 8327ee4): name -> the model's figure in the case's unit.
RECORDED = {
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 1, TPOT': 84.9,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 1, throughput': 10.0,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 2, TPOT': 70.8,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 2, throughput': 16.9,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 4, TPOT': 53.8,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 4, throughput': 25.8,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 8, TPOT': 37.4,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 8, throughput': 36.1,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 16, TPOT': 24.8,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 16, throughput': 48.0,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 32, TPOT': 16.9,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 32, throughput': 64.6,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 64, TPOT': 12.9,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 64, throughput': 95.8,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 128, TPOT': 10.6,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 128/128, concurrency 128, throughput': 155.6,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 1, TPOT': 67.9,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 1, throughput': 4.1,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 2, TPOT': 62.9,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 2, throughput': 7.6,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 4, TPOT': 55.0,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 4, throughput': 13.4,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 8, TPOT': 44.8,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 8, throughput': 21.8,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 16, TPOT': 34.3,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 16, throughput': 33.1,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 32, TPOT': 25.8,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 32, throughput': 48.9,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 64, TPOT': 20.6,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 64, throughput': 75.7,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 128, TPOT': 17.0,
    'tanjunchen SGLang DeepSeek-R1 2x8 H20 TP16, 128/128, concurrency 128, throughput': 122.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 1, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 1, throughput': 1.5,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 2, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 2, throughput': 3.0,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 4, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 4, throughput': 6.0,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 8, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 8, throughput': 12.0,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 16, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 32, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 64, TPOT': 12.1,
    'tanjunchen vLLM 0.8.2 DeepSeek-R1 8xH20 TP8 eager, 128/128, concurrency 128, TPOT': 10.4,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 32 running of 128 prompts, 3.5K/1.5K ratio 0.7, TPOT': 13.9,
    'tanjunchen SGLang DeepSeek-R1 8xH20 TP8, 32 running of 128 prompts, 3.5K/1.5K ratio 0.7, throughput': 55.5,
}
