"""The thirty-sixth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at c62d8f4, by someone who did not change the model; none of them was
used to choose a mechanism or a factor. Each case says which reading of its source was taken where the source is
silent (`assumed`). It holds MLPerf Inference v6.0's gpt-oss-120b Offline, Server and Interactive results on the
cards configure has (B200, H200, GB200, GB300, MI355X; TensorRT-LLM through NVIDIA's harness, vLLM through Red
Hat's llm-d, ROCm vLLM through AMD's harness) and HPE's mixtral-8x7b B200 Offline and Server results. No earlier
part took an MLPerf gpt-oss-120b or mixtral-8x7b figure. The MLPerf runs are read as blinds 25 and 27 read
DeepSeek-R1's (Offline as a colocated steady state at the batch an instance is capped at, Server via Little's law),
with each run's own values; every reading below, and the check of each batch cap against what the model's KV cache
holds (memory only: no throughput or latency of the model was looked at), was fixed before any prediction here.
After these predictions were recorded and read, the model took MXFP4 experts on cards with FP4 tensor cores at the
FP8 peak (W4A8), and its gpt-oss rows are read in configure's mxfp4, the release's format, instead of the fp4 of
this part's readings (docs/capacity.md says so); RECORDED keeps the predictions as recorded.

Sources (quoted as the stored copies print them, runs of spaces collapsed to one):
- MLPerf Inference v6.0 (2026), github.com/gbeezybez/inference_results_v6.0 (a fork of
  mlcommons/inference_results_v6.0) at 232fbf90f. Every result is <division>/<submitter>/results/<system>/
  <model>/<scenario>/performance/run_1/mlperf_log_summary.txt, every system <division>/<submitter>/systems/
  <system>.json. Every summary taken prints 'Result is : VALID'; the gpt-oss-120b Offline and Server ones
  'ttft_latency (ns): 3000000000' and 'tpot_latency (ns): 80000000', the Interactive one 'ttft_latency (ns):
  2000000000' and 'tpot_latency (ns): 15000000', mixtral-8x7b's 'ttft_latency (ns): 2000000000' and 'tpot_latency
  (ns): 200000000'.
- The gpt-oss-120b benchmark: NVIDIA's harness README (closed/NVIDIA/code/gpt-oss-120b/tensorrt/README.md, the same
  in every NVIDIA-harness submitter's copy): '| Performance | 6,396 | 15,330 | 10,240 | pubmed_summarization
  (synthetic) |' (Samples, Max ISL, Max OSL); generation_config_performance.json `"max_output_len": 10240`,
  `"temperature": 1.0`; the reference README (mlcommons/inference language/gpt-oss-120b/README.md at 2e1a699):
  'reasoning_effort | high | low' (accuracy, performance) and TEST09 'mean output sequence length is within ±10% of
  reference (1278.20 tokens)'. No stored source states the performance set's mean prompt; it is computed here from
  github.com/openshift-psap/performance-dashboard at 7100702, datasets/summaries/gpt-oss.csv (the dashboard's "GPT-OSS
  Perf Eval": 'input_length' of 6,396 prompts, largest 15,330 as the README's Max ISL): mean 5,010.6 tokens.
  Checkpoint: closed/NVIDIA/code/gpt-oss-120b/tensorrt/__init__.py `HF_MODEL_REPO = {"openai/gpt-oss-120b":
  'main'}`, builder.py '# Point directly to the existing checkpoint directory to skip quantization' (the release's
  MXFP4 experts, BF16 attention); AMD's prepare_model.sh (closed/AMD/setup/gpt-oss-120b/dataset_and_model, the same
  in Dell's, GigaComputing's, HPE's and ORACLE's copies): `MODEL=amd/gpt-oss-120b-w-mxfp4-a-fp8-Mlperf` or
  `quantize_quark.py ... --quant_scheme mxfp4_fp8 --exclude_layers ${EXCLUDE_LAYERS}` with `EXCLUDE_LAYERS="*lm_head
  *self_attn* *router*"`. Every NVIDIA-harness and AMD measurements.json `"weight_data_types": "fp4"`, Red Hat's
  `"mxfp4"` (`"weight_transformations": "none"`). No gpt-oss-120b config of any run taken sets a speculative-decoding
  field (no 'speculative', 'eagle', 'draft' or 'MTP' key in the configs, the llm-d overrides or the AMD YAMLs).
- NVIDIA-harness configs (TensorRT-LLM feat/1.2-mlpinf; system JSONs 'framework': 'TensorRT 10.14, CUDA 13.1'...):
  the multi-GPU result directories' configs (x64, x72) set only `loadgen_fields.min_query_count: 6396 * 64` / `6396 *
  72`, `'max_concurrency': 512 + 1024`, `'kv_cache_dtype': 'fp8'`, `model_fields.precision: 'fp4'` and the target; the
  engine is the one-GPU atomic config's (README: `--atomic-system GB200-NVL72_GB200-186GB_aarch64x1 --gpus-per-node 4
  --dp-multiplicity 4`): configs/GB200-NVL72_GB200-186GB_aarch64x1/{Offline,Server}/gpt-oss-120b.py (NVIDIA's and
  CoreWeave's alike) `llm_fields.tensor_parallelism: 1`, `llm_fields.moe_expert_parallelism: 1`,
  `'enable_attention_dp': False`, `model_fields.gpu_batch_size: {'gpt-oss-120b': 128 * 4}`, `'max_concurrency': 512 +
  1024`, `'cuda_graph_batch_sizes': [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512]`, `'max_num_tokens': 4638 * 3`,
  `'enable_chunked_context': True`, `'use_inflight_batching': True`, `'exclude_input_from_output': True`,
  `'kvcache_free_gpu_mem_frac': 0.98`, `'moe_backend': 'TRTLLM'`, `'kv_cache_dtype': 'fp8'`,
  `model_fields.precision: 'fp4'`, `harness_fields.use_graphs: True`; configs/GB300-NVL72_GB300-288GB_aarch64x1/
  {Offline,Server} (NVIDIA's, CoreWeave's, Nebius's) the same but `'gpt-oss-120b': 128 * 7` and graphs `[..., 512,
  640, 768, 896]`. Per run (config; summary):
  closed/Nebius nebius_b200_n1 ('Nebius B200 n1 (8x B200-SXM-180GB, TensorRT)', 1 x 8): Offline `'gpt-oss-120b':
  512`, `'max_concurrency': 1024`, graphs to 512, `'max_num_tokens': 2048 * 3`, `tensor_parallelism: 1`,
  `offline_expected_qps: 12 * 8`, `min_query_count: 6396 * 16`; 'Samples per second: 65.7087', 'Tokens per second:
  85921.2', 'target_qps : 96', 'samples_per_query : 102336'. Server `'gpt-oss-120b': 128 * 7`, `'max_concurrency':
  512 + 1024`, graphs to 896, `server_target_qps: 69`; 'Completed samples per second : 66.76', 'Completed tokens per
  second: 87444.22', 'Mean latency (ns) : 52564406805', 'Mean Time per Output Token (ns) : 40044323', 'target_qps :
  69'. Interactive (its config's comment '# 1-GPU config (no TP) - 8 independent instances') `'gpt-oss-120b': 128 *
  7`, graphs `[1, 2, 4, 8, 16, 32, 64]`, `server_target_qps: 10`; 'Completed samples per second : 10.05', 'Completed
  tokens per second: 13155.34', 'Mean latency (ns) : 10821443516', 'Mean Time per Output Token (ns) : 8217205',
  'target_qps : 10'.
  closed/CoreWeave GB200-NVL72_GB200-186GB_aarch64x64_TRT ('CoreWeave GB200 NVL72 (64x GB200-186GB_aarch64,
  TensorRT)', 16 x 4): Offline `offline_expected_qps: 10 * 64`; 'Samples per second: 592.154', 'Tokens per second:
  774539', 'target_qps : 640'. Server `server_target_qps: 9 * 64`; 'Completed samples per second : 568.05',
  'Completed tokens per second: 743549.68', 'Mean latency (ns) : 40132240464', 'Mean Time per Output Token (ns) :
  30597267', 'target_qps : 576'.
  closed/NVIDIA GB200-NVL72_GB200-186GB_aarch64x72_TRT ('NVIDIA GB200 NVL72 (72x GB200-186GB_aarch64, TensorRT)',
  18 x 4): Offline `offline_expected_qps: 39 * 18`; 'Samples per second: 672.382', 'Tokens per second: 879542',
  'target_qps : 702'. Server `server_target_qps: 700`; 'Completed samples per second : 686.96', 'Completed tokens per
  second: 899217.66', 'Mean latency (ns) : 49942789840', 'Mean Time per Output Token (ns) : 38084437', 'target_qps :
  700'.
  closed/CoreWeave GB300-NVL72_GB300-288GB_aarch64x64_TRT ('CoreWeave GB300 NVL72 (64x GB300-288GB_aarch64,
  TensorRT)', 16 x 4): Offline `offline_expected_qps: 47 * 16`; 'Samples per second: 696.158', 'Tokens per second:
  910468', 'target_qps : 752'. Server `server_target_qps: 47 * 16`; 'Completed samples per second : 730.85',
  'Completed tokens per second: 956522.81', 'Mean latency (ns) : 71158639271', 'Mean Time per Output Token (ns) :
  54246522', 'target_qps : 752'.
  closed/NVIDIA GB300-NVL72_GB300-288GB_aarch64x72_TRT ('NVIDIA GB300 NVL72 (72x GB300-288GB_aarch64, TensorRT)',
  18 x 4): Offline `offline_expected_qps: 47 * 18`; 'Samples per second: 797.384', 'Tokens per second: 1.04298e+06',
  'target_qps : 846'. Server `server_target_qps: 840`; 'Completed samples per second : 819.15', 'Completed tokens per
  second: 1072251.73', 'Mean latency (ns) : 68258911904', 'Mean Time per Output Token (ns) : 52071489', 'target_qps :
  840'.
  closed/Nebius GB300-NVL72_GB300-288GB_aarch64x1_TRT ('Nebius GB300 NVL72 (4x GB300-288GB_aarch64, TensorRT)',
  'number_of_nodes': 1, 'accelerators_per_node': 1): Offline `offline_expected_qps: 12`; 'Samples per second:
  11.7557', 'Tokens per second: 15371.7', 'target_qps : 12'. Server `server_target_qps: 11.6`; 'Completed samples per
  second : 11.42', 'Completed tokens per second: 14973.14', 'Mean latency (ns) : 66761179725', 'Mean Time per Output
  Token (ns) : 50804423', 'target_qps : 11.6'.
  closed/Nebius GB300-NVL72_GB300-288GB_aarch64x72_TRT (18 x 4): Offline `offline_expected_qps: 47 * 18`; 'Samples
  per second: 799.898', 'Tokens per second: 1.04615e+06', 'target_qps : 846'. Server `server_target_qps: 862`;
  'Completed samples per second : 837.93', 'Completed tokens per second: 1096765.78', 'Mean latency (ns) :
  71365628694', 'Mean Time per Output Token (ns) : 54354600', 'target_qps : 862'.
  closed/Lambda_SIT GB300-NVL72_GB300-288GB_aarch64x4_TRT ('NVIDIA GB300 NVL72 (4x GB300-288GB_aarch64, TensorRT)',
  1 x 4): configs/GB300-NVL72_GB300-288GB_aarch64x4 Offline `tensor_parallelism: 1`, `'gpt-oss-120b': 128 * 7`,
  `'max_concurrency': 512 + 1024`, graphs to 512, `offline_expected_qps: 12`; 'Samples per second: 46.0217', 'Tokens
  per second: 60220.4', 'target_qps : 45'. Server `tensor_parallelism: 1`, `'gpt-oss-120b': 128 * 7`, graphs to 896,
  `server_target_qps: 11.5`; 'Completed samples per second : 40.84', 'Completed tokens per second: 53462.73', 'Mean
  latency (ns) : 52240968987', 'Mean Time per Output Token (ns) : 39862729', 'target_qps : 42'.
- closed/RedHat (vLLM 0.14.1 through llm-d v0.5.0; systems 'LLM-D v0.5.0,Openshift 4.20.12,NVIDIA 8xB200-SXM-180GB'
  and 'LLM-D v0.5.0,OpenShift 4.21,IBM cloud gx3d-160x1792x8h200,NVIDIA 8xH200-SXM-141GB'): the results' README
  ('For latest setup instructions and code - Please clone the repo
  https://github.com/openshift-psap/mlperf-inference-6.0-redhat', 'At least 128 CPUs available on worker nodes (16
  CPUs × 8 replicas)'); that repository at 8010570, setup/llm-d/B200/override_ms_gptoss120b_offline_v050.yaml:
  `--gpu-memory-utilization=0.95`, `--max-num-batched-tokens '8192'`, `--max-num-seqs '1080'`, `--async-scheduling`,
  `--kv-cache-dtype 'fp8'`, `VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8`; the fork github.com/mnmehta/mlperf-inference-6.0-
  redhat at c8e2ca6, setup/llm-d/B200/override_ms_gptoss120b_server_v050.yaml: `--max-num-batched-tokens '2048'`,
  `--max-num-seqs '448'`, no --kv-cache-dtype; setup/llm-d/H200/OVERRIDE_FILES_README.md: '--set decode.replicas=8
  --set decode.parallelism.tensor=1', '**Tensor Parallelism**: 1 (TP=1 per replica, using 1 GPU each)', '**Max
  Sequences**: 448 (`--max-num-seqs`)' in both modes, no --kv-cache-dtype. B200 Offline 'Samples per second:
  69.4118', 'Tokens per second: 93070.7'; Server 'Completed samples per second : 53.37', 'Completed tokens per
  second: 71588.13', 'Mean latency (ns) : 49444835203', 'Mean Time per Output Token (ns) : 36194560'. H200 Offline
  'Samples per second: 20.798', 'Tokens per second: 28680'; Server 'Completed samples per second : 17.52',
  'Completed tokens per second: 24103.19', 'Mean latency (ns) : 77802405882', 'Mean Time per Output Token (ns) :
  56048277'.
- AMD-harness MI355X runs (ROCm vLLM 0.14 with AITER; 'AMD Instinct MI355X 288GB HBM3e'): src/gpt-oss-120b/
  offline_mi355x.yaml (AMD's; Dell's, GigaComputing's, HPE's, ORACLE's the same in these keys) `tensor_parallel_size:
  1`, `quantization: quark`, `gpu_memory_utilization: 0.96`, `max_num_seqs: 1792`, `max_num_batched_tokens: 65536`,
  `enable_chunked_prefill: True`, `cudagraph_mode: FULL_AND_PIECEWISE`, `async_scheduling: True`, `device_count: 8`,
  no kv_cache_dtype; server_mi355x.yaml the same but `gpu_memory_utilization: 0.95`, `max_num_seqs: 1024`.
  closed/AMD 8xMI355X_2xEPYC_9575F (1 x 8): Offline 'Samples per second: 69.1714', 'Tokens per second: 95004';
  Server 'Completed samples per second : 59.86', 'Completed tokens per second: 82136.08', 'Mean latency (ns) :
  93118913728', 'Mean Time per Output Token (ns) : 67443317'. closed/AMD 94xMI355X_24xEPYC_9575F ('AMD MI355X Custom
  Cluster', 'number_of_nodes': '12', 'AMD Instinct MI355X 288GB HBM3e (x94)'; offline_mi355x_mn.yaml and
  server_mi355x_mn.yaml as the one-node files): Offline 'Samples per second: 753.549', 'Tokens per second:
  1.03107e+06'; Server 'Completed samples per second : 658.41', 'Completed tokens per second: 900054.32', 'Mean
  latency (ns) : 83882661983', 'Mean Time per Output Token (ns) : 61036956'. closed/Dell 8xMI355X_2xEPYC_9655
  ('PowerEdge XE9785L (8x MI355X)'): Offline 'Samples per second: 66.6165', 'Tokens per second: 91395.5'; Server
  'Completed samples per second : 57.41', 'Completed tokens per second: 78603.48', 'Mean latency (ns) : 89724249954',
  'Mean Time per Output Token (ns) : 65175367'. closed/GigaComputing 8xMI355X_2xEPYC-9575F ('G893-ZX1-AAX4'):
  Offline 'Samples per second: 67.3166', 'Tokens per second: 92332.2'; Server 'Completed samples per second :
  58.43', 'Completed tokens per second: 80089.62', 'Mean latency (ns) : 87107271116', 'Mean Time per Output Token
  (ns) : 63141343'. closed/HPE HPE_ProLiant_XD685_MI355X_288GBx8: Offline 'Samples per second: 66.9387', 'Tokens per
  second: 91846.6'; Server 'Completed samples per second : 55.27', 'Completed tokens per second: 75354.94', 'Mean
  latency (ns) : 99369007432', 'Mean Time per Output Token (ns) : 72786474'. closed/ORACLE 8xMI355X_2xEPYC_9575F
  ('BM.GPU.MI355X.8'): Offline 'Samples per second: 66.8557', 'Tokens per second: 91706.3'; Server 'Completed samples
  per second : 56.95', 'Completed tokens per second: 78186.31', 'Mean latency (ns) : 83738571596', 'Mean Time per
  Output Token (ns) : 60618305'.
- closed/HPE HPE_ProLiant_XD685_B200_SXM_192GBx8_TRT mixtral-8x7b ('HPE ProLiant Compute XD685 (8x NVIDIA B200
  180GB, TensorRT)', 'TensorRT 10.11, CUDA 13.0'; 'accelerator_memory_capacity': '180 GB'): configs/
  HPE_ProLiant_XD685_B200_SXM_192GBx8/{Offline,Server}/mixtral-8x7b.py `model_fields.gpu_batch_size:
  {'mixtral-8x7b': 6144}`, `model_fields.precision: 'fp4'`, `llm_fields.tensor_parallelism: 1`, `'effective_bits':
  7.25`, `'kv_cache_dtype': 'fp8'`, `'use_inflight_batching': True`, `harness_fields.use_graphs: False`,
  `'max_input_len': 2048`; Offline `offline_expected_qps: 882`, runtime `'max_num_tokens': 14336`; Server
  `server_target_qps: 872`, runtime `'max_num_tokens': 10240`; src/TRT_10_11/llmlib/hf_quantize.py
  `mtq.auto_quantize(... constraints={"effective_bits": auto_quantize_bits}, ... quantization_formats=[...] +
  [None]`; measurements.json `"weight_data_types": "fp4"`. Offline 'Samples per second: 876.067', 'Tokens per
  second: 126468', 'target_qps : 882'; Server 'Completed samples per second : 869.80', 'Completed tokens per second:
  127209.01', 'Mean latency (ns) : 19866087992', 'Mean Time per Output Token (ns) : 134679518', 'target_qps : 872'.
  The data set: github.com/openshift-psap/performance-dashboard at 7100702, mlperf-data/summaries/mixtral-8x7b.csv
  (15,000 rows of input_length, output_length): mean prompt 427.4 tokens (computed here), mean reference output
  144.8.

Readings common to all (decided before any prediction): openai/gpt-oss-120b as configure's gpt-oss-120b read as
blind 35 reads the release, MXFP4 routed experts and BF16 attention, router, embeddings and LM head
(Precision(weights="bf16", moe="fp4")); the NVIDIA harness loads the release's checkpoint as it is ('fp4' = its MXFP4
experts; the TRTLLM MoE backend's MXFP8 activations not modelled apart), AMD's quark re-quantisation keeps MXFP4
experts with BF16 attention (FP8 activations of the experts not modelled apart), Red Hat serves the release
('mxfp4', no transformation); KV FP8 where the config sets it (every NVIDIA-harness config, Red Hat's B200 Offline),
else BF16 (vLLM's 'auto': Red Hat's B200 Server and both H200 runs, every MI355X run). Every gpt-oss-120b run is
instances of one GPU each (TP 1, no expert parallelism: Layout(1, 1)), the figure a GPU the system's over its GPUs
(x1, x4, x8, x64, x72 and AMD's 94); no speculative decoding (none configured, so no acceptance rate enters);
in-flight batching with chunked prefill in the decode steps (prefill "mixed": TensorRT-LLM's
'enable_chunked_context', vLLM V1), CUDA graphs at decode (every config; none for mixtral, `use_graphs: False`);
KV memory at configure's default 0.9 of the card (the engines' 0.95-0.98 are not the model's input, as blind 27);
the mean prompt the performance set's 5,011 tokens (5,010.6), not spread (isl_cv 0, as blinds 25 and 27), and the
mean output each run's own, its tokens a second over its samples a second, rounded (1,308-1,379); 'Tokens per second'
as generated tokens ('exclude_input_from_output': True; the AMD and Red Hat harnesses count the generated tokens
too); the profiles' cards with no override (every system's memory is the profile's card: 180 GB B200, 141 GB H200,
186 GB GB200, 288 GB GB300 and MI355X). Offline: every sample queued at once, read as a steady state at the batch an
instance is capped at: the engine's max batch (gpu_batch_size / --max-num-seqs / max_num_seqs), under the harness's
max_concurrency of an instance (1,024 or 1,536), where the model's KV cache holds it. Checked before any figure was
predicted (the model's largest fitting decode batch at the runs' lengths, memory only): 871 (B200, FP8 KV), 919
(GB200), 1,666 (GB300), 277.5 (H200, BF16 KV), 870 (MI355X, BF16 KV), 867 (B200, FP8 KV, Red Hat's 1,341 output
tokens); so the NVIDIA-harness caps (512 on B200 and GB200, 896 on GB300) fit, and those are read at their caps.
Red Hat's B200 (1,080, 25% past), Red Hat's H200 (448, 61% past) and every MI355X Offline cap (1,792, 106% past) are
far past what the model's KV cache holds; an engine cannot run more sequences than its KV pool holds (vLLM admits
and preempts by free KV blocks), so those are read at the largest batch the model's KV cache holds (batch_rule
"fit"; blind 27 read caps at most 1.6% past at the cap, a reading it fixed for caps 'a little past' and that does not
carry to these). Server and Interactive: Poisson arrivals read as a colocated steady state at the requests in flight
by Little's law (completed samples a second x mean latency / the system's GPUs), each under its engine's max batch
and what the model's KV cache holds; the published mean TPOT ('Mean Time per Output Token') as the colocated TPOT
there and the completed tokens a second over the system's GPUs as the throughput.

Readings of particular runs (fixed before any prediction):
- Multi-GPU NVIDIA-harness runs (CoreWeave x64, NVIDIA and Nebius x72): the result directory's config sets no
  engine field but max_concurrency (1,536, the atomic config's); the engine is each submitter's one-GPU atomic
  config (GB200 x1: gpu_batch_size 512; GB300 x1: 896), the count of instances the system's GPUs.
- Lambda_SIT's GB300 x4: its stored configs (TP 1, 896) carry targets 12 (Offline) and 11.5 (Server) where the runs
  log 'target_qps : 45' and 'target_qps : 42' (and 'samples_per_query : 29700' = 45 x 600 s x 1.1): the target only
  differs (as blind 27's _TARGET), read as four TP-1 instances; its Offline CUDA graphs stop at 512 under the max
  batch 896, read at 896 (the engine's max batch, blind 27's rule).
- Other stored configs whose target only differs from the run's: Dell MI355X Server (user.conf 60.5, run 61.2),
  GigaComputing MI355X Offline (70, run 71), HPE MI355X Offline (71, run 70): kept.
- Red Hat's llm-d setups are read from the repositories its README points to (the setup files are not in the
  results repository): B200 Offline from openshift-psap's override (1,080 sequences, FP8 KV), B200 Server and both
  H200 modes from the mnmehta fork's (448 sequences, no KV dtype: BF16); eight TP-1 vLLM replicas behind llm-d's
  gateway (its scheduler's routing not modelled apart). That these are the files the runs used is assumed.
- AMD's 94-GPU cluster: 94 instances of one GPU (the one-node YAMLs' TP 1 repeated over 12 nodes; the system JSON
  counts 94), the figure over 94 GPUs.
- Nebius B200 Interactive: aggregated TP-1 instances (not disaggregated), read as its Server run is: 10.05 x 10.82 s
  / 8 = 13.6 in flight a GPU.
- HPE's mixtral-8x7b: configure's mixtral-8x7b; ModelOpt's AutoQuantize at 'effective_bits' 7.25 mixes the searched
  formats layer by layer (FP4 among them, BF16 allowed) for 7.25 bits a weight on average; the split is not stated,
  and it is read as FP8 weights throughout (configure takes one format; 7.25 bits is nearest FP8), FP8 KV
  (Precision(weights="fp8", kv="fp8")); TP 1 instances on 8 GPUs; no CUDA graphs (`use_graphs: False`); the prompt
  the data set's 427 tokens, output the run's own (144); Offline gpu_batch_size 6,144 is far past what the model's
  KV cache holds (3,343 a GPU at FP8 weights), read at that fit (batch_rule "fit"); Server 869.80 x 19.87 s / 8 =
  2,159.9 in flight a GPU, under both.

Figures looked at and not taken: NVIDIA's GB200 x72 and GB300 x72 Interactive results (477.41 and 517.30 samples a
second): Dynamo-disaggregated ('# 24 CTX TP1 + 12 GEN TP4EP4 = 24 + 48 = 72 GPUs'), whose decode-side batch and
TPOT are not a colocated reading (blind 27 left NVIDIA's disaggregated Interactive runs out too); open/Lambda_SIT's
B200 x8 Server (open division: its config enables a 'dynamic bias router' `ENABLE_DYNAMIC_BIAS_ROUTER` that changes
expert routing, and TP 4 EP 4 with attention DP; configure does not model the altered routing); Lenovo SR680aV4
('ThinkSystem SR680a V4 (8x B300-SXM-270GB, TensorRT)'), every B300 result (ASUSTeK XA_NB3I-E12, Cisco C880A M8,
GigaComputing G894-SD3-AAX7, NVIDIA B300-SXM-270GBx8, Nebius nebius_b300_n1) and every RTX PRO 6000 result (HPE
DL380A / DL385, gpt-oss-120b and mixtral-8x7b), Intel's BMG B60 / B70 / Pro B60 Dual runs and open/Supermicro_RedHat's
MI350X runs: no configure profile for those cards; the TTFTs, TPOT percentiles and 'Scheduled samples per second'
(the mean TPOT and the completed rate taken, as blind 27); the Offline runs' latencies (an offline run's queue);
the TEST07 / TEST09 compliance runs (a different data set or an audit of output length; TEST09's 'Mean output
tokens' of 1,373-1,383 on MI355X agree with the performance runs' own); stored gpt-oss-120b configs without a result
(NVIDIA B200 x1 / x4 / x8, Google B200 x8 and GB200 x4 / x72, CoreWeave B200 x1 / x4 / x16 and GB200 / GB300 x1,
GigaComputing DLB2-CB3 GB300 x4 Interactive, Lambda_SIT GB300 x72, Dell XE9780 B300). No H100, H20 or MI300X
gpt-oss-120b result is in v6.0.
"""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

V60 = "github.com/gbeezybez/inference_results_v6.0 (a fork of mlcommons/inference_results_v6.0) at 232fbf90f"

_OSS = "gpt-oss-120b"
_ISL = 5011  # the performance set's mean prompt, 5,010.6 tokens (performance-dashboard gpt-oss.csv, 6,396 prompts)
_MIX_ISL = 427  # mixtral-8x7b's data set, 427.4 tokens (performance-dashboard mixtral-8x7b.csv, 15,000 prompts)
_CARDS = {"b200": "B200", "gb200": "GB200", "gb300": "GB300", "h200": "H200", "mi355x": "MI355X"}


def _oss(kv: str) -> Precision:
    """openai/gpt-oss-120b: MXFP4 routed experts (recorded as configure's fp4; read as mxfp4, the release's
    format, since blind 36 was recorded: docs/capacity.md), attention, router, embeddings and LM head BF16."""
    return Precision(weights="bf16", moe="mxfp4", kv=kv)


_ENGINES = {
    "trt": ("TensorRT-LLM", "TensorRT-LLM (feat/1.2-mlpinf) through NVIDIA's MLPerf harness"),
    "llmd": ("vLLM", "vLLM 0.14.1 through Red Hat's llm-d v0.5.0 (eight TP-1 replicas behind its gateway)"),
    "rocm": ("vLLM", "ROCm vLLM 0.14 (AITER) through AMD's MLPerf harness"),
}


@dataclass(frozen=True)
class _System:
    division: str
    submitter: str
    label: str  # the system as the case name gives it
    results: str  # <division>/<submitter>/results/<results>/<model>/<scenario>/performance/run_1
    config: str  # where the engine's settings are read (text)
    hw: str
    gpus: int
    engine: str  # a key of _ENGINES
    model: str = _OSS

    def name(self, precision: str, scenario: str) -> str:
        open_ = " (open division)" if self.division == "open" else ""
        return (f"MLPerf v6.0 {self.submitter}{open_} {self.label} {_ENGINES[self.engine][0]} {self.model} "
                f"{precision} {self.gpus}x{_CARDS[self.hw]} TP1, {scenario}")

    def source(self, scenario: str) -> str:
        return (f"MLPerf Inference v6.0, {self.submitter}'s {self.division}-division {self.model} submission "
                f"({_ENGINES[self.engine][1]}): {self.config} and {self.division}/{self.submitter}/results/"
                f"{self.results}/{self.model}/{scenario}/performance/run_1/mlperf_log_summary.txt of {V60}")

    @property
    def isl(self) -> int:
        return _ISL if self.model == _OSS else _MIX_ISL

    @property
    def options(self) -> Options:
        return Options() if self.model == _OSS else Options(cuda_graphs=False)

    def precision(self, kv: str) -> Precision:
        return _oss(kv) if self.model == _OSS else Precision(weights="fp8", kv="fp8")

    def setup(self, isl: int, osl: int, how: str, kv: str) -> str:
        instances = (" (one GPU)" if self.gpus == 1 else
                     f", {self.gpus} such instances, the published figure over its {self.gpus} GPUs")
        weights = ("mixtral-8x7b in ModelOpt's AutoQuantize mix at 7.25 effective bits read as FP8 weights"
                   if self.model != _OSS else
                   "openai/gpt-oss-120b as released (MXFP4 experts, BF16 attention, router, embeddings, LM head)")
        graphs = "no CUDA graphs (use_graphs False)" if self.model != _OSS else "CUDA graphs at decode"
        return (f"{_ENGINES[self.engine][1]}, each instance one GPU at TP 1{instances}; {weights}, {kv} KV, "
                f"{graphs}, no speculative decoding (none configured); in-flight batching with chunked prefill in "
                f"the decode steps (prefill 'mixed'); KV memory at configure's 0.9 of the card; the data set's mean "
                f"prompt {isl:,} tokens, output {osl:,} ({how})")


def _offline(s: _System, samples: str, tokens: str, cap: int, cap_text: str, kv: str, fit: str | None = None,
             note: str = "") -> Case:
    """An Offline run: its 'Tokens per second' over its GPUs at the batch an instance is capped at, or where the cap
    is far past what the model's KV cache holds, at what it holds."""
    osl, isl = round(float(tokens) / float(samples)), s.isl
    if fit is None:
        batch, rule = cap, "slo"
        how = (f"read as a steady state at the batch an instance is capped at, {cap_text} = {cap:,}; checked before "
               f"any figure was predicted: the model's KV cache holds it")
    else:
        batch, rule = None, "fit"
        how = (f"the cap ({cap_text} = {cap:,}) is far past what the model's KV cache holds ({fit} a GPU, checked "
               f"before any figure was predicted): read at the largest batch the model's KV cache holds (the engine "
               f"admits no more than its KV pool holds)")
    return Case(s.name(_label(s, kv), "Offline"), s.source("Offline"), s.hw, "colocated", Layout(1, 1, 0), batch,
                Workload(isl, osl), s.options, round(float(tokens) / s.gpus, 2), "tok/s/GPU",
                f"the Offline 'Tokens per second: {tokens}' / {s.gpus} GPUs; every sample queued at once, {how}; "
                f"{note}" + s.setup(isl, osl, f"the run's {tokens} tokens / {samples} samples a second", kv),
                s.precision(kv), model=s.model, batch_rule=rule, blind=36)


def _server(s: _System, qps: str, tokens: str, latency_ns: int, tpot_ns: int, cap: int, kv: str,
            scenario: str = "Server", note: str = "") -> list[Case]:
    """A Server (or Interactive) run: its mean TPOT and its completed tokens a second over its GPUs, colocated at the
    requests in flight by Little's law."""
    osl, isl = round(float(tokens) / float(qps)), s.isl
    batch = float(qps) * latency_ns / 1e9 / s.gpus
    setup = (f"Poisson arrivals read as a colocated steady state at the requests in flight by Little's law "
             f"('Completed samples per second : {qps}' x 'Mean latency (ns) : {latency_ns}' / {s.gpus} GPUs = "
             f"{batch:.1f} a GPU, under the engine's max batch {cap:,} and what the model's KV cache holds); {note}"
             + s.setup(isl, osl, f"the run's {tokens} tokens / {qps} samples a second", kv))
    precision, options, label = s.precision(kv), s.options, _label(s, kv)
    return [
        Case(s.name(label, f"{scenario}, TPOT"), s.source(scenario), s.hw, "colocated", Layout(1, 1, 0),
             round(batch, 2), Workload(isl, osl), options, round(1e9 / tpot_ns, 2), "tok/s/user",
             f"1 / the 'Mean Time per Output Token (ns) : {tpot_ns}', read as the colocated TPOT; " + setup,
             precision, model=s.model, blind=36),
        Case(s.name(label, f"{scenario}, throughput"), s.source(scenario), s.hw, "colocated", Layout(1, 1, 0),
             round(batch, 2), Workload(isl, osl), options, round(float(tokens) / s.gpus, 2), "tok/s/GPU",
             f"'Completed tokens per second: {tokens}' / {s.gpus} GPUs; " + setup, precision, model=s.model,
             blind=36),
    ]


def _label(s: _System, kv: str) -> str:
    if s.model != _OSS:
        return "FP4/FP8 mix"
    return "MXFP4" if kv == "fp8" else "MXFP4 BF16-KV"


_NEB_B200 = _System("closed", "Nebius", "B200 n1", "nebius_b200_n1",
                    "closed/Nebius/configs/nebius_b200_n1/<scenario>/gpt-oss-120b.py", "b200", 8, "trt")
_CW_GB200 = _System("closed", "CoreWeave", "GB200 NVL72", "GB200-NVL72_GB200-186GB_aarch64x64_TRT",
                    "closed/CoreWeave/configs/GB200-NVL72_GB200-186GB_aarch64x64 (harness) and "
                    "GB200-NVL72_GB200-186GB_aarch64x1 (engine)", "gb200", 64, "trt")
_NV_GB200 = _System("closed", "NVIDIA", "GB200 NVL72", "GB200-NVL72_GB200-186GB_aarch64x72_TRT",
                    "closed/NVIDIA/configs/GB200-NVL72_GB200-186GB_aarch64x72 (harness) and "
                    "GB200-NVL72_GB200-186GB_aarch64x1 (engine)", "gb200", 72, "trt")
_CW_GB300 = _System("closed", "CoreWeave", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x64_TRT",
                    "closed/CoreWeave/configs/GB300-NVL72_GB300-288GB_aarch64x64 (harness) and "
                    "GB300-NVL72_GB300-288GB_aarch64x1 (engine)", "gb300", 64, "trt")
_NV_GB300 = _System("closed", "NVIDIA", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x72_TRT",
                    "closed/NVIDIA/configs/GB300-NVL72_GB300-288GB_aarch64x72 (harness) and "
                    "GB300-NVL72_GB300-288GB_aarch64x1 (engine)", "gb300", 72, "trt")
_NEB_GB300_1 = _System("closed", "Nebius", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x1_TRT",
                       "closed/Nebius/configs/GB300-NVL72_GB300-288GB_aarch64x1", "gb300", 1, "trt")
_NEB_GB300_72 = _System("closed", "Nebius", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x72_TRT",
                        "closed/Nebius/configs/GB300-NVL72_GB300-288GB_aarch64x72 (harness) and "
                        "GB300-NVL72_GB300-288GB_aarch64x1 (engine)", "gb300", 72, "trt")
_LAMBDA_GB300 = _System("closed", "Lambda_SIT", "GB300 NVL72", "GB300-NVL72_GB300-288GB_aarch64x4_TRT",
                        "closed/Lambda_SIT/configs/GB300-NVL72_GB300-288GB_aarch64x4", "gb300", 4, "trt")
_RH_B200 = _System("closed", "RedHat", "8xB200 llm-d OpenShift", "8xB200-LLM-D-Openshift",
                   "the llm-d overrides of github.com/openshift-psap/mlperf-inference-6.0-redhat at 8010570 (Offline) "
                   "and github.com/mnmehta/mlperf-inference-6.0-redhat at c8e2ca6 (Server)", "b200", 8, "llmd")
_RH_H200 = _System("closed", "RedHat", "8xH200 llm-d OpenShift", "8xH200-LLM-D-Openshift",
                   "setup/llm-d/H200/OVERRIDE_FILES_README.md of github.com/mnmehta/mlperf-inference-6.0-redhat at "
                   "c8e2ca6", "h200", 8, "llmd")
_AMD_YAML = "closed/{sub}/src/gpt-oss-120b/{{offline,server}}_mi355x{mn}.yaml"
_AMD_8 = _System("closed", "AMD", "8xMI355X", "8xMI355X_2xEPYC_9575F", _AMD_YAML.format(sub="AMD", mn=""),
                 "mi355x", 8, "rocm")
_AMD_94 = _System("closed", "AMD", "MI355X cluster", "94xMI355X_24xEPYC_9575F", _AMD_YAML.format(sub="AMD", mn="_mn"),
                  "mi355x", 94, "rocm")
_DELL_MI = _System("closed", "Dell", "PowerEdge XE9785L", "8xMI355X_2xEPYC_9655", _AMD_YAML.format(sub="Dell", mn=""),
                   "mi355x", 8, "rocm")
_GIGA_MI = _System("closed", "GigaComputing", "G893-ZX1-AAX4", "8xMI355X_2xEPYC-9575F",
                   _AMD_YAML.format(sub="GigaComputing", mn=""), "mi355x", 8, "rocm")
_HPE_MI = _System("closed", "HPE", "ProLiant XD685", "HPE_ProLiant_XD685_MI355X_288GBx8",
                  _AMD_YAML.format(sub="HPE", mn=""), "mi355x", 8, "rocm")
_ORACLE_MI = _System("closed", "ORACLE", "BM.GPU.MI355X.8", "8xMI355X_2xEPYC_9575F",
                     _AMD_YAML.format(sub="ORACLE", mn=""), "mi355x", 8, "rocm")
_HPE_MIX = _System("closed", "HPE", "ProLiant XD685", "HPE_ProLiant_XD685_B200_SXM_192GBx8_TRT",
                   "closed/HPE/configs/HPE_ProLiant_XD685_B200_SXM_192GBx8/<scenario>/mixtral-8x7b.py", "b200", 8,
                   "trt", model="mixtral-8x7b")

_CAP_B200 = "min(gpu_batch_size 512, max_concurrency 1,024), CUDA graphs to 512"
_CAP_GB200 = "min(the atomic config's gpu_batch_size 128 * 4, max_concurrency 512 + 1024)"
_CAP_GB300 = "min(the atomic config's gpu_batch_size 128 * 7, max_concurrency 512 + 1024)"
_CAP_MI = "max_num_seqs 1,792 of an instance"
_TARGET = "the stored config's target ({config}) differs from the run's 'target_qps : {run}' only: kept; "

BLIND36 = [
    _offline(_NEB_B200, "65.7087", "85921.2", 512, _CAP_B200, "fp8"),
    _offline(_CW_GB200, "592.154", "774539", 512, _CAP_GB200, "fp8"),
    _offline(_NV_GB200, "672.382", "879542", 512, _CAP_GB200, "fp8"),
    _offline(_CW_GB300, "696.158", "910468", 896, _CAP_GB300, "fp8"),
    _offline(_NV_GB300, "797.384", "1.04298e+06", 896, _CAP_GB300, "fp8"),
    _offline(_NEB_GB300_1, "11.7557", "15371.7", 896, _CAP_GB300, "fp8"),
    _offline(_NEB_GB300_72, "799.898", "1.04615e+06", 896, _CAP_GB300, "fp8"),
    _offline(_LAMBDA_GB300, "46.0217", "60220.4", 896,
             "min(gpu_batch_size 128 * 7, max_concurrency 512 + 1024) (CUDA graphs to 512 only)", "fp8",
             note=_TARGET.format(config="offline_expected_qps: 12", run=45)),
    _offline(_RH_B200, "69.4118", "93070.7", 1080, "--max-num-seqs 1080", "fp8", fit="867"),
    _offline(_RH_H200, "20.798", "28680", 448, "--max-num-seqs 448", "bf16", fit="277.5"),
    _offline(_AMD_8, "69.1714", "95004", 1792, _CAP_MI, "bf16", fit="870"),
    _offline(_AMD_94, "753.549", "1.03107e+06", 1792, _CAP_MI, "bf16", fit="870"),
    _offline(_DELL_MI, "66.6165", "91395.5", 1792, _CAP_MI, "bf16", fit="870"),
    _offline(_GIGA_MI, "67.3166", "92332.2", 1792, _CAP_MI, "bf16", fit="870",
             note=_TARGET.format(config="gpt-oss-120b.Offline.target_qps = 70", run=71)),
    _offline(_HPE_MI, "66.9387", "91846.6", 1792, _CAP_MI, "bf16", fit="870",
             note=_TARGET.format(config="gpt-oss-120b.Offline.target_qps = 71", run=70)),
    _offline(_ORACLE_MI, "66.8557", "91706.3", 1792, _CAP_MI, "bf16", fit="870"),
    _offline(_HPE_MIX, "876.067", "126468", 6144, "gpu_batch_size 6,144", "fp8", fit="3,343"),
]
BLIND36 += [
    case
    for server in (
        _server(_NEB_B200, "66.76", "87444.22", 52564406805, 40044323, 896, "fp8"),
        _server(_NEB_B200, "10.05", "13155.34", 10821443516, 8217205, 896, "fp8", scenario="Interactive",
                note="the Interactive scenario (TPOT limit 15 ms, TTFT 2 s) of aggregated TP-1 instances, read as "
                     "its Server run is; "),
        _server(_CW_GB200, "568.05", "743549.68", 40132240464, 30597267, 512, "fp8"),
        _server(_NV_GB200, "686.96", "899217.66", 49942789840, 38084437, 512, "fp8"),
        _server(_CW_GB300, "730.85", "956522.81", 71158639271, 54246522, 896, "fp8"),
        _server(_NV_GB300, "819.15", "1072251.73", 68258911904, 52071489, 896, "fp8"),
        _server(_NEB_GB300_1, "11.42", "14973.14", 66761179725, 50804423, 896, "fp8"),
        _server(_NEB_GB300_72, "837.93", "1096765.78", 71365628694, 54354600, 896, "fp8"),
        _server(_LAMBDA_GB300, "40.84", "53462.73", 52240968987, 39862729, 896, "fp8",
                note=_TARGET.format(config="server_target_qps: 11.5", run=42)),
        _server(_RH_B200, "53.37", "71588.13", 49444835203, 36194560, 448, "bf16"),
        _server(_RH_H200, "17.52", "24103.19", 77802405882, 56048277, 448, "bf16"),
        _server(_AMD_8, "59.86", "82136.08", 93118913728, 67443317, 1024, "bf16"),
        _server(_AMD_94, "658.41", "900054.32", 83882661983, 61036956, 1024, "bf16"),
        _server(_DELL_MI, "57.41", "78603.48", 89724249954, 65175367, 1024, "bf16",
                note=_TARGET.format(config="gpt-oss-120b.Server.target_qps = 60.5", run=61.2)),
        _server(_GIGA_MI, "58.43", "80089.62", 87107271116, 63141343, 1024, "bf16"),
        _server(_HPE_MI, "55.27", "75354.94", 99369007432, 72786474, 1024, "bf16"),
        _server(_ORACLE_MI, "56.95", "78186.31", 83738571596, 60618305, 1024, "bf16"),
        _server(_HPE_MIX, "869.80", "127209.01", 19866087992, 134679518, 6144, "fp8"),
    )
    for case in server
]

# Predicted when recorded (the model of main at c62d8f4): name -> the model's figure in the case's unit.
RECORDED = {
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM gpt-oss-120b MXFP4 8xB200 TP1, Offline': 13847.4,
    'MLPerf v6.0 CoreWeave GB200 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 64xGB200 TP1, Offline': 14636.4,
    'MLPerf v6.0 NVIDIA GB200 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB200 TP1, Offline': 14636.4,
    'MLPerf v6.0 CoreWeave GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 64xGB300 TP1, Offline': 18675.1,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB300 TP1, Offline': 18675.1,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 1xGB300 TP1, Offline': 18675.1,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB300 TP1, Offline': 18675.1,
    'MLPerf v6.0 Lambda_SIT GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 4xGB300 TP1, Offline': 18677.4,
    'MLPerf v6.0 RedHat 8xB200 llm-d OpenShift vLLM gpt-oss-120b MXFP4 8xB200 TP1, Offline': 16510.2,
    'MLPerf v6.0 RedHat 8xH200 llm-d OpenShift vLLM gpt-oss-120b MXFP4 BF16-KV 8xH200 TP1, Offline': 3684.5,
    'MLPerf v6.0 AMD 8xMI355X vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Offline': 12517.0,
    'MLPerf v6.0 AMD MI355X cluster vLLM gpt-oss-120b MXFP4 BF16-KV 94xMI355X TP1, Offline': 12514.1,
    'MLPerf v6.0 Dell PowerEdge XE9785L vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Offline': 12516.4,
    'MLPerf v6.0 GigaComputing G893-ZX1-AAX4 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Offline': 12516.4,
    'MLPerf v6.0 HPE ProLiant XD685 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Offline': 12516.4,
    'MLPerf v6.0 ORACLE BM.GPU.MI355X.8 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Offline': 12516.4,
    'MLPerf v6.0 HPE ProLiant XD685 TensorRT-LLM mixtral-8x7b FP4/FP8 mix 8xB200 TP1, Offline': 22036.7,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM gpt-oss-120b MXFP4 8xB200 TP1, Server, TPOT': 29.7,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM gpt-oss-120b MXFP4 8xB200 TP1, Server, throughput': 13027.3,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM gpt-oss-120b MXFP4 8xB200 TP1, Interactive, TPOT': 131.9,
    'MLPerf v6.0 Nebius B200 n1 TensorRT-LLM gpt-oss-120b MXFP4 8xB200 TP1, Interactive, throughput': 1792.3,
    'MLPerf v6.0 CoreWeave GB200 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 64xGB200 TP1, Server, TPOT': 35.1,
    'MLPerf v6.0 CoreWeave GB200 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 64xGB200 TP1, Server, throughput': 12505.4,
    'MLPerf v6.0 NVIDIA GB200 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB200 TP1, Server, TPOT': 29.8,
    'MLPerf v6.0 NVIDIA GB200 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB200 TP1, Server, throughput': 14202.4,
    'MLPerf v6.0 CoreWeave GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 64xGB300 TP1, Server, TPOT': 22.3,
    'MLPerf v6.0 CoreWeave GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 64xGB300 TP1, Server, throughput': 18096.2,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB300 TP1, Server, TPOT': 22.9,
    'MLPerf v6.0 NVIDIA GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB300 TP1, Server, throughput': 17802.3,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 1xGB300 TP1, Server, TPOT': 23.3,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 1xGB300 TP1, Server, throughput': 17739.0,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB300 TP1, Server, TPOT': 22.0,
    'MLPerf v6.0 Nebius GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 72xGB300 TP1, Server, throughput': 18237.1,
    'MLPerf v6.0 Lambda_SIT GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 4xGB300 TP1, Server, TPOT': 29.2,
    'MLPerf v6.0 Lambda_SIT GB300 NVL72 TensorRT-LLM gpt-oss-120b MXFP4 4xGB300 TP1, Server, throughput': 15564.5,
    'MLPerf v6.0 RedHat 8xB200 llm-d OpenShift vLLM gpt-oss-120b MXFP4 BF16-KV 8xB200 TP1, Server, TPOT': 27.2,
    'MLPerf v6.0 RedHat 8xB200 llm-d OpenShift vLLM gpt-oss-120b MXFP4 BF16-KV 8xB200 TP1, Server, throughput': 8976.1,
    'MLPerf v6.0 RedHat 8xH200 llm-d OpenShift vLLM gpt-oss-120b MXFP4 BF16-KV 8xH200 TP1, Server, TPOT': 18.6,
    'MLPerf v6.0 RedHat 8xH200 llm-d OpenShift vLLM gpt-oss-120b MXFP4 BF16-KV 8xH200 TP1, Server, throughput': 3164.8,
    'MLPerf v6.0 AMD 8xMI355X vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, TPOT': 17.1,
    'MLPerf v6.0 AMD 8xMI355X vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, throughput': 11899.6,
    'MLPerf v6.0 AMD MI355X cluster vLLM gpt-oss-120b MXFP4 BF16-KV 94xMI355X TP1, Server, TPOT': 19.4,
    'MLPerf v6.0 AMD MI355X cluster vLLM gpt-oss-120b MXFP4 BF16-KV 94xMI355X TP1, Server, throughput': 11380.4,
    'MLPerf v6.0 Dell PowerEdge XE9785L vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, TPOT': 18.1,
    'MLPerf v6.0 Dell PowerEdge XE9785L vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, throughput': 11656.5,
    'MLPerf v6.0 GigaComputing G893-ZX1-AAX4 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, TPOT': 18.3,
    'MLPerf v6.0 GigaComputing G893-ZX1-AAX4 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, throughput': 11632.2,
    'MLPerf v6.0 HPE ProLiant XD685 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, TPOT': 17.3,
    'MLPerf v6.0 HPE ProLiant XD685 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, throughput': 11844.0,
    'MLPerf v6.0 ORACLE BM.GPU.MI355X.8 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, TPOT': 19.2,
    'MLPerf v6.0 ORACLE BM.GPU.MI355X.8 vLLM gpt-oss-120b MXFP4 BF16-KV 8xMI355X TP1, Server, throughput': 11434.0,
    'MLPerf v6.0 HPE ProLiant XD685 TensorRT-LLM mixtral-8x7b FP4/FP8 mix 8xB200 TP1, Server, TPOT': 8.0,
    'MLPerf v6.0 HPE ProLiant XD685 TensorRT-LLM mixtral-8x7b FP4/FP8 mix 8xB200 TP1, Server, throughput': 17266.3,
}
