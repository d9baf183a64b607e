"""The eighteenth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at a193eec (its step model is that of 985e947, unchanged since), by
someone who did not change the model; none of them was used to choose a mechanism or a factor. Each case says
which reading of its source was taken where the source is silent (`assumed`). It was searched in web pages and
documentation sites only (blogs, cloud and vendor reports, papers' pages, benchmark sites, engines' documentation
hosted off GitHub), H800, H20, GB200 and B200 first, then Kimi K2, DeepSeek-V3/R1 and Qwen3-235B, single-user
latency as well as throughput. No figure here is used by another part, and its one source is new to the
validation.

Source:
- Neural Nova, 'How Neural Nova Improved Qwen3-235B Inference Throughput by 2.39X' (www.neural-nova.com/
  industry-insights/how-neural-nova-improved-qwen3-235b-a22b-serving-throughput-by-2.39x-with-workload-aware-vllm-
  optimization): 'Qwen3-235B-A22B running on NVIDIA H100 8 GPUs vLLM with tensor parallel size 8', 'Output
  throughput increased from 759.0 to 1,812.0 tokens/s', 'Request throughput increased from 2.92 to 6.98
  requests/s', 'Mean TPOT decreased from 146.3 ms to 53.9 ms', 'Mean ITL decreased from 144.3 ms to 53.2 ms',
  'Mean end-to-end latency decreased from 41.8s to 17.6s'; 'This result came from workload-aware vLLM serving
  optimization. It was not a custom kernel optimization result.' With the recipe it publishes for the tuned run
  (huggingface.co/neural-nova/Qwen3-235B-A22B-Instruct-2507-optimized, 'Qwen3-235B-A22B - Tuned vLLM Serving
  Recipe', serving Qwen/Qwen3-235B-A22B): 'Hardware 8x NVIDIA H100-80GB, single node', 'Input Length 409-3,686
  tokens · nominal 2,048 · uniform', 'Output Length 51-460 tokens · nominal 256 · uniform', 'Dataset random
  (synthetic) · range ratio 0.8', 'vLLM version v0.21.0', 'Parallelism Tensor-parallel 8', 'Features Chunked
  prefill, prefix caching, Triton MoE backend', 'Prompts Measured 1,000', 'Request Rate inf · max concurrency is
  the only throttle', 'Tested Concurrency 512', 'Precision BF16'; its changes: '--max-num-batched-tokens at 8,192',
  '--gpu-memory-utilization 0.90', '--max-num-seqs 512', chunked prefill and prefix caching, the Triton MoE backend.
  This part takes the four figures of the blog: output throughput and mean TPOT, before (vLLM's defaults) and
  after (the tuned recipe).

Figures looked at and not taken (web pages and documentation only): the Step-3 paper ('Step-3 is Large yet
Affordable', arXiv 2507.19427: DeepSeek-V3's '2,324' decode tokens a GPU second 'under 50ms TPOT SLA (4K
context, FP8, no MTP)' on Hopper GPUs; how that figure was obtained, its card and layout, is past the part of
the paper that could be read); a 13 x 8 H800 SuperPod study of SGLang v0.4.8 prefill/decode disaggregation
(Hugging Face community blog 'Comprehensive Study of H800x104 DGX SuperPod Disaggregation Strategy in SGLang
v0.4.8', 2025-07-19: '1.3 million tokens per second' input and '20,000 toks/sec' output across configurations
P4D9, P4D6, P2D4 ..., '25,000 toks/sec output throughput at the concurrency of 50': which configuration, model
release and lengths produced each figure is not in the part that could be read); Perplexity's 'Lower Latency and
Higher Throughput with Multi-node DeepSeek Deployment' (2025-04-18: DeepSeek-V3 on 8 H200 and on several 8 H100
nodes, figures in charts) and 'Hosting Qwen on Blackwell' (Qwen3-235B on GB200 NVL72, prefill TP 4 / EP 4, decode
EP 16, MXFP8: kernel latencies only, the serving throughput in charts); Alibaba Cloud PAI's DeepSeek-R1 posts
(the 'GU120' instance's card is not named; 'DeepSeek-R1-PAI-optimized' is a compressed checkpoint); InferenceX's
GB200 NVL72 vs B200 post (Dynamo TensorRT-LLM with MTP, disaggregated, acceptance not published) and its
comparison pages (interpolated curves); Baseten's Kimi K2 Thinking on 8 B200 ('a mixture of Tensor Parallelism and
Expert Parallelism', sizes not given, measured by Artificial Analysis), Simplismart's Kimi K2 Thinking ('Hybrid
Parallelism'), Clarifai's Kimi K2.5 (speculative decoding) and the vLLM recipes' Kimi K2 Thinking pages (Moonshot's
INT4 weights); Google Cloud's A4X (GB200) Dynamo recipes ('over 6K total tokens/sec/GPU' at 8K/1K: layout and
concurrency not in the post) and NVIDIA's GB200 NVL72 Kimi K2 Thinking announcement (a '10x' gain over H200
in tokens per megawatt, a chart); Inspur's NF5688G7 release (blind 16's reading: lengths and layout not given, MTP);
gpustack's DeepSeek-R1 H200 summary table (the runs blinds 3 and 8 took or judged bursts of queued prefill), its
Qwen3-235B A100 page (no configure profile) and Qwen3.5 latency pages (models configure does not have); Nebius's
SGLang story (relative gains); several Chinese article-mirror and tutorial pages with H20, H200 and Kimi K2
'benchmarks' whose hardware contradicts itself (an 'H200 80GB', 'two H20 machines' of four GPUs over NVLink) or that
give no engine or layout; tanjunchen's H20 post (blind 12: results not in the stored part). No H800, H20, GB200 or
B200 figure with a stated layout, lengths and concurrency, and none of Kimi K2, was found in the stored web pages
that no part had taken.

Readings common to all: an output throughput of a closed-loop serving benchmark as colocated at the run's requests
in flight over the GPUs, vLLM's prefill chunks riding in its decode steps (prefill "mixed", the model's default);
a mean TPOT of such a run, with other requests' prefills interleaved, as the colocated TPOT at the same batch (the
reading of c99b6a0); the requests in flight by Little's law (request throughput x mean end-to-end latency: 6.98 x
17.6 s = 123 after and 2.92 x 41.8 s = 122 before, 15.4 and 15.3 a GPU), not the recipe's 'Tested Concurrency 512'
(at 512 requests kept in flight the published request rate would give a mean latency of 73 s, not 17.6 s; the
blog's runs read as one of about 128); lengths at the recipe's means (2,048 in, 256 out); Qwen3-235B-A22B in BF16
(the recipe's 'Precision BF16') with BF16 KV (no KV format set); experts split TP 8 (no expert parallelism set);
CUDA graphs (vLLM's default); no prefix-cache hits (random prompts); no speculative decoding. The baseline ('vLLM
without' the tuning) read as the same vLLM release, TP 8, workload and load with vLLM's defaults: the model takes
no MoE backend or scheduler budget, so it gives both runs one figure.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

NEURAL_NOVA = ("Neural Nova, 'How Neural Nova Improved Qwen3-235B Inference Throughput by 2.39X' (www.neural-nova.com/"
               "industry-insights), with its tuned recipe huggingface.co/neural-nova/Qwen3-235B-A22B-Instruct-2507-"
               "optimized (vLLM v0.21.0, 8 H100)")

_NN = ("Qwen3-235B-A22B in BF16 on one node of 8 H100 80GB, vLLM v0.21.0 at tensor parallel 8 (attention TP 8, experts "
       "split TP 8), BF16 KV, CUDA graphs, chunked prefill riding in the decode steps; 1,000 random prompts, inputs "
       "uniform in 409-3,686 and outputs in 51-460 tokens (means 2,048 / 256), no prefix-cache hits; {load}; {run}")


def _neural_nova(run: str, unit: str, figure: float, req_s: float, e2e_s: float) -> Case:
    tuned = run == "tuned"
    inflight = req_s * e2e_s
    load = (f"requests in flight by Little's law, {req_s} req/s x the mean end-to-end {e2e_s} s = {inflight:.0f}, "
            f"{inflight / 8:.1f} a GPU")
    what = ("the tuned recipe (--max-num-seqs 512, --max-num-batched-tokens 8192, --gpu-memory-utilization 0.90, "
            "Triton MoE backend)" if tuned else "the baseline, vLLM's defaults (same release, TP 8, workload and load "
            "assumed)")
    if unit == "tok/s/GPU":
        published, head = figure / 8, f"output tok/s ({figure:,}) / 8 GPUs"
    else:
        published, head = 1000 / figure, f"1 / the mean TPOT ({figure} ms), with other requests' prefills interleaved"
    name = (f"Neural Nova Qwen3-235B 8xH100 vLLM TP8 BF16, {'tuned' if tuned else 'defaults'}, 2K/256, "
            f"{'throughput' if unit == 'tok/s/GPU' else 'TPOT'}")
    return Case(name, NEURAL_NOVA, "h100", "colocated", Layout(8, 1, 0), inflight / 8, Workload(2048, 256), Options(),
                published, unit, head + "; " + _NN.format(load=load, run=what), Precision(weights="bf16"),
                model="qwen3-235b-a22b", blind=18)


BLIND18 = [
    _neural_nova("tuned", "tok/s/GPU", 1812.0, 6.98, 17.6),
    _neural_nova("tuned", "tok/s/user", 53.9, 6.98, 17.6),
    _neural_nova("defaults", "tok/s/GPU", 759.0, 2.92, 41.8),
    _neural_nova("defaults", "tok/s/user", 146.3, 2.92, 41.8),
]

# Predicted when recorded (the model of main at a193eec): name -> the model's figure in the case's unit.
RECORDED = {
    'Neural Nova Qwen3-235B 8xH100 vLLM TP8 BF16, tuned, 2K/256, throughput': 212.9,
    'Neural Nova Qwen3-235B 8xH100 vLLM TP8 BF16, tuned, 2K/256, TPOT': 13.9,
    'Neural Nova Qwen3-235B 8xH100 vLLM TP8 BF16, defaults, 2K/256, throughput': 212.3,
    'Neural Nova Qwen3-235B 8xH100 vLLM TP8 BF16, defaults, 2K/256, TPOT': 13.9,
}
