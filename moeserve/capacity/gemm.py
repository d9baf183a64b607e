"""GEMM time as a function of the rows each weight matrix multiplies and the row tile the kernels use.

A GEMM of M rows against a weight matrix is padded to the kernels' row tile: the kernels pick, among
the card's tiles (`Hardware.gemm_tiles`: 64 and 128 rows on Hopper's WGMMA, 32 with swapAB kernels),
the one that wastes the fewest rows. Compute-bound, a padded GEMM reaches a share of the tensor-core
peak that grows with M (fewer tiles than SMs, prologue and epilogue amortised over less work): the
published curves below, per card class. Memory-bound, it streams its weights at the `weight_stream`
efficiency factor. The package's fitted `gemm` factor scales the curve to what a serving engine gets
between quantisation, routing and other kernels (efficiency.py).

Shape legend: M rows of one GEMM (per expert for grouped GEMMs), G groups (experts with rows),
P parameters of one group's weight matrix.
"""
from __future__ import annotations

import bisect
import math

# Compute-bound share of dense tensor-core peak at M rows per group, per card class: (M, share) points,
# log-linear between them and flat beyond. Sources:
# hopper: DeepGEMM README (2025-03-25 tables, H800, FP8, DeepSeek-V3 shapes N x K = 4096 x 7168 and
#   7168 x 2048): masked layout 256 rows/group 932 and 815 TFLOPS, 512 rows 1040 and 916, 1024 rows 1233
#   and 925, contiguous layout 4096-8192 rows 1346 and 1214, of 1979 peak: 0.44, 0.49, 0.55, 0.65;
#   and this project's benchmarks/gpu_check.py (docs/kernels.md, cuBLAS grouped GEMM, BF16, 989 peak):
#   DeepSeek-V3 experts at 1024 rows/expert 4641 us on an H100 and 4660 us on an H200 (0.63), Mixtral
#   experts at 2048 rows 9036 / 9424 us (0.65 / 0.62). At 1024 rows the two sources are averaged
#   (0.59). Below 256 rows neither publishes a compute-bound figure (on H800 those shapes are
#   memory-bound); the 256-row share is held.
# blackwell, cdna3, cdna4: no published grouped-GEMM table was found for B200/GB200/GB300 or MI300X/MI355X
#   (the GB200 part II blog of LMSYS gives NVFP4 against FP8 speed-ups only); the Hopper curve is
#   assumed, and the validation table says which predictions rest on it.
# cpu: oneDNN/MKL have no tensor-core tile and reach their measured rate (calibrate.py) at any M.
_HOPPER = ((256, 0.44), (512, 0.49), (1024, 0.59), (2048, 0.63), (4096, 0.65))
CURVES = {"hopper": _HOPPER, "blackwell": _HOPPER, "cdna3": _HOPPER, "cdna4": _HOPPER, "cpu": ((1, 1.0),)}
# the share the fitted `gemm` factor is relative to: a large GEMM (the curve's last point)
REFERENCE = {name: points[-1][1] for name, points in CURVES.items()}


def kernel_share(card_class: str, rows: float) -> float:
    """Compute-bound share of peak a GEMM kernel reaches at `rows` rows per group, relative to a large
    GEMM's (1.0 at and beyond the curve's last point)."""
    points = CURVES[card_class]
    ms = [m for m, _ in points]
    if rows <= ms[0]:
        share = points[0][1]
    elif rows >= ms[-1]:
        share = points[-1][1]
    else:
        i = bisect.bisect_right(ms, rows)
        (m0, s0), (m1, s1) = points[i - 1], points[i]
        share = s0 + (s1 - s0) * math.log(rows / m0) / math.log(m1 / m0)
    return share / REFERENCE[card_class]


def padded_rows(rows: float, tiles: list[int]) -> float:
    """Rows a GEMM of `rows` rows computes: a whole number of the tile that wastes fewest."""
    if rows <= 0:
        return 0.0
    return min(math.ceil(rows / t - 1e-9) * t for t in tiles)
