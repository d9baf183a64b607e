"""The GEMM under every linear layer and expert: oneDNN with pre-packed weights on CPU, F.linear elsewhere.

Why: torch's CPU `F.linear` / `mm` / `grouped_mm` in fp32 call MKL's sgemm, which on the AMD EPYC
machines we measure on runs well below the core's peak; oneDNN's matmul with its weight packed
once, in its own blocked layout, runs the same product 1.7-2.4x faster at every shape the engine
uses (docs/performance.md: 16 x 256 x 1024 expert rows 0.10 -> 0.05 ms, 1441 x 256 x 512 prefill
3.5 -> 1.5 ms, 64 x 256 x 4096 LM head 1.34 -> 0.56 ms; 1 thread). This is what vLLM's CPU backend
does too (oneDNN linears, packed MoE weights).

Contract: `pack_weight(w)` once after the weight is final (load, rebalance) and `linear(x, w, bias,
packed)` per call. A packed copy is a snapshot: whoever writes the weight afterwards must pack it
again (layers drop their packed copy in `load` / `set_slot`; `pack_weights(model)` repacks all).
Results equal F.linear to fp32 rounding (~1e-6 relative; the summation order differs), not bit for bit.
Only fp32 on CPU is packed (bf16 and other devices keep F.linear). `MOESERVE_PACKED_GEMM=0` turns
packing off (every layer then runs F.linear). Packed weights are extra memory: one more copy of every
packed weight, kept beside the original, which loading, placement moves and the tests read; a layer
with column blocks (`enable_split`, dense/split_linear.py) holds a third.

Shape legend: T rows, I in features, O out features.
"""

from __future__ import annotations

import logging
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from moeserve.dense import panel_gemm

logger = logging.getLogger(__name__)

# oneDNN picks its blocked layout for a typical row count; any row count works with any layout
ROWS_HINT = 64

# oneDNN keeps one JIT-built kernel per (layout, row count, thread count) in an LRU cache of 1024 by
# default. Every row count 1..256 of every weight shape (warm_up), and again at a second thread count
# (engine/step_threads.py), exceed that, and then steps rebuild kernels they had (measured: the wide
# way's steps ran 1.6x slower than with one pinned thread count). Read once, at oneDNN's first use.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8192")
WARM_UP_BUDGET_S = 5.0  # start-up seconds the GEMM warm-up may take (`warm_up`)


def packing_enabled() -> bool:
    if os.environ.get("MOESERVE_PACKED_GEMM", "1") in ("0", "false", "off"):
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
    15-25% slower than the same steps a round later (session 15). So they are built at start-up, as
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
                logger.info("GEMM warm-up stopped at %d rows: its %.1f s budget is spent", rows - 1, budget_s)
                break
            for in_features, packed, limit in shapes:
                if rows <= limit:
                    packed_linear(torch.zeros(rows, in_features), packed)
                    calls += 1
    return calls


def warm_up_rows() -> int:
    return int(os.environ.get("MOESERVE_GEMM_WARMUP_ROWS", "256"))


def distinct_packed(model: nn.Module) -> dict[tuple, torch.Tensor]:
    """One packed weight of each distinct (packed shape, kind) in `model`; kind: "dense", or "expert"
    (packed with a smaller rows hint, so possibly another blocked layout)."""
    shapes: dict[tuple, torch.Tensor] = {}
    for module in model.modules():
        packs = [("dense", getattr(module, "packed", None))]
        packs += [("expert", p) for p in (getattr(module, "packed13", None) or []) + (getattr(module, "packed2", None) or [])]
        for kind, packed in packs:
            if isinstance(packed, torch.Tensor):
                shapes.setdefault((*packed.shape, kind), packed)
    return shapes


def row_checks(model: nn.Module, row_counts: list[int], limits: dict[int, int] | None = None, seed: int = 0) -> list:
    """One function per distinct packed weight of `model`, running that GEMM on fixed random inputs
    at each of `row_counts` (at most limits[id(packed)] rows, where given) and returning an exact
    digest of each output's bits ([counts, 3] int64: the sum of the fp32 bit patterns, and that sum
    weighted by row and by column), so comparing two runs (engine/step_threads.py, under two thread
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


def pack_weights(model: nn.Module) -> int:
    """Call `pack()` on every submodule that has one (after loading); returns how many packed."""
    count = 0
    for module in model.modules():
        pack = getattr(module, "pack", None)
        if callable(pack) and pack():
            count += 1
    return count


class PackedWeight:
    """Mixin for a module with `weight` [O, I]: `pack()` snapshots it for `linear(..., self.packed)`,
    and as panels for calls of at most panel_gemm.small_rows() rows (dense/panel_gemm.py, where
    available); `packed` and `panels` are None (F.linear) until then, and the module's `load` resets
    them. `enable_split(n)` adds a column split over n threads (dense/split_linear.py) where it gives
    the same bits as the packed GEMM; `matmul` then times both ways per call size and keeps the
    faster, for the calls the panels do not take."""

    weight: torch.Tensor
    packed: torch.Tensor | None = None
    panels: torch.Tensor | None = None
    split = None  # a SplitLinear, or None

    def pack(self) -> bool:
        """A new snapshot drops the column blocks of the old one; whoever packs again after start-up
        calls `enable_split` again if it wants them (ModelRunner does once, after loading)."""
        self.split = None
        self.packed = pack_weight(self.weight)
        self.panels = panel_gemm.pack(self.weight) if self.packed is not None else None
        return self.packed is not None

    def unpack(self) -> None:
        """Drop every snapshot of the weight (a `load` is about to write it)."""
        self.packed = self.panels = None
        self.split = None

    def enable_split(self, threads: int) -> bool:
        from moeserve.dense.split_linear import SplitLinear

        self.split = None
        if self.packed is not None and threads > 1:
            self.split = SplitLinear.create(self.weight, getattr(self, "bias", None), self.packed, threads)
        return self.split is not None

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [T, I] -> x @ weight.T + bias [T, O]. Which kernel runs depends on T only (the panels up
        to small_rows() rows, above that oneDNN, split or not: the same bits), never on timings."""
        panels = self.panels
        if panels is not None and x.dim() == 2 and x.shape[0] <= panel_gemm.small_rows() and x.dtype == torch.float32:
            out = torch.ops.moeserve.panel_linear(x, panels, self.weight.shape[0])
            return out if bias is None else out.add_(bias)
        split = self.split
        if split is None or self.packed is None or x.dim() != 2 or not 0 < x.shape[0] <= split.max_rows \
                or x.dtype != torch.float32:
            return linear(x, self.weight, bias, self.packed)
        return split.chooser.timed(
            x.shape[0], lambda: linear(x, self.weight, bias, self.packed), lambda: split.run(x, bias)
        )
