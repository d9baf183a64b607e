"""The twenty-fifth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 8327ee4, by someone who did not change the model; none of them was
used to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is
silent (`assumed`). It was searched for DeepSeek-V3/R1, Kimi K2 and Qwen3-235B serving figures on B200, GB200 and
GB300 with their setup stated (MLPerf Inference result repositories, InferenceX pull requests and its repository,
TensorRT-LLM / SGLang / vLLM issues and pull requests). No figure here is used by another part. Two sources are new
to the validation: NVIDIA's MLPerf Inference v5.1 DeepSeek-R1 submission (blinds 13 and 14 looked for its configs
and did not find them) and TensorRT-LLM PR #7104. The other two are InferenceX image-bump pull requests whose
baseline tables no part has read (blind 22 names only PRs #2989 and #3010, whose tables it could not read); they
bring B200 rows of DeepSeek-R1-0528 FP8 at concurrency 1 and 2, on 4 GPUs, and of TensorRT-LLM 1.3.

Sources (quoted as the stored copies print them):
- MLPerf Inference v5.1, NVIDIA's closed-division DeepSeek-R1 submission (August 2025; TensorRT-LLM's PyTorch
  backend through NVIDIA's harness), as two public forks of mlcommons/inference_results_v5.1 hold it.
  (a) github.com/ykamiset/inference_results_v5.1 at e9ccad4d6: the configs
  closed/NVIDIA/configs/{B200-SXM-180GBx8, GB200-NVL72_GB200-186GB_aarch64x72,
  GB300-NVL72_GB300-288GB_aarch64x72_TRT}/{Offline,Server}/deepseek-r1.py, every one with
  `llm_fields.tensor_parallelism: 8`, `llm_fields.pipeline_parallelism: 1`, `llm_fields.moe_expert_parallelism: 8`,
  `'enable_attention_dp': True`, `"adp_balancing_enable": True`, `'kv_cache_dtype': 'fp8'`,
  `model_fields.precision: 'fp4'`, `'enable_chunked_context': False`, `'use_inflight_batching': True`,
  `'cuda_graph_padding_enabled': True`, `harness_fields.use_graphs: True` and `'max_input_len': 3140`; B200 and GB200
  `model_fields.gpu_batch_size: {'deepseek-r1': 512}`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_num_tokens': 4608` (Offline) or `3456` (Server); GB200 Server
  `loadgen_fields.server_target_qps: 5 * 9`; GB300 Offline `gpu_batch_size {'deepseek-r1': 1536}`,
  `'max_concurrency': 10240`, `'cuda_graph_batch_sizes': [128, 256, 512, 896, 1024, 1280]`, `'moe_backend':
  'CUTLASS'`, `'kvcache_free_gpu_mem_frac': 0.95`, runtime `'max_num_tokens': 6656`; GB300 Server `gpu_batch_size
  512`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`, `'max_num_tokens': 3456`. No speculative-decoding field
  appears in any of them, and the harness's extra-config writer (closed/NVIDIA/code/llmlib/config.py,
  TrtllmExtraYAMLConfig._generate_extra_config_yaml) writes none. The same config.py: 'max_concurrency applies to
  each LLMCore (ie each data-parallel rank) of inference' and 'since max-bs applies per attention-rank, when
  enabled, each TP rank has a DP rank of attention block'. code/deepseek-r1/tensorrt/README.md: the checkpoint
  `nvidia/deepseek-r1-fp4` (or `nvidia/DeepSeek-R1-FP4-v2`, 'the weight of WO_GEMM is additionally quantized to
  FP4'); generation_config.json `"max_output_len": 20000`, `"temperature": 0.0`. The result logs
  closed/NVIDIA/results/{GB200-NVL72_GB200-186GB_aarch64x72_TRT, GB300-NVL72_GB300-288GB_aarch64x72_TRT}/deepseek-r1/
  {Offline,Server}/performance/run_1/mlperf_log_summary.txt: GB200 Offline 'Samples per second: 77.995', 'Tokens per
  second: 289712', 'samples_per_query : 210624'; GB200 Server 'Completed samples per second    : 44.76', 'Completed
  tokens per second: 167578.06', 'Mean latency (ns)               : 216208976941', 'Mean Time to Output Token (ns)
  : 69572752', 'target_qps : 45'; GB300 Offline 'Samples per second: 115.017', 'Tokens per second: 420659',
  'samples_per_query : 396000'; GB300 Server 'Completed samples per second    : 56.95', 'Completed tokens per second:
  209327.68', 'Mean latency (ns)               : 233104690927', 'Mean Time to Output Token (ns)                :
  63719543', 'target_qps : 60'; all 'Result is : VALID', 'ttft_latency (ns): 2000000000', 'tpot_latency (ns):
  80000000'. (b) github.com/ntuhpc/inference_results_v5.1 at a634ab772,
  closed/NVIDIA/results/B200-SXM-180GBx8_TRT/README.md ('MLPerf Inference v5.1', 'NVIDIA - NVIDIA DGX B200 (8x
  B200-SXM-180GB, TensorRT)'), its results table: 'deepseek-r1 | exact_match: 80.5446, TOKENS_PER_SAMPLE: 3497.6047
  | Tokens/s | 18592.20 | N/A | Tokens/s | 33379.00' (server, interactive, offline). The dataset
  (mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl): its 4,388 prompts' token lengths as
  github.com/openshift-psap/performance-dashboard holds them at 7100702 (mlperf-data/summaries/deepseek-r1.csv,
  columns input_length, output_length), mean input 803.8 tokens (computed here; at most 3,140).
- SemiAnalysis InferenceX PR #3363 ('[Klaud Cold] Update dsr1-fp8-b200-sglang SGLang image to v0.5.20-cu130',
  github.com/SemiAnalysisAI/InferenceX/pull/3363, 2026-09-22), its baseline table: '**Baseline:** 2026-05-22 ·
  `lmsysorg/sglang:v0.5.12-cu130`  Mean latency', '| Point | Total tok/s/GPU ↑ | Output tok/s/GPU ↑ | TTFT ms ↓ |
  TPOT ms ↓ |', '| 1k/1k c1 TP8 EP1 5c7bfe | 33.89 | 17.01 | 160.36 | 7.18 |', '| 1k/1k c2 TP8 EP1 49ee8c | 60.92 |
  30.74 | 177.91 | 7.93 |', '| 1k/1k c4 TP8 EP1 9fcf40 | 107.96 | 53.72 | 203.87 | 8.82 |', '| 1k/1k c8 TP8 EP1
  565b6f | 173.97 | 87.31 | 248.74 | 10.96 |', '| 1k/1k c16 TP8 EP1 daf140 | 292.05 | 145.25 | 368.49 | 13.09 |', '|
  1k/1k c32 TP8 EP1 603745 | 467.27 | 234.01 | 470.96 | 16.21 |', '| 1k/1k c64 TP8 EP1 71dbb5 | 678.09 | 338.97 |
  1,170.32 | 21.73 |', '| 8k/1k c1 TP4 EP1 685589 | 266.6 | 29.78 | 410.18 | 7.96 |', '| 8k/1k c1 TP8 EP1 734c7e |
  144.84 | 16.18 | 314.28 | 7.39 |', '| 8k/1k c2 TP4 EP1 c25f6c | 460.9 | 51.72 | 483.64 | 9.13 |'. The run's setup,
  from the InferenceX repository at d4948f993 (2026-05-22): .github/configs/nvidia-master.yaml, 'dsr1-fp8-b200-sglang'
  (`image: lmsysorg/sglang:v0.5.12-cu130`, `model: deepseek-ai/DeepSeek-R1-0528`; 1024 / 1024 `{ tp: 8, ep: 1,
  conc-start: 1, conc-end: 64 }`; 8192 / 1024 `{ tp: 8, ep: 1, conc-start: 1, conc-end: 4 }` and `{ tp: 4, ep: 1,
  conc-start: 1, conc-end: 32 }`; commit 6a4fe2a12 of 2026-05-22 'dsr1-sglang: extend sweep to include conc 1 & 2');
  benchmarks/single_node/dsr1_fp8_b200.sh (unchanged from 2026-05-12 to 2026-06-02): `sglang.launch_server ...
  --tensor-parallel-size=$TP --data-parallel-size=1 --cuda-graph-max-bs $CUDA_GRAPH_MAX_BATCH_SIZE
  --max-running-requests $MAX_RUNNING_REQUESTS --mem-fraction-static $MEM_FRAC_STATIC --kv-cache-dtype fp8_e4m3
  --chunked-prefill-size $CHUNKED_PREFILL_SIZE ... --enable-flashinfer-allreduce-fusion ... --disable-radix-cache
  --attention-backend trtllm_mla --stream-interval 30 --ep-size $EP_SIZE --moe-runner-backend flashinfer_trtllm
  --quantization fp8`, at TP 8 `MAX_RUNNING_REQUESTS=128`, `CUDA_GRAPH_MAX_BATCH_SIZE=128`, `MEM_FRAC_STATIC=0.82`,
  `CHUNKED_PREFILL_SIZE=32768`, at TP 4 (8192 / 1024 only) `MAX_RUNNING_REQUESTS=32`, `CUDA_GRAPH_MAX_BATCH_SIZE=32`,
  `MEM_FRAC_STATIC=0.95`, `CHUNKED_PREFILL_SIZE=8192`; the client, run_benchmark_serving of
  benchmarks/benchmark_lib.sh: `benchmark_serving.py ... --dataset-name random --random-input-len ...
  --random-output-len ... --random-range-ratio "$random_range_ratio" --num-prompts "$((CONC * 10))"
  --max-concurrency "$max_concurrency" --request-rate inf --ignore-eos ... --num-warmups "$((2 * max_concurrency))"`,
  with .github/workflows/benchmark-tmpl.yml's `RANDOM_RANGE_RATIO: 0.8`.
- SemiAnalysis InferenceX PR #3317 ('[Klaud Cold] Update dsr1-fp8-b200-trt TensorRT-LLM image to 1.3.0rc27',
  github.com/SemiAnalysisAI/InferenceX/pull/3317, 2026-09-20), its baseline table: '**Baseline:** 2026-05-18 ·
  `nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14`  Mean latency', '| 1k/1k c4 TP8 EP1 3bbdf9 | 109.42 | 54.45 |
  189.91 | 8.69 |', '| 1k/1k c8 TP4 EP1 f3f420 | 294.45 | 147.77 | 194.49 | 13.06 |', '| 1k/1k c8 TP8 EP1 f65dd1 |
  176.52 | 88.59 | 180.97 | 10.86 |', '| 1k/1k c16 TP4 EP1 c85941 | 460.04 | 228.8 | 218.01 | 16.92 |', '| 1k/1k c64
  TP8 EP1 a14bb9 | 749.44 | 374.64 | 569.02 | 20.06 |', '| 1k/1k c128 TP8 EP1 b974b1 | 1,228.86 | 613.76 | 591.66 |
  24.54 |', '| 8k/1k c4 TP8 EP1 0d4f86 | 455.28 | 50.65 | 322.69 | 9.29 |', '| 8k/1k c8 TP4 EP1 c34538 | 1,162.66 |
  130.7 |' (the stored text ends there). The run's setup, from the InferenceX repository at e43ae2f1b (2026-05-18,
  '[Klaud Cold] Update dsr1-fp8-b200-trt (+mtp) TRT-LLM image to v1.3.0rc14 (#1488)'): 'dsr1-fp8-b200-trt'
  (`image: nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc14`, model deepseek-ai/DeepSeek-R1-0528; 1024 / 1024 `{ tp: 8,
  ep: 1, conc-start: 64, conc-end: 128 }`, `{ tp: 4, ep: 1, conc-start: 8, conc-end: 16 }`, `{ tp: 8, ep: 1,
  conc-start: 4, conc-end: 8 }`; 8192 / 1024 `{ tp: 8, ep: 1, 64-256 }`, `{ tp: 4, ep: 1, 8-32 }`, `{ tp: 8, ep: 1,
  4-8 }`; no dp-attn key: DP_ATTENTION false); benchmarks/single_node/dsr1_fp8_b200_trt.sh: `trtllm-serve $MODEL ...
  --backend=pytorch --max_seq_len=$MAX_MODEL_LEN --max_num_tokens=$MAX_NUM_TOKENS --tp_size=$TP --ep_size=$EP_SIZE
  --extra_llm_api_options=$EXTRA_CONFIG_FILE`, the extra config `cuda_graph_config: enable_padding: true
  max_batch_size: $CUDA_GRAPH_MAX_BATCH_SIZE` (= CONC), `enable_attention_dp: $DP_ATTENTION`, `kv_cache_config: dtype:
  fp8 free_gpu_memory_fraction: $KV_CACHE_FREE_MEM_FRACTION` (0.8; 0.75 at TP 4 8192 / 1024) `enable_block_reuse:
  false`, `moe_config: backend: TRTLLM`, and at 1024 / 1024 with CONC >= 64 piecewise CUDA graphs
  (torch_compile_config) and `batch_wait_timeout_iters: 40`, `batch_wait_max_tokens_ratio: 0.8`; `export
  TLLM_OVERRIDE_LAYER_NUM=61`; the client as PR #3363's (run_benchmark_serving, `--backend openai`, 10 x CONC prompts,
  range ratio 0.8).
- TensorRT-LLM PR #7104 ('[None][perf] Disable Swap AB when num tokens exceeds N dimension',
  github.com/NVIDIA/TensorRT-LLM/pull/7104, 2025-08-21, merged): 'GB200 DeepSeek 4GPUs', its 'Optimized'
  trtllm-bench report: 'Model Path:  .../DeepSeek-R1-0528-FP4', 'TensorRT-LLM Version: 1.1.0rc1', 'KV Cache Dtype:
  FP8', 'Quantization:  NVFP4', 'Number of requests:             6144', 'Number of concurrent requests:  1018.8281',
  'Average Input Length (tokens):  1024.0000', 'Average Output Length (tokens): 1024.0000', 'TP Size:
  4', 'PP Size:                1', 'EP Size:                4', 'Max Runtime Batch Size: 1024', 'Max Runtime Tokens:
  2176', 'Scheduling Policy:      GUARANTEED_NO_EVICT', 'KV Memory Percentage:   70.00%', 'Request Throughput
  (req/sec):                     7.3411', 'Total Output Throughput (tokens/sec):             7517.2584', 'Average
  request latency (ms):                     138784.6399'. Little's law agrees with the printed concurrency: 7.3411
  a second x 138.78 s = 1,019 in flight.

Figures looked at and not taken: MLPerf's B200 Server figure (18,592.20 tok/s): the B200 result logs are in neither
stored fork, so its requests in flight and its TPOT are not published, and a server run's throughput is the load
offered to it (5 queries a second, the config's target) unless the in-flight count it took is known; MLPerf's
median TPOTs (61.3 ms GB200, 66.1 ms GB300: the mean, the latency the runs are constrained on, taken), TTFTs and
percentiles, and the offline runs' latencies (the queue of an offline run, not a step); MLPerf's Interactive
scenario (no DeepSeek-R1 entry: 'N/A'); the GB300 Server config's `server_target_qps: 61.2` against the log's
'target_qps : 60' (the run's log is read; the target does not enter a reading); PR #3363's 8k/1k rows past c2 (past
the stored excerpt), its rows marked 'N/A', its TTFT and total-throughput columns (the same runs as the output
columns); PR #3317's 8k/1k c8 TP4 TPOT (cut off; its output tok/s a GPU, 130.7, is taken) and its 'N/A' rows; PR
#7104's baseline run (past the excerpt) and its TTFT (3,563.9 ms average: queueing of a burst of 6,144); the B300
image-bump baselines (InferenceX PRs #3175 and #3183: B300 is not a configure card); aiconfigurator issue #1396
(Kimi-K2.5-NVFP4 on 8 B200 with vLLM: the measured point's TP / DP / EP not in the readable part); SGLang issue #9145
(result table past the excerpt, a user's own FP8 quantisation), PRs #8552 and #8588 (result tables, GPU or model
not in the stored text); TensorRT-LLM issue #3058 (a misconfigured reproduction without a result block); vLLM issue
#23752 (its result block not readable whole, as blind 17 found); TensorRT-LLM tech blog 2 (results as images);
InferenceX PR #2989 (table not in the stored text, as blind 22 found) and the disaggregated or Kimi K2.6 baselines
(#3034, #3024, #3082, #3160, #3076: every row 'N/A'); MLPerf Inference v6.0 forks (not read). No new Qwen3-235B or
Kimi K2 figure with its setup stated was found.

Readings common to all (decided before the model was run): DeepSeek-R1 / R1-0528 as configure's deepseek-r1; the
cards as the sources name them, configure's b200, gb200 and gb300 profiles; a mean TPOT of a run with more than one
request in flight as the colocated TPOT at the same batch (the prefills interleaved with the decodes stall them
and the mean counts the stalls: the reading of c99b6a0 and blinds 15-17, 23 and 24), of one request alone as 1 /
TPOT of decode (no other request's prefill interleaves with it: blinds 15 and 16); an output throughput as colocated
at the requests in flight over the instance's GPUs; no speculative decoding (no source sets it); CUDA graphs at
decode (every launch captures up to the batch it runs); KV memory at configure's default 0.9 of the card (the
engines' fractions of free memory are not the model's input, as blinds 8 and 14 leave them); lengths at their means,
their spread not modelled (as every earlier part).

InferenceX (PRs #3363 and #3317): 8 B200 at TP 8 or 4 B200 at TP 4, one instance, the table's 'Output tok/s/GPU'
over the instance's GPUs (c1 TP8: 17.01 x 8 = 136 tok/s against 1 / 7.18 ms = 139; 8k/1k c1 TP4: 29.78 x 4 = 119
against 126); EP 1 as the experts split TP over the instance (Layout(tp, 1)), one attention group (no DP attention:
SGLang's --data-parallel-size=1, TensorRT-LLM's DP_ATTENTION false); DeepSeek-R1-0528's block-scaled FP8 checkpoint
with FP8 KV (--kv-cache-dtype fp8_e4m3; kv_cache_config dtype fp8); no prefix-cache hits (random prompts, radix
cache / block reuse off); the closed loop (--max-concurrency, 10 x CONC prompts after 2 x CONC warm-ups) read at its
concurrency in flight; lengths uniform in [0.8 L, L] at ratio 0.8, means 922 for 1,024 and 7,373 for 8,192 (blinds
22 and 24). SGLang v0.5.12: its scheduler without --enable-mixed-chunk under a closed loop, prefill "separate" (eager
passes of their own: blinds 11, 15-17 and 24); its trtllm_mla attention backend, flashinfer all-reduce fusion and
FlashInfer / TRT-LLM MoE runner are not modelled apart. TensorRT-LLM 1.3.0rc14 (trtllm-serve, PyTorch backend):
in-flight batching, prefill "mixed" (configure's reading of TensorRT-LLM, blinds 8 and 14); its TRTLLM MoE backend,
the piecewise CUDA graphs of its prefill and the batch-wait setting at 1K/1K concurrency >= 64 are not modelled
apart; TLLM_OVERRIDE_LAYER_NUM=61 is DeepSeek-R1's own 61 layers.

MLPerf v5.1 (TensorRT-LLM through NVIDIA's harness): each instance TP 8 with enable_attention_dp and EP 8, read as
eight attention data-parallel ranks with whole experts over them (DEP8, Layout(1, 8)); the NVL72 systems as nine
such instances in their 72 GPUs (the GB200 Server target 5 x 9 queries a second, B200's 5 per instance), the
published figure over 72 GPUs (the figure a GPU is the instance's for any count of instances); NVIDIA's 'fp4'
DeepSeek-R1 checkpoint (nvidia/deepseek-r1-fp4) as blinds 2 and 14 read NVIDIA's NVFP4 checkpoints (R1_FP4, the same
formats as R1_V2: NVFP4 experts, dense FFNs and dispatch, FP8 attention; FP8 KV as the config sets); no redundant
experts (no expert load balancer in the configs; 'adp_balancing' balances requests over the attention ranks, not
experts): balancedness 0.70 (ASSUMED_PLAIN), as blind 8 reads TensorRT-LLM's DEP8 run; in-flight batching, prefill
"mixed" (whole prompts: enable_chunked_context False, up to max_num_tokens a rank's step; configure's 8,192-token
chunk is not an input); the mean prompt 804 tokens (the data set's 803.8) and the mean output the run's own: its
tokens a second over its samples a second (GB200 Offline 3,714, Server 3,744; GB300 Offline 3,657, Server 3,676; the
B200 performance logs are not stored, so B200 Offline takes B200's own accuracy run over the 4,388 prompts,
'TOKENS_PER_SAMPLE: 3497.6047', 3,498); 'Tokens per second' as generated tokens (exclude_input_from_output True).
Offline: every sample queued at once, read as a steady state at the batch a rank is capped at: the engine's max
batch (gpu_batch_size, a rank's with attention DP) or the harness's max_concurrency over the instance's 8 ranks,
whichever is smaller (B200 and GB200 min(512, 5,120 / 8) = 512, GB300 min(1,536, 10,240 / 8) = 1,280, the largest of
its CUDA-graph sizes), which the model's KV cache holds at those lengths (its largest fitting batch 720, 722 and
1,298 a GPU: checked before any figure was predicted), the fill and the heavy tail's drain left out (blind 14's
steady reading of trtllm-bench). Server: Poisson arrivals read as a colocated steady state at the requests in flight
by Little's law (completed samples a second x mean latency / 72: GB200 44.76 x 216.21 s = 9,678, 134.4 a GPU; GB300
56.95 x 233.10 s = 13,275, 184.4 a GPU) and the published mean TPOT ('Mean Time to Output Token') as the colocated
TPOT there.

TensorRT-LLM PR #7104: trtllm-bench's max-throughput run of DeepSeek-R1-0528 NVFP4 on 4 GB200 at TP 4 / EP 4, 1K /
1K; its report does not print the attention layout: read as blind 14 reads the same kind of run (trtllm-bench
max throughput of DeepSeek-R1-0528 NVFP4 on 4 GB200 at 1K / 1K, the release-1.2 perf overview's 'GB200 DEP4' row):
attention data-parallel with the experts over the 4 GPUs (DEP4), no redundant experts with EPLB's balance assumed
as that part's (ASSUMED_REPLICATED), the NVFP4 checkpoint as NVIDIA's (R1_FP4), FP8 KV (printed); in-flight
batching (prefill "mixed"); fixed lengths (1,024 / 1,024, printed averages of a synthetic set); at the printed
'Number of concurrent requests' (1,018.8) over 4 GPUs, 254.7 a GPU, rather than a batch that fits (the case has
its own in-flight count).
"""
from __future__ import annotations

from moeserve.capacity.balance import ASSUMED_PLAIN, ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind2 import R1_FP4
from moeserve.capacity.validation_cases import Case

IX_3363 = ("SemiAnalysis InferenceX PR #3363 (github.com/SemiAnalysisAI/InferenceX/pull/3363), the baseline table of "
           "2026-05-22, dsr1-fp8-b200-sglang with SGLang v0.5.12 (lmsysorg/sglang:v0.5.12-cu130), setup at d4948f993")
IX_3317 = ("SemiAnalysis InferenceX PR #3317 (github.com/SemiAnalysisAI/InferenceX/pull/3317), the baseline table of "
           "2026-05-18, dsr1-fp8-b200-trt with TensorRT-LLM 1.3.0rc14, setup at e43ae2f1b")
MLPERF = ("MLPerf Inference v5.1, NVIDIA's closed DeepSeek-R1 submission (TensorRT-LLM), {system}: configs and result "
          "logs of github.com/ykamiset/inference_results_v5.1 at e9ccad4d6{extra}")
TRT_7104 = ("TensorRT-LLM PR #7104 '[None][perf] Disable Swap AB when num tokens exceeds N dimension' "
            "(github.com/NVIDIA/TensorRT-LLM/pull/7104, 2025-08-21), its 'Optimized' trtllm-bench report")

_R1 = "deepseek-r1"
_R1_FP8 = Precision(weights="fp8", kv="fp8")  # DeepSeek-R1-0528's block-scaled FP8 checkpoint, FP8 KV
_IX_LENGTHS = {(1024, 1024): ("1K/1K", Workload(922, 922)), (8192, 1024): ("8K/1K", Workload(7373, 922))}
_IX_RATIO = ("lengths uniform in [0.8 L, L] (range ratio 0.8): means 922 / 922 (1K/1K) or 7,373 / 922 (8K/1K); "
             "10 x concurrency prompts after 2 x concurrency warm-ups, --max-concurrency read as that many in flight")
_IX_ENGINES = {
    "SGLang": (IX_3363, "SGLang v0.5.12", Options(prefill="separate"),
               "DeepSeek-R1-0528 FP8 (block-scaled) on {gpus} B200, SGLang v0.5.12 at --tensor-parallel-size={tp} "
               "--data-parallel-size=1 --ep-size 1 (attention TP {tp}, experts split TP {tp}), FP8 KV (fp8_e4m3), "
               "radix cache off, CUDA graphs (--cuda-graph-max-bs {graphs}), no MTP; SGLang's scheduler without "
               "mixed chunks (prefill 'separate', eager); trtllm_mla attention and all-reduce fusion not modelled "
               "apart; "),
    "TensorRT-LLM": (IX_3317, "TensorRT-LLM 1.3.0rc14", Options(),
                     "DeepSeek-R1-0528 FP8 (block-scaled) on {gpus} B200, TensorRT-LLM 1.3.0rc14 trtllm-serve (PyTorch "
                     "backend) at --tp_size {tp} --ep_size 1 (attention TP {tp}, experts split TP {tp}, no attention "
                     "DP), FP8 KV, block reuse off, CUDA graphs up to the concurrency, TRTLLM MoE backend, no MTP; "
                     "in-flight batching (prefill 'mixed'); "),
}


def _ix(engine: str, tp: int, isl: int, osl: int, conc: int, out: float, tpot: float | None) -> list[Case]:
    """An InferenceX row: its mean TPOT (where published) and its output tok/s a GPU."""
    source, version, options, setup = _IX_ENGINES[engine]
    label, w = _IX_LENGTHS[(isl, osl)]
    layout = Layout(tp, 1, 0)
    setup = setup.format(gpus=tp, tp=tp, graphs=128 if tp == 8 else 32) + _IX_RATIO
    head = f"InferenceX {version} DeepSeek-R1 FP8 {tp}xB200 TP{tp}, concurrency {conc}, {label}"
    cases = []
    if tpot is not None:
        alone = conc == 1
        how = ("read as 1 / TPOT of decode (one request alone: no other prefill interleaves)" if alone else
               f"read as the colocated TPOT at {conc} in flight ({conc / tp:g} a GPU)")
        cases.append(Case(f"{head}, TPOT", source, "b200", "decode" if alone else "colocated", layout, conc / tp, w,
                          options, round(1000 / tpot, 2), "tok/s/user",
                          f"1 / the mean TPOT ({tpot} ms), {how}; " + setup, _R1_FP8, model=_R1, blind=25))
    cases.append(Case(f"{head}, throughput", source, "b200", "colocated", layout, conc / tp, w, options, out,
                      "tok/s/GPU",
                      f"the table's output tok/s a GPU ({out}: the instance's over its {tp} GPUs) at concurrency "
                      f"{conc} ({conc / tp:g} a GPU); " + setup, _R1_FP8, model=_R1, blind=25))
    return cases


# (engine, TP, ISL, OSL, concurrency, output tok/s a GPU, mean TPOT ms or None where not in the stored text)
_IX_ROWS = [
    ("SGLang", 8, 1024, 1024, 1, 17.01, 7.18),
    ("SGLang", 8, 1024, 1024, 2, 30.74, 7.93),
    ("SGLang", 8, 1024, 1024, 4, 53.72, 8.82),
    ("SGLang", 8, 1024, 1024, 8, 87.31, 10.96),
    ("SGLang", 8, 1024, 1024, 16, 145.25, 13.09),
    ("SGLang", 8, 1024, 1024, 32, 234.01, 16.21),
    ("SGLang", 8, 1024, 1024, 64, 338.97, 21.73),
    ("SGLang", 4, 8192, 1024, 1, 29.78, 7.96),
    ("SGLang", 8, 8192, 1024, 1, 16.18, 7.39),
    ("SGLang", 4, 8192, 1024, 2, 51.72, 9.13),
    ("TensorRT-LLM", 8, 1024, 1024, 4, 54.45, 8.69),
    ("TensorRT-LLM", 4, 1024, 1024, 8, 147.77, 13.06),
    ("TensorRT-LLM", 8, 1024, 1024, 8, 88.59, 10.86),
    ("TensorRT-LLM", 4, 1024, 1024, 16, 228.8, 16.92),
    ("TensorRT-LLM", 8, 1024, 1024, 64, 374.64, 20.06),
    ("TensorRT-LLM", 8, 1024, 1024, 128, 613.76, 24.54),
    ("TensorRT-LLM", 8, 8192, 1024, 4, 50.65, 9.29),
    ("TensorRT-LLM", 4, 8192, 1024, 8, 130.7, None),
]

# --- MLPerf v5.1: DEP8 instances, NVIDIA's NVFP4 DeepSeek-R1, no redundant experts
_MLPERF_O = Options(balancedness=ASSUMED_PLAIN)
_MLPERF_SETUP = ("TensorRT-LLM through NVIDIA's MLPerf harness, each instance TP 8 with enable_attention_dp and EP 8 "
                 "(attention data-parallel over 8 ranks, whole experts over them: DEP8), no redundant experts "
                 "(balancedness 0.70 assumed; ADP balancing balances requests, not experts), NVIDIA's NVFP4 "
                 "DeepSeek-R1 (NVFP4 experts, dense FFNs and dispatch, FP8 attention), FP8 KV, CUDA graphs, no "
                 "speculative decoding; in-flight batching of whole prompts (prefill 'mixed'); the data set's mean "
                 "prompt 804 tokens (803.8), output {osl:,} ({how})")
_SYSTEMS = {
    "b200": ("8xB200", "B200-SXM-180GBx8", 8),
    "gb200": ("GB200 NVL72", "GB200-NVL72_GB200-186GB_aarch64x72", 72),
    "gb300": ("GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", 72),
}


def _mlperf_offline(hw: str, tokens: float, osl: int, how: str, cap: int, cap_text: str) -> Case:
    label, system, gpus = _SYSTEMS[hw]
    extra = (", with its results table of github.com/ntuhpc/inference_results_v5.1 at a634ab772 "
             "(closed/NVIDIA/results/B200-SXM-180GBx8_TRT/README.md)" if hw == "b200" else "")
    return Case(f"MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 {label} DEP8, Offline", MLPERF.format(system=system,
                extra=extra), hw, "colocated", Layout(1, 8, 0), cap, Workload(804, osl), _MLPERF_O,
                round(tokens / gpus, 2), "tok/s/GPU",
                f"the Offline 'Tokens per second' ({tokens:,}) / {gpus} GPUs; every sample queued at once, read as a "
                f"steady state at the batch a rank is capped at, {cap_text}, which the model's KV cache holds; "
                + _MLPERF_SETUP.format(osl=osl, how=how), R1_FP4, model=_R1, blind=25)


def _mlperf_server(hw: str, qps: float, tokens: float, latency_ns: int, tpot_ns: int, osl: int) -> list[Case]:
    label, system, gpus = _SYSTEMS[hw]
    source = MLPERF.format(system=system, extra="")
    batch = qps * latency_ns / 1e9 / gpus
    w = Workload(804, osl)
    setup = (f"Poisson arrivals read as a colocated steady state at the requests in flight by Little's law "
             f"('Completed samples per second : {qps}' x 'Mean latency (ns) : {latency_ns}' / {gpus} GPUs = "
             f"{batch:.1f} a GPU); "
             + _MLPERF_SETUP.format(osl=osl, how=f"the run's {tokens:,} tokens / {qps} samples a second"))
    head = f"MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 {label} DEP8, Server"
    return [
        Case(f"{head}, TPOT", source, hw, "colocated", Layout(1, 8, 0), round(batch, 2), w, _MLPERF_O,
             round(1e9 / tpot_ns, 2), "tok/s/user",
             f"1 / the 'Mean Time to Output Token (ns) : {tpot_ns}', read as the colocated TPOT; " + setup, R1_FP4,
             model=_R1, blind=25),
        Case(f"{head}, throughput", source, hw, "colocated", Layout(1, 8, 0), round(batch, 2), w, _MLPERF_O,
             round(tokens / gpus, 2), "tok/s/GPU",
             f"'Completed tokens per second: {tokens}' / {gpus} GPUs; " + setup, R1_FP4, model=_R1, blind=25),
    ]


BLIND25 = (
    [case for row in _IX_ROWS for case in _ix(*row)]
    + [
        _mlperf_offline("b200", 33_379.00, 3498, "B200's own accuracy run over the 4,388 prompts, 'TOKENS_PER_SAMPLE: "
                        "3497.6047': its performance logs are not stored", 512,
                        "min(gpu_batch_size 512, max_concurrency 5,120 / 8)"),
        _mlperf_offline("gb200", 289_712, 3714, "the run's 289,712 tokens / 77.995 samples a second", 512,
                        "min(gpu_batch_size 512, max_concurrency 5,120 / 8)"),
        _mlperf_offline("gb300", 420_659, 3657, "the run's 420,659 tokens / 115.017 samples a second", 1280,
                        "min(gpu_batch_size 1,536, max_concurrency 10,240 / 8), its largest CUDA-graph size"),
    ]
    + _mlperf_server("gb200", 44.76, 167_578.06, 216_208_976_941, 69_572_752, 3744)
    + _mlperf_server("gb300", 56.95, 209_327.68, 233_104_690_927, 63_719_543, 3676)
    + [
        Case("TensorRT-LLM PR #7104 trtllm-bench DeepSeek-R1-0528 NVFP4 4xGB200 DEP4, 1K/1K", TRT_7104, "gb200",
             "colocated", Layout(1, 4, 0), round(1018.8281 / 4, 2), Workload(1024, 1024),
             Options(balancedness=ASSUMED_REPLICATED), round(7517.2584 / 4, 2), "tok/s/GPU",
             "'Total Output Throughput (tokens/sec): 7517.2584' / 4 GPUs, at the printed 'Number of concurrent "
             "requests: 1018.8281' (254.7 a GPU; 7.3411 requests a second x 138.78 s agrees) of 6,144 requests of "
             "1,024 / 1,024 (fixed); TensorRT-LLM 1.1.0rc1, TP 4 / EP 4 with the attention layout not printed: "
             "attention data-parallel (DEP4) as blind 14 reads the release-1.2 perf overview's GB200 DEP4 1K/1K "
             "trtllm-bench row, no redundant experts with that part's balance (ASSUMED_REPLICATED); "
             "DeepSeek-R1-0528-FP4 as NVIDIA's NVFP4 checkpoints (NVFP4 experts, dense FFNs and dispatch, FP8 "
             "attention), FP8 KV (printed), CUDA graphs, no MTP (none printed); in-flight batching (prefill 'mixed')",
             R1_FP4, model=_R1, blind=25),
    ]
)

# Predicted when recorded (the model of main at 8327ee4): name -> the model's figure in the case's unit.
RECORDED = {
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 1, 1K/1K, TPOT': 114.6,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 1, 1K/1K, throughput': 14.2,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 2, 1K/1K, TPOT': 109.7,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 2, 1K/1K, throughput': 27.4,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 4, 1K/1K, TPOT': 100.1,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 4, 1K/1K, throughput': 50.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 8, 1K/1K, TPOT': 85.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 8, 1K/1K, throughput': 85.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 16, 1K/1K, TPOT': 67.5,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 16, 1K/1K, throughput': 135.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 32, 1K/1K, TPOT': 51.3,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 32, 1K/1K, throughput': 205.0,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 64, 1K/1K, TPOT': 38.6,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 64, 1K/1K, throughput': 308.8,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 4xB200 TP4, concurrency 1, 8K/1K, TPOT': 111.3,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 4xB200 TP4, concurrency 1, 8K/1K, throughput': 27.2,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 1, 8K/1K, TPOT': 114.6,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 8xB200 TP8, concurrency 1, 8K/1K, throughput': 14.1,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 4xB200 TP4, concurrency 2, 8K/1K, TPOT': 98.5,
    'InferenceX SGLang v0.5.12 DeepSeek-R1 FP8 4xB200 TP4, concurrency 2, 8K/1K, throughput': 49.3,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 4, 1K/1K, TPOT': 103.1,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 4, 1K/1K, throughput': 51.5,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 4xB200 TP4, concurrency 8, 1K/1K, TPOT': 70.4,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 4xB200 TP4, concurrency 8, 1K/1K, throughput': 140.8,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 8, 1K/1K, TPOT': 89.5,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 8, 1K/1K, throughput': 89.5,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 4xB200 TP4, concurrency 16, 1K/1K, TPOT': 52.6,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 4xB200 TP4, concurrency 16, 1K/1K, throughput': 210.5,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 64, 1K/1K, TPOT': 46.9,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 64, 1K/1K, throughput': 375.0,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 128, 1K/1K, TPOT': 40.0,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 128, 1K/1K, throughput': 639.4,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 4, 8K/1K, TPOT': 97.9,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 8xB200 TP8, concurrency 4, 8K/1K, throughput': 49.0,
    'InferenceX TensorRT-LLM 1.3.0rc14 DeepSeek-R1 FP8 4xB200 TP4, concurrency 8, 8K/1K, throughput': 127.2,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6452.8,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 GB200 NVL72 DEP8, Offline': 6973.9,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 GB300 NVL72 DEP8, Offline': 9055.4,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 GB200 NVL72 DEP8, Server, TPOT': 31.2,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 GB200 NVL72 DEP8, Server, throughput': 4196.2,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 GB300 NVL72 DEP8, Server, TPOT': 28.2,
    'MLPerf v5.1 TensorRT-LLM DeepSeek-R1 NVFP4 GB300 NVL72 DEP8, Server, throughput': 5193.7,
    'TensorRT-LLM PR #7104 trtllm-bench DeepSeek-R1-0528 NVFP4 4xGB200 DEP4, 1K/1K': 4188.3,
}
