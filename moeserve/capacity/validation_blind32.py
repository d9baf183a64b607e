"""The thirty-second blind part of the validation table (docs/capacity.md): published figures of Kimi K2.5 served in
Moonshot's native INT4 weights (W4A16), found and recorded with the predictions of the model of main at b260c42, by
someone who did not change the model; none of them was used to choose a mechanism or a factor. Earlier parts left
these figures out because configure had no INT4 weight format; this part reads them with the format 'int4' (4-bit
integer weights with one BF16 scale per 32 values, GEMMs computing in BF16 after dequantisation). Each case says which
reading of its source was taken where the source is silent (`assumed`); every reading was decided before any
prediction here was computed.

It was searched for Kimi K2 family runs in INT4 (Kimi-K2-Thinking, Kimi K2.5; K2.6 and later only where their text
backbone is Kimi K2's) on configure's cards, H200, H20, H800 and B200 first: the SemiAnalysis InferenceX blog posts
and the InferenceX repository's launch scripts and run matrices, the SGLang cookbook, the vLLM recipes, SGLang / vLLM
/ TensorRT-LLM pull requests and issues with benchmark blocks, and self-hosting write-ups. No H20 or H800 figure of
an INT4 Kimi run with its setup readable was found.

The checkpoint (moonshotai/Kimi-K2.5, as every source here serves it). Its config.json could not be read from a
stored copy of the Hugging Face repository itself; its text_config's quantization_config is read from a stored
third-party copy (a config-derived 'MOE Matmul Stats Report' whose source line is
`huggingface:moonshotai/Kimi-K2.5@main`; the index names no repository for it): `"config_groups": {"group_0":
{"input_activations": null, "output_activations": null, "targets": ["Linear"], "weights": {..., "group_size": 32,
"num_bits": 4, ..., "strategy": "group", "symmetric": true, "type": "int"}}}, "format": "pack-quantized", "ignore":
["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
"re:vision_tower.*", "re:mm_projector.*"], "kv_cache_scheme": null, "quant_method": "compressed-tensors"`, with
`text.num_hidden_layers 61`, `text.n_routed_experts 384`, `text.n_shared_experts 1`, `text.first_k_dense_replace
1`, `text.kv_lora_rank 512`, `text.q_lora_rank 1536`, `text.num_attention_heads 64`, `text.hidden_size 7168`,
`text.moe_intermediate_size 2048`, `text.model_type kimi_k2` (Kimi K2's architecture: configure's kimi-k2). The same
ignore list is quoted by a vLLM test as 'The real ignore list from Kimi-K2.6's compressed-tensors
quantization_config', ROCm/ATOM's recipes/Kimi-K2.5.md says 'The model uses native INT4 quantization
(`compressed-tensors`, group_size=32) for the routed MoE expert weights', and the 8xH100 write-up below logs vLLM's
`CompressedTensorsWNA16MarlinMoEMethod` (W4A16 Marlin MoE) loading it. Read so: the routed experts in INT4 (group 32,
BF16 activations); attention (self_attn, kv_b_proj included), the shared expert, layer 0's dense MLP and the LM head
in BF16 (the router's gate stays BF16: the engines build it without the quantization config); no KV scheme.
Precision(weights="bf16", moe="int4", kv="bf16") throughout (no source sets a KV format). The checkpoint's vision
tower and projector (BF16, idle on text prompts) are not in configure's kimi-k2: their memory is left out.

Sources (quoted as the stored copies print them):
- SemiAnalysis InferenceX blog 'B200 NVFP4 vs H200 INT4 on Kimi K2.5/K2.6: Up to 2.95x Better Performance per
  Dollar' (2026-05-26; github.com/SemiAnalysisAI/InferenceX-app, packages/app/content/blog/
  b200-nvfp4-vs-h200-int4-kimi-k2-vllm-perf-per-dollar.mdx at commit 26a3586): 'All rows are Kimi K2.5 / K2.6 at
  ISL 8192 / OSL 1024 on a single 8-GPU node, measured on InferenceX on 2026-05-19, GHA run 26118912054. Throughput
  is per-GPU.', 'Both SKUs run the same vllm/vllm-openai:v0.21.0 container', 'Moonshot ships K2.5/K2.6 with native
  INT4 weights as the default open-weights checkpoint, which is what the H200 INT4 and B200 INT4 curves in this post
  use directly', 'every measured H200 INT4 point is TP=8'; its tables '**H200 vLLM INT4 (TP=8)**' (| Conc |
  tok/s/GPU | tok/s/user | TPOT (ms) |: '| 4 | 384.4 | 91.18 | 10.97 |', '| 8 | 590.2 | 70.28 | 14.23 |', '| 16 |
  797.9 | 46.64 | 21.44 |', '| 32 | 990.9 | 28.86 | 34.65 |', '| 64 | 1,174.5 | 16.67 | 59.98 |') and '**B200 vLLM
  INT4 (TP=8)**' ('| 4 | 446.7 | 104.36 | 9.58 |', '| 8 | 692.8 | 81.12 | 12.33 |', '| 16 | 969.4 | 59.21 | 16.89
  |', '| 32 | 1,351.4 | 40.48 | 24.70 |', '| 64 | 1,790.7 | 26.01 | 38.45 |'). Blind 7 took the post's B200 NVFP4
  table; this part takes both INT4 tables. The run's setup, from github.com/SemiAnalysisAI/InferenceX at afb49f5a3
  (2026-05-19): .github/configs/nvidia-master.yaml 'kimik2.5-int4-h200-vllm' and 'kimik2.5-int4-b200-vllm' (image
  vllm/vllm-openai:v0.21.0, model moonshotai/Kimi-K2.5, isl 8192 / osl 1024 search space '{ tp: 8, conc-start: 4,
  conc-end: 64 }'); benchmarks/single_node/kimik2.5_int4_h200.sh and kimik2.5_int4_b200.sh: `vllm serve $MODEL ...
  --gpu-memory-utilization 0.95 --tensor-parallel-size $TP --max-model-len $MAX_MODEL_LEN --max-num-seqs $CONC
  --reasoning-parser kimi_k2 --tool-call-parser kimi_k2 --compilation_config.pass_config.fuse_allreduce_rms true
  --trust-remote-code --no-enable-prefix-caching` (the B200 script adds `export VLLM_USE_FLASHINFER_MOE_INT4=1`), no
  --enable-expert-parallel, no --kv-cache-dtype; `run_benchmark_serving ... --random-range-ratio
  "$RANDOM_RANGE_RATIO" --num-prompts $(( CONC * 10 )) --max-concurrency "$CONC"`, which benchmark_lib.sh runs with
  `--dataset-name random --request-rate inf --ignore-eos --num-warmups "$((2 * max_concurrency))"`; RANDOM_RANGE_RATIO
  0.8 (.github/workflows/benchmark-tmpl.yml), lengths uniform in [0.8 L, L] (utils/bench_serving/
  benchmark_serving.py's sample_uniform).
- SemiAnalysis InferenceX blog 'Best GPU for Kimi-K2.5 Inference — Benchmarks & Comparison (April 2026)'
  (2026-04-06; InferenceX-app, packages/app/content/blog/best-gpu-for-kimik2.5-inference.mdx at commit 7958e57,
  the stored version whose tables keep the B200 INT4 rows), '## GPU Comparison — Kimi-K2.5 at 8k/1k' (| GPU |
  Precision | Framework | Throughput/GPU (tok/s) | Median TTFT (ms) | Median TPOT (ms) | Concurrency | Date |):
  '| NVIDIA B200 | INT4 | vllm | 1,419.3 | 457.5 | 49.4 | 64 | 2026-03-24 |', '| NVIDIA H200 | INT4 | vllm |
  1,149.3 | 520.7 | 61.3 | 64 | 2026-03-27 |'; '## Additional Results — 1k/1k Sequence Length': '| NVIDIA B200 |
  INT4 | vllm | 541.8 | 155.2 | 29.0 | 64 | 2026-03-24 |', '| NVIDIA H200 | INT4 | vllm | 498.1 | 160.0 | 31.7 | 64
  | 2026-03-27 |' ('One row per GPU showing the highest-throughput configuration'). Blind 9 took this post's B200
  FP4 rows and left its INT4 rows out. Their setup, from InferenceX at 626932a (2026-03-27) and 79ea3651a
  (2026-03-24): 'kimik2.5-int4-h200-vllm' image vllm/vllm-openai:v0.16.0 and 'kimik2.5-int4-b200-vllm' image
  vllm/vllm-openai:v0.15.1, both model moonshotai/Kimi-K2.5 with only '{ tp: 8, conc-start: 4, conc-end: 64 }' at
  each length; the same launch lines as above (with --disable-log-requests; the B200 one with
  VLLM_USE_FLASHINFER_MOE_INT4=1 from that day's PR #935), RANDOM_RANGE_RATIO 0.8.
- The SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c), docs/autoregressive/Moonshotai/
  Kimi-K2.5.md, '### 5.2 Speed Benchmark': 'Hardware: NVIDIA H200 GPU (8x)', 'Model: Kimi-K2.5', 'Tensor
  Parallelism: 8', 'SGLang Version: 0.5.6.post2', `sglang serve --model-path moonshotai/Kimi-K2.5 --tp 8
  --trust-remote-code`, `python3 -m sglang.bench_serving --backend sglang --model moonshotai/Kimi-K2.5
  --dataset-name random --random-input-len {1000|8000} --random-output-len {1000|8000} --num-prompts 10
  --max-concurrency 1 --request-rate inf`; its three concurrency-1 blocks: 1K/1K 'Total input tokens: 6101', 'Total
  generated tokens: 4220', 'Concurrency: 1.00', 'Mean TPOT (ms): 9.22'; 1K/8K 'Total input tokens: 6101', 'Total
  generated tokens: 44462', 'Mean TPOT (ms): 14.36'; 8K/1K 'Total input tokens: 41941', 'Total generated tokens:
  4220', 'Mean TPOT (ms): 24.95'.
- t0mdicks0n/llm-self-hosting (github.com/t0mdicks0n/llm-self-hosting): notes/kimi-k2.5-benchmark-results.md at
  d9aa0fc, '# Kimi K2.5 Benchmark Results — 8x H100 80GB (GCP)', 'Date: 2026-02-09', 'Hardware: 8x NVIDIA H100 80GB
  HBM3 (GCP a3-highgpu-8g)', 'vLLM: 0.15.0 with tensor parallelism (tp=8)', 'Memory: 72.02 GiB model per GPU, 0.64
  GiB KV cache, gpu_memory_utilization=0.95', 'Limits: max_model_len=8192, max_num_seqs=64'; '## Benchmark
  (benchmark.py --rounds 3 --concurrent 2)': 'Sequential request 1/3... 1.146s (111.7 tok/s)',
  '2/3... 1.138s (112.5 tok/s)', '3/3... 1.138s (112.5 tok/s)', 'Total output: 384 tokens in 3.4s'; 'Concurrent
  Throughput (2 requests at a time)': 'Requests: 6', 'Latency (s): min=0.59 avg=0.59 max=0.60 p50=0.59', 'Tok/s:
  min=107.5 avg=107.6 max=107.7', 'Total output: 384 tokens in 3.6s'. notes/kimi-k2.5-setup-log.md (d9aa0fc): the
  working command `vllm serve $HOME/Kimi-K2.5 -tp 8 --served-model-name Kimi-K2.5 --mm-encoder-tp-mode data
  --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --trust-remote-code --gpu-memory-utilization 0.95
  --max-num-seqs 64 --max-model-len 8192`, the weights `snapshot_download('moonshotai/Kimi-K2.5', ...)`, 'torch.compile:
  ~15s', 'CUDA graph capture: ~8s', Marlin MoE ('CompressedTensorsWNA16MarlinMoEMethod'); scripts/benchmark.py
  (de34620): each request `{"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
  "temperature": 0.0, "stream": False}` timed from send to the whole response; the sequential prompt 'Explain what
  a neural network is in exactly 3 sentences.' at max_tokens 128, the concurrent one 'Write a haiku about GPUs.' at
  64, two at a time from a thread pool, three rounds. (The write-up calls this checkpoint 'full precision'; it is
  Moonshot's ~595 GB INT4 release, loaded through the Marlin W4A16 MoE path, as its own log shows.)

Figures looked at and not taken:
- The SGLang cookbook's Kimi-K2.5 H200 runs at 16, 64 and 100 in flight: the output throughput does not rise with
  the load (1K/1K: 258.18 tok/s at 'Concurrency: 14.09', 253.51 at 92.70; 8K/1K: 106.86 at 14.95, 132.86 at 60.12),
  the peak output rates are 4-5 times the means (1,103 and 1,199 tok/s) and the largest ITLs 0.66-6.5 s: not a steady
  step of the batch the run holds (the same 8 H200 serve 8K/1K at 64 in flight at 1,020-1,045 output tok/s under
  vLLM in the InferenceX rows taken), read as stalls of that build's INT4 serving path that configure does not
  model; its 1K/8K concurrency-64 block prints only 'Waiting for completion...'. The cookbook's Kimi-K2.6 page
  reprints the same K2.5 blocks ('The results below are measured with K2.5').
- The InferenceX posts' other rows: the May post's B200 NVFP4 table (blind 7) and interpolated iso-interactivity
  costs; the April post's FP4 rows (blind 9) and its AMD INT4 rows (MI355X, MI325X, MI300X: this part's brief names
  NVIDIA cards; MI325X is not a configure card). The 2026-05-19 run matrix also holds 1K/1K INT4 runs, which the
  post does not print.
- The vLLM recipes' Kimi-K2-Thinking 8xH200 TP8 and TP8+DCP8 runs (moonshotai/Kimi-K2-Think.md): 1,000 requests at
  100 a second, 8,000 in / 4,000 asked without --ignore-eos (388,750 generated: 389 a request), a KV cache of
  715,072 tokens holding about 89 of the prompts at once: a queue drained at the cache's limit, not a load read at
  a batch; DCP is not modelled.
- SGLang PR #18136 (an 8,192 / 1,024 bench_one_batch_server table at batch 1-16, ITL 6.99 / 8.04 / 10.29 / 13.93 ms,
  '[Blackwell]'): the model, card and TP are not in the readable part. SGLang PR #16892 (Kimi-K2-Thinking on B200
  at --tp 8, MXINT4 FlashInfer TRT-LLM MoE against Marlin): its result tables are past the readable part. SGLang PR
  #13287 (Kimi-K2-Thinking, 1,200 in / 20 out at concurrency 1 and 32: the table past the readable part, the card
  not named) and #13725 (gsm8k at --tp 8 --ep 4: lengths not given). vLLM PR #39315 (a FlashInfer MXINT4 fix: a
  vLLM 0.19.0 concurrency-1 block of 10 requests, 129.02 output tok/s): the card and model not in the readable part.
  vLLM issue #32832 and PR #32437 (kernel times only). SGLang PR #23461, AMD's W4A8 posts and InferenceX's MI355X
  Kimi K2.5 INT4 MTP result files: AMD cards, W4A8 or speculative decoding. ai-dynamo/aiconfigurator PR #403
  (predictions, not measurements). aarora79/agentic-coding-harness-benchmarks PR #56 (Kimi K2.7-Code).
- The 8xH100 write-up's test_inference runs (0.87 s for 96 completion tokens, 5.65 s for 638, 6.07 s for 687): one
  request at a time as in the benchmark taken, at reasoning outputs that stop at EOS under undisclosed prompts;
  its 'Context length (INT4) 32K' profile ('Kimi K2.5 NVFP4'): no figure.
- ktransformers, RTX PRO 6000, Mac Studio and Ascend runs of Kimi K2.5 / K2-Thinking: not configure cards.

Readings (decided before the model was run):
- InferenceX rows: Kimi K2.5 as moonshotai/Kimi-K2.5 (above) on 8 GPUs of one node at --tensor-parallel-size 8
  without --enable-expert-parallel: attention TP 8 with the experts split TP 8 (Layout(8, 1)), one instance; vLLM's
  INT4 MoE kernels (Marlin on H200; FlashInfer's TRT-LLM INT4 MoE on B200 with VLLM_USE_FLASHINFER_MOE_INT4=1, W4A16
  both) not modelled apart; the closed loop (10 x concurrency prompts after 2 x concurrency warm-ups at
  --max-concurrency, --max-num-seqs the concurrency) read at the concurrency in flight, concurrency / 8 a GPU;
  lengths uniform in [0.8 L, L], means 7,373 / 922 (8K/1K) and 922 / 922 (1K/1K); vLLM V1's scheduler with prefill
  chunks in the decode steps (prefill "mixed", configure's default); CUDA graphs at decode (vLLM's default); no
  speculative decoding; no prefix-cache hits (random prompts, prefix caching off); KV memory at the scripts' 0.95 of
  the card (Options(memory_fraction=0.95)); the fused all-reduce + RMSNorm pass not modelled apart; the vision
  encoder idle. 'tok/s/GPU' is InferenceX's total (input + output) throughput a GPU (as blinds 7 and 9 read it; the
  printed rows agree: 1,174.5 x 8 x 1,024 / 9,216 = 1,044 output tok/s, 64 / 59.98 ms = 1,067), so its output share
  OSL / (ISL + OSL) (1,024 / 9,216 at 8K/1K, 1/2 at 1K/1K; the range ratio scales both alike) is read as the
  colocated output tok/s a GPU. 'tok/s/user' (the May tables; 1,000 / TPOT) and 1,000 / 'Median TPOT' (the April
  tables) are read as 1 / the colocated TPOT at the run's concurrency (other requests' prefill chunks riding in the
  steps included, the reading of c99b6a0 that blinds 15 and 31 give a serving benchmark's TPOT with more than one in
  flight); the May post's TPOT statistic is not named (the April post's is the median): read as the same.
  The April rows are the runs of their dates (H200 2026-03-27 on v0.16.0, B200 2026-03-24 on v0.15.1 with the
  FlashInfer INT4 flag), 'the highest-throughput configuration' being concurrency 64, TP 8 (the only layout of
  their matrices).
- The SGLang cookbook rows: 8 H200, SGLang 0.5.6.post2 at --tp 8 (attention TP 8, experts split TP 8, no DP
  attention or EP), KV in BF16 (SGLang's 'auto'), CUDA graphs at decode, no speculative decoding, radix cache on but
  no hits (random prompts); one request at a time (10 prompts at --max-concurrency 1: 'Concurrency: 1.00'), so the
  mean TPOT is read as 1 / TPOT of decode at one sequence on the instance (1/8 a GPU); SGLang's random dataset at
  its default range ratio, lengths read as the totals' means: 610 in / 422 out (1K/1K), 610 / 4,446 (1K/8K), 4,194 /
  422 (8K/1K), decode context prompt + half the output.
- The 8xH100 write-up: 8 H100 (80 GB) at -tp 8 (attention TP 8, experts split TP 8), vLLM 0.15.0 with
  torch.compile and CUDA graphs, KV in BF16 (no --kv-cache-dtype), --gpu-memory-utilization 0.95 (0.64 GiB of KV a
  GPU: one sequence of up to ~9.6K tokens, enough for these requests); each printed latency read as one request's
  time from send to the full non-streamed response: its prefill plus its other output tokens (unit ms/request,
  phase decode), HTTP and detokenisation left out. The sequential run: one request at a time, 128 tokens out
  (max_tokens 128; 384 over 3) after a prompt of about 40 tokens (the 11-word message in Kimi's chat template with
  its default system line: not printed, assumed), published as the mean of the three printed latencies (1.146,
  1.138, 1.138 s: 1,140.7 ms). The concurrent run: two requests at a time, 64 tokens out each (384 over 6) after
  about 35 prompt tokens (assumed likewise), both in one batch from first to last token (2 in flight, 0.25 a GPU);
  published as 64 tokens / the printed mean 107.6 tok/s a request = 594.8 ms (within the printed 'avg=0.59').
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

IX_MAY = ("SemiAnalysis InferenceX blog 'B200 NVFP4 vs H200 INT4 on Kimi K2.5/K2.6' (2026-05-26, InferenceX-app commit "
          "26a3586), its tables 'H200 vLLM INT4 (TP=8)' and 'B200 vLLM INT4 (TP=8)', 8K/1K, vLLM v0.21.0, with "
          "InferenceX's launch scripts at afb49f5a3")
IX_APRIL = ("SemiAnalysis InferenceX blog 'Best GPU for Kimi-K2.5 Inference' (2026-04-06, InferenceX-app commit "
            "7958e57), its NVIDIA H200 and B200 INT4 vllm rows at 8k/1k and 1k/1k, with InferenceX's launch scripts "
            "at 626932a and 79ea3651a")
SGL_COOKBOOK = ("SGLang cookbook (github.com/sgl-project/sgl-cookbook at commit 7b5bd9c), Moonshotai/Kimi-K2.5.md, "
                "'Speed Benchmark' (8 H200, --tp 8, SGLang 0.5.6.post2), its 'Max request concurrency: 1' blocks")
H100_WRITEUP = ("t0mdicks0n/llm-self-hosting (github.com/t0mdicks0n/llm-self-hosting), "
                "notes/kimi-k2.5-benchmark-results.md 'Kimi K2.5 Benchmark Results — 8x H100 80GB (GCP)' "
                "(2026-02-09, at d9aa0fc) with its setup log and scripts/benchmark.py")

# moonshotai/Kimi-K2.5's quantization_config: INT4 (group 32) routed experts only; attention, shared expert, dense
# layer and LM head in BF16; no KV scheme (BF16 KV)
_KIMI_INT4 = Precision(weights="bf16", moe="int4", kv="bf16")
_W8K = Workload(7373, 922)  # 8,192 / 1,024 at InferenceX's range ratio 0.8: means 0.9 L
_W1K = Workload(922, 922)  # 1,024 / 1,024 likewise
_IX_OPTS = Options(memory_fraction=0.95)  # --gpu-memory-utilization 0.95

_IX_SETUP = ("Kimi K2.5 as moonshotai/Kimi-K2.5 (INT4 W4A16 routed experts, group 32; attention, shared expert, "
             "dense layer and LM head in BF16; BF16 KV: no --kv-cache-dtype) on 8 {card} of one node, vLLM {ver} at "
             "--tensor-parallel-size 8 without --enable-expert-parallel (attention TP 8, experts split TP 8), "
             "--max-num-seqs {conc}, --gpu-memory-utilization 0.95, prefix caching off, CUDA graphs at decode, prefill "
             "chunks in the decode steps (vLLM V1), no speculative decoding{kernel}; 10 x {conc} prompts after 2 x "
             "{conc} warm-ups at --max-concurrency {conc}, read as {conc} in flight ({per:g} a GPU); {lengths}")
_L8K = "ISL 8,192 / OSL 1,024 uniform in [0.8 L, L] (range ratio 0.8): means 7,373 / 922"
_L1K = "ISL 1,024 / OSL 1,024 uniform in [0.8 L, L] (range ratio 0.8): means 922 / 922"
_KERNEL = {"h200": " (Marlin W4A16 MoE)", "b200": " (FlashInfer TRT-LLM INT4 MoE, VLLM_USE_FLASHINFER_MOE_INT4=1)"}


def _ix_setup(hw: str, ver: str, conc: int, long_prompt: bool) -> str:
    return _IX_SETUP.format(card=hw.upper(), ver=ver, conc=conc, per=conc / 8, kernel=_KERNEL[hw],
                            lengths=_L8K if long_prompt else _L1K)


def _ix_user(src: str, hw: str, ver: str, conc: int, user: float, what: str, long_prompt: bool = True) -> Case:
    lengths = "8K/1K" if long_prompt else "1K/1K"
    return Case(f"vLLM {ver} Kimi K2.5 8x{hw.upper()} TP8 INT4, concurrency {conc}, {lengths}", src, hw, "colocated",
                Layout(8, 1, 0), conc / 8, _W8K if long_prompt else _W1K, _IX_OPTS, user, "tok/s/user",
                f"{what}, read as 1 / the colocated TPOT at {conc} in flight (other requests' prefill chunks in the "
                "steps included); " + _ix_setup(hw, ver, conc, long_prompt), _KIMI_INT4, model="kimi-k2", blind=32)


def _ix_tput(src: str, hw: str, ver: str, conc: int, total: float, long_prompt: bool = True) -> Case:
    lengths = "8K/1K" if long_prompt else "1K/1K"
    share, text = (1024 / 9216, "1,024 / 9,216") if long_prompt else (0.5, "1 / 2")
    return Case(f"vLLM {ver} Kimi K2.5 8x{hw.upper()} TP8 INT4, concurrency {conc}, {lengths}, throughput", src, hw,
                "colocated", Layout(8, 1, 0), conc / 8, _W8K if long_prompt else _W1K, _IX_OPTS,
                round(total * share, 2), "tok/s/GPU",
                f"output tok/s a GPU: the table's total (input + output) throughput a GPU ({total:,}) x {text} at "
                f"concurrency {conc}, colocated; " + _ix_setup(hw, ver, conc, long_prompt),
                _KIMI_INT4, model="kimi-k2", blind=32)


# The May post's INT4 tables: (concurrency, tok/s/GPU, tok/s/user, TPOT ms)
_MAY_H200 = [(4, 384.4, 91.18, 10.97), (8, 590.2, 70.28, 14.23), (16, 797.9, 46.64, 21.44), (32, 990.9, 28.86, 34.65),
             (64, 1174.5, 16.67, 59.98)]
_MAY_B200 = [(4, 446.7, 104.36, 9.58), (8, 692.8, 81.12, 12.33), (16, 969.4, 59.21, 16.89), (32, 1351.4, 40.48, 24.70),
             (64, 1790.7, 26.01, 38.45)]


def _may(hw: str, rows: list) -> list[Case]:
    cases = []
    for conc, total, user, tpot in rows:
        cases.append(_ix_user(IX_MAY, hw, "v0.21", conc, user, f"the table's tok/s/user ({user}; TPOT {tpot} ms)"))
    for conc, total, _user, _tpot in rows:
        cases.append(_ix_tput(IX_MAY, hw, "v0.21", conc, total))
    return cases


def _april(hw: str, ver: str, long_prompt: bool, total: float, tpot: float) -> list[Case]:
    return [_ix_user(IX_APRIL, hw, ver, 64, round(1000 / tpot, 2), f"1,000 / the row's median TPOT ({tpot} ms)",
                     long_prompt),
            _ix_tput(IX_APRIL, hw, ver, 64, total, long_prompt)]


_SGL_SETUP = ("Kimi K2.5 as moonshotai/Kimi-K2.5 (INT4 W4A16 routed experts; attention, shared expert, dense layer "
              "and LM head in BF16; BF16 KV) on 8 H200, SGLang 0.5.6.post2 at --tp 8 (attention TP 8, experts split "
              "TP 8), CUDA graphs at decode, no speculative decoding; 10 random prompts one at a time "
              "(--max-concurrency 1, 'Concurrency: 1.00'): decode of one sequence on the instance (1/8 a GPU); ")


def _sgl(lengths: str, isl: int, osl: int, tpot: float, totals: str) -> Case:
    return Case(f"SGLang 0.5.6 Kimi K2.5 8xH200 TP8 INT4, 1 request, {lengths}", SGL_COOKBOOK, "h200", "decode",
                Layout(8, 1, 0), 1 / 8, Workload(isl, osl), Options(), round(1000 / tpot, 2), "tok/s/user",
                f"1 / the mean TPOT ({tpot} ms) of one request at a time; " + _SGL_SETUP
                + f"SGLang's random lengths at its default range ratio, read as the totals' means: {totals} = "
                f"{isl:,} in / {osl:,} out, decode context prompt + half the output",
                _KIMI_INT4, model="kimi-k2", blind=32)


_H100_SETUP = ("Kimi K2.5 as moonshotai/Kimi-K2.5 (INT4 W4A16 routed experts through vLLM's Marlin MoE; attention, "
               "shared expert, dense layer and LM head in BF16; BF16 KV) on 8 H100 80GB (GCP a3-highgpu-8g), vLLM "
               "0.15.0 at -tp 8 (attention TP 8, experts split TP 8), torch.compile and CUDA graphs, "
               "--gpu-memory-utilization 0.95 (72.02 GiB of weights and 0.64 GiB of KV a GPU), --max-num-seqs 64, "
               "--max-model-len 8192, no speculative decoding; the latency of one non-streamed chat request from send "
               "to response, read as its prefill plus its other output tokens (HTTP and detokenisation left out)")
_H100_OPTS = Options(memory_fraction=0.95)

BLIND32 = [
    *_may("h200", _MAY_H200),
    *_may("b200", _MAY_B200),
    *_april("h200", "v0.16", True, 1149.3, 61.3),
    *_april("h200", "v0.16", False, 498.1, 31.7),
    *_april("b200", "v0.15.1", True, 1419.3, 49.4),
    *_april("b200", "v0.15.1", False, 541.8, 29.0),
    _sgl("1K/1K", 610, 422, 9.22, "6,101 / 4,220 over 10"),
    _sgl("1K/8K", 610, 4446, 14.36, "6,101 / 44,462 over 10"),
    _sgl("8K/1K", 4194, 422, 24.95, "41,941 / 4,220 over 10"),
    Case("vLLM 0.15 Kimi K2.5 8xH100 TP8 INT4, 1 request, chat 128 out, request latency", H100_WRITEUP, "h100",
         "decode", Layout(8, 1, 0), 1 / 8, Workload(40, 128), _H100_OPTS, 1140.7, "ms/request",
         "the mean of the three sequential latencies printed (1.146, 1.138, 1.138 s), one request at a time (1/8 a "
         "GPU), 128 tokens out (max_tokens 128; 384 over 3) after a prompt of about 40 tokens (the 11-word message "
         "'Explain what a neural network is in exactly 3 sentences.' in Kimi's chat template with its default system "
         "line: not printed, assumed); " + _H100_SETUP, _KIMI_INT4, model="kimi-k2", blind=32),
    Case("vLLM 0.15 Kimi K2.5 8xH100 TP8 INT4, 2 requests, chat 64 out, request latency", H100_WRITEUP, "h100",
         "decode", Layout(8, 1, 0), 2 / 8, Workload(35, 64), _H100_OPTS, 594.8, "ms/request",
         "64 tokens / the printed mean 107.6 tok/s a request (594.8 ms, within the printed 'avg=0.59' s) of the "
         "concurrent run: two requests at a time, both in one batch from first to last token (0.25 a GPU), 64 "
         "tokens out each (max_tokens 64; 384 over 6) after a prompt of about 35 tokens ('Write a haiku about GPUs.' "
         "in the chat template: assumed); " + _H100_SETUP, _KIMI_INT4, model="kimi-k2", blind=32),
]

# Predicted when recorded (the model of main at b260c42): name -> the model's figure in the case's unit.
RECORDED = {
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 4, 8K/1K': 83.7,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 8, 8K/1K': 63.1,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 16, 8K/1K': 42.9,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 32, 8K/1K': 26.9,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 64, 8K/1K': 16.2,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 4, 8K/1K, throughput': 41.9,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 8, 8K/1K, throughput': 63.1,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 16, 8K/1K, throughput': 85.8,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 32, 8K/1K, throughput': 107.8,
    'vLLM v0.21 Kimi K2.5 8xH200 TP8 INT4, concurrency 64, 8K/1K, throughput': 129.9,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 4, 8K/1K': 99.8,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 8, 8K/1K': 82.5,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 16, 8K/1K': 61.7,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 32, 8K/1K': 42.3,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 64, 8K/1K': 27.3,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 4, 8K/1K, throughput': 49.9,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 8, 8K/1K, throughput': 82.5,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 16, 8K/1K, throughput': 123.4,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 32, 8K/1K, throughput': 169.1,
    'vLLM v0.21 Kimi K2.5 8xB200 TP8 INT4, concurrency 64, 8K/1K, throughput': 218.4,
    'vLLM v0.16 Kimi K2.5 8xH200 TP8 INT4, concurrency 64, 8K/1K': 16.2,
    'vLLM v0.16 Kimi K2.5 8xH200 TP8 INT4, concurrency 64, 8K/1K, throughput': 129.9,
    'vLLM v0.16 Kimi K2.5 8xH200 TP8 INT4, concurrency 64, 1K/1K': 35.9,
    'vLLM v0.16 Kimi K2.5 8xH200 TP8 INT4, concurrency 64, 1K/1K, throughput': 287.1,
    'vLLM v0.15.1 Kimi K2.5 8xB200 TP8 INT4, concurrency 64, 8K/1K': 27.3,
    'vLLM v0.15.1 Kimi K2.5 8xB200 TP8 INT4, concurrency 64, 8K/1K, throughput': 218.4,
    'vLLM v0.15.1 Kimi K2.5 8xB200 TP8 INT4, concurrency 64, 1K/1K': 51.1,
    'vLLM v0.15.1 Kimi K2.5 8xB200 TP8 INT4, concurrency 64, 1K/1K, throughput': 408.5,
    'SGLang 0.5.6 Kimi K2.5 8xH200 TP8 INT4, 1 request, 1K/1K': 111.4,
    'SGLang 0.5.6 Kimi K2.5 8xH200 TP8 INT4, 1 request, 1K/8K': 111.4,
    'SGLang 0.5.6 Kimi K2.5 8xH200 TP8 INT4, 1 request, 8K/1K': 111.4,
    'vLLM 0.15 Kimi K2.5 8xH100 TP8 INT4, 1 request, chat 128 out, request latency': 1199.0,
    'vLLM 0.15 Kimi K2.5 8xH100 TP8 INT4, 2 requests, chat 64 out, request latency': 630.0,
}
