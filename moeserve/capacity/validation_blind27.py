"""The twenty-seventh blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at 6506675 (whose step model is that of 8327ee4 / d5e4167), by someone who
did not change the model; none of them was used to choose a mechanism or a factor. Each case says which reading of
its source was taken where the source is silent (`assumed`). It holds MLPerf Inference v6.0's DeepSeek-R1 Offline
and Server results on the cards configure has (B200, GB200, GB300; every one TensorRT-LLM through NVIDIA's harness,
whoever submitted it) and MLPerf Inference v5.1's DeepSeek-R1 results by submitters other than NVIDIA (B200, GB300
and one H200). Blind 25 took NVIDIA's own v5.1 runs and read no v6.0 fork; no figure here is used by another part.
The MLPerf runs are read exactly as blind 25 read them ("MLPerf v5.1" in that part's docstring and its
_mlperf_offline / _mlperf_server), with each run's own config values; those readings were decided before any
prediction here, and so was every reading this part adds for a case blind 25 did not meet (below).

Sources (quoted as the stored copies print them, runs of spaces collapsed to one):
- MLPerf Inference v6.0 (2026), github.com/gbeezybez/inference_results_v6.0 (a fork of
  mlcommons/inference_results_v6.0) at 232fbf90f; the results and configs came in ab33b2144 and later commits touch
  only open/Lattix. MLPerf Inference v5.1 (August 2025), github.com/ntuhpc/inference_results_v5.1 at 387c3dd04.
  Every result is <division>/<submitter>/results/<system>/deepseek-r1/<scenario>/performance/run_1/
  mlperf_log_summary.txt (the run's `mlperf_log_detail.txt` agrees: its 'requested_min_query_count' and target are
  the summary's), every config <division>/<submitter>/configs/<system without _TRT>/<scenario>/deepseek-r1.py, every
  system <division>/<submitter>/systems/<system>.json. Every config read here sets `llm_fields.tensor_parallelism:
  8`, `llm_fields.pipeline_parallelism: 1`, `llm_fields.moe_expert_parallelism: 8`, `'enable_attention_dp': True`,
  `"adp_balancing_enable": True`, `'kv_cache_dtype': 'fp8'`, `'use_inflight_batching': True`,
  `'exclude_input_from_output': True`, `'cuda_graph_padding_enabled': True`, `harness_fields.use_graphs: True`,
  `'max_input_len': 3140` and (but for GigaComputing's v5.1 Server) `'enable_chunked_context': False`; every one
  `model_fields.precision: 'fp4'` but HPE's (`'fp8'`); none a speculative-decoding field. Every summary read here
  prints 'Result is : VALID', 'ttft_latency (ns): 2000000000' and 'tpot_latency (ns): 80000000'. The v6.0 harness
  (closed/NVIDIA/code): deepseek-r1/tensorrt/README.md 'git clone https://huggingface.co/nvidia/deepseek-r1-fp4'
  ('Alternatively, use the V2 checkpoint ... nvidia/DeepSeek-R1-FP4-v2'); generation_config.json `"max_output_len":
  20000`, `"temperature": 0.0`; llmlib/config.py '# max_concurrency applies to each LLMCore (ie each data-parallel
  rank) of inference' and '# since max-bs applies per attention-rank, # when enabled, each TP rank has a DP rank of
  attention block'; every run's measurements JSON (v6.0 results/<system>/deepseek-r1/<scenario>/measurements.json,
  v5.1 measurements/<system>/deepseek-r1/<scenario>/<system>_<scenario>.json) `"weight_data_types": "fp4"`, HPE's
  `"fp8"`.
  The multi-node aggregated runs: scripts/slurm_llm/dynamo_disagg/run_scaleout.sh '--atomic-system <name> Atomic
  system config (e.g., GB200-NVL72_GB200-186GB_aarch64x8)', '--dp-multiplicity <N> Number of DP ranks',
  'total_harness_gpus=$((num_gpus_per_dp * dp_multiplicity))', and each instance's server is started with
  'make run_llm_server "RUN_ARGS=$server_args" "LOG_DIR=$dp_container_log_dir" "SYSTEM_NAME=$atomic_system"'.
  The runs taken, system by system (system JSON 'system_name', nodes x accelerators a node, 'framework'; then the
  config lines and the summary lines):

  v6.0 closed/Dell, 'PowerEdge XE9780 (8x B200-SXM-180GB, TensorRT)' (1 x 8 NVIDIA B200-SXM-180GB; 'framework':
  'TensorRT 10.14, CUDA 13.1'): configs/XE9780_x86_B200-SXM-180GBx8: Offline `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 70208`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.offline_expected_qps: 12`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 512}`,
  `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26382`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 11`. results/XE9780_x86_B200-SXM-180GBx8_TRT: Offline 'Samples per second:
  15.5349', 'Tokens per second: 58235.4', 'target_qps : 12', 'samples_per_query : 70208'; Server 'Completed samples
  per second : 10.95', 'Completed tokens per second: 40949.45', 'Mean latency (ns) : 222471379921', 'Mean Time per
  Output Token (ns) : 60137236', 'target_qps : 11', 'min_query_count : 26382'.

  v6.0 closed/Google, 'NVIDIA DGX B200 (8x B200-SXM-180GB, TensorRT)' (1 x 8 NVIDIA B200-SXM-180GB; 'framework':
  'TensorRT 10.14, CUDA 13.1'): configs/B200-SXM-180GBx8: Offline `model_fields.gpu_batch_size: {'deepseek-r1':
  512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 70208`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.offline_expected_qps: 12`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 512}`,
  `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26382`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 11`. results/B200-SXM-180GBx8_TRT: Offline 'Samples per second: 15.2288',
  'Tokens per second: 57116.9', 'target_qps : 12', 'samples_per_query : 70208'; Server 'Completed samples per second
  : 10.96', 'Completed tokens per second: 41027.93', 'Mean latency (ns) : 199246622004', 'Mean Time per Output Token
  (ns) : 53618304', 'target_qps : 11', 'min_query_count : 26382'.

  v6.0 closed/Nebius, 'Nebius B200 n1 (8x B200-SXM-180GB, TensorRT)' (1 x 8 NVIDIA B200-SXM-180GB; 'framework':
  'TensorRT 10.14, CUDA 13.1, cuDNN 9.17, TensorRT-LLM feat/1.2-mlpinf, NVIDIA Dynamo mlperf-v6.0-dynamo-v0.8.0,
  vLLM CentML:mlperf-inf-mm-q3vl-v6.0'): configs/nebius_b200_n1: Offline `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 70208 *
  2`, `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.offline_expected_qps: 12`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 640}`,
  `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 105312`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 14`. results/nebius_b200_n1: Offline 'Samples per second: 15.5989', 'Tokens per
  second: 58581.6', 'target_qps : 12', 'samples_per_query : 140416'; Server 'Completed samples per second : 13.81',
  'Completed tokens per second: 51692.89', 'Mean latency (ns) : 268377450618', 'Mean Time per Output Token (ns) :
  71857261', 'target_qps : 14', 'min_query_count : 105312'.

  v6.0 closed/CoreWeave, 'CoreWeave GB200 NVL72 (64x GB200-186GB_aarch64, TensorRT)' (16 x 4 NVIDIA GB200;
  'framework': 'TensorRT 10.14, CUDA 13.1'): configs/GB200-NVL72_GB200-186GB_aarch64x64: Offline
  `model_fields.gpu_batch_size: {'deepseek-r1': 512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime),
  `loadgen_fields.min_query_count: 70208 * 8`, `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`,
  `'moe_backend': 'WIDEEP'`, `loadgen_fields.offline_expected_qps: 12 * 8`; Server `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26328 *
  8`, `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.server_target_qps: 12 * 8`. results/GB200-NVL72_GB200-186GB_aarch64x64_TRT: Offline 'Samples per
  second: 124.763', 'Tokens per second: 468665', 'target_qps : 96', 'samples_per_query : 561664'; Server 'Completed
  samples per second : 83.08', 'Completed tokens per second: 311531.04', 'Mean latency (ns) : 209356709271', 'Mean
  Time per Output Token (ns) : 56620037', 'target_qps : 96', 'min_query_count : 210624'.

  v6.0 closed/Google, 'NVIDIA GB200 NVL72 (72x GB200-186GB_aarch64, TensorRT)' (18 x 4 NVIDIA GB200; 'framework':
  'TensorRT 10.14, CUDA 13.1'): configs/GB200-NVL72_GB200-186GB_aarch64x72: Server `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26328 *
  8`, `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.server_target_qps: 110`. results/GB200-NVL72_GB200-186GB_aarch64x72_TRT: Server 'Completed samples
  per second : 42.45', 'Completed tokens per second: 156781.10', 'Mean latency (ns) : 187239195555', 'Mean Time per
  Output Token (ns) : 51108483', 'target_qps : 45', 'min_query_count : 210624'.

  v6.0 closed/NVIDIA, 'NVIDIA GB200 NVL72 (72x GB200-186GB_aarch64, TensorRT)' (18 x 4 NVIDIA GB200; 'framework':
  'TensorRT 10.14, CUDA 13.1, cuDNN 9.17, TensorRT-LLM feat/1.2-mlpinf, NVIDIA Dynamo mlperf-v6.0-dynamo-v0.8.0,
  vLLM CentML:mlperf-inf-mm-q3vl-v6.0'): configs/GB200-NVL72_GB200-186GB_aarch64x72: Offline
  `model_fields.gpu_batch_size: {'deepseek-r1': 512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime),
  `loadgen_fields.min_query_count: 70208 * 8`, `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`,
  `'moe_backend': 'WIDEEP'`, `loadgen_fields.offline_expected_qps: 12 * 9`; Server `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26328 *
  8`, `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.server_target_qps: 110`. results/GB200-NVL72_GB200-186GB_aarch64x72_TRT: Offline 'Samples per
  second: 129.533', 'Tokens per second: 486141', 'target_qps : 10', 'samples_per_query : 561664'; Server 'Completed
  samples per second : 89.59', 'Completed tokens per second: 336106.48', 'Mean latency (ns) : 215076807821', 'Mean
  Time per Output Token (ns) : 58306669', 'target_qps : 110', 'min_query_count : 210624'.

  v6.0 closed/CoreWeave, 'CoreWeave GB300 NVL72 (8x GB300-288GB_aarch64, TensorRT)' (2 x 4 NVIDIA GB300;
  'framework': 'TensorRT 10.14, CUDA 13.1'): configs/GB300-NVL72_GB300-288GB_aarch64x8: Offline
  `model_fields.gpu_batch_size: {'deepseek-r1': 1024}`, `'max_num_tokens'` 4608 (build) / 6144 (runtime),
  `loadgen_fields.min_query_count: 105312`, `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`,
  `'moe_backend': 'CUTEDSL'`, `loadgen_fields.offline_expected_qps: 12`; Server `model_fields.gpu_batch_size:
  {'deepseek-r1': 640}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 105312`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 12`. results/GB300-NVL72_GB300-288GB_aarch64x8_TRT: Offline 'Samples per
  second: 20.9377', 'Tokens per second: 78564', 'target_qps : 12', 'samples_per_query : 105312'; Server 'Completed
  samples per second : 11.88', 'Completed tokens per second: 44589.69', 'Mean latency (ns) : 213601419604', 'Mean
  Time per Output Token (ns) : 57014667', 'target_qps : 12', 'min_query_count : 105312'.

  v6.0 closed/NVIDIA, 'NVIDIA GB300 NVL72 (72x GB300-288GB_aarch64, TensorRT)' (72 x 4 NVIDIA GB300; 'framework':
  'TensorRT 10.14, CUDA 13.1, cuDNN 9.17, TensorRT-LLM feat/1.2-mlpinf, NVIDIA Dynamo mlperf-v6.0-dynamo-v0.8.0,
  vLLM CentML:mlperf-inf-mm-q3vl-v6.0'): configs/GB300-NVL72_GB300-288GB_aarch64x288: Offline
  `model_fields.gpu_batch_size: {'deepseek-r1': 1536}`, `'max_num_tokens'` 4608 (build) / 6656 (runtime),
  `loadgen_fields.min_duration: 2_000_000`, `loadgen_fields.min_query_count: 700 * 4388`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTLASS'`,
  `loadgen_fields.offline_expected_qps: 10 * 18 * 4`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 640}`,
  `'max_num_tokens'` 3456 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 240 * 4388`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 410`. results/GB300-NVL72_GB300-288GB_aarch64x288_TRT: Offline 'Samples per
  second: 664.711', 'Tokens per second: 2.49431e+06', 'target_qps : 720', 'samples_per_query : 3071600',
  'min_duration (ms): 2000000'; Server 'Completed samples per second : 414.63', 'Completed tokens per second:
  1555108.58', 'Mean latency (ns) : 195162958224', 'Mean Time per Output Token (ns) : 61507803', 'target_qps : 430',
  'min_query_count : 1053120'.

  v6.0 closed/NVIDIA, 'NVIDIA GB300 NVL72 (72x GB300-288GB_aarch64, TensorRT)' (18 x 4 NVIDIA GB300; 'framework':
  'TensorRT 10.14, CUDA 13.1, cuDNN 9.17, TensorRT-LLM feat/1.2-mlpinf, NVIDIA Dynamo mlperf-v6.0-dynamo-v0.8.0,
  vLLM CentML:mlperf-inf-mm-q3vl-v6.0'): configs/GB300-NVL72_GB300-288GB_aarch64x72: Server
  `model_fields.gpu_batch_size: {'deepseek-r1': 640}`, `'max_num_tokens'` 3456 (build) / 4608 (runtime),
  `loadgen_fields.min_query_count: 50 * 4388`, `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`,
  `'moe_backend': 'CUTEDSL'`, `loadgen_fields.server_target_qps: 110`.
  results/GB300-NVL72_GB300-288GB_aarch64x72_TRT: Server 'Completed samples per second : 106.66', 'Completed tokens
  per second: 400436.77', 'Mean latency (ns) : 207405891707', 'Mean Time per Output Token (ns) : 56151598',
  'target_qps : 110', 'min_query_count : 219400'.

  v6.0 closed/Nebius, 'Nebius GB300 NVL72 (72x GB300-288GB_aarch64, TensorRT)' (18 x 4 NVIDIA GB300; 'framework':
  'TensorRT 10.14, CUDA 13.1, cuDNN 9.17, Driver 580.105.08, TensorRT-LLM feat/1.2-mlpinf, NVIDIA Dynamo
  mlperf-v6.0-dynamo-v0.8.0, vLLM CentML:mlperf-inf-mm-q3vl-v6.0'): configs/GB300-NVL72_GB300-288GB_aarch64x72:
  Offline `model_fields.gpu_batch_size: {'deepseek-r1': 1536}`, `'max_num_tokens'` 4608 (build) / 6656 (runtime),
  `loadgen_fields.min_duration: 2_000_000`, `loadgen_fields.min_query_count: 150 * 4388`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTLASS'`,
  `loadgen_fields.offline_expected_qps: 10 * 18`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 640}`,
  `'max_num_tokens'` 3456 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 50 * 4388`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 165`. results/GB300-NVL72_GB300-288GB_aarch64x72_TRT: Offline 'Samples per
  second: 179.593', 'Tokens per second: 673936', 'target_qps : 180', 'samples_per_query : 658200', 'min_duration
  (ms): 2000000'; Server 'Completed samples per second : 153.33', 'Completed tokens per second: 575579.74', 'Mean
  latency (ns) : 228618259194', 'Mean Time per Output Token (ns) : 62550491', 'target_qps : 165', 'min_query_count :
  219400'.

  v6.0 closed/Nebius, 'Nebius GB300 NVL72 (4x GB300-288GB_aarch64, TensorRT)' (2 x 4 NVIDIA GB300; 'framework':
  'TensorRT 10.14, CUDA 13.1, cuDNN 9.17, Driver 580.105.08, TensorRT-LLM feat/1.2-mlpinf, NVIDIA Dynamo
  mlperf-v6.0-dynamo-v0.8.0, vLLM CentML:mlperf-inf-mm-q3vl-v6.0'): configs/GB300-NVL72_GB300-288GB_aarch64x8:
  Offline `model_fields.gpu_batch_size: {'deepseek-r1': 1024}`, `'max_num_tokens'` 4608 (build) / 6144 (runtime),
  `loadgen_fields.min_query_count: 105312`, `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`,
  `'moe_backend': 'CUTEDSL'`, `loadgen_fields.offline_expected_qps: 12`; Server `model_fields.gpu_batch_size:
  {'deepseek-r1': 640}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 105312`,
  `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTEDSL'`,
  `loadgen_fields.server_target_qps: 17.37`. results/GB300-NVL72_GB300-288GB_aarch64x8_TRT: Offline 'Samples per
  second: 20.3614', 'Tokens per second: 76346.6', 'target_qps : 12', 'samples_per_query : 105312'; Server 'Completed
  samples per second : 17.18', 'Completed tokens per second: 64509.99', 'Mean latency (ns) : 270924415353', 'Mean
  Time per Output Token (ns) : 72421826', 'target_qps : 17.37', 'min_query_count : 105312'.

  v6.0 open/CoreWeave, 'CoreWeave GB300 NVL72 (64x GB300-288GB_aarch64, TensorRT)' (16 x 4 NVIDIA GB300;
  'framework': 'TensorRT 10.14, CUDA 13.1'): configs/GB300-NVL72_GB300-288GB_aarch64x64: Offline
  `model_fields.gpu_batch_size: {'deepseek-r1': 1536}`, `'max_num_tokens'` 4608 (build) / 6656 (runtime),
  `loadgen_fields.min_query_count: 105312 * 8`, `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`,
  `'moe_backend': 'CUTLASS'`, `loadgen_fields.offline_expected_qps: 12 * 8`.
  results/GB300-NVL72_GB300-288GB_aarch64x64_TRT: Offline 'Samples per second: 167.245', 'Tokens per second:
  627653', 'target_qps : 96', 'samples_per_query : 842496'.

  v5.1 closed/CoreWeave, '(8x GB300-288GB_aarch64, TensorRT)' (2 x 4 NVIDIA GB300; 'framework': 'TensorRT 10.13,
  CUDA 13.0'): configs/GB300-NVL8-CoreWeave: Offline `model_fields.gpu_batch_size: {'deepseek-r1': 1536}`,
  `'max_num_tokens'` 4608 (build) / 6656 (runtime), `loadgen_fields.min_duration: 2_000_000`,
  `loadgen_fields.min_query_count: 10 * 4388`, `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`,
  `'moe_backend': 'CUTLASS'`, `loadgen_fields.offline_expected_qps: 10`; Server `model_fields.gpu_batch_size:
  {'deepseek-r1': 1536}`, `'max_num_tokens'` 3456 (build) / 6656 (runtime), `loadgen_fields.min_query_count: 10 *
  4388`, `'kvcache_free_gpu_mem_frac': 0.95`, `'max_concurrency': 10240`, `'moe_backend': 'CUTLASS'`,
  `loadgen_fields.server_target_qps: 6.3`. results/GB300-NVL8-CoreWeave_TRT: Offline 'Samples per second: 13.1378',
  'Tokens per second: 48047', 'target_qps : 10', 'samples_per_query : 43880', 'min_duration (ms): 2000000'; Server
  'Completed samples per second : 6.13', 'Completed tokens per second: 22545.12', 'Mean latency (ns) :
  233789068581', 'Mean Time to Output Token (ns) : 63589813', 'target_qps : 6.3', 'min_query_count : 43880'.

  v5.1 closed/Dell, 'Dell PowerEdge XE9680L (8x B200-SXM-180GB, TensorRT)' (1 x 8 NVIDIA B200-SXM-180GB;
  'framework': 'TensorRT 10.11, CUDA 12.9'): configs/XE9680L_B200_SXM_180GBx8: Offline `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.offline_expected_qps: 10`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 512}`,
  `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.server_target_qps: 3.8`. results/XE9680L_B200_SXM_180GBx8_TRT: Offline 'Samples per second:
  8.35339', 'Tokens per second: 30493.3', 'target_qps : 10', 'samples_per_query : 26328'; Server 'Completed samples
  per second : 3.78', 'Completed tokens per second: 13913.33', 'Mean latency (ns) : 224538270152', 'Mean Time to
  Output Token (ns) : 61003180', 'target_qps : 3.8', 'min_query_count : 26328'.

  v5.1 closed/Dell, 'Dell PowerEdge XE9685L (8x B200-SXM-180GB, TensorRT)' (1 x 8 NVIDIA B200-SXM-180GB;
  'framework': 'TensorRT 10.11, CUDA 12.8'): configs/XE9685L_B200_SXM_180GBx8: Offline `model_fields.gpu_batch_size:
  {'deepseek-r1': 512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.offline_expected_qps: 10`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 512}`,
  `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.server_target_qps: 3.8`. results/XE9685L_B200_SXM_180GBx8_TRT: Offline 'Samples per second:
  8.41588', 'Tokens per second: 30766.5', 'target_qps : 10', 'samples_per_query : 26328'; Server 'Completed samples
  per second : 3.79', 'Completed tokens per second: 13963.01', 'Mean latency (ns) : 220974550837', 'Mean Time to
  Output Token (ns) : 59934795', 'target_qps : 3.8', 'min_query_count : 26328'.

  v5.1 closed/GigaComputing, 'G894-SD1' (1 x 8 NVIDIA B200-SXM-180GB; 'framework': 'TensorRT 10.11, CUDA 12.9'):
  configs/G894-SD1_B200-SXM-180GBx8: Offline `model_fields.gpu_batch_size: {'deepseek-r1': 512}`, `'max_num_tokens'`
  4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 26328`, `'kvcache_free_gpu_mem_frac': 0.9`,
  `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`, `loadgen_fields.offline_expected_qps: 10`; Server
  `model_fields.gpu_batch_size: {'deepseek-r1': 768}`, `'max_num_tokens'` 3456 (build) / 3456 (runtime),
  `loadgen_fields.min_query_count: 26328`, `'kvcache_free_gpu_mem_frac': 0.9`, `'enable_chunked_context': True`,
  `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`, `loadgen_fields.server_target_qps: 4.4`.
  results/G894-SD1_B200-SXM-180GBx8_TRT: Offline 'Samples per second: 8.4179', 'Tokens per second: 30873.9',
  'target_qps : 10', 'samples_per_query : 26328'; Server 'Completed samples per second : 4.28', 'Completed tokens
  per second: 15977.87', 'Mean latency (ns) : 218210263550', 'Mean Time to Output Token (ns) : 58452306',
  'target_qps : 4.3', 'min_query_count : 26328'.

  v5.1 closed/Google, 'NVIDIA DGX B200 (8x B200-SXM-180GB, TensorRT)' (1 x 8 NVIDIA B200-SXM-180GB; 'framework':
  'TensorRT 10.11, CUDA 12.9'): configs/B200-SXM-180GBx8: Offline `model_fields.gpu_batch_size: {'deepseek-r1':
  512}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.offline_expected_qps: 10`; Server `model_fields.gpu_batch_size: {'deepseek-r1': 512}`,
  `'max_num_tokens'` 3456 (build) / 3456 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.9`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.server_target_qps: 5`. results/B200-SXM-180GBx8_TRT: Offline 'Samples per second: 8.52471',
  'Tokens per second: 31920.3', 'target_qps : 11', 'samples_per_query : 26328'; Server 'Completed samples per second
  : 3.98', 'Completed tokens per second: 14630.74', 'Mean latency (ns) : 225046402606', 'Mean Time to Output Token
  (ns) : 61274613', 'target_qps : 4', 'min_query_count : 26328'.

  v5.1 open/HPE, 'HPE Cray XD670 (8x H200-SXM-141GB)' (1 x 8 NVIDIA H200-SXM-141GB; 'framework': 'TensorRT 10.8,
  CUDA 12.8'): closed/HPE/configs/HPE_Cray_XD670_H200_SXM_141GBx8: Offline `model_fields.gpu_batch_size:
  {'deepseek-r1': 216}`, `'max_num_tokens'` 4608 (build) / 4608 (runtime), `loadgen_fields.min_query_count: 26328`,
  `'kvcache_free_gpu_mem_frac': 0.6`, `'max_concurrency': 5120`, `'moe_backend': 'WIDEEP'`,
  `loadgen_fields.offline_expected_qps: 10`. results/HPE_Cray_XD670_H200_SXM_141GBx8_TRT: Offline 'Samples per
  second: 2.32632', 'Tokens per second: 8904.83', 'target_qps : 10', 'samples_per_query : 26328'.

Readings common to all (blind 25's MLPerf readings, decided before any prediction here): DeepSeek-R1 as configure's
deepseek-r1; the cards as the systems name them, configure's b200, gb200, gb300 and h200 profiles; each instance TP
8 with enable_attention_dp and EP 8, read as eight attention data-parallel ranks with whole experts over them (DEP8,
Layout(1, 8)); a system of more than 8 GPUs as its GPUs / 8 such instances (no config writes the count; the Offline
targets `12 * 8` of CoreWeave's GB200 x64 and `12 * 9` of NVIDIA's GB200 x72 read so), the figure over all its GPUs
(the figure a GPU is an instance's for any count of instances); NVIDIA's 'fp4' DeepSeek-R1 checkpoint
(nvidia/deepseek-r1-fp4) as blinds 2, 14 and 25 read NVIDIA's NVFP4 checkpoints (R1_FP4: NVFP4 experts, dense FFNs
and dispatch, FP8 attention), FP8 KV as the configs set; no redundant experts (no expert load balancer in any
config; 'adp_balancing' balances requests over the attention ranks, not experts): balancedness 0.70
(ASSUMED_PLAIN); in-flight batching, prefill "mixed" (whole prompts up to a rank's max_num_tokens a step; configure's
8,192-token chunk is not an input); CUDA graphs at decode; no speculative decoding (no config sets it); KV memory at
configure's default 0.9 of the card (the engines' 'kvcache_free_gpu_mem_frac' is not the model's input); the mean
prompt 804 tokens (the data set's 803.8, blind 25's count over its 4,388 prompts) and the mean output the run's own,
its tokens a second over its samples a second, rounded; 'Tokens per second' as generated tokens
(exclude_input_from_output True); the MoE backend (CUTEDSL, WIDEEP, CUTLASS) noted, not modelled apart. Offline:
every sample queued at once, read as a steady state at the batch a rank is capped at: the engine's max batch
(gpu_batch_size, a rank's with attention DP) or the harness's max_concurrency over the instance's 8 ranks, whichever
is smaller (B200, GB200 and HPE's H200 at their gpu_batch_size 512 / 216 under 5,120 / 8 = 640; GB300 v6.0 x8 at
1,024 under 10,240 / 8 = 1,280; GB300 v6.0 x64 / x72 / x288 and v5.1 at min(1,536, 1,280) = 1,280, the largest of
their CUDA-graph sizes), the fill and the heavy tail's drain left out. Checked against what the model's KV cache
holds at those lengths before any figure was predicted: its largest fitting batch a GPU is 680-696 (B200), 716
(GB200), 1,271-1,272 at the v6.0 GB300 runs' 3,750-3,753 output tokens and 1,298 at v5.1's 3,657 (GB300), 212.7
(H200, FP8 weights); so every cap fits but 1,280 on the v6.0 GB300 x64 / x72 / x288 runs (0.7% past) and 216 on the
H200 (1.6% past), which are read at their caps all the same: the cap is the run's own config value and the
engine's own KV pool (0.95, or 0.6 on the H200, of free memory) is not the model's input (blind 25 met no such case;
this reading was fixed before any prediction). Server: Poisson arrivals read as a colocated steady state at the
requests in flight by Little's law (completed samples a second x mean latency / the system's GPUs; 104.7-581.8 a GPU
here, each under its gpu_batch_size and what the model's KV cache holds) and the published mean TPOT ('Mean Time per
Output Token' in v6.0, 'Mean Time to Output Token' in v5.1) as the colocated TPOT there; the completed tokens a
second over the system's GPUs as the throughput.

Readings of this part's own cases (fixed before any prediction):
- The x64, x72 and x288 aggregated GB300 runs (NVIDIA x288, Nebius x72, CoreWeave's open x64): the per-instance
  settings are ambiguous, since run_scaleout.sh starts each instance's server with the x8 'atomic' system
  (closed/NVIDIA/configs/GB300-NVL72_GB300-288GB_aarch64x8/Offline: `model_fields.gpu_batch_size: {'deepseek-r1':
  1024}`, `'moe_backend': 'CUTEDSL'`, runtime `'max_num_tokens': 6144`) while the harness reads the result
  directory's system; the harness config of the system the result directory names is taken (x288 / x72 / x64:
  gpu_batch_size 1,536, CUTLASS, runtime max_num_tokens 6,656; its `loadgen_fields.min_duration: 2_000_000` is the
  runs' 'min_duration (ms): 2000000' where the x8 config has 600000). On GB200 (NVIDIA x72, CoreWeave x64) and on
  every GB300 Server run the x8 and the harness configs give the same gpu_batch_size and max_concurrency (only the
  MoE backend, max_num_tokens or stream_interval differ, none of them an input).
- NVIDIA's GB300 x288 system JSON names it 'NVIDIA GB300 NVL72 (72x GB300-288GB_aarch64, TensorRT)' with
  'number_of_nodes': 72 of 'accelerators_per_node': 4; read as the directory (x288) and the nodes say, 288 GPUs
  (36 instances). Nebius's x8 JSON says '(4x GB300-288GB_aarch64, TensorRT)' with 2 nodes of 4: 8 GPUs.
- Stored config against run: a config whose target differs from the run's 'target_qps' only (NVIDIA GB200 x72
  Offline `12 * 9` against 10; Google GB200 x72 Server `110` against 45; NVIDIA GB300 x288 Server `410` against 430;
  GigaComputing v5.1 Server `4.4` against 4.3; Google v5.1 Offline `10` against 11 and Server `5` against 4) is
  kept: the target sets neither the batch nor the load read (min_query_count matches in each). Google's GB200 x72
  Server ran 45 queries a second where NVIDIA's ran 110 on the same system; how many of its 72 GPUs served is not
  stated, and it is read over all 72 (42.45 x 187.24 s / 72 = 110.4 in flight a GPU).
- HPE's v5.1 H200 run is in the open division (open/HPE/results/HPE_Cray_XD670_H200_SXM_141GBx8_TRT) with no config
  under open/; the config closed/HPE/configs/HPE_Cray_XD670_H200_SXM_141GBx8/Offline/deepseek-r1.py is taken for it
  (the same system; its `loadgen_fields.min_query_count: 26328` and `offline_expected_qps: 10` are the run's, as is
  open/HPE/measurements/HPE_Cray_XD670_H200_SXM_141GBx8_TRT/deepseek-r1/Offline/user.conf '*.Offline.min_query_count
  = 26328'); FP8 weights and FP8 KV (`model_fields.precision: 'fp8'`, `'kv_cache_dtype': 'fp8'`; measurements
  `"weight_data_types": "fp8"`), Precision(weights="fp8", kv="fp8"), blind 25's reading otherwise.
- GigaComputing's v5.1 Server sets `'enable_chunked_context': True` with `'max_num_tokens': 3456`: every prompt (at
  most 3,140 tokens) fits a step whole, so prefill stays "mixed" of whole prompts; its gpu_batch_size 768 is past
  the 5,120 / 8 = 640 a rank max_concurrency allows, which does not bind at its 116.7 in flight a GPU.

Figures looked at and not taken: every B300 result (v6.0 Cisco C880A M8, Dell XE9780L and XE9780 B300, GigaComputing
G894-SD3-AAX7, NVIDIA DGX B300, Nebius B300 n1, Quanta D75H-10U, Offline and Server): B300 is not a configure card;
the Interactive results (GigaComputing B300, NVIDIA GB200 x72 and GB300 x72): MTP (`'decoding_type': 'MTP'`,
`'num_nextn_predict_layers': 3` in the GigaComputing config and NVIDIA's decode YAML
configs/GB200-NVL72_GB200-186GB_aarch64x16/Interactive/disagg_decode/deepseek-r1.yml) with no acceptance logged in
any stored file, and NVIDIA's two Dynamo-disaggregated ('# Full 72-GPU system: 2 CTX DEP4 + 4 GEN DEP16 = 8 + 64 =
72 GPUs'; '# Full 72-GPU system: 4 CTX DEP2 + 4 GEN DEP16 = 8 + 64 = 72 GPUs'); runs whose stored config is not the
run's: Google GB200 x72 Offline (config `loadgen_fields.min_query_count: 70208 * 8` = 561,664 against the run's
'samples_per_query : 210624') and NVIDIA GB300 x72 Offline (`150 * 4388` = 658,200 against 'samples_per_query :
877600'), and Cisco's B300 Offline (`70208` against 105,312; B300 besides); the TTFTs, TPOT percentiles and
'Scheduled samples per second' (the mean TPOT, the latency the runs are constrained on, and the completed rate are
blind 25's); the Offline runs' latencies (the queue of an offline run, not a step); the accuracy runs'
'tokens_per_sample' (each performance run's own tokens over samples taken); stored DeepSeek-R1 configs without a
result (NVIDIA B200 x8, GB200 / GB300 x2-x16, HPE ProLiant XD685 B200, Lambda_SIT GB300, ASUSTeK and Supermicro
B300, Dell XE9780LAP B300, CoreWeave B200 x8 / x16 and GB200 x8; v5.1 Broadcom_Supermicro, Lenovo, Oracle and
Supermicro B200, HPE DL385 H200 NVL); v6.0's qwen3-vl-235b-a22b (a vision-language model, samples a second only). No
AMD, H100 or H200 DeepSeek-R1 result is in v6.0, and none from AMD in v5.1; v6.1's AMD MI355X DeepSeek-R1 (SGLang)
is stored as configs only (intel-ai-tce/inference_results_v6.1 at 5174fca85, closed/AMD/src/deepseek-r1; no file
under closed/AMD/results/8xMI355X_2xEPYC_9575F/deepseek-r1).
"""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.capacity.balance import ASSUMED_PLAIN
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_blind2 import R1_FP4
from moeserve.capacity.validation_cases import Case

V60 = "github.com/gbeezybez/inference_results_v6.0 (a fork of mlcommons/inference_results_v6.0) at 232fbf90f"
V51 = "github.com/ntuhpc/inference_results_v5.1 at 387c3dd04"

_R1 = "deepseek-r1"
_R1_FP8 = Precision(weights="fp8", kv="fp8")  # model_fields.precision 'fp8': FP8 weights, FP8 KV
_MLPERF_O = Options(balancedness=ASSUMED_PLAIN)  # blind 25's: no redundant experts, in-flight batching ('mixed')
_ISL = 804  # the data set's mean prompt, 803.8 tokens (blind 25)
_CARDS = {"b200": "B200", "gb200": "GB200", "gb300": "GB300", "h200": "H200"}
_NVFP4 = ("NVIDIA's NVFP4 DeepSeek-R1 (model_fields.precision 'fp4': NVFP4 experts, dense FFNs and dispatch, FP8 "
          "attention)")
_FP8 = "DeepSeek-R1 in FP8 (model_fields.precision 'fp8': FP8 weights)"


@dataclass(frozen=True)
class _System:
    rnd: str  # "v6.0" or "v5.1"
    division: str  # of the result: "closed" or "open"
    submitter: str
    label: str  # the system as the case name gives it
    results: str  # <division>/<submitter>/results/<results>/deepseek-r1/<scenario>/performance/run_1
    configs: str  # <config division>/<submitter>/configs/<configs>/<scenario>/deepseek-r1.py
    hw: str
    gpus: int
    config_division: str = ""  # where the config is stored, when not the result's division

    @property
    def fp8(self) -> bool:
        return self.hw == "h200"

    def name(self, scenario: str) -> str:
        open_ = " (open division)" if self.division == "open" else ""
        return (f"MLPerf {self.rnd} {self.submitter}{open_} {self.label} TensorRT-LLM DeepSeek-R1 "
                f"{'FP8' if self.fp8 else 'NVFP4'} {self.gpus}x{_CARDS[self.hw]} DEP8, {scenario}")

    def source(self, scenario: str) -> str:
        cdiv = self.config_division or self.division
        return (f"MLPerf Inference {self.rnd}, {self.submitter}'s {self.division}-division DeepSeek-R1 submission "
                f"(TensorRT-LLM through NVIDIA's harness): {cdiv}/{self.submitter}/configs/{self.configs}/{scenario}/"
                f"deepseek-r1.py and {self.division}/{self.submitter}/results/{self.results}/deepseek-r1/{scenario}/"
                f"performance/run_1/mlperf_log_summary.txt of {V60 if self.rnd == 'v6.0' else V51}")

    def setup(self, osl: int, how: str, moe: str) -> str:
        instances = ("" if self.gpus == 8 else
                     f", {self.gpus // 8} such instances in the {self.gpus} GPUs (GPUs / 8: no config writes the "
                     f"count), the published figure over its {self.gpus} GPUs")
        return (f"TensorRT-LLM through NVIDIA's MLPerf harness, each instance TP 8 with enable_attention_dp and EP 8 "
                f"(attention data-parallel over 8 ranks, whole experts over them: DEP8){instances}; no redundant "
                f"experts (balancedness 0.70 assumed; ADP balancing balances requests, not experts), "
                f"{_FP8 if self.fp8 else _NVFP4}, FP8 KV, CUDA graphs, no speculative decoding; in-flight batching "
                f"of whole prompts (prefill 'mixed'); the data set's mean prompt 804 tokens (803.8), output {osl:,} "
                f"({how}); MoE backend '{moe}' noted, not modelled apart")


def _offline(s: _System, samples: str, tokens: str, batch_cap: int, concurrency: int, moe: str,
             note: str = "", kv: str = "the model's KV cache holds it") -> Case:
    """An Offline run: its 'Tokens per second' over its GPUs at the batch a rank is capped at."""
    osl = round(float(tokens) / float(samples))
    cap = min(batch_cap, concurrency // 8)
    return Case(s.name("Offline"), s.source("Offline"), s.hw, "colocated", Layout(1, 8, 0), cap, Workload(_ISL, osl),
                _MLPERF_O, round(float(tokens) / s.gpus, 2), "tok/s/GPU",
                f"the Offline 'Tokens per second: {tokens}' / {s.gpus} GPUs; every sample queued at once, read as a "
                f"steady state at the batch a rank is capped at, min(gpu_batch_size {batch_cap:,}, max_concurrency "
                f"{concurrency:,} / 8) = {cap:,}; checked before any figure was predicted: {kv}; {note}"
                + s.setup(osl, f"the run's {tokens} tokens / {samples} samples a second", moe),
                _R1_FP8 if s.fp8 else R1_FP4, model=_R1, blind=27)


def _server(s: _System, qps: str, tokens: str, latency_ns: int, tpot_ns: int, batch_cap: int, moe: str,
            note: str = "") -> list[Case]:
    """A Server run: its mean TPOT and its completed tokens a second over its GPUs, colocated at the requests in
    flight by Little's law."""
    osl = round(float(tokens) / float(qps))
    batch = float(qps) * latency_ns / 1e9 / s.gpus
    tpot_key = "Mean Time per Output Token (ns)" if s.rnd == "v6.0" else "Mean Time to Output Token (ns)"
    setup = (f"Poisson arrivals read as a colocated steady state at the requests in flight by Little's law "
             f"('Completed samples per second : {qps}' x 'Mean latency (ns) : {latency_ns}' / {s.gpus} GPUs = "
             f"{batch:.1f} a GPU, under gpu_batch_size {batch_cap:,}); {note}"
             + s.setup(osl, f"the run's {tokens} tokens / {qps} samples a second", moe))
    precision = _R1_FP8 if s.fp8 else R1_FP4
    return [
        Case(s.name("Server, TPOT"), s.source("Server"), s.hw, "colocated", Layout(1, 8, 0), round(batch, 2),
             Workload(_ISL, osl), _MLPERF_O, round(1e9 / tpot_ns, 2), "tok/s/user",
             f"1 / the '{tpot_key} : {tpot_ns}', read as the colocated TPOT; " + setup, precision, model=_R1,
             blind=27),
        Case(s.name("Server, throughput"), s.source("Server"), s.hw, "colocated", Layout(1, 8, 0), round(batch, 2),
             Workload(_ISL, osl), _MLPERF_O, round(float(tokens) / s.gpus, 2), "tok/s/GPU",
             f"'Completed tokens per second: {tokens}' / {s.gpus} GPUs; " + setup, precision, model=_R1, blind=27),
    ]


# --- MLPerf Inference v6.0 (gbeezybez/inference_results_v6.0 at 232fbf90f)
_DELL_B200 = _System("v6.0", "closed", "Dell", "PowerEdge XE9780", "XE9780_x86_B200-SXM-180GBx8_TRT",
                     "XE9780_x86_B200-SXM-180GBx8", "b200", 8)
_GOOGLE_B200 = _System("v6.0", "closed", "Google", "DGX B200", "B200-SXM-180GBx8_TRT", "B200-SXM-180GBx8", "b200", 8)
_NEBIUS_B200 = _System("v6.0", "closed", "Nebius", "B200 n1", "nebius_b200_n1", "nebius_b200_n1", "b200", 8)
_CW_GB200 = _System("v6.0", "closed", "CoreWeave", "GB200 NVL72", "GB200-NVL72_GB200-186GB_aarch64x64_TRT",
                    "GB200-NVL72_GB200-186GB_aarch64x64", "gb200", 64)
_GOOGLE_GB200 = _System("v6.0", "closed", "Google", "GB200 NVL72", "GB200-NVL72_GB200-186GB_aarch64x72_TRT",
                        "GB200-NVL72_GB200-186GB_aarch64x72", "gb200", 72)
_NV_GB200 = _System("v6.0", "closed", "NVIDIA", "GB200 NVL72", "GB200-NVL72_GB200-186GB_aarch64x72_TRT",
                    "GB200-NVL72_GB200-186GB_aarch64x72", "gb200", 72)
_CW_GB300_8 = _System("v6.0", "closed", "CoreWeave", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x8_TRT",
                      "GB300-NVL72_GB300-288GB_aarch64x8", "gb300", 8)
_NV_GB300_288 = _System("v6.0", "closed", "NVIDIA", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x288_TRT",
                        "GB300-NVL72_GB300-288GB_aarch64x288", "gb300", 288)
_NV_GB300_72 = _System("v6.0", "closed", "NVIDIA", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x72_TRT",
                       "GB300-NVL72_GB300-288GB_aarch64x72", "gb300", 72)
_NEBIUS_GB300_72 = _System("v6.0", "closed", "Nebius", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x72_TRT",
                           "GB300-NVL72_GB300-288GB_aarch64x72", "gb300", 72)
_NEBIUS_GB300_8 = _System("v6.0", "closed", "Nebius", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x8_TRT",
                          "GB300-NVL72_GB300-288GB_aarch64x8", "gb300", 8)
_CW_GB300_64 = _System("v6.0", "open", "CoreWeave", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x64_TRT",
                       "GB300-NVL72_GB300-288GB_aarch64x64", "gb300", 64)
# --- MLPerf Inference v5.1, submitters other than NVIDIA (ntuhpc/inference_results_v5.1 at 387c3dd04)
_CW_GB300_V51 = _System("v5.1", "closed", "CoreWeave", "GB300 NVL8", "GB300-NVL8-CoreWeave_TRT",
                        "GB300-NVL8-CoreWeave", "gb300", 8)
_DELL_9680 = _System("v5.1", "closed", "Dell", "PowerEdge XE9680L", "XE9680L_B200_SXM_180GBx8_TRT",
                     "XE9680L_B200_SXM_180GBx8", "b200", 8)
_DELL_9685 = _System("v5.1", "closed", "Dell", "PowerEdge XE9685L", "XE9685L_B200_SXM_180GBx8_TRT",
                     "XE9685L_B200_SXM_180GBx8", "b200", 8)
_GIGA_B200 = _System("v5.1", "closed", "GigaComputing", "G894-SD1", "G894-SD1_B200-SXM-180GBx8_TRT",
                     "G894-SD1_B200-SXM-180GBx8", "b200", 8)
_GOOGLE_B200_V51 = _System("v5.1", "closed", "Google", "DGX B200", "B200-SXM-180GBx8_TRT", "B200-SXM-180GBx8",
                           "b200", 8)
_HPE_H200 = _System("v5.1", "open", "HPE", "Cray XD670", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT",
                    "HPE_Cray_XD670_H200_SXM_141GBx8", "h200", 8, config_division="closed")

_HARNESS = ("the per-instance settings of the harness config of the system the result directory names (x{gpus}), "
            "not the x8 'atomic' config's (GB300 x8: gpu_batch_size 1,024, 'CUTEDSL'); ")
# the cap a little past the model's KV cache (configure's 0.9 of the card): read at the cap all the same
_KV_SHORT = ("the cap a little past what the model's KV cache holds at configure's 0.9 of the card ({fit} a GPU), "
             "read at the cap all the same (the run's own config value; the engine's 'kvcache_free_gpu_mem_frac' "
             "{frac} of free memory is not the model's input)")
_TARGET = "the stored config's target ({config}) differs from the run's 'target_qps : {run}' only: kept; "

BLIND27 = [
    # v6.0 Offline
    _offline(_DELL_B200, "15.5349", "58235.4", 512, 5120, "CUTEDSL"),
    _offline(_GOOGLE_B200, "15.2288", "57116.9", 512, 5120, "CUTEDSL"),
    _offline(_NEBIUS_B200, "15.5989", "58581.6", 512, 5120, "CUTEDSL"),
    _offline(_CW_GB200, "124.763", "468665", 512, 5120, "WIDEEP"),
    _offline(_NV_GB200, "129.533", "486141", 512, 5120, "WIDEEP",
             _TARGET.format(config="offline_expected_qps: 12 * 9", run=10)),
    _offline(_CW_GB300_8, "20.9377", "78564", 1024, 10240, "CUTEDSL"),
    _offline(_NV_GB300_288, "664.711", "2.49431e+06", 1536, 10240, "CUTLASS", _HARNESS.format(gpus=288),
             _KV_SHORT.format(fit="1,271", frac="0.95")),
    _offline(_NEBIUS_GB300_72, "179.593", "673936", 1536, 10240, "CUTLASS", _HARNESS.format(gpus=72),
             _KV_SHORT.format(fit="1,271", frac="0.95")),
    _offline(_NEBIUS_GB300_8, "20.3614", "76346.6", 1024, 10240, "CUTEDSL"),
    _offline(_CW_GB300_64, "167.245", "627653", 1536, 10240, "CUTLASS", _HARNESS.format(gpus=64),
             _KV_SHORT.format(fit="1,271", frac="0.95")),
    # v5.1 Offline
    _offline(_CW_GB300_V51, "13.1378", "48047", 1536, 10240, "CUTLASS"),
    _offline(_DELL_9680, "8.35339", "30493.3", 512, 5120, "WIDEEP"),
    _offline(_DELL_9685, "8.41588", "30766.5", 512, 5120, "WIDEEP"),
    _offline(_GIGA_B200, "8.4179", "30873.9", 512, 5120, "WIDEEP"),
    _offline(_GOOGLE_B200_V51, "8.52471", "31920.3", 512, 5120, "WIDEEP",
             _TARGET.format(config="offline_expected_qps: 10", run=11)),
    _offline(_HPE_H200, "2.32632", "8904.83", 216, 5120, "WIDEEP",
             "the config closed/HPE/configs/HPE_Cray_XD670_H200_SXM_141GBx8 taken for the open-division result of "
             "the same system (min_query_count 26328 and target 10 as the run's); ",
             _KV_SHORT.format(fit="212.7", frac="0.6")),
]
BLIND27 += [
    case
    for server in (
        # v6.0 Server
        _server(_DELL_B200, "10.95", "40949.45", 222471379921, 60137236, 512, "CUTEDSL"),
        _server(_GOOGLE_B200, "10.96", "41027.93", 199246622004, 53618304, 512, "CUTEDSL"),
        _server(_NEBIUS_B200, "13.81", "51692.89", 268377450618, 71857261, 640, "CUTEDSL"),
        _server(_CW_GB200, "83.08", "311531.04", 209356709271, 56620037, 512, "WIDEEP"),
        _server(_GOOGLE_GB200, "42.45", "156781.10", 187239195555, 51108483, 512, "WIDEEP",
                _TARGET.format(config="server_target_qps: 110", run=45)
                + "the run's 45 queries a second against NVIDIA's 110 on the same system: how many of its 72 GPUs "
                  "served is not stated, read over all 72; "),
        _server(_NV_GB200, "89.59", "336106.48", 215076807821, 58306669, 512, "WIDEEP"),
        _server(_CW_GB300_8, "11.88", "44589.69", 213601419604, 57014667, 640, "CUTEDSL"),
        _server(_NV_GB300_288, "414.63", "1555108.58", 195162958224, 61507803, 640, "CUTEDSL",
                _TARGET.format(config="server_target_qps: 410", run=430)),
        _server(_NV_GB300_72, "106.66", "400436.77", 207405891707, 56151598, 640, "CUTEDSL"),
        _server(_NEBIUS_GB300_72, "153.33", "575579.74", 228618259194, 62550491, 640, "CUTEDSL"),
        _server(_NEBIUS_GB300_8, "17.18", "64509.99", 270924415353, 72421826, 640, "CUTEDSL"),
        # v5.1 Server
        _server(_CW_GB300_V51, "6.13", "22545.12", 233789068581, 63589813, 1536, "CUTLASS"),
        _server(_DELL_9680, "3.78", "13913.33", 224538270152, 61003180, 512, "WIDEEP"),
        _server(_DELL_9685, "3.79", "13963.01", 220974550837, 59934795, 512, "WIDEEP"),
        _server(_GIGA_B200, "4.28", "15977.87", 218210263550, 58452306, 768, "WIDEEP",
                _TARGET.format(config="server_target_qps: 4.4", run=4.3)
                + "'enable_chunked_context': True (prompts of at most 3,140 tokens within a step's 3,456: whole); "),
        _server(_GOOGLE_B200_V51, "3.98", "14630.74", 225046402606, 61274613, 512, "WIDEEP",
                _TARGET.format(config="server_target_qps: 5", run=4)),
    )
    for case in server
]

# Predicted when recorded (the model of main at 6506675): name -> the model's figure in the case's unit.
RECORDED = {
    'MLPerf v6.0 Dell PowerEdge XE9780 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6555.7,
    'MLPerf v6.0 Google DGX B200 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6556.5,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6558.0,
    'MLPerf v6.0 CoreWeave GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 64xGB200 DEP8, Offline': 6990.7,
    'MLPerf v6.0 NVIDIA GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB200 DEP8, Offline': 6989.5,
    'MLPerf v6.0 CoreWeave GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Offline': 8804.4,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 288xGB300 DEP8, Offline': 9093.4,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB300 DEP8, Offline': 9093.8,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Offline': 8803.5,
    'MLPerf v6.0 CoreWeave (open division) GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 64xGB300 DEP8, Offline': 9093.8,
    'MLPerf v5.1 CoreWeave GB300 NVL8 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Offline': 9055.4,
    'MLPerf v5.1 Dell PowerEdge XE9680L TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6516.8,
    'MLPerf v5.1 Dell PowerEdge XE9685L TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6519.2,
    'MLPerf v5.1 GigaComputing G894-SD1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6524.1,
    'MLPerf v5.1 Google DGX B200 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Offline': 6553.8,
    'MLPerf v5.1 HPE (open division) Cray XD670 TensorRT-LLM DeepSeek-R1 FP8 8xH200 DEP8, Offline': 1889.2,
    'MLPerf v6.0 Dell PowerEdge XE9780 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 19.1,
    'MLPerf v6.0 Dell PowerEdge XE9780 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 5813.6,
    'MLPerf v6.0 Google DGX B200 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 20.3,
    'MLPerf v6.0 Google DGX B200 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 5529.8,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 13.5,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 6275.8,
    'MLPerf v6.0 CoreWeave GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 64xGB200 DEP8, Server, TPOT': 21.4,
    'MLPerf v6.0 CoreWeave GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 64xGB200 DEP8, Server, throughput': 5805.2,
    'MLPerf v6.0 Google GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB200 DEP8, Server, TPOT': 34.8,
    'MLPerf v6.0 Google GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB200 DEP8, Server, throughput': 3837.0,
    'MLPerf v6.0 NVIDIA GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB200 DEP8, Server, TPOT': 21.5,
    'MLPerf v6.0 NVIDIA GB200 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB200 DEP8, Server, throughput': 5763.6,
    'MLPerf v6.0 CoreWeave GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Server, TPOT': 20.6,
    'MLPerf v6.0 CoreWeave GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Server, throughput': 6523.0,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 288xGB300 DEP8, Server, TPOT': 21.9,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 288xGB300 DEP8, Server, throughput': 6163.4,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB300 DEP8, Server, TPOT': 20.9,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB300 DEP8, Server, throughput': 6428.9,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB300 DEP8, Server, TPOT': 15.3,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 72xGB300 DEP8, Server, throughput': 7453.9,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Server, TPOT': 13.3,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Server, throughput': 7718.3,
    'MLPerf v5.1 CoreWeave GB300 NVL8 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Server, TPOT': 28.5,
    'MLPerf v5.1 CoreWeave GB300 NVL8 TensorRT-LLM DeepSeek-R1 NVFP4 8xGB300 DEP8, Server, throughput': 5112.6,
    'MLPerf v5.1 Dell PowerEdge XE9680L TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 33.9,
    'MLPerf v5.1 Dell PowerEdge XE9680L TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 3594.9,
    'MLPerf v5.1 Dell PowerEdge XE9685L TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 34.0,
    'MLPerf v5.1 Dell PowerEdge XE9685L TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 3564.3,
    'MLPerf v5.1 GigaComputing G894-SD1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 32.8,
    'MLPerf v5.1 GigaComputing G894-SD1 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 3829.5,
    'MLPerf v5.1 Google DGX B200 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, TPOT': 33.2,
    'MLPerf v5.1 Google DGX B200 TensorRT-LLM DeepSeek-R1 NVFP4 8xB200 DEP8, Server, throughput': 3721.5,
}
