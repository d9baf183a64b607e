"""The GEMM under every linear layer and expert: oneDNN with pre-packed weights on CPU, F.linear elsewhere.

Why: torch's CPU `F.linear` / `mm` / `grouped_mm` in fp32 call MKL's sgemm, which on the AMD EPYC
machines we measure on runs well below the core's peak; oneDNN's matmul with its weight packed
once, in its own blocked layout, runs the same product 1.7-2.4x faster at every shape the engine
uses (docs/performance.md: 16 x 256 x 1024 expert rows 0.10 -> 0.05 ms, 1441 x 256 x 512 prefill
3.5 -> 1.5 ms, 64 x 256 x 4096 LM head 1.34 -> 0.56 ms; 1 thread). This is what vLLM's CPU backend
does too (oneDNN linears, packed MoE weights).

Contract: `pack_weight(w)` once after the weight is final (load, rebalance) and `linear(x, w, bias,
packed)` per call. A packed copy is a snapshot: whoever writes the weight afterwards must pack it
again (layers drop the CPU set's copy in `load` / `set_slot`; kernels/cpu/linear.py holds it).
Results equal F.linear to fp32 rounding (~1e-6 relative; the summation order differs), not bit for bit.
Only fp32 on CPU is packed (bf16 and other devices keep F.linear). `MOESERVE_PACKED_GEMM=0` turns
packing off (every layer then calls F.linear). Packed weights are extra memory: one more copy of every
packed weight, kept beside the original, which loading, placement moves and the tests read; a layer
with column blocks (kernels/cpu/split_linear.py) holds a third.

Shape legend: T rows, I in features, O out features.
"""

from __future__ import annotations

import logging
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from moeserve import envs

logger = logging.getLogger(__name__)

# oneDNN picks its blocked layout for a typical row count; any row count works with any layout
ROWS_HINT = 64

# oneDNN keeps one JIT-built kernel per (layout, row count, thread count) in an LRU cache of 1024 by
# default. Every row count 1..256 of every weight shape (warm_up), and again at a second thread count
# (kernels/cpu/step_threads.py), exceed that, and then steps rebuild kernels they had (measured: the wide
# way's steps ran 1.6x slower than with one pinned thread count). oneDNN reads it once, at its first
# use: `raise_primitive_cache` sets it when the CPU set is made, before anything is packed.
PRIMITIVE_CACHE_CAPACITY = "8192"
WARM_UP_BUDGET_S = 5.0  # start-up seconds the GEMM warm-up may take (`warm_up`)


def raise_primitive_cache() -> None:
    """Unless the user set it, give oneDNN's kernel cache PRIMITIVE_CACHE_CAPACITY entries (above)."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", PRIMITIVE_CACHE_CAPACITY)


def packing_enabled() -> bool:
    if not envs.PACKED_GEMM.get():
        return False
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def pack_weight(weight: torch.Tensor, rows_hint: int = ROWS_HINT) -> torch.Tensor | None:
    """weight [O, I] -> an opaque oneDNN-packed copy for `linear`, or None where packing does not
    apply (not fp32, not CPU, packing disabled or unavailable)."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or weight.dim() != 2 or not packing_enabled():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows_hint)
    except RuntimeError:  # a oneDNN build without this layout: stay on F.linear
        return None


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, packed: torch.Tensor | None = None
) -> torch.Tensor:
    """x [..., I] -> x @ weight.T + bias [..., O]; through `packed` (from pack_weight(weight)) when given."""
    if packed is None or x.dtype != torch.float32 or x.device.type != "cpu":
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def packed_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """x [T, I] fp32 on CPU -> x @ weight.T [T, O], packed = pack_weight(weight); no checks (hot loops)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def warm_up(model: nn.Module, max_rows: int | None = None, limits: dict[int, int] | None = None,
            budget_s: float = WARM_UP_BUDGET_S) -> int:
    """Run every distinct packed weight shape once at each row count 1..max_rows (at most
    limits[id(packed)] rows for a weight, where given), every shape at a count before the next count,
    until `budget_s` seconds have passed.

    oneDNN builds (JIT-compiles) one kernel per (weight layout, row count) the first time it sees
    it, ~0.25 ms each at tiny-mixtral's shapes; a server that has not yet met a row count pays that
    inside a request's step (measured: TTFT p50 29.6 ms on a fresh server vs 20.0 ms warm, same load).
    Decode steps meet small row counts (rows per expert, sequences sampled) and prefill steps of a few
    short prompts meet up to a few hundred (every token of the step goes through the dense weights):
    with kernels built to 64 rows only, a fresh server's first prefill steps of 65-101 tokens ran
    15-25% slower than the same steps a round later. So they are built at start-up, as
    vLLM does with its warm-up runs; the budget bounds the start-up of a model whose GEMMs are large.
    max_rows: MOESERVE_GEMM_WARMUP_ROWS, default 256 (0 = off: the tests). Returns the calls made."""
    if max_rows is None:
        max_rows = warm_up_rows()
    shapes = [(in_features, packed, (limits or {}).get(id(packed), max_rows))
              for (_, in_features, _), packed in distinct_packed(model).items()]
    calls = 0
    deadline = time.monotonic() + budget_s
    with torch.inference_mode():
        for rows in range(1, max_rows + 1):
            if time.monotonic() > deadline:
                logger.debug("GEMM warm-up stopped at %d rows: its %.1f s budget is spent", rows - 1, budget_s)
                break
            for in_features, packed, limit in shapes:
                if rows <= limit:
                    packed_linear(torch.zeros(rows, in_features), packed)
                    calls += 1
    return calls


def warm_up_rows() -> int:
    return envs.GEMM_WARMUP_ROWS.get()


def distinct_packed(model: nn.Module) -> dict[tuple, torch.Tensor]:
    """One packed weight of each distinct (packed shape, kind) in `model`; kind: "dense", or "expert"
    (packed with a smaller rows hint, so possibly another blocked layout). Reads the CPU set's copies
    (`kernel_state`: kernels/cpu/linear.py PackedLinear, kernels/cpu/experts.py PackedExperts)."""
    shapes: dict[tuple, torch.Tensor] = {}
    for module in model.modules():
        state = getattr(module, "kernel_state", None)
        packs = [("dense", getattr(state, "packed", None))]
        packs += [("expert", p) for p in (getattr(state, "packed13", None) or []) + (getattr(state, "packed2", None) or [])]
        for kind, packed in packs:
            if isinstance(packed, torch.Tensor):
                shapes.setdefault((*packed.shape, kind), packed)
    return shapes


def row_checks(model: nn.Module, row_counts: list[int], limits: dict[int, int] | None = None, seed: int = 0) -> list:
    """One function per distinct packed weight of `model`, running that GEMM on fixed random inputs
    at each of `row_counts` (at most limits[id(packed)] rows, where given) and returning an exact
    digest of each output's bits ([counts, 3] int64: the sum of the fp32 bit patterns, and that sum
    weighted by row and by column), so comparing two runs (kernels/cpu/step_threads.py, under two thread
    settings) keeps no copy of the outputs. Inputs are drawn when a check runs, not before."""
    checks = []
    for (_, in_features, _), packed in distinct_packed(model).items():
        counts = [r for r in row_counts if r <= (limits or {}).get(id(packed), r)]
        if not counts:
            continue

        def run(in_features: int = in_features, packed: torch.Tensor = packed, counts: list = counts) -> torch.Tensor:
            x = torch.randn(max(counts), in_features, generator=torch.Generator().manual_seed(seed))
            digests = []
            for rows in counts:
                bits = packed_linear(x[:rows], packed).view(torch.int32)
                by_row = bits.sum(dim=1, dtype=torch.int64)
                by_col = bits.sum(dim=0, dtype=torch.int64)
                digests.append(torch.stack([
                    by_row.sum(),
                    (by_row * torch.arange(1, rows + 1)).sum(),
                    (by_col * torch.arange(1, by_col.numel() + 1)).sum(),
                ]))
            return torch.stack(digests)

        checks.append(run)
    return checks
