"""The published deployments of the validation table (docs/capacity.md): what each source states, and
what had to be assumed where it is silent. `fitted=True` marks the ten the factors were fitted to;
the rest are held out. Figures per GPU are the published per-node or per-cluster figures divided by
the GPUs that produced them."""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.capacity.balance import ASSUMED_PLAIN, ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload

UNITS = ("tok/s/GPU", "tok/s/user", "ms/request", "tok/s/request")


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    hardware: str
    phase: str  # prefill, decode (tokens/s per GPU of that side) or colocated
    layout: Layout
    # per GPU; None: the largest meeting workload.tpot_slo_ms ("slo") or whose decode fits memory ("fit")
    batch: float | None
    workload: Workload
    options: Options
    published: float
    # tok/s/GPU (input for prefill, output otherwise), tok/s/user (1 / TPOT), ms/request (one request's
    # prefill + its other output tokens) or tok/s/request ((prompt + output tokens) / that time)
    unit: str
    assumed: str
    precision: Precision = Precision()
    model: str = "deepseek-v3"
    fitted: bool = False
    batch_rule: str = "slo"
    # a benchmark run replayed step by step (bench_run.simulate): (prompts, length distribution, requests a second
    # or None for all at once); () reads the case at its steady batch
    run: tuple = ()
    hw_overrides: tuple = ()  # (field, value) pairs: what the deployment changes (swapAB's 32-row tile, a memory)
    # recorded before a model change and not predicted while making it: N = the part validation_blindN.py holds
    # (1 = validation_blind.py); 0 = fitted or held out
    blind: int = 0

    @property
    def part(self) -> str:
        if self.fitted:
            return "fitted"
        return {0: "held out", 1: "blind"}.get(int(self.blind), f"blind {int(self.blind)}")

    @property
    def engine(self) -> str:
        """The engine that served it: the one its name, else its source, names (vLLM with ATOM's plugin is
        vLLM's); LMSYS's deployment posts are SGLang's, DeepSeek's Day-6 figures its own engine's."""
        for text in (self.name, self.source):
            for engine in ENGINES + OTHER_ENGINES:
                if engine in text:
                    return engine
        return "SGLang" if "LMSYS" in self.source else "DeepSeek"


ENGINES = ("TensorRT-LLM", "SGLang", "vLLM", "ATOM")  # vLLM before ATOM: vLLM with ATOM's plugin is vLLM's run
# engines of published runs that `--engine` does not plan for: Alibaba's RTP-LLM
OTHER_ENGINES = ("RTP-LLM",)

# SGLang's scheduler without --enable-mixed-chunk runs a prefill batch as a forward of its own: the decodes wait
# (read so by the rule the mixed-steps change set for every SGLang run read in chunks, after all parts had been seen)
SGLANG_UNMIXED = Options(prefill="stalled")


_EPLB = dict(balancedness=ASSUMED_REPLICATED)  # no source gives its balance
DEEPSEEK = "DeepSeek, 'Day 6: DeepSeek-V3/R1 Inference System Overview' (github.com/deepseek-ai/open-infra-index, 2025-03-01)"
LMSYS = "LMSYS, 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs' (2025-05-05)"
TRTLLM = "NVIDIA, TensorRT-LLM docs 'How to get best performance on DeepSeek-R1 in TensorRT-LLM'"
TRT_B200_LAT = "NVIDIA, TensorRT-LLM tech blog 1 'Pushing Latency Boundaries: Optimizing DeepSeek-R1 Performance on NVIDIA B200 GPUs'"
ANT = "LMSYS / Ant Group, 'Together with SGLang: Best Practices for Serving DeepSeek-R1 on H20-96G' (2025-09-26)"
GB200_1 = "LMSYS, 'Deploying DeepSeek on GB200 NVL72 with PD and Large Scale EP (Part I)' (2025-06-16)"
GB200_2 = "LMSYS, 'Deploying DeepSeek on GB200 NVL72 with PD and Large Scale EP (Part II)' (2025-09-25)"
# its reproduction commands: SGLang issue #10903 ('Instructions for DeepSeek'), as the z.blog2_*_decode.sh
# scripts of github.com/shifangx/Scripts-SGLang copy them: decode DP48/EP48 with 32 redundant experts,
# --enable-single-batch-overlap and SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK 1408 (FP8 attention,
# NVFP4 MoE) or 768 (BF16 attention, FP8 MoE) running requests per rank; prefill instances of 4 GPUs
# (NVFP4, no redundant experts) or 8 (FP8, 32 redundant), 16,384 tokens per rank, no weight offload
GB200_2_REPRO = GB200_2 + " with the reproduction commands of SGLang issue #10903"
K2 = "LMSYS / Mooncake, 'Deploying Kimi K2 with PD Disaggregation and Large-Scale Expert Parallelism on 128 H200 GPUs' (2025-07-20)"
MTP = "LMSYS / Eigen AI, 'Accelerating SGLang with Multiple Token Prediction' (2025-07-17)"
AMD_MTP = "LMSYS / AMD, 'Accelerating DeepSeek V3 Inference via Multi-Token Prediction in SGLang' (2025-09-02)"
QWEN = "Qwen, 'Speed Benchmark' (Qwen3 docs, github.com/QwenLM: SGLang 0.4.6, H20 96GB, batch 1)"

# NVIDIA's FP4 checkpoints: NVFP4 routed experts and dense FFNs, attention left in FP8 (TensorRT-LLM blog 3)
NVFP4 = Precision(weights="fp8", moe="fp4", dense="fp4")
SWAPAB = (("gemm_min_tile_rows", 32),)  # DeepGEMM swapAB: 32-row blocks (the H20 post)

FITTED = [
    Case("DeepSeek prefill, H800 EP32", DEEPSEEK, "h800", "prefill", Layout(1, 32, 32), 16384,
         Workload(4400, 1200, cache_hit=0.563, isl_cv=1.0), Options(tbo=True, cuda_graphs=False, **_EPLB), 73_700 / 8, "tok/s/GPU",
         "a daily average of the live service, cache hits (56.3%) counted as input; prompt 4,400 tokens (608B input / 168B "
         "output tokens a day = 3.6:1 with the mean decode KV length 4,989 = prompt + half the output); 16K tokens per GPU "
         "per step and two micro-batches (DeepSeek's profile-data README); live prompt lengths spread as an exponential "
         "distribution (isl_cv 1)", fitted=True),
    Case("DeepSeek decode, H800 EP144", DEEPSEEK, "h800", "decode", Layout(1, 144, 32), None,
         Workload(4400, 1200, tpot_slo_ms=1000 / 21), Options(tbo=True, decode_context=4989, **_EPLB), 14_800 / 8,
         "tok/s/GPU", "batch = the largest whose TPOT meets the published 20-22 tok/s per user (21); no MTP "
         "(the overview does not say it is used); two micro-batches (its 5-stage pipeline)", fitted=True),
    *[Case(f"LMSYS prefill, H100 EP32, {isl // 1024}K", LMSYS, "h100", "prefill", Layout(1, 32, 32), 16384,
           Workload(isl, 1), Options(tbo=True, cuda_graphs=False, **_EPLB), published / 8, "tok/s/GPU",
           "16,384 tokens per GPU per step, two-batch overlap, EPLB with 32 redundant experts, no cache hits", fitted=True)
      for isl, published in ((1024, 57_674), (2048, 54_543), (4096, 50_302))],
    Case("LMSYS decode, H100 EP72", LMSYS, "h100", "decode", Layout(1, 72, 32), 256,
         Workload(2000, 100), Options(tbo=True, decode_context=2000, **_EPLB), 22_282 / 8, "tok/s/GPU",
         "KV length 2,000 (the input; outputs short against it); two-batch overlap; no MTP; EPLB with 32 redundant experts",
         fitted=True),
    Case("TensorRT-LLM, 8xH200 DP8 EP8, 1K/2K", TRTLLM + " (H200 max-throughput)", "h200", "colocated", Layout(1, 8, 0), 1024 / 8,
         Workload(1024, 2048), Options(**_EPLB), 1_436, "tok/s/GPU",
         "in-flight batching of prefill and decode on the same GPUs (trtllm-bench); FP8 KV cache; no MTP; no "
         "redundant experts", Precision(kv="fp8"), fitted=True),
    Case("TensorRT-LLM, 8xB200 batch 1, no MTP", TRT_B200_LAT, "b200", "decode", Layout(tp=8, ep=4, moe_tp=2), 1 / 8,
         Workload(1024, 2048), Options(), 111, "tok/s/user",
         "the 'without MTP' row of its MTP table (111 TPS/user), measured with the MoE split TP 2 x EP 4 of the 253 row; "
         "NVFP4 experts and dense FFNs, BF16 attention and KV; mean context 1K + half of 2K", Precision(weights="fp4", attn="bf16"),
         fitted=True),
    Case("Ant Group H20 decode 'InferX Pro', EP16, batch 32, MTP", ANT, "h20", "decode", Layout(1, 16, 0), 32,
         Workload(4096, 1536), Options(mtp_accept=1.85, mtp_draft=1, balancedness=0.70, sbo=True), 675, "tok/s/GPU",
         "one MTP draft accepting 1.8-1.9 (1.85); FP8 MLA (KV FP8); DeepGEMM swapAB (32-row tiles); single-batch overlap "
         "(the post); no redundant experts stated, the post's '>70% load balance ratio' as balancedness 0.70",
         Precision(kv="fp8"), fitted=True, hw_overrides=SWAPAB),
    Case("GB200 NVL72 decode, EP48, FP8 attention + NVFP4 MoE", GB200_2_REPRO, "gb200", "decode", Layout(1, 48, 32), 1408,
         Workload(2000, 100), Options(decode_context=2000, sbo=True, **_EPLB), 13_386, "tok/s/GPU",
         "batch 1,408 per GPU (the reproduction's dispatch cap and CUDA-graph batch); 32 redundant experts (288 slots "
         "over 48 ranks); NVFP4 dispatch (fused in DeepEP); single-batch overlap (combine behind the down GEMM); "
         "attention weights FP8 (the post quantises o_proj to NVFP4 too, not modelled)",
         Precision(weights="fp8", moe="fp4", kv="fp8", dispatch="fp4"), fitted=True),
]

HELD_OUT = [
    Case("Ant Group H20 decode 'InferX Base', EP16, batch 48, MTP", ANT, "h20", "decode", Layout(1, 16, 0), 48,
         Workload(4096, 1536), Options(mtp_accept=1.85, mtp_draft=1, balancedness=0.70, sbo=True), 714, "tok/s/GPU",
         "as 'InferX Pro'", Precision(kv="fp8"), hw_overrides=SWAPAB),
    Case("Ant Group H20 decode 'InferX Max', EP16, batch 12, MTP 2 drafts", ANT, "h20", "decode", Layout(1, 16, 0), 12,
         Workload(4096, 1536), Options(mtp_accept=2.55, mtp_draft=2, balancedness=0.70, sbo=True), 423, "tok/s/GPU",
         "two MTP drafts accepting 2.4-2.7 (2.55); otherwise as 'InferX Pro'", Precision(kv="fp8"), hw_overrides=SWAPAB),
    Case("Ant Group H20 decode, EP32, batch 8, MTP", ANT, "h20", "decode", Layout(1, 32, 0), 8,
         Workload(4096, 1536), Options(mtp_accept=1.85, mtp_draft=1, balancedness=0.70, sbo=True), 293, "tok/s/GPU",
         "its EP-size study (293 tok/s per GPU at batch 8); the base MTP setting with every optimisation assumed",
         Precision(kv="fp8"), hw_overrides=SWAPAB),
    Case("Ant Group H20 decode, EP16, batch 1, MTP", ANT, "h20", "decode", Layout(1, 16, 0), 1,
         Workload(4096, 1536), Options(mtp_accept=1.85, mtp_draft=1, balancedness=0.70, sbo=True), 43, "tok/s/user",
         "its MTP study: 43 tok/s at batch 1 with one draft (one sequence per GPU: per GPU = per user)",
         Precision(kv="fp8"), hw_overrides=SWAPAB),
    Case("Ant Group H20 prefill, TP8, 4K input", ANT, "h20", "prefill", Layout(8, 1, 0), 8192 / 8,
         Workload(4096, 1), Options(), 16_500 / 8, "tok/s/GPU",
         "16.5k input tok/s per node; FP8 attention (FA3-FP8); 8,192 tokens per step over the node assumed (SGLang's "
         "chunked prefill); FP8 weights", Precision(kv="fp8")),
    Case("GB200 NVL72 decode, EP48, BF16 attention + FP8 MoE", GB200_2_REPRO, "gb200", "decode", Layout(1, 48, 32), 768,
         Workload(2000, 100), Options(decode_context=2000, sbo=True, **_EPLB), 9_087, "tok/s/GPU",
         "batch 768 per GPU (the reproduction's dispatch cap and CUDA-graph batch); 32 redundant experts; FP8 dispatch; "
         "single-batch overlap", Precision(weights="fp8", kv="bf16")),
    Case("GB200 NVL72 prefill, EP4, FP8 attention + NVFP4 MoE", GB200_2_REPRO, "gb200", "prefill", Layout(1, 4, 0), 16384,
         Workload(2000, 1), Options(sbo=True, balancedness=ASSUMED_PLAIN), 26_156, "tok/s/GPU",
         "a 4-GPU prefill instance (issue #10903: 'each prefill instance requires 4 GPUs'), NVFP4 weights resident (no "
         "offload), no redundant experts (balancedness 0.70 assumed), 16,384 tokens per GPU per step (its 65,536-token "
         "chunks over 4 ranks), single-batch overlap; no two-batch overlap",
         Precision(weights="fp8", moe="fp4", kv="fp8", dispatch="fp4")),
    Case("GB200 NVL72 prefill, EP8, BF16 attention + FP8 MoE", GB200_2_REPRO, "gb200", "prefill", Layout(1, 8, 32), 16384,
         Workload(2000, 1), Options(**_EPLB), 18_471, "tok/s/GPU",
         "an 8-GPU prefill instance over two trays (the reproduction's --nnodes 2 --tp-size 8), FP8 weights resident, "
         "32 redundant experts, 16,384 tokens per GPU per step (131,072-token chunks), no overlap",
         Precision(weights="fp8", kv="bf16")),
    Case("GB200 NVL72 decode, EP48, part I", GB200_1, "gb200", "decode", Layout(1, 48, 32), None,
         Workload(2000, 100), Options(decode_context=2000, **_EPLB), 7_583, "tok/s/GPU",
         "batch: the largest that fits; BF16 attention and KV, FP8 MoE; no two-batch overlap (the post disables it)",
         Precision(weights="fp8", kv="bf16"), batch_rule="fit"),
    Case("Kimi K2 prefill, 4 nodes of H200 (EP32)", K2, "h200", "prefill", Layout(1, 32, 0), 16384,
         Workload(2000, 1), Options(tbo=True, cuda_graphs=False, **_EPLB), 224_000 / 32, "tok/s/GPU",
         "224k input tok/s on 4 prefill nodes; the DeepSeek H100 post's prefill setup assumed (16,384 tokens per GPU, "
         "two-batch overlap)", model="kimi-k2"),
    Case("Kimi K2 decode, 12 nodes of H200 (EP96), batch 480", K2, "h200", "decode", Layout(1, 96, 96), 480,
         Workload(2000, 100), Options(tbo=True, decode_context=2000, **_EPLB), 288_000 / 96, "tok/s/GPU",
         "288k output tok/s on 12 decode nodes; 'decode batch size 480' read as per GPU; 96 redundant experts (stated); "
         "two-batch overlap as the DeepSeek setup", model="kimi-k2"),
    Case("SGLang 2 nodes of H200 decode, 2 sequences per GPU, 64K input", MTP, "h200", "decode", Layout(1, 16, 0), 2,
         Workload(65536, 4096), Options(**_EPLB), 51, "tok/s/GPU",
         "the baseline row (no MTP, no overlap scheduling): 51 tok/s per rank; DP attention with EP16 assumed",),
    Case("SGLang 2 nodes of H200 decode, 2 sequences per GPU, 64K input, MTP", MTP, "h200", "decode", Layout(1, 16, 0), 2,
         Workload(65536, 4096), Options(mtp_accept=2.18, mtp_draft=2, **_EPLB), 81.5, "tok/s/GPU",
         "the 3-token MTP window row: 2 drafts accepting 2.18, 81.5 tok/s per rank"),
    Case("TensorRT-LLM, 8xB200 DP8 EP8, 1K/2K, FP8 KV", TRTLLM + " (B200 max-throughput, R1-0528)", "b200", "colocated",
         Layout(1, 8, 0), 7168 / 8, Workload(1024, 2048), Options(**_EPLB), 5_393, "tok/s/GPU",
         "concurrency 7,168 (896 per GPU); NVFP4 experts and dense FFNs, FP8 attention and KV; FP4 all-gather as NVFP4 "
         "dispatch", Precision(weights="fp8", moe="fp4", dense="fp4", kv="fp8", dispatch="fp4")),
    Case("TensorRT-LLM, 8xB200 DP8 EP8, 1K/2K, BF16 KV", TRTLLM + " (B200 max-throughput)", "b200", "colocated",
         Layout(1, 8, 0), 3072 / 8, Workload(1024, 2048), Options(**_EPLB), 4_548, "tok/s/GPU",
         "concurrency 3,072 (384 per GPU); NVFP4 experts and dense FFNs, BF16 KV", NVFP4),
    Case("TensorRT-LLM, 8xB200 batch 1, MTP 3", TRT_B200_LAT, "b200", "decode", Layout(tp=8, ep=4, moe_tp=2), 1 / 8,
         Workload(1024, 2048), Options(mtp_accept=2.82, mtp_draft=3), 253, "tok/s/user",
         "the MTP 3 row (acceptance 2.82, 253 TPS/user); as the no-MTP case; the three MTP layers in BF16 (the blog's "
         "precision table)", Precision(weights="fp4", attn="bf16", mtp="bf16")),
    Case("TensorRT-LLM, 8xH200 batch 1, MTP 3", TRTLLM + " (H200 min-latency)", "h200", "decode", Layout(tp=8, ep=4, moe_tp=2), 1 / 8,
         Workload(1024, 2048), Options(mtp_accept=2.82, mtp_draft=3), 158, "tok/s/user",
         "TP 8 with --ep 4 (MoE TP 2 x EP 4); FP8; acceptance not published for H200: the B200 post's 2.82 for three "
         "MTP layers assumed"),
    Case("SGLang, 8xMI300X TP8, concurrency 1, 1K/1K", AMD_MTP, "mi300x", "decode", Layout(8, 1, 0), 1 / 8,
         Workload(1024, 1024), Options(), 17_348.25, "ms/request",
         "end-to-end latency of one request without MTP (17,348 ms); experts split TP 8; FP8 weights, BF16 KV"),
    Case("Qwen3-235B-A22B, H20 TP8 BF16, batch 1", QWEN, "h20", "decode", Layout(8, 1, 0), 1 / 8,
         Workload(1, 2048), Options(), 74.50, "tok/s/user",
         "input 1 token, 2,048 generated: the speed is 1 / TPOT at a mean context of 1K", Precision(weights="bf16"),
         model="qwen3-235b-a22b"),
    Case("Qwen3-235B-A22B, H20 TP4 FP8, batch 1", QWEN, "h20", "decode", Layout(4, 1, 0), 1 / 4,
         Workload(1, 2048), Options(), 71.65, "tok/s/user", "as the BF16 row, on 4 GPUs", Precision(weights="fp8"),
         model="qwen3-235b-a22b"),
]

CASES = FITTED + HELD_OUT  # validation.CASES adds the blind part (validation_blind.py)
