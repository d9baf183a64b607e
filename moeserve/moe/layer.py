"""The MoE layer: gate -> router -> logical ids -> physical slots -> dispatch -> experts -> combine,
plus optional shared experts.

Shape legend: T tokens, H hidden, E logical experts, P physical slots (E plus replicas), S slots on
this rank, k top-k, I expert intermediate size, tp / ep the parallel sizes.

Layouts (docs/architecture.md, "Parallel layout"):
- ep == 1: every rank holds all P slots, each expert split over tp along I; routed and shared
  outputs are partial sums, reduced with one all-reduce over tp here.
- ep > 1: this rank holds slots [ep_rank * S, (ep_rank + 1) * S) with full-width experts; the
  dispatcher moves rows between ranks; only the (tp-split) shared expert needs the tp all-reduce.
- ep > 1 and tp > 1: the tp ranks of a group split the group's tokens, route their share, and
  all-gather the results (no token is computed twice).
Placement: `phy2log[p]` is the logical expert in slot p (identity by default) and `slot_map` turns
logical ids [T, k] into physical slots [T, k] (replica choice); set both with `set_placement`
before loading weights.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from moeserve.dispatch.base import Dispatcher
from moeserve.moe.experts import ClampedSwiGLU, GroupedExperts
from moeserve.moe.router import Router
from moeserve.parallel_state import ParallelContext

SlotMap = Callable[[torch.Tensor], torch.Tensor]


class MoELayer(nn.Module):
    def __init__(
        self,
        gate: nn.Module,
        router: Router,
        num_experts: int,
        hidden: int,
        intermediate: int,
        ctx: ParallelContext,
        dtype: torch.dtype,
        act: str | ClampedSwiGLU = "silu",
        shared_expert: nn.Module | None = None,
        shared_expert_gate: nn.Module | None = None,
        use_grouped_mm: bool | None = None,
        expert_bias: bool = False,
    ):
        """gate: hidden [T, H] -> router logits [T, E]. router: see moe/router.py.
        shared_expert: hidden [T, H] -> partial [T, H] over tp. shared_expert_gate: hidden [T, H] -> [T, 1]
        logits, applied as sigmoid(g) * shared (Qwen2-MoE). act: the experts' activation (a hidden_act
        name, or gpt-oss's ClampedSwiGLU); expert_bias: the experts have biases (gpt-oss)."""
        super().__init__()
        self.gate, self.router, self.ctx = gate, router, ctx
        self.num_experts, self.hidden, self.dtype, self.act = num_experts, hidden, dtype, act
        self.use_grouped_mm, self.expert_bias = use_grouped_mm, expert_bias
        self.intermediate_full = intermediate
        if ctx.ep_size == 1 and intermediate % ctx.tp_size:
            raise ValueError(f"expert intermediate size {intermediate} is not divisible by --tp {ctx.tp_size}")
        self.shared_expert, self.shared_expert_gate = shared_expert, shared_expert_gate
        # observer of each step's logical top-k ids [T, k] and the step row of their first token (the
        # placement recorder); None = off
        self.on_route: Callable[[torch.Tensor, int], None] | None = None
        if num_experts % ctx.ep_size == 0:  # one slot per expert until a placement says otherwise
            self.set_placement(list(range(num_experts)), None)
        else:  # only a --placement plan's slots split over --ep (checked before the model is built)
            self.experts = None

    @property
    def intermediate_local(self) -> int:
        return self.intermediate_full // self.ctx.tp_size if self.ctx.ep_size == 1 else self.intermediate_full

    def set_placement(self, phy2log: Sequence[int], slot_map: SlotMap | None) -> None:
        """phy2log [P]: logical expert of each physical slot. slot_map: logical ids [T, k] int64 ->
        physical slots [T, k] int64 (None = identity, only valid when phy2log is the identity).
        Reallocates this rank's expert weights: call before `load_weights`."""
        P, ep = len(phy2log), self.ctx.ep_size
        if P % ep:
            raise ValueError(f"{P} physical expert slots do not split evenly over --ep {ep}")
        if slot_map is None and list(phy2log) != list(range(self.num_experts)):
            raise ValueError("a non-identity placement needs a slot_map from logical ids to physical slots")
        self.phy2log = list(phy2log)
        self.slot_map = slot_map
        self.num_slots = P
        self.slots_per_rank = P // ep
        self.first_slot = self.ctx.ep_rank * self.slots_per_rank if ep > 1 else 0
        num_local = self.slots_per_rank if ep > 1 else P
        self.experts = GroupedExperts(
            num_local, self.hidden, self.intermediate_local, self.dtype, self.act, self.use_grouped_mm, self.expert_bias
        )

    def remap(self, phy2log: Sequence[int], slot_map: SlotMap | None) -> None:
        """Switch to a new placement with the same slot count, keeping the weights: the rebalancer
        copies the moved experts' weights into `experts.w13/w2` itself, then calls this."""
        if len(phy2log) != self.num_slots:
            raise ValueError(f"remap keeps {self.num_slots} physical slots, got {len(phy2log)}")
        self.phy2log, self.slot_map = list(phy2log), slot_map

    def local_slot_experts(self) -> list[int]:
        """Logical expert id held in each of this rank's slots, in slot order."""
        return self.phy2log[self.first_slot : self.first_slot + self.experts.num_slots]

    def forward(self, hidden: torch.Tensor, dispatcher: Dispatcher, max_tokens: int | None = None) -> torch.Tensor:
        """hidden [T, H] (T may be 0: the collectives still run) -> [T, H], reduced over tp.

        max_tokens: the step's largest group token count, identical on every rank (StepPlan
        .max_group_tokens); backends that need a global size use it instead of agreeing on one."""
        shared = self._shared(hidden)  # partial over tp, or None
        if self.ctx.ep_size == 1:
            # routed experts are tp-split too: one reduction covers routed + shared partials
            out = self._routed(hidden, dispatcher, max_tokens)
            if shared is not None:
                out = out + shared
            if self.ctx.tp_size > 1:
                dist.all_reduce(out, group=self.ctx.tp_group)
            return out
        if self.ctx.tp_size > 1:
            out = self._routed_token_split(hidden, dispatcher, max_tokens)
        else:
            out = self._routed(hidden, dispatcher, max_tokens)
        if shared is not None:
            if self.ctx.tp_size > 1:
                dist.all_reduce(shared, group=self.ctx.tp_group)
            out = out + shared
        return out

    def _routed(self, hidden: torch.Tensor, dispatcher: Dispatcher, max_tokens: int | None,
                first_row: int = 0) -> torch.Tensor:
        """hidden [T, H], the step's rows from first_row on -> routed expert output [T, H] of these tokens."""
        topk_ids, topk_weights = self.router(self.gate(hidden))  # [T, k] int64, [T, k] fp32
        if self.on_route is not None:
            self.on_route(topk_ids, first_row)
        slots = topk_ids if self.slot_map is None else self.slot_map(topk_ids)
        if dispatcher.num_local_slots == dispatcher.num_slots:  # every slot here: no row leaves the rank
            fused = self.experts.fused(hidden, slots, topk_weights)
            if fused is not None:  # the kernel set gathered, weighted and summed the rows itself
                return fused
        # a router's top-k through a validated placement map: every id is a slot, so backends skip their
        # host-side range check (a device sync per layer on a GPU: dispatch/base.py)
        batch, handle = dispatcher.dispatch(hidden, slots, topk_weights, max_tokens=max_tokens, ids_valid=True)
        # where the backend offers one, the experts write into its buffer and combine reads it in place
        return dispatcher.combine(self.experts(batch, out=dispatcher.expert_output(batch)), handle)

    def _routed_token_split(self, hidden: torch.Tensor, dispatcher: Dispatcher, max_tokens: int | None) -> torch.Tensor:
        """ep > 1 and tp > 1: the tp ranks of a group hold the same T tokens, so each routes only its
        ceil(T / tp) share and the shares are all-gathered, instead of every expert computing each
        token tp times."""
        T, tp, rank = hidden.shape[0], self.ctx.tp_size, self.ctx.tp_rank
        chunk = -(-T // tp)
        lo, hi = min(rank * chunk, T), min((rank + 1) * chunk, T)
        mine = hidden.new_zeros(chunk, hidden.shape[1])
        share_max = None if max_tokens is None else -(-max_tokens // tp)
        mine[: hi - lo] = self._routed(hidden[lo:hi], dispatcher, share_max, lo)
        parts = [torch.empty_like(mine) for _ in range(tp)]
        dist.all_gather(parts, mine, group=self.ctx.tp_group)
        return torch.cat(parts)[:T]

    def _shared(self, hidden: torch.Tensor) -> torch.Tensor | None:
        if self.shared_expert is None:
            return None
        shared = self.shared_expert(hidden)
        if self.shared_expert_gate is not None:
            shared = torch.sigmoid(self.shared_expert_gate(hidden)) * shared
        return shared
