"""The CPU set's routed experts: a loop over slots with oneDNN-packed weights (fp32).

Measured at tiny-mixtral's shapes (docs/performance.md): 2x faster than grouped_mm at decode (16
rows per slot) and 2.7x at prefill (360 rows per slot). The loop is compiled with TorchScript and
splits the slots over the set's expert threads (kernels/cpu/expert_threads.py); a per-layer
SplitChooser times whether splitting pays. Any thread count gives the same bits.

Shape legend: S local slots, R rows, H hidden, Il intermediate on this rank. The layer is a
GroupedExperts (moe/experts.py): w13 [S, 2Il, H], w2 [S, H, Il].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from moeserve.kernels.cpu import gemm, panel_gemm
from moeserve.kernels.cpu.expert_threads import ACTIVATION_NAMES, run_packed
from moeserve.kernels.cpu.split_chooser import SplitChooser


@dataclass
class PackedExperts:
    """The CPU set's copy of a layer's slots (a snapshot: dropped when a slot is written)."""

    packed13: list[torch.Tensor]  # [S] oneDNN-packed w13[s]
    packed2: list[torch.Tensor]  # [S] oneDNN-packed w2[s]
    # per-slot panel copies (w13 panels, w2 panels) for few-row slots, or None where not built
    panels: tuple[list[torch.Tensor], list[torch.Tensor]] | None
    chooser: SplitChooser = field(default_factory=SplitChooser)  # whether splitting over threads pays


def _pack(w: torch.Tensor) -> torch.Tensor | None:
    return gemm.pack_weight(w, gemm.ROWS_HINT // 4)


def prepare(layer: Any, slots: list[int] | None = None) -> PackedExperts | None:
    """The layer's slots packed, or None where packing does not apply (the torch set's path then
    runs). slots: only these changed (layer.kernel_state holds the others)."""
    if layer.act_name not in ACTIVATION_NAMES:
        return None
    state: PackedExperts | None = layer.kernel_state
    if slots is not None and state is not None:
        for s in slots:
            state.packed13[s], state.packed2[s] = _pack(layer.w13[s]), _pack(layer.w2[s])
            if state.panels is not None:
                state.panels[0][s], state.panels[1][s] = panel_gemm.pack(layer.w13[s]), panel_gemm.pack(layer.w2[s])
        return state
    p13 = [_pack(layer.w13[s]) for s in range(layer.num_slots)]
    p2 = [_pack(layer.w2[s]) for s in range(layer.num_slots)]
    if layer.num_slots == 0 or any(p is None for p in p13 + p2):
        return None
    q13 = [panel_gemm.pack(layer.w13[s]) for s in range(layer.num_slots)]
    q2 = [panel_gemm.pack(layer.w2[s]) for s in range(layer.num_slots)]
    return PackedExperts(p13, p2, None if any(q is None for q in q13 + q2) else (q13, q2))


def _extras(layer: Any) -> tuple:
    """(biases, swiglu) for run_packed: the slots' biases as per-slot views (gpt-oss), and the clamped
    SwiGLU's (alpha, limit)."""
    biases = (list(layer.b13.unbind(0)), list(layer.b2.unbind(0))) if layer.b13 is not None else None
    swiglu = (layer.glu.alpha, layer.glu.limit) if layer.glu is not None else (0.0, 0.0)
    return biases, swiglu


def run(layer: Any, state: PackedExperts, x: torch.Tensor, counts: torch.Tensor, threads: int) -> torch.Tensor:
    """x [R, H] fp32 slot-major; counts [S] int64 -> [sum(counts), H], split over up to `threads`
    threads (rows past sum(counts), a fixed-capacity batch's padding, are not computed)."""
    per_slot = counts.tolist()
    if not any(per_slot):  # padding only
        return x.new_empty(0, x.shape[1])
    args = (x, per_slot, state.packed13, state.packed2, layer.intermediate, layer.act_name)
    biases, swiglu = _extras(layer)
    if threads == 1:
        return run_packed(*args, 1, state.panels, biases, swiglu)
    return state.chooser.timed(
        x.shape[0], lambda: run_packed(*args, 1, state.panels, biases, swiglu),
        lambda: run_packed(*args, threads, state.panels, biases, swiglu)
    )


def warm_up(layer: Any, state: PackedExperts, threads: int) -> None:
    """Run the packed loop at every thread count it may use, a few times each (TorchScript compiles
    it once per process, then profiles its first calls: ~50 ms the first time)."""
    if layer.num_slots == 0:
        return
    x = torch.zeros(layer.num_slots, layer.hidden)
    counts = [1] * layer.num_slots
    biases, swiglu = _extras(layer)
    with torch.inference_mode():
        for t in sorted({1, threads}):
            for _ in range(3):
                run_packed(x, counts, state.packed13, state.packed2, layer.intermediate, layer.act_name, t,
                           state.panels, biases, swiglu)
