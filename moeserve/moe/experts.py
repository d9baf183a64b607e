"""The routed experts held by this rank: their weights, and their forward over an expert-major batch
through the rank's kernel set (`kernels.experts`, kernels/base.py).

Weights are fused per rank in nn.Linear orientation (what `grouped_mm` takes as a transposed view):
    w13 [S, 2 * Il, H]  rows [0, Il) = gate (w1), rows [Il, 2 * Il) = up (w3)
    w2  [S, H, Il]
    b13 [S, 2 * Il], b2 [S, H]  optional biases (gpt-oss), in the same layout; under expert tensor
                                parallelism b2 is held by tp rank 0 only (zeros elsewhere), so the
                                reduced partial sums add it once
Shape legend: S local slots, R dispatched rows, H hidden, Il intermediate size on this rank
(= I / tp when the experts are tensor-parallel, ep == 1; = I when expert-parallel).
out = w2 @ (act(w1 @ x + b1) * (w3 @ x + b3)) + b2 per row, with the weights of the row's slot; gpt-oss's
clamped SwiGLU (`ClampedSwiGLU`) takes the place of act(gate) * up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from moeserve.dispatch.base import ExpertBatch
from moeserve.kernels.base import UsesKernels
from moeserve.kernels.reference.fp8 import FP8_DTYPE, Fp8Block, blocks, concat_rows
from moeserve.kernels.reference.experts import grouped_mm_supported

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


@dataclass(frozen=True)
class ClampedSwiGLU:
    """gpt-oss's expert activation (`swiglu_alpha`, `swiglu_limit`), in transformers' order of operations:
    g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * (g * sigmoid(alpha * g)).
    The sigmoid runs through `elementwise` (the kernel set's: the cpu set's row blocks give the same bits
    at any intra-op thread count)."""

    alpha: float
    limit: float
    name = "swigluoai"  # vLLM's name for it

    def __call__(self, gate: torch.Tensor, up: torch.Tensor, elementwise: Callable | None = None) -> torch.Tensor:
        """gate, up [R, Il] -> [R, Il]. elementwise(fn, x): how fn is applied (None: at once)."""
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        scaled = gate * self.alpha
        glu = gate * (torch.sigmoid(scaled) if elementwise is None else elementwise(torch.sigmoid, scaled))
        return (up + 1) * glu


class GroupedExperts(nn.Module, UsesKernels):
    """The weights of this rank's S expert slots, and their forward over an `ExpertBatch`.

    use_grouped_mm: None = whenever the shapes allow it; False forces the per-slot loop (the torch
    set's choice; other sets have their own kernels). `kernel_state`: the bound set's copy of the
    slots' weights (`prepare`), dropped by `set_slot`. act: a `hidden_act` name, or a ClampedSwiGLU
    (gpt-oss). bias: hold b13 / b2 (gpt-oss's expert biases).
    """

    kernel_state = None

    def __init__(
        self,
        num_slots: int,
        hidden: int,
        intermediate: int,
        dtype: torch.dtype,
        act: str | ClampedSwiGLU = "silu",
        use_grouped_mm: bool | None = None,
        bias: bool = False,
    ):
        super().__init__()
        self.num_slots, self.hidden, self.intermediate = num_slots, hidden, intermediate
        if isinstance(act, ClampedSwiGLU):
            self.act, self.act_name, self.glu = None, act.name, act
        else:
            self.act, self.act_name, self.glu = activation(act), act, None
        self.w13 = nn.Parameter(torch.zeros(num_slots, 2 * intermediate, hidden, dtype=dtype), requires_grad=False)
        self.w2 = nn.Parameter(torch.zeros(num_slots, hidden, intermediate, dtype=dtype), requires_grad=False)
        self.b13 = self.b2 = None
        if bias:
            self.b13 = nn.Parameter(torch.zeros(num_slots, 2 * intermediate, dtype=dtype), requires_grad=False)
            self.b2 = nn.Parameter(torch.zeros(num_slots, hidden, dtype=dtype), requires_grad=False)
        ok = grouped_mm_supported(hidden, intermediate, dtype)
        self.use_grouped_mm = ok if use_grouped_mm is None else (use_grouped_mm and ok)

    def prepare(self, slots: list[int] | None = None) -> bool:
        """Let the bound set take its copy of the slots' weights (after loading, and after any write
        to w13 / w2: `set_slot` drops the copy, the rebalancer prepares the slots it wrote). slots:
        None = all; a list retakes only those, where a copy exists. True when the set kept one."""
        if slots is not None and self.kernel_state is None:
            return False
        self.kernel_state = self.kernels.prepare_experts(self, slots)
        return self.kernel_state is not None

    def forward(self, batch: ExpertBatch, out: torch.Tensor | None = None) -> torch.Tensor:
        """batch.hidden [R, H] grouped by local slot -> [R, H] (partial over tp when Il = I / tp).

        out: [R, H] where the result should go (the dispatcher's buffer: Dispatcher.expert_output); the
        kernel sets return a tensor of their own, copied into it. A result of another dtype than out's
        is returned as it is (a cast would round it differently from `local`).
        Rows past offsets[-1] (a fixed-capacity batch's padding: dispatch/a2a_ll.py) are computed or not,
        as the set finds cheaper; nobody reads them."""
        assert batch.offsets.shape[0] == self.num_slots, "dispatcher and experts disagree on local slots"
        if batch.num_rows == 0:
            return batch.hidden.new_zeros(0, self.hidden) if out is None else out
        y = self.kernels.experts(self, batch)
        if y.shape[0] < batch.num_rows:  # a set that returns the rows up to offsets[-1] only (the cpu set)
            y = torch.cat([y, y.new_empty(batch.num_rows - y.shape[0], y.shape[1])])
        return y if out is None or y.dtype != out.dtype else out.copy_(y)

    def fused(self, hidden: torch.Tensor, slots: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor | None:
        """hidden [T, H] of tokens whose slots [T, k] int64 are all this rank's, topk_weights [T, k] fp32 ->
        [T, H], the weighted sum over k of their experts' outputs, where the kernel set runs the whole
        routed computation itself (gather and weights in its kernels: `kernels.fused_moe`); else None."""
        if hidden.shape[0] == 0:
            return None
        return self.kernels.fused_moe(self, hidden, slots, topk_weights)

    def gated(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up [R, 2Il] (gate columns first) -> [R, Il]: act(gate) * up, or the ClampedSwiGLU, their
        elementwise functions through the bound set (the cpu set's row blocks: kernels/cpu/blocked.py)."""
        gate, up = gate_up.chunk(2, dim=-1)
        if self.glu is not None:
            return self.glu(gate, up, self.kernels.elementwise)
        return self.kernels.elementwise(self.act, gate) * up

    def set_slot(
        self,
        slot: int,
        gate: torch.Tensor,
        up: torch.Tensor,
        down: torch.Tensor,
        biases: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """gate, up [Il, H]; down [H, Il]: this rank's shard of one expert, copied into `slot`.
        biases: (gate [Il], up [Il], down [H]) where the experts have biases."""
        Il = self.intermediate
        self.kernel_state = None  # a stale copy must not outlive the write
        checks = [("gate", gate, (Il, self.hidden)), ("up", up, (Il, self.hidden)), ("down", down, (self.hidden, Il))]
        if (biases is None) != (self.b13 is None):
            raise ValueError("expert biases given to experts without biases, or missing for experts with them")
        if biases is not None:
            checks += list(zip(("gate bias", "up bias", "down bias"), biases, ((Il,), (Il,), (self.hidden,))))
        for name, value, shape in checks:
            if tuple(value.shape) != shape:
                raise ValueError(f"expert {name} shard has shape {tuple(value.shape)}, expected {shape}")
        self.w13.data[slot, :Il].copy_(gate)
        self.w13.data[slot, Il:].copy_(up)
        self.w2.data[slot].copy_(down)
        if biases is not None:
            self.b13.data[slot, :Il].copy_(biases[0])
            self.b13.data[slot, Il:].copy_(biases[1])
            self.b2.data[slot].copy_(biases[2])

    def set_slot_fp8(self, slot: int, gate: Fp8Block, up: Fp8Block, down: Fp8Block) -> None:
        """set_slot for FP8 block-scaled shards (kernels/reference/fp8.py): gate, up [Il, H] and down
        [H, Il] with their scale blocks; Il must hold whole row blocks (gate and up stack into w13). The
        first call turns w13 / w2 into FP8 with `w13_scale_inv` [S, ceil(2Il / bn), ceil(H / bk)] and
        `w2_scale_inv` [S, ceil(H / bn), ceil(Il / bk)]; every slot of a layer is then set this way."""
        Il, H, S = self.intermediate, self.hidden, self.num_slots
        w13 = concat_rows([gate, up])
        if w13 is None or w13.block != down.block:
            raise ValueError(f"FP8 expert shards of {Il} rows do not stack in {gate.block} blocks")
        for name, value, shape in (("gate_up", w13, (2 * Il, H)), ("down", down, (H, Il))):
            if value.shape != shape:
                raise ValueError(f"expert {name} shard has shape {value.shape}, expected {shape}")
        self.kernel_state = None
        if self.w13.dtype != FP8_DTYPE:
            bn, bk = self.weight_block = w13.block
            self.w13 = nn.Parameter(torch.zeros(S, 2 * Il, H, dtype=FP8_DTYPE), requires_grad=False)
            self.w2 = nn.Parameter(torch.zeros(S, H, Il, dtype=FP8_DTYPE), requires_grad=False)
            self.w13_scale_inv = nn.Parameter(torch.ones(S, blocks(2 * Il, bn), blocks(H, bk)), requires_grad=False)
            self.w2_scale_inv = nn.Parameter(torch.ones(S, blocks(H, bn), blocks(Il, bk)), requires_grad=False)
        self.w13.data[slot].copy_(w13.data)
        self.w13_scale_inv.data[slot].copy_(w13.scale_inv)
        self.w2.data[slot].copy_(down.data)
        self.w2_scale_inv.data[slot].copy_(down.scale_inv)

    def slot_tensors(self) -> list[torch.Tensor]:
        """Every tensor with one row per slot that makes up the experts' weights ([S, ...] each): w13
        and w2, their scale blocks when FP8, their biases (gpt-oss). What moving an expert between
        slots copies (engine/rebalance.py)."""
        biases = [self.b13.data, self.b2.data] if self.b13 is not None else []
        if self.w13.dtype != FP8_DTYPE:
            return [self.w13.data, self.w2.data, *biases]
        # fp32 scales (and biases) first: a byte row of them all then keeps every part aligned to its element size
        return [self.w13_scale_inv.data, self.w2_scale_inv.data, *biases, self.w13.data, self.w2.data]
