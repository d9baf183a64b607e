"""The blind part of the validation table (docs/capacity.md): published figures recorded before the
model changes that followed them, and not predicted while those changes were made. Like the held-out
part they never choose a factor; unlike it, nobody looked at their errors while modelling, until the
later changes docs/capacity.md lists with the cases that informed them (the 129K-token Qwen3 prefill
informed the long-context prefill change). Each case says which reading of its source was taken where
the source is ambiguous (`assumed`).

Sources beyond validation_cases.py's:
- TensorRT-LLM's performance overview (docs/source/developer-guide/perf-overview.md, commit 03e27c7):
  trtllm-bench's max-throughput runs, output tokens/s per GPU, prefill and decode interleaved on the
  same GPUs (colocated), attention data-parallel with experts over the GPUs (DEP), FP8 KV cache for
  DeepSeek-R1; the concurrency is not published: read as the largest batch whose KV cache fits (the
  page raises the KV share to 0.95 where it can; 0.90 assumed).
- Qwen's 'Speed Benchmark' (Qwen3 docs, SGLang 0.4.6.post1 on H20 96 GB, batch 1): speed = (prompt +
  generated tokens) / request time, 2,048 tokens generated, prompts of 6,144 to 129,042 tokens.
- TensorRT-LLM tech blog 1 (B200 min-latency): the row 'Introduce moe_backend=TRTLLM, EP2TP4' (299 TPS
  per user), strict MTP acceptance (the relaxed acceptance came two rows later).
- SGLang PR #8047 (H20 tune config for Kimi): Kimi K2 on H20 at TP 16, concurrency 32, before its tuned
  fused-MoE configs.
"""
from __future__ import annotations

from dataclasses import replace

from moeserve.capacity.balance import ASSUMED_REPLICATED
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

PERF = "NVIDIA, TensorRT-LLM docs 'Performance Overview' (perf-overview.md at commit 03e27c7; trtllm-bench max throughput)"
QWEN_SPEED = "Qwen, 'Speed Benchmark' (Qwen3 docs: SGLang 0.4.6.post1, H20 96GB, batch 1, 2,048 generated tokens)"
TRT_B200_LAT = "NVIDIA, TensorRT-LLM tech blog 1 'Pushing Latency Boundaries: Optimizing DeepSeek-R1 Performance on NVIDIA B200 GPUs'"
SGL_KIMI_H20 = "SGLang PR #8047 'H20 tune config for Kimi' (2025-07-15), the 'origin Kimi Performance' run"

_EPLB = dict(balancedness=ASSUMED_REPLICATED)
# NVIDIA's DeepSeek-R1-0528-NVFP4-v2: NVFP4 experts, dense FFNs and o_proj (only the other attention
# projections FP8; the whole attention is costed FP8 here), FP8 KV cache, NVFP4 all-to-all
R1_V2 = Precision(weights="fp8", moe="fp4", dense="fp4", kv="fp8", dispatch="fp4")
_PERF_DS = ("DeepSeek-R1-0528; attention data-parallel, experts over the {n} GPUs, no redundant experts; "
            "batch: the largest whose KV cache fits (concurrency not published); FP8 KV (the page's config); ")
# NVIDIA's ModelOpt Qwen3-235B-A22B checkpoints (-FP4, -FP8), which the perf overview runs, carry an FP8 KV cache
# (kv_cache_quant_algo FP8): ModelOpt's hf_ptq.py quantizes the KV cache to FP8 unless told otherwise, and
# TensorRT-LLM's own accuracy tests of these checkpoints (tests/integration/defs/accuracy/test_llm_api_pytorch.py,
# TestQwen3_235B_A22B: KvCacheConfig without a dtype) are referenced only with kv_cache_quant_algo FP8
# (references/gsm8k.yaml); TensorRT-LLM's dtype "auto" runs the checkpoint's (capacity/engine_kv.py). The rows were
# recorded reading BF16 (the page's Qwen3 options set no KV format); the reading was corrected after their errors
# were known (docs/capacity.md, "Readings corrected"), and RECORDED keeps the BF16 reading's predictions.
MODELOPT_QWEN3_KV = "fp8"
QWEN3_KV_TEXT = ("KV in FP8, the ModelOpt checkpoint's (recorded reading BF16, as the page's Qwen3 options set no KV "
                 "format; corrected); ")
_PERF_QWEN = ("Qwen3-235B-A22B; attention data-parallel, experts over the 4 GPUs; batch: the largest whose KV "
              "cache fits; " + QWEN3_KV_TEXT)


def qwen3_modelopt(prec: Precision) -> Precision:
    """A perf-overview Qwen3-235B row's formats: the ModelOpt checkpoint's FP8 KV cache (MODELOPT_QWEN3_KV)."""
    return replace(prec, kv=MODELOPT_QWEN3_KV)


def _perf(name: str, hw: str, n: int, isl: int, osl: int, published: float, prec: Precision, model: str) -> Case:
    text = (_PERF_DS.format(n=n) + ("NVFP4-v2 checkpoint" if prec.moe_weights == "fp4" else "FP8 checkpoint")
            if model == "deepseek-r1" else _PERF_QWEN + ("NVFP4 checkpoint, every linear layer FP4"
                                                         if prec.weights == "fp4" else "FP8 checkpoint"))
    prec = prec if model == "deepseek-r1" else qwen3_modelopt(prec)
    return Case(name, PERF, hw, "colocated", Layout(1, n, 0), None, Workload(isl, osl), Options(**_EPLB), published,
                "tok/s/GPU", text, prec, model=model, batch_rule="fit", blind=True)


def _qwen(isl: int, fmt: str, tp: int, published: float, blind: int = 1) -> Case:
    """A row of Qwen's H20 speed benchmark; `blind`: the part that took it (blinds 1, 3 and 10 took rows)."""
    return Case(f"Qwen3-235B-A22B, H20 TP{tp} {fmt.upper()}, batch 1, {isl:,}-token prompt", QWEN_SPEED, "h20", "decode",
                Layout(tp, 1, 0), 1 / tp, Workload(isl, 2048), Options(), published, "tok/s/request",
                f"(prompt + 2,048 generated) / request time; the prompt prefilled in one pass (SGLang's chunks change "
                f"the attention's order, not its work); {fmt.upper()} weights and BF16 KV; CUDA graphs at decode",
                Precision(weights=fmt), model="qwen3-235b-a22b", blind=blind)


BLIND = [
    _perf("TensorRT-LLM perf overview, B200 DEP4, 1K/1K", "b200", 4, 1024, 1024, 6_430, R1_V2, "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, GB200 DEP4, 1K/1K", "gb200", 4, 1024, 1024, 6_924, R1_V2, "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, H200 DEP8, 1K/1K", "h200", 8, 1024, 1024, 1_620, Precision(kv="fp8"), "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, B200 DEP4, 8K/1K", "b200", 4, 8192, 1024, 1_168, R1_V2, "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, H200 DEP8, 1K/8K", "h200", 8, 1024, 8192, 1_218, Precision(kv="fp8"), "deepseek-r1"),
    _perf("TensorRT-LLM perf overview, Qwen3-235B B200 DEP4 FP4, 1K/1K", "b200", 4, 1024, 1024, 5_756,
          Precision(weights="fp4"), "qwen3-235b-a22b"),
    _perf("TensorRT-LLM perf overview, Qwen3-235B GB200 DEP4 FP4, 1K/1K", "gb200", 4, 1024, 1024, 5_862,
          Precision(weights="fp4"), "qwen3-235b-a22b"),
    _perf("TensorRT-LLM perf overview, Qwen3-235B H200 DEP4 FP8, 1K/1K", "h200", 4, 1024, 1024, 3_268,
          Precision(weights="fp8"), "qwen3-235b-a22b"),
    _perf("TensorRT-LLM perf overview, Qwen3-235B H200 DEP4 FP8, 8K/1K", "h200", 4, 8192, 1024, 627,
          Precision(weights="fp8"), "qwen3-235b-a22b"),
    _qwen(6144, "fp8", 4, 275.16),
    _qwen(30720, "bf16", 8, 979.41),
    _qwen(30720, "fp8", 4, 887.90),
    _qwen(129042, "bf16", 8, 1639.54),
    Case("TensorRT-LLM, 8xB200 batch 1, MTP 3, TRTLLM MoE backend", TRT_B200_LAT, "b200", "decode",
         Layout(tp=8, ep=2, moe_tp=4), 1 / 8, Workload(1024, 2048), Options(mtp_accept=2.82, mtp_draft=3), 299, "tok/s/user",
         "the row 'Introduce moe_backend=TRTLLM, EP2TP4 for better balance' (299 TPS/user): MoE split TP 4 x EP 2, "
         "three MTP layers at the blog's strict acceptance 2.82 (its MTP table); NVFP4 experts and dense FFNs, BF16 "
         "attention, KV and MTP layers; mean context 1K + half of 2K", Precision(weights="fp4", attn="bf16", mtp="bf16"),
         blind=True),
    Case("SGLang Kimi K2, H20 TP16, concurrency 32 (untuned fused MoE)", SGL_KIMI_H20, "h20", "decode", Layout(16, 1, 0),
         32 / 16, Workload(1719, 726), Options(), 1000 / 56.61, "tok/s/user",
         "1 / the median inter-token latency (56.61 ms) of 128 requests at concurrency 32 on one TP-16 instance (two "
         "H20 nodes); mean prompt 1,719 and output 726 tokens (the run's totals / 128); FP8 weights, BF16 KV, "
         "experts split TP 16; the Triton fused-MoE kernels ran on default configs (the PR adds tuned ones)",
         Precision(weights="fp8"), model="kimi-k2", blind=True),
]
