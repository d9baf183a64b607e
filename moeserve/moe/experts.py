"""The routed experts held by this rank, computed as one grouped GEMM over an expert-major batch.

Weights are fused per rank in nn.Linear orientation (what `grouped_mm` takes as a transposed view):
    w13 [S, 2 * Il, H]  rows [0, Il) = gate (w1), rows [Il, 2 * Il) = up (w3)
    w2  [S, H, Il]
Shape legend: S local slots, R dispatched rows, H hidden, Il intermediate size on this rank
(= I / tp when the experts are tensor-parallel, ep == 1; = I when expert-parallel).
out = w2 @ (act(w1 @ x) * (w3 @ x)) per row, with the weights of the row's slot.

On CPU in fp32, once `pack()` has run (ModelRunner does it after loading), a loop over slots with
oneDNN-packed weights (dense/gemm.py): 2x faster than grouped_mm at decode (16 rows per slot) and
2.7x at prefill (360 rows per slot), measured at tiny-mixtral's shapes (docs/performance.md). That
loop is compiled with TorchScript and splits the slots over `threads` (moe/expert_threads.py).
Otherwise `torch.nn.functional.grouped_mm` runs both GEMMs for all slots in one call when every row
stride is a multiple of 16 bytes, else (and as the reference the tests compare) a loop over slots.
Measured on CPU at tiny-mixtral's shapes (docs/performance.md, 1 thread): grouped_mm is ~10% faster
than the loop up to ~128 rows per slot (decode), the loop ~30% faster at ~360 rows per slot
(a 64-prompt prefill), so batches averaging more than LOOP_ROWS_PER_SLOT rows per slot take the loop.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from moeserve.dense import gemm, panel_gemm
from moeserve.dense.blocked import by_rows
from moeserve.dense.split_chooser import SplitChooser
from moeserve.dispatch.base import ExpertBatch
from moeserve.moe.expert_threads import run_packed

LOOP_ROWS_PER_SLOT = 256

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ACTIVATIONS:
        raise ValueError(f"hidden_act {name!r} is not supported; choose one of {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]


def grouped_mm_supported(hidden: int, intermediate: int, dtype: torch.dtype) -> bool:
    """grouped_mm needs 16-byte aligned strides on every operand and an fp32/bf16 dtype."""
    if not hasattr(F, "grouped_mm") or dtype not in (torch.float32, torch.bfloat16):
        return False
    size = torch.finfo(dtype).bits // 8
    return (hidden * size) % 16 == 0 and (intermediate * size) % 16 == 0


def experts_reference(
    x: torch.Tensor, counts: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, act: Callable
) -> torch.Tensor:
    """x [R, H] expert-major; counts [S] int64 rows per slot; w13 [S, 2Il, H]; w2 [S, H, Il] -> [R, H]."""
    out = torch.empty(x.shape[0], w2.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for s, n in enumerate(counts.tolist()):
        if n:
            gate, up = F.linear(x[start : start + n], w13[s]).chunk(2, dim=-1)
            out[start : start + n] = F.linear(act(gate) * up, w2[s])
        start += n
    return out


def experts_grouped(
    x: torch.Tensor, offsets: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, act: Callable
) -> torch.Tensor:
    """Same contract as `experts_reference`, offsets [S] int32 cumulative end rows, one call per GEMM."""
    gate_up = F.grouped_mm(x, w13.transpose(-2, -1), offs=offsets)  # [R, 2Il]
    gate, up = gate_up.chunk(2, dim=-1)
    return F.grouped_mm(act(gate) * up, w2.transpose(-2, -1), offs=offsets)  # [R, H]


class GroupedExperts(nn.Module):
    """The weights of this rank's S expert slots, and their forward over an `ExpertBatch`.

    use_grouped_mm: None = whenever the shapes allow it; False forces the per-slot loop.
    threads: at most how many threads the packed loop splits the slots over (ModelRunner sets it
    from --expert-threads); `chooser` times whether splitting pays. Any value gives the same bits.
    """

    def __init__(
        self,
        num_slots: int,
        hidden: int,
        intermediate: int,
        dtype: torch.dtype,
        act: str = "silu",
        use_grouped_mm: bool | None = None,
    ):
        super().__init__()
        self.num_slots, self.hidden, self.intermediate = num_slots, hidden, intermediate
        self.act, self.act_name = activation(act), act
        self.threads = 1
        self.chooser = SplitChooser()  # whether `threads` > 1 pays, measured per batch size
        self.w13 = nn.Parameter(torch.zeros(num_slots, 2 * intermediate, hidden, dtype=dtype), requires_grad=False)
        self.w2 = nn.Parameter(torch.zeros(num_slots, hidden, intermediate, dtype=dtype), requires_grad=False)
        ok = grouped_mm_supported(hidden, intermediate, dtype)
        self.use_grouped_mm = ok if use_grouped_mm is None else (use_grouped_mm and ok)
        # per-slot oneDNN-packed copies of w13[s] / w2[s] (see `pack`); None = not packed
        self.packed13: list[torch.Tensor] | None = None
        self.packed2: list[torch.Tensor] | None = None
        # per-slot panel copies for few-row slots (dense/panel_gemm.py), taken with the packed ones
        self.panels: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def pack(self, slots: list[int] | None = None) -> bool:
        """Snapshot the slots' weights for the packed GEMM, and as panels for the few-row kernel
        where it is available (after loading, and after any write to w13 / w2: `set_slot` drops the
        snapshot, the rebalancer packs the slots it wrote). slots: None = all; a list repacks only
        those, when a snapshot exists. False where packing does not apply (dense/gemm.py), leaving
        the grouped_mm / loop paths."""
        if slots is not None and self.packed13 is not None:
            for s in slots:
                self.packed13[s] = gemm.pack_weight(self.w13[s], gemm.ROWS_HINT // 4)
                self.packed2[s] = gemm.pack_weight(self.w2[s], gemm.ROWS_HINT // 4)
                if self.panels is not None:
                    self.panels[0][s], self.panels[1][s] = panel_gemm.pack(self.w13[s]), panel_gemm.pack(self.w2[s])
            return True
        p13 = [gemm.pack_weight(self.w13[s], gemm.ROWS_HINT // 4) for s in range(self.num_slots)]
        p2 = [gemm.pack_weight(self.w2[s], gemm.ROWS_HINT // 4) for s in range(self.num_slots)]
        if self.num_slots == 0 or any(p is None for p in p13 + p2):
            self.packed13 = self.packed2 = self.panels = None
            return False
        self.packed13, self.packed2 = p13, p2
        q13 = [panel_gemm.pack(self.w13[s]) for s in range(self.num_slots)]
        q2 = [panel_gemm.pack(self.w2[s]) for s in range(self.num_slots)]
        self.panels = None if any(q is None for q in q13 + q2) else (q13, q2)
        return True

    def forward(self, batch: ExpertBatch) -> torch.Tensor:
        """batch.hidden [R, H] grouped by local slot -> [R, H] (partial over tp when Il = I / tp)."""
        assert batch.offsets.shape[0] == self.num_slots, "dispatcher and experts disagree on local slots"
        if batch.num_rows == 0:
            return batch.hidden.new_zeros(0, self.hidden)
        if self.packed13 is not None and batch.hidden.dtype == torch.float32:
            args = (batch.hidden, batch.counts.tolist(), self.packed13, self.packed2, self.intermediate, self.act_name)
            if self.threads == 1:
                return run_packed(*args, 1, self.panels)
            return self.chooser.timed(
                batch.num_rows, lambda: run_packed(*args, 1, self.panels), lambda: run_packed(*args, self.threads, self.panels)
            )
        if self.use_grouped_mm and batch.num_rows <= LOOP_ROWS_PER_SLOT * self.num_slots:
            return experts_grouped(batch.hidden, batch.offsets, self.w13, self.w2, self.blocked_act)
        return experts_reference(batch.hidden, batch.counts, self.w13, self.w2, self.blocked_act)

    def blocked_act(self, x: torch.Tensor) -> torch.Tensor:
        """The activation in row blocks (dense/blocked.py): the same bits at any intra-op thread count."""
        return by_rows(self.act, x)

    def warm_up(self) -> None:
        """Run the packed loop at every thread count it may use, a few times each (TorchScript
        compiles it once per process, then profiles its first calls: ~50 ms the first time)."""
        if self.packed13 is None or self.num_slots == 0:
            return
        x = torch.zeros(self.num_slots, self.hidden)
        counts = [1] * self.num_slots
        with torch.inference_mode():
            for threads in sorted({1, self.threads}):
                for _ in range(3):
                    run_packed(x, counts, self.packed13, self.packed2, self.intermediate, self.act_name, threads, self.panels)

    def set_slot(self, slot: int, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> None:
        """gate, up [Il, H]; down [H, Il]: this rank's shard of one expert, copied into `slot`."""
        Il = self.intermediate
        self.packed13 = self.packed2 = self.panels = None  # a stale snapshot must not outlive the write
        for name, value, shape in (
            ("gate", gate, (Il, self.hidden)),
            ("up", up, (Il, self.hidden)),
            ("down", down, (self.hidden, Il)),
        ):
            if tuple(value.shape) != shape:
                raise ValueError(f"expert {name} shard has shape {tuple(value.shape)}, expected {shape}")
        self.w13.data[slot, :Il].copy_(gate)
        self.w13.data[slot, Il:].copy_(up)
        self.w2.data[slot].copy_(down)
