"""The efficiency factors of the step-time model: few, named, one set for every hardware profile.

Each is the fraction of a profile's peak that a kind of kernel reaches in a serving engine, or a
fixed behaviour the roofline leaves out. The values were fitted (`python -m moeserve.capacity.fit`:
least squared log error, each factor within the range its kernel authors publish, quoted per factor
and in fit.BOUNDS) to the fitted part of the validation table in docs/capacity.md
(moeserve/capacity/validation_cases.py); the held-out and blind parts are never used to choose them.
tests/capacity checks that this one set keeps every fitted case within its band. Change a factor
only together with that table. The GPU profiles' `kernel_floor_us` (5.875 us) was fitted with them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Efficiency:
    # GEMMs (dense and grouped, FP8 with per-block scales): share of dense tensor-core peak of a large
    # FP8 GEMM on Hopper in a serving engine; other rows, cards and formats scale it by their published
    # kernel curve relative to that one (gemm.py: DeepGEMM README 1,214-1,346 of 1,979 TFLOPS (0.61-0.68)
    # on H800 at 4,096-8,192 rows per group, up to 1,550 (0.78) at its best shapes)
    gemm: float = 0.42
    # prefill attention kernels (expanded MLA / FlashAttention-3 with causal masking)
    attention: float = 0.283
    # decode attention kernels (absorbed MLA over the latent cache, paged GQA) when compute-bound:
    # FlashMLA README reaches 660 of 989 BF16 TFLOPS on H800 (0.67)
    attention_decode: float = 0.67
    # HBM reads by GEMMs streaming weights and by elementwise kernels (DeepGEMM README: 1.5-2.7 of
    # 3.35 TB/s on H800, 0.80 at best; DeepGEMM PR #192: 3.1 of 4.0 TB/s on H20 with swapAB; this
    # project's gpu_check.py: cuBLAS grouped GEMM at 16 rows/expert 0.79 of an H100's bandwidth, 0.64
    # of an H200's)
    weight_stream: float = 0.8
    # HBM reads by attention streaming the KV cache (FlashMLA README: 3,000 of 3,350 GB/s)
    kv_stream: float = 0.6
    # dispatch/combine and all-reduce: share of link bandwidth (DeepEP README: 153-158 of H800's
    # 200 GB/s NVLink; 43-58 GB/s of 50 GB/s InfiniBand per GPU as it counts)
    network: float = 0.644
    # share of the shorter of compute and communication that two-batch overlap hides (and of what
    # single-batch overlap can hide: dispatch behind the shared expert, combine behind the down GEMM)
    overlap: float = 0.854

    def with_overrides(self, **kw) -> "Efficiency":
        known = {f.name for f in fields(self)}
        bad = sorted(set(kw) - known)
        if bad:
            raise ValueError(f"unknown efficiency factors {bad}; known: {', '.join(sorted(known))}")
        return replace(self, **kw)


DEFAULT = Efficiency()
