"""The thirty-fifth blind part of the validation table (docs/capacity.md): published figures of the MoE models configure
was gaining readers for while this part was searched (GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air, gpt-oss-120b and
gpt-oss-20b, MiniMax-M2 / M2.5), found and recorded with the predictions of the model of main at cceb246 (the commit
that gave configure glm-4.5, glm-4.5-air, gpt-oss-120b, gpt-oss-20b and minimax-m2), by someone who did not change
the model; none of them was used to choose a mechanism or a factor. Every reading below was written down before
that commit was merged and before any prediction here was computed. Each case says which reading of its source was
taken where the source is silent (`assumed`).

Models and formats. GLM-4.6 (and GLM-4.5 / 4.7, the same glm4_moe shape) as configure's glm-4.5, GLM-4.5-Air as
glm-4.5-air; zai-org/GLM-4.6 and zai-org/GLM-4.5-Air are BF16 checkpoints (Precision(weights="bf16")), their -FP8
releases FP8 block-scaled in every linear module (Precision(weights="fp8")). openai/gpt-oss-120b and -20b: MXFP4
routed experts, attention, router, embeddings and LM head BF16 (the release's modules_to_not_convert), read as
configure reads quant_method mxfp4: Precision(weights="bf16", moe="fp4"); the engines' MoE kernels (vLLM's Marlin
W4A16 on H100 with VLLM_MXFP4_USE_MARLIN=1, TensorRT-LLM's TRITON backend on H200 and TRTLLM backend on B200, whose
default on Blackwell is W4A8_MXFP4_MXFP8 per TensorRT-LLM tech blog 9, AITER in ATOM and ROCm vLLM) not modelled
apart. MiniMaxAI/MiniMax-M2 and -M2.5 (SGLang's docs/basic_usage/minimax_m2.md: 'This guide applies to ...
MiniMax-M2.5, MiniMax-M2.1, MiniMax-M2'; 230B / 10B active, 256 experts, FP8 [128, 128] block-scaled) as
configure's minimax-m2, Precision(weights="fp8"). KV caches BF16 unless the launch sets FP8.

Sources (quoted as the stored copies print them):
- gpustack's performance lab (github.com/gpustack/gpustack, docs/performance-lab/): glm-4.6/h200.md at 72aee9d
  (glm-4.x/h200.md at 7ae332a prints the same runs: 'Recommended configuration ... of GLM-4.x (4.5, 4.6 and 4.7)',
  '8 x NVIDIA H200 SXM GPUs on a single node'; vLLM v0.11.0, SGLang v0.5.3), glm-4.5-air/h100.md at 48d8b10 (vLLM
  v0.11.0, SGLang v0.5.4.post2), gpt-oss-120b/h100.md at 72aee9d (vLLM v0.10.2, SGLang v0.5.3rc0, TensorRT-LLM
  v1.0.0), gpt-oss-20b/h100.md at 7b50d50 (vLLM v0.11.0, SGLang v0.5.4.post2, TensorRT-LLM v1.2.0rc1). Each run:
  `vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --num-prompts
  1000` against the serving script printed above it ('Peak concurrent requests: 1000.00'), its 'Output token
  throughput (tok/s)' taken; GLM pages 'Total input tokens: 214465', 'Total generated tokens: 199702' (vLLM) /
  '199904' (SGLang) / '199895' (Air vLLM); gpt-oss pages 'Total input tokens: 215312' and per run 195544, 196540,
  193874, 196205, 196174, 196089 (120b vLLM TP1, SGLang, TensorRT-LLM, TP2, TP4, PP2), 193979, 195734, 191726 (20b
  vLLM, SGLang, TensorRT-LLM). GLM-4.6 H200: vLLM `vllm serve zai-org/GLM-4.6 -tp 8` 'Output token throughput
  (tok/s): 2907.97'; SGLang `--model-path zai-org/GLM-4.6 --tp-size 8` '3366.90'; `zai-org/GLM-4.6-FP8 --tp-size 8`
  '3791.55'; `--tp-size 4` '3416.25'; `--tp-size 4 --ep-size 4` '3221.11'; and the baseline's '# ShareGPT batch size
  4' ('Successful requests: 100', 'Maximum request concurrency: 4', 'Total input tokens: 22992', 'Total generated
  tokens: 21794', 'Output token throughput (tok/s): 211.38', 'Mean TPOT (ms): 18.11'). GLM-4.5-Air H100: `vllm serve
  zai-org/GLM-4.5-Air -tp 4` '3815.71'; SGLang `--tp-size 4` '4532.66'; `zai-org/GLM-4.5-Air-FP8 --tp-size 4`
  '5787.27'; `zai-org/GLM-4.5-Air --tp-size 4 --ep-size 4` '5987.56'; `--pp-size 4` '1686.89'. GPT-OSS-120B H100:
  `vllm serve openai/gpt-oss-120b --max-model-len 32768` '2901.05'; SGLang '865.81'; `trtllm-serve
  openai/gpt-oss-120b --max_seq_len 32768` '1013.72'; `--async-scheduling -tp 2` '7648.67'; `-tp 4` '11327.22';
  `-pp 2` '5337.65'; '# ShareGPT batch size 4' of the baseline (1 GPU: 'Total input tokens: 22946', 'Total
  generated tokens: 21691', 'Output token throughput (tok/s): 453.04', 'Mean TPOT (ms): 8.31') and of the optimized
  `--async-scheduling -tp 2` ('645.55', 'Mean TPOT (ms): 5.75'). GPT-OSS-20B H100: `vllm serve openai/gpt-oss-20b`
  '7817.03'; SGLang '2679.49'; `trtllm-serve openai/gpt-oss-20b` '3615.45'.
- SemiAnalysis InferenceX blog 'B200 NVFP4 vs H100 FP8 on MiniMax-M2.5' (2026-05-26; github.com/SemiAnalysisAI/
  InferenceX-app, packages/app/content/blog/b200-minimax-m2-5-vllm-nvfp4-vs-h100-fp8-perf-per-dollar.mdx at
  66a1670): 'All rows are MiniMax-M2.5 at **ISL 8192 / OSL 1024** on a single non-disaggregated node, measured on
  InferenceX on 2026-05-22 on vLLM.'; '**H100 vLLM FP8, TP=8 on 8 GPUs**' (| Conc | tok/s/GPU | tok/s/user | TPOT
  (ms) |): '| 4 | 476.5 | 110.93 | 9.01 |', '| 8 | 771.4 | 89.71 | 11.15 |', '| 16 | 1,193.7 | 69.09 | 14.47 |',
  '| 32 | 1,707.6 | 49.70 | 20.12 |', '| 64 | 2,317.0 | 33.00 | 30.31 |', '| 128 | 2,985.6 | 21.19 | 47.19 |';
  '**B200 vLLM FP8, TP=2 on 2 GPUs**': '| 4 | 1,926.8 | 112.30 | 8.90 |', '| 8 | 3,143.5 | 92.25 | 10.84 |', '| 16
  | 4,684.8 | 68.04 | 14.70 |', '| 32 | 6,514.0 | 47.40 | 21.10 |', '| 64 | 9,079.0 | 32.35 | 30.91 |' (and 128 to
  512, not taken). Setup from github.com/SemiAnalysisAI/InferenceX at 298d8f94c ('[NV] update Minimax2.5 fp8 h100
  vllm (#1516)', 2026-05-22, the change to the TP 8 the post prints): .github/configs/nvidia-master.yaml
  'minimaxm2.5-fp8-h100-vllm' (image vllm/vllm-openai:v0.19.1-cu130, model MiniMaxAI/MiniMax-M2.5, 8k/1k '{ tp: 8,
  ep: 8, conc-start: 4, conc-end: 128 }') with benchmarks/single_node/minimaxm2.5_fp8_h100.sh (`vllm serve
  --tensor-parallel-size=8 --enable-expert-parallel --trust-remote-code ... --compilation-config
  '{"mode":3,"pass_config":{"fuse_minimax_qk_norm":true}}' --gpu-memory-utilization 0.9`, no --kv-cache-dtype), and
  'minimaxm2.5-fp8-b200-vllm' (image vllm/vllm-openai:v0.21.0, 8k/1k '{ tp: 2, conc-start: 4, conc-end: 512 }') with
  minimaxm2.5_fp8_b200.sh (`--tensor-parallel-size=2`, no EP at EP_SIZE 1, `--gpu-memory-utilization 0.90
  --max-model-len $MAX_MODEL_LEN --block-size=32 --kv-cache-dtype fp8 --max-cudagraph-capture-size 2048
  --max-num-batched-tokens "$((ISL * 2 ))" --stream-interval 20 --no-enable-prefix-caching`); both clients
  `run_benchmark_serving ... --random-range-ratio "$RANDOM_RANGE_RATIO" --num-prompts "$((CONC * 10))"
  --max-concurrency "$CONC"`, RANDOM_RANGE_RATIO 0.8 (.github/workflows/benchmark-tmpl.yml).
- SemiAnalysis InferenceX blog 'Best GPU for gpt-oss-120b Inference — Benchmarks & Comparison (April 2026)'
  (InferenceX-app, best-gpu-for-gptoss120b-inference.mdx at 2d1d3d6), '## GPU Comparison — gpt-oss-120b at 8k/1k'
  (| GPU | Precision | Framework | Throughput/GPU (tok/s) | $/Mtok | Median TTFT (ms) | Median TPOT (ms) |
  Concurrency | Date |): '| NVIDIA B200 | FP4 | trt | 61,612.7 | $0.01 | 244.5 | 36.7 | 256 | 2026-02-05 |',
  '| AMD MI355X | FP4 | atom | 44,999.3 | $0.01 | 175.4 | 25.1 | 128 | 2026-01-14 |', '| NVIDIA H200 | FP4 | trt |
  15,202.1 | $0.03 | 4,286.9 | 31.3 | 64 | 2025-12-15 |', '| AMD MI300X | FP4 | vllm | 11,511.9 | $0.03 | 443.0 |
  49.0 | 64 | 2026-03-09 |', '| NVIDIA H100 | FP4 | vllm | 10,394.0 | $0.03 | 338.4 | 27.0 | 64 | 2026-03-27 |';
  '## Additional Results — 1k/1k Sequence Length': '| NVIDIA B200 | FP4 | trt | 28,012.9 | 72.9 | 17.9 | 256 |
  2026-02-05 |', '| AMD MI355X | FP4 | atom | 17,577.2 | 50.5 | 14.2 | 128 | 2026-01-14 |', '| NVIDIA H200 | FP4 |
  trt | 6,063.8 | 96.1 | 20.6 | 64 | 2025-12-15 |', '| NVIDIA H100 | FP4 | vllm | 4,170.9 | 70.8 | 15.0 | 64 |
  2026-03-27 |', '| AMD MI300X | FP4 | vllm | 3,887.2 | 143.6 | 32.2 | 64 | 2026-03-09 |' ('One row per GPU
  showing the highest-throughput configuration'). Setups from InferenceX at the rows' dates: B200 (95877f5, image
  nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc2.post2; benchmarks/gptoss_fp4_b200_trt.sh: `trtllm-serve
  --backend=pytorch --max_batch_size 512 --max_seq_len=$MAX_MODEL_LEN --max_num_tokens=20000 --tp_size=$TP
  --ep_size=$EP_SIZE` with 'moe_config: backend: TRTLLM', 'kv_cache_config: dtype: fp8 ... free_gpu_memory_fraction:
  0.85', CUDA graphs with padding up to the concurrency); MI355X (d3b67c8, image rocm/atom:rocm7.1.1-ubuntu24.04-
  pytorch2.9-atom0.1.1-MI350x; gptoss_fp4_mi355x_atom_slurm.sh: `python3 -m atom.entrypoints.openai_server ... -tp
  $TP --kv_cache_dtype fp8`, '--max-model-len 10240' at 8k/1k, block size 16; the matrix: tp 1 to concurrency 128,
  tp 8 to 16 or 32); H200 (f6a9d0b, image tensorrt-llm/release:gpt-oss-dev; gptoss_fp4_h200_trt_slurm.sh: 'moe_config:
  backend: TRITON', 'kv_cache_config: dtype: auto ... free_gpu_memory_fraction: 0.85', `--max_batch_size $CONC
  --max_num_tokens 20000 --ep_size=$EP_SIZE --tp_size=$TP`, the matrix 'EP=TP, DP_ATTENTION=false'); MI300X (f7135ac,
  image vllm/vllm-openai-rocm:v0.17.0; gptoss_fp4_mi300x.sh: VLLM_ROCM_USE_AITER=1, `--attention-backend
  ROCM_AITER_UNIFIED_ATTN --tensor-parallel-size=$TP --gpu-memory-utilization 0.95 --block-size=64
  --no-enable-prefix-caching`); H100 (after cec542a9a of 2026-03-27, image vllm/vllm-openai:v0.18.0;
  benchmarks/single_node/gptoss_fp4_h100.sh: VLLM_MXFP4_USE_MARLIN=1, 'no-enable-prefix-caching: true',
  'max-cudagraph-capture-size: 2048', 'max-num-batched-tokens: 8192', 'max-model-len: 10240',
  `--gpu-memory-utilization=0.9 --tensor-parallel-size=$TP --max-num-seqs=$CONC`); clients 10 x CONC random
  prompts at --max-concurrency CONC, range ratio 0.8 (benchmark-tmpl.yml's default '0.8' at every date).
- The SGLang cookbook (github.com/sgl-project/sgl-cookbook at 7b5bd9c), '5.1 Speed Benchmark' blocks of `python -m
  sglang.bench_serving --backend sglang --dataset-name random --random-input-len L --random-output-len L'
  --num-prompts N --max-concurrency C`: docs/autoregressive/GLM/GLM-4.6.md (d59f9e0): 'Hardware: NVIDIA B200 GPU
  (8x), AMD MI300X (8x), AMD MI325X (8x), AMD MI355X (8x)', 'Tensor Parallelism: 8', 'SGLang Version: 0.5.6.post1',
  `python -m sglang.launch_server --model zai-org/GLM-4.6 --tp 8`; the blocks are the B200's (at ec650cf the page read
  'Hardware: NVIDIA B200 GPU (8x)' over the same blocks; the AMD cards were added later without new ones); per block
  'Total input tokens' / 'Total generated tokens' / 'Concurrency:' / 'Mean TPOT (ms):': 1K/1K C 1 '6101' / '4210' /
  '1.00' / '14.81', C 16 (80 prompts) '39668' / '40725' / '13.71' / '24.24', C 100 (500) '249831' / '252162' /
  '90.91' / '49.97'; 1K/8K C 1 '6101' / '44452' / '1.00' / '14.92', C 16 '39668' / '318226' / '13.88' / '21.97', C 64
  (320) '158939' / '1300705' / '56.17' / '33.47'; 8K/1K C 1 '41941' / '4210' / '1.00' / '15.02', C 16 '300020' /
  '41589' / '13.95' / '25.37', C 64 '1273893' / '169680' / '58.46' / '46.62'. docs/autoregressive/MiniMax/
  MiniMax-M2.5.md (7dfb02d): 'Hardware: NVIDIA B200 GPU (8x)', 'Tensor Parallelism: 8', 'Expert Parallelism: 8',
  'sglang version: 0.5.8', and '#### 5.1.3 H100 Benchmark': 'Hardware: NVIDIA H100 80GB HBM3 GPU (8x)', 'sglang
  version: 0.5.9', both `sglang serve --model-path MiniMaxAI/MiniMax-M2.5 --tp 8 --ep 8 --reasoning-parser
  minimax-append-think --trust-remote-code --mem-fraction-static 0.85 --tool-call-parser minimax-m2`; B200 1K/1K C 1
  '6091' / '4220' / '1.00' / '9.89', C 16 '39588' / '40805' / '13.67' / '16.20', C 100 '249331' / '252662' / '91.19'
  / '33.04'; 8K/1K C 1 '41941' / '4220' / '1.00' / '10.00', C 16 '300020' / '41669' / '13.93' / '16.60', C 64
  '1273893' / '170000' / '58.87' / '32.19'; H100 1K/1K C 1 '6101' / '4220' / '1.00' / '8.05', C 16 '39668' / '40805' /
  '13.83' / '14.81', C 100 '249831' / '252662' / '90.56' / '28.92'. docs/autoregressive/MiniMax/MiniMax-M2.md
  (ffd029d): 'Hardware: AMD MI300X GPU(4x)', 'Tensor Parallelism: 4', 'sglang version: 0.5.7', `sglang serve
  --model-path MiniMaxAI/MiniMax-M2 --tp-size 4 --trust-remote-code --mem-fraction-static 0.85` (its docker steps
  rename a module and comment out a torch.compile decorator in minimax_m2.py); 1K/1K C 1 '6101' / '4220' / '1.00' /
  '22.21', C 16 '39668' / '40805' / '13.74' / '27.49', C 100 '249831' / '252662' / '91.14' / '55.23'.

Figures looked at and not taken:
- gpustack's random-dataset runs on all four pages (32K/100, 4K/200, 2K/100 and 128/4 at 100 to 1,000 prompts at
  once): bursts whose time is mostly queued prefill (mean TTFT about half the run), outputs stopping at EOS (gpt-oss
  67,205 of 100,000 asked), left out as blind 8 left them; the 'Optimized' repeats and the summary ratios.
- gpustack GLM-4.5-Air SGLang `--tp-size 2` and `--tp-size 2 --ep-size 2`: the printed command loads
  zai-org/GLM-4.5-Air (BF16, about 212 GB of weights) on 2 x 80 GB H100, which cannot be the run as printed.
- gpustack gpt-oss-120b vLLM `--async-scheduling` at TP 1 and `--max-num-batched-tokens 16384` at TP 1, gpt-oss-20b
  `--async-scheduling` and `--max-num-batched-tokens 16384` (whose script names gpt-oss-120b): repeats of the TP 1
  setup with scheduler options configure does not model apart.
- gpustack's A100 pages and the glm-4.6/h100.md and glm-4.x/h100.md pages (A100 is no configure card; the H100 pages
  were not read in time).
- The InferenceX MiniMax-M2.5 post's B200 FP8 TP 2 rows at 128, 256 and 512 ('| 128 | 10,053.9 | 23.91 | 41.82 |',
  '| 256 | 10,134.1 | 23.92 | 41.81 |', '| 512 | 10,112.2 | 23.85 | 41.93 |': the same TPOT from 128 on shows the
  server running fewer than the client's concurrency, KV cache or scheduler bound, so the in-flight count is not
  the stated one), its B200 FP8 TP 4 rows at 256 / 512 (the same plateau shape), all its NVFP4 tables
  (nvidia/MiniMax-M2.5-NVFP4: the attention format of that checkpoint was not read; its TP 1 and TP 2 tables
  plateau too) and its iso-interactivity interpolations.
- InferenceX 'Best GPU for MiniMax-M2.5' (April 2026): no TP printed; for H100 / B200 superseded by the May post's
  stated tables; its H100 row's TTFT of 31,646 ms ('likely due to a config issue').
- The gpt-oss post's GB200 dynamo-trt rows (disaggregated, multi-node), MI325X rows (not a configure card) and its
  text's B200 vllm mentions (51,523.0 tok/s/GPU, TTFT 172.6 ms: no TPOT or concurrency printed).
- The SGLang cookbook's GLM-4.5 and GLM-4.7 pages (commands only, no result blocks), its GPT-OSS page (no benchmark
  blocks), and every block's 'Output token throughput' (one figure a block taken: 5 x C prompts, a short run's ramp
  and drain).
- The vLLM recipes' GLM/GLM-4.5.md 'Expected Output' (16 prompts of 8000 / 1000 on GLM-4.5-FP8, 'Mean TPOT (ms):
  22.35'): the card and the layout are not stated. TensorRT-LLM tech blog 9 (Deploying GPT-OSS): commands only.
- No H20, H800, GB200 (aggregated) or GB300 figure of these models with its setup readable was found.

Readings (decided before the model was run):
- gpustack ShareGPT runs: the 1,000 prompts sent at once replayed by bench_run (Case.run = (1000, "exponential",
  None): ShareGPT's lengths exponential around the run's means, validation_runs.py's reading of these pages), the
  published figure the run's output tok/s over the instance's GPUs, the batch 1,000 over its GPUs; means 214 in /
  200 out (GLM pages) and 215 in / the run's own generated total over 1,000 (gpt-oss pages). vLLM: V1 scheduler
  (prefill "mixed"), CUDA graphs, --gpu-memory-utilization 0.9 (its default), --async-scheduling not modelled apart;
  SGLang: prefill "separate" (no --enable-mixed-chunk), its memory fraction at configure's default 0.9 (assumed);
  TensorRT-LLM trtllm-serve at its defaults (in-flight batching: prefill "mixed", KV BF16). Layouts as launched: -tp
  N / --tp-size N attention TP N with the experts split TP N; --tp-size 4 --ep-size 4 attention TP 4 with whole
  experts over 4 ranks (Layout(4, 4)), no redundant experts (balancedness 0.70 assumed); --pp-size 4 / -pp 2 as
  pipeline stages of one GPU. No prefix-cache hits, no speculative decoding.
- gpustack '# ShareGPT batch size 4' runs (100 prompts at --max-concurrency 4, a closed loop): read at 4 in flight,
  colocated, lengths the totals' means (230 / 218 for GLM-4.6, 229 / 217 for gpt-oss-120b); tok/s/user = 1,000 /
  'Mean TPOT', and the output tok/s over the GPUs at the same steady batch.
- InferenceX rows: CONC in flight (CONC / GPUs a GPU), colocated with prefill chunks in the steps (vLLM,
  TensorRT-LLM) or ATOM's compiled prefill passes of their own ("separate-compiled"); lengths uniform in [0.8 L, L]
  (means 7,373 / 922 at 8K/1K, 922 / 922 at 1K/1K); tok/s/user the table's 'tok/s/user' or 1,000 / 'Median TPOT'
  (read as the mean), as 1 / the colocated TPOT (other requests' prefill included); tok/s/GPU the table's (input +
  output) throughput a GPU x OSL / (ISL + OSL) (1,024 / 9,216 or 1 / 2), InferenceX counting both (blind 32's
  reading). MiniMax H100: Layout(8, 8) (vLLM's expert parallelism with TP attention), no redundant experts
  (balancedness 0.70 assumed), BF16 KV; MiniMax B200: Layout(2, 1), FP8 KV. gpt-oss: the post prints no TP, and the
  matrices of those dates hold several TPs at the rows' concurrencies, so the TP is read off each row by Little's
  law, GPUs = CONC x (1,000 / TPOT) x (ISL + OSL) / OSL / (tok/s/GPU): B200 256 x 27.2 x 9 / 61,612.7 = 1.02 and
  256 x 55.9 x 2 / 28,012.9 = 1.02 (TP 1); MI355X 128 x 39.8 x 9 / 44,999.3 = 1.02 (TP 1, the only TP of its matrix
  reaching 128); H200 64 x 31.9 x 9 / 15,202.1 = 1.21 (its 4.3 s TTFT) and 64 x 48.5 x 2 / 6,063.8 = 1.02 (TP 1, EP 1);
  MI300X 64 x 20.4 x 9 / 11,511.9 = 1.02 and 64 x 31.1 x 2 / 3,887.2 = 1.02 (TP 1); H100 64 x 37.0 x 9 / 10,394.0 =
  2.05 and 64 x 66.7 x 2 / 4,170.9 = 2.05 (TP 2). KV FP8 on B200 and MI355X (the scripts), BF16 on H200, MI300X and
  H100; memory fractions 0.85 (TensorRT-LLM's free_gpu_memory_fraction on B200 and H200), 0.9 (H100, MI355X), 0.95
  (MI300X).
- SGLang cookbook blocks: one figure a block, tok/s/user = 1,000 / 'Mean TPOT'; lengths the printed totals' means
  (SGLang's random lengths at its default range ratio, as blind 32 read the Kimi page); C = 1 as decode of one
  sequence on the instance (1 / GPUs a GPU), decode context prompt + half the output (blind 32's reading); C > 1
  colocated at the printed 'Concurrency:' (the mean in flight over the run) over the GPUs, prefill "separate"
  (SGLang without --enable-mixed-chunk: the other requests' prefills stall the decodes in the TPOT); CUDA graphs at
  decode, no speculative decoding, no radix-cache hits (random prompts), BF16 KV (no --kv-cache-dtype). GLM-4.6:
  BF16 on 8 B200 at --tp 8 (Layout(8, 1)), SGLang's memory fraction at configure's default 0.9 (assumed); MiniMax-M2.5:
  --tp 8 --ep 8 (Layout(8, 8), SGLang's default MoE all-to-all: no DeepEP), no redundant experts (balancedness 0.70
  assumed), --mem-fraction-static 0.85; MiniMax-M2 on 4 MI300X at --tp-size 4 (Layout(4, 1)), 0.85, the page's
  torch.compile edit not modelled.
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

_GPUSTACK = "gpustack docs, performance-lab/"
GS_GLM46 = _GPUSTACK + "glm-4.6/h200.md (github.com/gpustack/gpustack at 72aee9d; 8 H200, vLLM v0.11.0, SGLang v0.5.3)"
GS_AIR = (_GPUSTACK + "glm-4.5-air/h100.md (github.com/gpustack/gpustack at 48d8b10; H100, vLLM v0.11.0, SGLang "
          "v0.5.4.post2)")
GS_OSS120 = (_GPUSTACK + "gpt-oss-120b/h100.md (github.com/gpustack/gpustack at 72aee9d; H100, vLLM v0.10.2, SGLang "
             "v0.5.3rc0, TensorRT-LLM v1.0.0)")
GS_OSS20 = (_GPUSTACK + "gpt-oss-20b/h100.md (github.com/gpustack/gpustack at 7b50d50; H100, vLLM v0.11.0, SGLang "
            "v0.5.4.post2, TensorRT-LLM v1.2.0rc1)")
IX_MINIMAX = ("SemiAnalysis InferenceX blog 'B200 NVFP4 vs H100 FP8 on MiniMax-M2.5' (2026-05-26, InferenceX-app "
              "commit 66a1670), its vLLM FP8 tables at 8K/1K, with InferenceX's configs and scripts at 298d8f94c")
IX_GPTOSS = ("SemiAnalysis InferenceX blog 'Best GPU for gpt-oss-120b Inference' (2026-04-06, InferenceX-app commit "
             "2d1d3d6), its 8k/1k and 1k/1k rows, with InferenceX's configs and scripts at the rows' dates")
SGL_GLM46 = ("SGLang cookbook (github.com/sgl-project/sgl-cookbook at 7b5bd9c), GLM/GLM-4.6.md 'Speed Benchmark' "
             "(8 B200, --tp 8, SGLang 0.5.6.post1)")
SGL_M25 = ("SGLang cookbook (github.com/sgl-project/sgl-cookbook at 7b5bd9c), MiniMax/MiniMax-M2.5.md 'Speed "
           "Benchmark' (8 B200 on SGLang 0.5.8, 8 H100 on 0.5.9, --tp 8 --ep 8)")
SGL_M2 = ("SGLang cookbook (github.com/sgl-project/sgl-cookbook at 7b5bd9c), MiniMax/MiniMax-M2.md 'Speed Benchmark' "
          "(4 MI300X, --tp-size 4, SGLang 0.5.7)")

_BF16 = Precision(weights="bf16")  # zai-org/GLM-4.6, zai-org/GLM-4.5-Air: BF16 checkpoints, BF16 KV
_FP8 = Precision(weights="fp8")  # the -FP8 GLM releases, MiniMaxAI/MiniMax-M2(.5): FP8 block-scaled, BF16 KV
_FP8_KV8 = Precision(weights="fp8", kv="fp8")


def _oss(kv: str = "bf16") -> Precision:
    """openai/gpt-oss-*: MXFP4 routed experts (recorded as configure's fp4; read as mxfp4, the release's
    format, since blind 36 was recorded: docs/capacity.md), attention, router, embeddings and LM head BF16."""
    return Precision(weights="bf16", moe="mxfp4", kv=kv)


_VLLM = Options()
_SGL = Options(prefill="separate")
_SGL_EP = Options(prefill="separate", balancedness=ASSUMED_PLAIN)
_TRT = Options()

# ---- gpustack: ShareGPT, 1,000 prompts at once, replayed ----------------------------------------------------------
_RUN = (1000, "exponential", None)
_GS_READ = ("output tok/s ({out}) / {gpus} GPU{s} of the run of 1,000 ShareGPT prompts sent at once (vllm bench serve "
            "--num-prompts 1000, no rate or concurrency limit; 'Peak concurrent requests: 1000.00'), replayed by "
            "bench_run (Case.run = (1000, 'exponential', None): ShareGPT's lengths exponential around the run's means "
            "{isl} in / {osl} out), the batch 1,000 / {gpus}; {setup}")


def _gs(name: str, source: str, hw: str, model: str, layout: Layout, options: Options, prec: Precision, out: float,
        isl: int, osl: int, setup: str) -> Case:
    gpus = layout.gpus
    return Case(name, source, hw, "colocated", layout, 1000 / gpus, Workload(isl, osl), options, round(out / gpus, 3),
                "tok/s/GPU", _GS_READ.format(out=out, gpus=gpus, s="" if gpus == 1 else "s", isl=isl, osl=osl,
                                              setup=setup),
                prec, model=model, run=_RUN, blind=35)


_GLM_V = ("zai-org/GLM-4.6 (BF16) on {g} H200, vLLM v0.11.0 `vllm serve zai-org/GLM-4.6 -tp {g}` (attention TP {g}, "
          "experts split TP {g}), V1 scheduler (prefill chunks in the decode steps), CUDA graphs, memory 0.9, BF16 KV")
_GLM_S = ("{ckpt} on {g} H200, SGLang v0.5.3 `--tp-size {g}{ep}` ({lay}), prefill batches as passes of their own "
          "(no --enable-mixed-chunk), CUDA graphs at decode, memory fraction 0.9 (assumed), BF16 KV")
_AIR_V = ("zai-org/GLM-4.5-Air (BF16) on 4 H100, vLLM v0.11.0 `vllm serve zai-org/GLM-4.5-Air -tp 4` (attention TP 4, "
          "experts split TP 4), V1 scheduler, CUDA graphs, memory 0.9, BF16 KV")
_AIR_S = ("{ckpt} on 4 H100, SGLang v0.5.4.post2 `{flags}` ({lay}), prefill batches as passes of their own, CUDA "
          "graphs at decode, memory fraction 0.9 (assumed), BF16 KV")
_OSS_V = ("openai/gpt-oss-{m} (MXFP4 experts, BF16 rest) on {g} H100, vLLM {ver} `{cmd}` ({lay}), V1 scheduler "
          "(prefill chunks in the decode steps), CUDA graphs, memory 0.9, BF16 KV{extra}")
_OSS_S = ("openai/gpt-oss-{m} on 1 H100, SGLang {ver} `python3 -m sglang.launch_server --model-path "
          "openai/gpt-oss-{m}` at its defaults (one GPU), prefill batches as passes of their own, memory fraction 0.9 "
          "(assumed), BF16 KV")
_OSS_T = ("openai/gpt-oss-{m} on 1 H100, TensorRT-LLM {ver} `trtllm-serve openai/gpt-oss-{m}{extra}` at its defaults "
          "(PyTorch backend, in-flight batching: prefill chunks in the steps, CUDA graphs), KV BF16 (auto)")

_ASYNC = "; --async-scheduling not modelled apart"

GPUSTACK = [
    _gs("gpustack GLM-4.6 8xH200 vLLM v0.11.0 TP8 BF16, ShareGPT 1,000 at once", GS_GLM46, "h200", "glm-4.5",
        Layout(8, 1, 0), _VLLM, _BF16, 2907.97, 214, 200, _GLM_V.format(g=8)),
    _gs("gpustack GLM-4.6 8xH200 SGLang v0.5.3 TP8 BF16, ShareGPT 1,000 at once", GS_GLM46, "h200", "glm-4.5",
        Layout(8, 1, 0), _SGL, _BF16, 3366.90, 214, 200,
        _GLM_S.format(ckpt="zai-org/GLM-4.6 (BF16)", g=8, ep="", lay="attention TP 8, experts split TP 8")),
    _gs("gpustack GLM-4.6 8xH200 SGLang v0.5.3 TP8 FP8, ShareGPT 1,000 at once", GS_GLM46, "h200", "glm-4.5",
        Layout(8, 1, 0), _SGL, _FP8, 3791.55, 214, 200,
        _GLM_S.format(ckpt="zai-org/GLM-4.6-FP8", g=8, ep="", lay="attention TP 8, experts split TP 8")),
    _gs("gpustack GLM-4.6 4xH200 SGLang v0.5.3 TP4 FP8, ShareGPT 1,000 at once", GS_GLM46, "h200", "glm-4.5",
        Layout(4, 1, 0), _SGL, _FP8, 3416.25, 214, 200,
        _GLM_S.format(ckpt="zai-org/GLM-4.6-FP8", g=4, ep="", lay="attention TP 4, experts split TP 4")),
    _gs("gpustack GLM-4.6 4xH200 SGLang v0.5.3 TP4 EP4 FP8, ShareGPT 1,000 at once", GS_GLM46, "h200", "glm-4.5",
        Layout(4, 4, 0), _SGL_EP, _FP8, 3221.11, 214, 200,
        _GLM_S.format(ckpt="zai-org/GLM-4.6-FP8", g=4, ep=" --ep-size 4",
                      lay="attention TP 4, whole experts over 4 ranks, no redundant experts, balancedness 0.70 "
                          "assumed")),
    _gs("gpustack GLM-4.5-Air 4xH100 vLLM v0.11.0 TP4 BF16, ShareGPT 1,000 at once", GS_AIR, "h100", "glm-4.5-air",
        Layout(4, 1, 0), _VLLM, _BF16, 3815.71, 214, 200, _AIR_V),
    _gs("gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 TP4 BF16, ShareGPT 1,000 at once", GS_AIR, "h100", "glm-4.5-air",
        Layout(4, 1, 0), _SGL, _BF16, 4532.66, 214, 200,
        _AIR_S.format(ckpt="zai-org/GLM-4.5-Air (BF16)", flags="--tp-size 4",
                      lay="attention TP 4, experts split TP 4")),
    _gs("gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 TP4 FP8, ShareGPT 1,000 at once", GS_AIR, "h100", "glm-4.5-air",
        Layout(4, 1, 0), _SGL, _FP8, 5787.27, 214, 200,
        _AIR_S.format(ckpt="zai-org/GLM-4.5-Air-FP8", flags="--tp-size 4", lay="attention TP 4, experts split TP 4")),
    _gs("gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 TP4 EP4 BF16, ShareGPT 1,000 at once", GS_AIR, "h100",
        "glm-4.5-air", Layout(4, 4, 0), _SGL_EP, _BF16, 5987.56, 214, 200,
        _AIR_S.format(ckpt="zai-org/GLM-4.5-Air (BF16, as printed)", flags="--tp-size 4 --ep-size 4",
                      lay="attention TP 4, whole experts over 4 ranks, no redundant experts, balancedness 0.70 "
                          "assumed")),
    _gs("gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 PP4 BF16, ShareGPT 1,000 at once", GS_AIR, "h100", "glm-4.5-air",
        Layout(1, 1, 0, pp=4), _SGL, _BF16, 1686.89, 214, 200,
        _AIR_S.format(ckpt="zai-org/GLM-4.5-Air (BF16)", flags="--pp-size 4",
                      lay="four pipeline stages of one GPU, each a quarter of the layers")),
    _gs("gpustack gpt-oss-120b 1xH100 vLLM v0.10.2, ShareGPT 1,000 at once", GS_OSS120, "h100", "gpt-oss-120b",
        Layout(1, 1, 0), _VLLM, _oss(), 2901.05, 215, 196,
        _OSS_V.format(m="120b", g=1, ver="v0.10.2", cmd="vllm serve openai/gpt-oss-120b --max-model-len 32768",
                      lay="one GPU", extra="")),
    _gs("gpustack gpt-oss-120b 1xH100 SGLang v0.5.3rc0, ShareGPT 1,000 at once", GS_OSS120, "h100", "gpt-oss-120b",
        Layout(1, 1, 0), _SGL, _oss(), 865.81, 215, 197, _OSS_S.format(m="120b", ver="v0.5.3rc0")),
    _gs("gpustack gpt-oss-120b 1xH100 TensorRT-LLM v1.0.0, ShareGPT 1,000 at once", GS_OSS120, "h100", "gpt-oss-120b",
        Layout(1, 1, 0), _TRT, _oss(), 1013.72, 215, 194,
        _OSS_T.format(m="120b", ver="v1.0.0", extra=" --max_seq_len 32768")),
    _gs("gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 TP2, ShareGPT 1,000 at once", GS_OSS120, "h100", "gpt-oss-120b",
        Layout(2, 1, 0), _VLLM, _oss(), 7648.67, 215, 196,
        _OSS_V.format(m="120b", g=2, ver="v0.10.2",
                      cmd="vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling -tp 2",
                      lay="attention TP 2, experts split TP 2", extra=_ASYNC)),
    _gs("gpustack gpt-oss-120b 4xH100 vLLM v0.10.2 TP4, ShareGPT 1,000 at once", GS_OSS120, "h100", "gpt-oss-120b",
        Layout(4, 1, 0), _VLLM, _oss(), 11327.22, 215, 196,
        _OSS_V.format(m="120b", g=4, ver="v0.10.2",
                      cmd="vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling -tp 4",
                      lay="attention TP 4, experts split TP 4", extra=_ASYNC)),
    _gs("gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 PP2, ShareGPT 1,000 at once", GS_OSS120, "h100", "gpt-oss-120b",
        Layout(1, 1, 0, pp=2), _VLLM, _oss(), 5337.65, 215, 196,
        _OSS_V.format(m="120b", g=2, ver="v0.10.2",
                      cmd="vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling -pp 2",
                      lay="two pipeline stages of one GPU", extra=_ASYNC)),
    _gs("gpustack gpt-oss-20b 1xH100 vLLM v0.11.0, ShareGPT 1,000 at once", GS_OSS20, "h100", "gpt-oss-20b",
        Layout(1, 1, 0), _VLLM, _oss(), 7817.03, 215, 194,
        _OSS_V.format(m="20b", g=1, ver="v0.11.0", cmd="vllm serve openai/gpt-oss-20b", lay="one GPU", extra="")),
    _gs("gpustack gpt-oss-20b 1xH100 SGLang v0.5.4, ShareGPT 1,000 at once", GS_OSS20, "h100", "gpt-oss-20b",
        Layout(1, 1, 0), _SGL, _oss(), 2679.49, 215, 196, _OSS_S.format(m="20b", ver="v0.5.4.post2")),
    _gs("gpustack gpt-oss-20b 1xH100 TensorRT-LLM v1.2.0rc1, ShareGPT 1,000 at once", GS_OSS20, "h100", "gpt-oss-20b",
        Layout(1, 1, 0), _TRT, _oss(), 3615.45, 215, 192, _OSS_T.format(m="20b", ver="v1.2.0rc1", extra="")),
]

# ---- gpustack: ShareGPT at --max-concurrency 4 (100 prompts), read at 4 in flight ---------------------------------
_BS4 = ("100 ShareGPT prompts at --max-concurrency 4 ('Maximum request concurrency: 4'), a closed loop read at 4 in "
        "flight ({per:g} a GPU), colocated, lengths the totals' means ({isl} in / {osl} out); {setup}")


def _bs4(name: str, source: str, hw: str, model: str, layout: Layout, prec: Precision, isl: int, osl: int, tpot: float,
         out: float, setup: str) -> list[Case]:
    gpus = layout.gpus
    how = _BS4.format(per=4 / gpus, isl=isl, osl=osl, setup=setup)
    w = Workload(isl, osl)
    return [Case(f"{name}, ShareGPT at concurrency 4, TPOT", source, hw, "colocated", layout, 4 / gpus, w, _VLLM,
                 round(1000 / tpot, 2), "tok/s/user", f"1 / the mean TPOT ({tpot} ms); " + how, prec, model=model,
                 blind=35),
            Case(f"{name}, ShareGPT at concurrency 4, throughput", source, hw, "colocated", layout, 4 / gpus, w, _VLLM,
                 round(out / gpus, 3), "tok/s/GPU", f"output tok/s ({out}) / {gpus} GPU{'s' if gpus > 1 else ''}; "
                 + how, prec, model=model, blind=35)]


BATCH4 = [
    *_bs4("gpustack GLM-4.6 8xH200 vLLM v0.11.0 TP8 BF16", GS_GLM46, "h200", "glm-4.5", Layout(8, 1, 0), _BF16, 230,
          218, 18.11, 211.38, _GLM_V.format(g=8)),
    *_bs4("gpustack gpt-oss-120b 1xH100 vLLM v0.10.2", GS_OSS120, "h100", "gpt-oss-120b", Layout(1, 1, 0), _oss(), 229,
          217, 8.31, 453.04,
          _OSS_V.format(m="120b", g=1, ver="v0.10.2", cmd="vllm serve openai/gpt-oss-120b --max-model-len 32768",
                        lay="one GPU", extra="")),
    *_bs4("gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 TP2", GS_OSS120, "h100", "gpt-oss-120b", Layout(2, 1, 0), _oss(),
          229, 217, 5.75, 645.55,
          _OSS_V.format(m="120b", g=2, ver="v0.10.2", cmd="vllm serve openai/gpt-oss-120b --async-scheduling -tp 2",
                        lay="attention TP 2, experts split TP 2", extra=_ASYNC)),
]

# ---- InferenceX ---------------------------------------------------------------------------------------------------
_W8K = Workload(7373, 922)  # 8,192 / 1,024 uniform in [0.8 L, L]
_W1K = Workload(922, 922)  # 1,024 / 1,024 likewise
_L8K = "ISL 8,192 / OSL 1,024 uniform in [0.8 L, L] (range ratio 0.8): means 7,373 / 922"
_L1K = "ISL 1,024 / OSL 1,024 uniform in [0.8 L, L] (range ratio 0.8): means 922 / 922"
_IX_LOOP = "10 x {conc} random prompts at --max-concurrency {conc}, read as {conc} in flight ({per:g} a GPU); {lengths}"


def _ix_pair(name: str, source: str, hw: str, model: str, layout: Layout, options: Options, prec: Precision, conc: int,
             total: float, user: float, user_what: str, long_prompt: bool, setup: str) -> list[Case]:
    gpus = layout.gpus
    w, lengths = (_W8K, _L8K) if long_prompt else (_W1K, _L1K)
    share, text = (1024 / 9216, "1,024 / 9,216") if long_prompt else (0.5, "1 / 2")
    loop = _IX_LOOP.format(conc=conc, per=conc / gpus, lengths=lengths)
    return [Case(name, source, hw, "colocated", layout, conc / gpus, w, options, user, "tok/s/user",
                 f"{user_what}, read as 1 / the colocated TPOT at {conc} in flight (other requests' prefill "
                 f"included); {loop}; {setup}", prec, model=model, blind=35),
            Case(f"{name}, throughput", source, hw, "colocated", layout, conc / gpus, w, options,
                 round(total * share, 2), "tok/s/GPU",
                 f"output tok/s a GPU: the table's total (input + output) throughput a GPU ({total:,}) x {text}; "
                 f"{loop}; {setup}", prec, model=model, blind=35)]


_MM_H100 = ("MiniMaxAI/MiniMax-M2.5 (FP8 block-scaled, BF16 KV: no --kv-cache-dtype) on 8 H100, vLLM v0.19.1-cu130 at "
            "--tensor-parallel-size 8 --enable-expert-parallel (attention TP 8, whole experts over 8 ranks), no "
            "redundant experts (balancedness 0.70 assumed), compilation mode 3, --gpu-memory-utilization 0.9, prefill "
            "chunks in the decode steps, CUDA graphs, no speculative decoding")
_MM_B200 = ("MiniMaxAI/MiniMax-M2.5 (FP8 block-scaled) on 2 B200, vLLM v0.21.0 at --tensor-parallel-size 2 (attention "
            "TP 2, experts split TP 2), --kv-cache-dtype fp8, --gpu-memory-utilization 0.90, --max-num-batched-tokens "
            "16,384, prefix caching off, prefill chunks in the decode steps, CUDA graphs, no speculative decoding")

# (concurrency, tok/s/GPU, tok/s/user, TPOT ms)
_MM_H100_ROWS = [(4, 476.5, 110.93, 9.01), (8, 771.4, 89.71, 11.15), (16, 1193.7, 69.09, 14.47),
                 (32, 1707.6, 49.70, 20.12), (64, 2317.0, 33.00, 30.31), (128, 2985.6, 21.19, 47.19)]
_MM_B200_ROWS = [(4, 1926.8, 112.30, 8.90), (8, 3143.5, 92.25, 10.84), (16, 4684.8, 68.04, 14.70),
                 (32, 6514.0, 47.40, 21.10), (64, 9079.0, 32.35, 30.91)]

MINIMAX_IX = [
    *[c for conc, total, user, tpot in _MM_H100_ROWS
      for c in _ix_pair(f"InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency {conc}, 8K/1K",
                        IX_MINIMAX, "h100", "minimax-m2", Layout(8, 8, 0), Options(balancedness=ASSUMED_PLAIN), _FP8,
                        conc, total, user, f"the table's tok/s/user ({user}; TPOT {tpot} ms)", True, _MM_H100)],
    *[c for conc, total, user, tpot in _MM_B200_ROWS
      for c in _ix_pair(f"InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency {conc}, 8K/1K", IX_MINIMAX,
                        "b200", "minimax-m2", Layout(2, 1, 0), Options(), _FP8_KV8, conc, total, user,
                        f"the table's tok/s/user ({user}; TPOT {tpot} ms)", True, _MM_B200)],
]

_OSS_IX = {
    "b200": ("TensorRT-LLM 1.2.0rc2.post2", "1xB200 TP1", Layout(1, 1, 0), Options(memory_fraction=0.85), _oss("fp8"),
             "openai/gpt-oss-120b on 1 B200, TensorRT-LLM 1.2.0rc2.post2 trtllm-serve --backend pytorch --tp_size 1 "
             "(TP read by Little's law), MoE backend TRTLLM (its Blackwell default W4A8 MXFP4 x MXFP8 not modelled "
             "apart), FP8 KV, free_gpu_memory_fraction 0.85 as memory fraction 0.85, --max_batch_size 512, "
             "--max_num_tokens 20,000, CUDA graphs padded to the concurrency, in-flight batching (prefill chunks in the "
             "steps)"),
    "mi355x": ("ATOM 0.1.1", "1xMI355X TP1", Layout(1, 1, 0), Options(prefill="separate-compiled"), _oss("fp8"),
               "openai/gpt-oss-120b on 1 MI355X, ROCm ATOM 0.1.1 (rocm/atom:rocm7.1.1 image) atom.entrypoints."
               "openai_server -tp 1 (the only TP of its matrix reaching concurrency 128) --kv_cache_dtype fp8, block "
               "size 16, its compiled forward with prefill passes of their own (ATOM's scheduler)"),
    "h200": ("TensorRT-LLM gpt-oss-dev", "1xH200 TP1", Layout(1, 1, 0), Options(memory_fraction=0.85), _oss(),
             "openai/gpt-oss-120b on 1 H200, TensorRT-LLM (release:gpt-oss-dev image) trtllm-serve --backend pytorch "
             "--tp_size 1 --ep_size 1 (TP read by Little's law), MoE backend TRITON (W4A16 on Hopper), KV dtype auto "
             "(BF16), free_gpu_memory_fraction 0.85 as memory fraction 0.85, --max_batch_size = the concurrency, "
             "--max_num_tokens 20,000, in-flight batching"),
    "mi300x": ("vLLM v0.17.0", "1xMI300X TP1", Layout(1, 1, 0), Options(memory_fraction=0.95), _oss(),
               "openai/gpt-oss-120b on 1 MI300X, vLLM v0.17.0 (ROCm image) --tensor-parallel-size 1 (TP read by "
               "Little's law) with AITER (VLLM_ROCM_USE_AITER=1, ROCM_AITER_UNIFIED_ATTN), --gpu-memory-utilization "
               "0.95, block size 64, prefix caching off, BF16 KV, prefill chunks in the decode steps"),
    "h100": ("vLLM v0.18.0", "2xH100 TP2", Layout(2, 1, 0), Options(), _oss(),
             "openai/gpt-oss-120b on 2 H100, vLLM v0.18.0 --tensor-parallel-size 2 (TP read by Little's law; attention "
             "TP 2, experts split TP 2) with VLLM_MXFP4_USE_MARLIN=1 (Marlin W4A16 MoE), --gpu-memory-utilization "
             "0.9, --max-num-seqs = the concurrency, max-num-batched-tokens 8,192, max-model-len 10,240, prefix "
             "caching off, BF16 KV, prefill chunks in the decode steps, CUDA graphs"),
}
# (card, long prompt, concurrency, throughput a GPU, median TPOT ms)
_OSS_ROWS = [("b200", True, 256, 61612.7, 36.7), ("mi355x", True, 128, 44999.3, 25.1),
             ("h200", True, 64, 15202.1, 31.3), ("mi300x", True, 64, 11511.9, 49.0), ("h100", True, 64, 10394.0, 27.0),
             ("b200", False, 256, 28012.9, 17.9), ("mi355x", False, 128, 17577.2, 14.2),
             ("h200", False, 64, 6063.8, 20.6), ("mi300x", False, 64, 3887.2, 32.2), ("h100", False, 64, 4170.9, 15.0)]

GPTOSS_IX = [c for hw, long_prompt, conc, total, tpot in _OSS_ROWS
             for c in _ix_pair(f"InferenceX {_OSS_IX[hw][0]} gpt-oss-120b {_OSS_IX[hw][1]}, concurrency {conc}, "
                               f"{'8K/1K' if long_prompt else '1K/1K'}", IX_GPTOSS, hw, "gpt-oss-120b",
                               _OSS_IX[hw][2], _OSS_IX[hw][3], _OSS_IX[hw][4], conc, total, round(1000 / tpot, 2),
                               f"1,000 / the row's median TPOT ({tpot} ms)", long_prompt, _OSS_IX[hw][5])]

# ---- SGLang cookbook blocks ---------------------------------------------------------------------------------------
_SGL_READ = ("1 / the mean TPOT ({tpot} ms) of `sglang.bench_serving --dataset-name random --random-input-len {li} "
             "--random-output-len {lo} --num-prompts {n} --max-concurrency {c}`; lengths the printed totals' means "
             "({tin:,} / {tout:,} over {n}: {isl:,} in / {osl:,} out); {how}; {setup}")
_SGL_ONE = ("one request at a time ('Concurrency: 1.00'): decode of one sequence on the instance, context prompt + "
            "half the output")
_SGL_MANY = ("colocated at the printed mean in flight ('Concurrency: {mean}', {per:.2f} a GPU), prefill as SGLang's "
             "passes of their own (no --enable-mixed-chunk) stalling the decodes")


def _sgl(name: str, source: str, hw: str, model: str, layout: Layout, options: Options, prec: Precision, li: int,
         lo: int, c: int, n: int, tin: int, tout: int, mean: float, tpot: float, setup: str) -> Case:
    gpus = layout.gpus
    isl, osl = round(tin / n), round(tout / n)
    one = c == 1
    how = _SGL_ONE if one else _SGL_MANY.format(mean=f"{mean:.2f}", per=mean / gpus)
    return Case(name, source, hw, "decode" if one else "colocated", layout, (1 if one else mean) / gpus,
                Workload(isl, osl), options, round(1000 / tpot, 2), "tok/s/user",
                _SGL_READ.format(tpot=tpot, li=li, lo=lo, n=n, c=c, tin=tin, tout=tout, isl=isl, osl=osl, how=how,
                                 setup=setup),
                prec, model=model, blind=35)


_GLM46_B200 = ("zai-org/GLM-4.6 (BF16, BF16 KV) on 8 B200, SGLang 0.5.6.post1 `python -m sglang.launch_server --model "
               "zai-org/GLM-4.6 --tp 8` (attention TP 8, experts split TP 8), CUDA graphs at decode, memory fraction "
               "0.9 (assumed), no speculative decoding, no radix-cache hits")
_M25_SETUP = ("MiniMaxAI/MiniMax-M2.5 (FP8 block-scaled, BF16 KV) on 8 {card}, SGLang {ver} `sglang serve --tp 8 --ep 8 "
              "--mem-fraction-static 0.85` (attention TP 8, whole experts over 8 ranks, SGLang's default MoE "
              "all-to-all), no redundant experts (balancedness 0.70 assumed), CUDA graphs at decode, no speculative "
              "decoding, no radix-cache hits")
_M2_MI300X = ("MiniMaxAI/MiniMax-M2 (FP8 block-scaled, BF16 KV) on 4 MI300X, SGLang 0.5.7 `sglang serve --tp-size 4 "
              "--mem-fraction-static 0.85` (attention TP 4, experts split TP 4; the page's torch.compile edit not "
              "modelled), CUDA graphs at decode, no speculative decoding, no radix-cache hits")

_SGL_SEP = Options(prefill="separate")
_M25_OPT = Options(prefill="separate", memory_fraction=0.85, balancedness=ASSUMED_PLAIN)
_M2_OPT = Options(prefill="separate", memory_fraction=0.85)

# (input len, output len, concurrency, prompts, total input, total generated, printed concurrency, mean TPOT)
_GLM46_BLOCKS = [(1000, 1000, 1, 10, 6101, 4210, 1.00, 14.81), (1000, 1000, 16, 80, 39668, 40725, 13.71, 24.24),
                 (1000, 1000, 100, 500, 249831, 252162, 90.91, 49.97), (1000, 8000, 1, 10, 6101, 44452, 1.00, 14.92),
                 (1000, 8000, 16, 80, 39668, 318226, 13.88, 21.97), (1000, 8000, 64, 320, 158939, 1300705, 56.17, 33.47),
                 (8000, 1000, 1, 10, 41941, 4210, 1.00, 15.02), (8000, 1000, 16, 80, 300020, 41589, 13.95, 25.37),
                 (8000, 1000, 64, 320, 1273893, 169680, 58.46, 46.62)]
_M25_B200_BLOCKS = [(1000, 1000, 1, 10, 6091, 4220, 1.00, 9.89), (1000, 1000, 16, 80, 39588, 40805, 13.67, 16.20),
                    (1000, 1000, 100, 500, 249331, 252662, 91.19, 33.04), (8000, 1000, 1, 10, 41941, 4220, 1.00, 10.00),
                    (8000, 1000, 16, 80, 300020, 41669, 13.93, 16.60), (8000, 1000, 64, 320, 1273893, 170000, 58.87, 32.19)]
_M25_H100_BLOCKS = [(1000, 1000, 1, 10, 6101, 4220, 1.00, 8.05), (1000, 1000, 16, 80, 39668, 40805, 13.83, 14.81),
                    (1000, 1000, 100, 500, 249831, 252662, 90.56, 28.92)]
_M2_BLOCKS = [(1000, 1000, 1, 10, 6101, 4220, 1.00, 22.21), (1000, 1000, 16, 80, 39668, 40805, 13.74, 27.49),
              (1000, 1000, 100, 500, 249831, 252662, 91.14, 55.23)]


def _lens(li: int, lo: int) -> str:
    return f"{li // 1000}K/{lo // 1000}K"


COOKBOOK = [
    *[_sgl(f"SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency {c}, {_lens(li, lo)}", SGL_GLM46, "b200", "glm-4.5",
           Layout(8, 1, 0), _SGL_SEP, _BF16, li, lo, c, n, tin, tout, mean, tpot, _GLM46_B200)
      for li, lo, c, n, tin, tout, mean, tpot in _GLM46_BLOCKS],
    *[_sgl(f"SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency {c}, {_lens(li, lo)}", SGL_M25, "b200",
           "minimax-m2", Layout(8, 8, 0), _M25_OPT, _FP8, li, lo, c, n, tin, tout, mean, tpot,
           _M25_SETUP.format(card="B200", ver="0.5.8"))
      for li, lo, c, n, tin, tout, mean, tpot in _M25_B200_BLOCKS],
    *[_sgl(f"SGLang 0.5.9 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency {c}, {_lens(li, lo)}", SGL_M25, "h100",
           "minimax-m2", Layout(8, 8, 0), _M25_OPT, _FP8, li, lo, c, n, tin, tout, mean, tpot,
           _M25_SETUP.format(card="H100", ver="0.5.9"))
      for li, lo, c, n, tin, tout, mean, tpot in _M25_H100_BLOCKS],
    *[_sgl(f"SGLang 0.5.7 MiniMax-M2 4xMI300X TP4 FP8, concurrency {c}, {_lens(li, lo)}", SGL_M2, "mi300x",
           "minimax-m2", Layout(4, 1, 0), _M2_OPT, _FP8, li, lo, c, n, tin, tout, mean, tpot, _M2_MI300X)
      for li, lo, c, n, tin, tout, mean, tpot in _M2_BLOCKS],
]

BLIND35 = GPUSTACK + BATCH4 + MINIMAX_IX + GPTOSS_IX + COOKBOOK

# Predicted when recorded (the model of main at cceb246): name -> the model's figure in the case's unit.
RECORDED = {
    'gpustack GLM-4.6 8xH200 vLLM v0.11.0 TP8 BF16, ShareGPT 1,000 at once': 485.0,
    'gpustack GLM-4.6 8xH200 SGLang v0.5.3 TP8 BF16, ShareGPT 1,000 at once': 476.6,
    'gpustack GLM-4.6 8xH200 SGLang v0.5.3 TP8 FP8, ShareGPT 1,000 at once': 650.3,
    'gpustack GLM-4.6 4xH200 SGLang v0.5.3 TP4 FP8, ShareGPT 1,000 at once': 955.4,
    'gpustack GLM-4.6 4xH200 SGLang v0.5.3 TP4 EP4 FP8, ShareGPT 1,000 at once': 937.0,
    'gpustack GLM-4.5-Air 4xH100 vLLM v0.11.0 TP4 BF16, ShareGPT 1,000 at once': 1357.9,
    'gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 TP4 BF16, ShareGPT 1,000 at once': 1341.0,
    'gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 TP4 FP8, ShareGPT 1,000 at once': 1994.7,
    'gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 TP4 EP4 BF16, ShareGPT 1,000 at once': 1307.7,
    'gpustack GLM-4.5-Air 4xH100 SGLang v0.5.4 PP4 BF16, ShareGPT 1,000 at once': 708.9,
    'gpustack gpt-oss-120b 1xH100 vLLM v0.10.2, ShareGPT 1,000 at once': 5806.1,
    'gpustack gpt-oss-120b 1xH100 SGLang v0.5.3rc0, ShareGPT 1,000 at once': 5261.8,
    'gpustack gpt-oss-120b 1xH100 TensorRT-LLM v1.0.0, ShareGPT 1,000 at once': 5788.4,
    'gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 TP2, ShareGPT 1,000 at once': 4720.5,
    'gpustack gpt-oss-120b 4xH100 vLLM v0.10.2 TP4, ShareGPT 1,000 at once': 3498.4,
    'gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 PP2, ShareGPT 1,000 at once': 3716.5,
    'gpustack gpt-oss-20b 1xH100 vLLM v0.11.0, ShareGPT 1,000 at once': 13402.2,
    'gpustack gpt-oss-20b 1xH100 SGLang v0.5.4, ShareGPT 1,000 at once': 13196.4,
    'gpustack gpt-oss-20b 1xH100 TensorRT-LLM v1.2.0rc1, ShareGPT 1,000 at once': 13383.6,
    'gpustack GLM-4.6 8xH200 vLLM v0.11.0 TP8 BF16, ShareGPT at concurrency 4, TPOT': 67.6,
    'gpustack GLM-4.6 8xH200 vLLM v0.11.0 TP8 BF16, ShareGPT at concurrency 4, throughput': 33.8,
    'gpustack gpt-oss-120b 1xH100 vLLM v0.10.2, ShareGPT at concurrency 4, TPOT': 138.5,
    'gpustack gpt-oss-120b 1xH100 vLLM v0.10.2, ShareGPT at concurrency 4, throughput': 553.9,
    'gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 TP2, ShareGPT at concurrency 4, TPOT': 174.7,
    'gpustack gpt-oss-120b 2xH100 vLLM v0.10.2 TP2, ShareGPT at concurrency 4, throughput': 349.3,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 4, 8K/1K': 114.6,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 4, 8K/1K, throughput': 57.3,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 8, 8K/1K': 90.2,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 8, 8K/1K, throughput': 90.2,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 16, 8K/1K': 66.2,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 16, 8K/1K, throughput': 132.4,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 32, 8K/1K': 47.0,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 32, 8K/1K, throughput': 188.1,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 64, 8K/1K': 33.1,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 64, 8K/1K, throughput': 265.0,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 128, 8K/1K': 22.3,
    'InferenceX vLLM v0.19.1 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 128, 8K/1K, throughput': 356.7,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 4, 8K/1K': 110.4,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 4, 8K/1K, throughput': 220.9,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 8, 8K/1K': 85.2,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 8, 8K/1K, throughput': 340.8,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 16, 8K/1K': 60.9,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 16, 8K/1K, throughput': 487.0,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 32, 8K/1K': 42.1,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 32, 8K/1K, throughput': 672.8,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 64, 8K/1K': 29.5,
    'InferenceX vLLM v0.21 MiniMax-M2.5 2xB200 TP2 FP8, concurrency 64, 8K/1K, throughput': 944.6,
    'InferenceX TensorRT-LLM 1.2.0rc2.post2 gpt-oss-120b 1xB200 TP1, concurrency 256, 8K/1K': 30.5,
    'InferenceX TensorRT-LLM 1.2.0rc2.post2 gpt-oss-120b 1xB200 TP1, concurrency 256, 8K/1K, throughput': 7805.2,
    'InferenceX ATOM 0.1.1 gpt-oss-120b 1xMI355X TP1, concurrency 128, 8K/1K': 42.3,
    'InferenceX ATOM 0.1.1 gpt-oss-120b 1xMI355X TP1, concurrency 128, 8K/1K, throughput': 5419.8,
    'InferenceX TensorRT-LLM gpt-oss-dev gpt-oss-120b 1xH200 TP1, concurrency 64, 8K/1K': 23.9,
    'InferenceX TensorRT-LLM gpt-oss-dev gpt-oss-120b 1xH200 TP1, concurrency 64, 8K/1K, throughput': 1527.0,
    'InferenceX vLLM v0.17.0 gpt-oss-120b 1xMI300X TP1, concurrency 64, 8K/1K': 33.4,
    'InferenceX vLLM v0.17.0 gpt-oss-120b 1xMI300X TP1, concurrency 64, 8K/1K, throughput': 2135.1,
    'InferenceX vLLM v0.18.0 gpt-oss-120b 2xH100 TP2, concurrency 64, 8K/1K': 38.6,
    'InferenceX vLLM v0.18.0 gpt-oss-120b 2xH100 TP2, concurrency 64, 8K/1K, throughput': 1236.5,
    'InferenceX TensorRT-LLM 1.2.0rc2.post2 gpt-oss-120b 1xB200 TP1, concurrency 256, 1K/1K': 57.0,
    'InferenceX TensorRT-LLM 1.2.0rc2.post2 gpt-oss-120b 1xB200 TP1, concurrency 256, 1K/1K, throughput': 14590.6,
    'InferenceX ATOM 0.1.1 gpt-oss-120b 1xMI355X TP1, concurrency 128, 1K/1K': 61.2,
    'InferenceX ATOM 0.1.1 gpt-oss-120b 1xMI355X TP1, concurrency 128, 1K/1K, throughput': 7839.1,
    'InferenceX TensorRT-LLM gpt-oss-dev gpt-oss-120b 1xH200 TP1, concurrency 64, 1K/1K': 35.1,
    'InferenceX TensorRT-LLM gpt-oss-dev gpt-oss-120b 1xH200 TP1, concurrency 64, 1K/1K, throughput': 2244.1,
    'InferenceX vLLM v0.17.0 gpt-oss-120b 1xMI300X TP1, concurrency 64, 1K/1K': 53.3,
    'InferenceX vLLM v0.17.0 gpt-oss-120b 1xMI300X TP1, concurrency 64, 1K/1K, throughput': 3414.1,
    'InferenceX vLLM v0.18.0 gpt-oss-120b 2xH100 TP2, concurrency 64, 1K/1K': 59.0,
    'InferenceX vLLM v0.18.0 gpt-oss-120b 2xH100 TP2, concurrency 64, 1K/1K, throughput': 1887.5,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 1, 1K/1K': 86.2,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 16, 1K/1K': 50.6,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 100, 1K/1K': 25.4,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 1, 1K/8K': 86.2,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 16, 1K/8K': 56.2,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 64, 1K/8K': 38.5,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 1, 8K/1K': 86.2,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 16, 8K/1K': 49.9,
    'SGLang 0.5.6 GLM-4.6 8xB200 TP8 BF16, concurrency 64, 8K/1K': 26.9,
    'SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency 1, 1K/1K': 140.4,
    'SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency 16, 1K/1K': 101.8,
    'SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency 100, 1K/1K': 51.8,
    'SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency 1, 8K/1K': 140.4,
    'SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency 16, 8K/1K': 101.3,
    'SGLang 0.5.8 MiniMax-M2.5 8xB200 TP8 EP8 FP8, concurrency 64, 8K/1K': 57.9,
    'SGLang 0.5.9 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 1, 1K/1K': 139.7,
    'SGLang 0.5.9 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 16, 1K/1K': 78.8,
    'SGLang 0.5.9 MiniMax-M2.5 8xH100 TP8 EP8 FP8, concurrency 100, 1K/1K': 38.5,
    'SGLang 0.5.7 MiniMax-M2 4xMI300X TP4 FP8, concurrency 1, 1K/1K': 141.3,
    'SGLang 0.5.7 MiniMax-M2 4xMI300X TP4 FP8, concurrency 16, 1K/1K': 81.0,
    'SGLang 0.5.7 MiniMax-M2 4xMI300X TP4 FP8, concurrency 100, 1K/1K': 35.1,
}
