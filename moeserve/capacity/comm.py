"""Communication of one decoder layer on the busiest GPU: TP all-reduces and MoE dispatch/combine.

All-reduce: a fixed latency (one-shot custom all-reduce at a few KB: the profile's
`allreduce_latency_us`) plus a ring's bytes over the scale-up link. A TP group that spans nodes (TP 16
on 8-GPU nodes) all-reduces hierarchically, as NCCL does: reduce-scatter and all-gather inside each
node over the scale-up link, and each GPU's 1 / (GPUs of the group in a node) share all-reduced
between the nodes over its own scale-out link, at NCCL's multi-node latency
(`scaleout_allreduce_latency_us`; custom all-reduce kernels work inside one NVLink domain only). Dispatch and combine: tokens go
out in the dispatch format and come back in the combine format; at decode one copy per (token,
rank) (DeepEP's low-latency kernels), at prefill one per (token, node) then on over NVLink (its normal
kernels), nodes capped by group-limited routing; bandwidth plus a latency per phase. With one
attention group (world = tp) every rank already holds every token after the attention all-reduce:
there is no dispatch, and the second all-reduce sums the experts' partial outputs (TensorRT-LLM's
TP x EP layouts). Functions take the StepModel whose model, hardware, layout and formats they read.

Across nodes at decode, a low-latency dispatch or combine takes at least what DeepEP's README measures
for one call at its production setting (LL_FLOOR_US): the kernels post RDMA writes to every peer and
wait for every peer's arrival flags, so a call with few tokens costs round trips and the wait for the
slowest rank, not bytes. With two-batch overlap that wait runs behind the other micro-batch's
compute (DeepEP's hook-based receive holds no SM while it waits), so only the bytes count there.
"""
from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from moeserve.capacity.step_time import StepInput, StepModel


# DeepEP README, low-latency kernels on H800 with ConnectX-7 400 Gb/s RDMA, 128 tokens per rank, hidden
# 7168, top-8, FP8 dispatch and BF16 combine: (EP, dispatch us, combine us); log-linear in EP between
# the points, flat beyond them. Assumed for every card whose nodes talk over 400 Gb/s RDMA.
LL_FLOOR_US = ((8, 77, 114), (16, 118, 195), (32, 155, 273), (64, 173, 314), (128, 192, 369), (256, 194, 360))


def ll_floor(ep: int) -> tuple[float, float]:
    """(dispatch, combine) seconds a low-latency call across nodes takes at least at expert parallelism `ep`."""
    eps = [p[0] for p in LL_FLOOR_US]
    if ep <= eps[0]:
        return LL_FLOOR_US[0][1] * 1e-6, LL_FLOOR_US[0][2] * 1e-6
    if ep >= eps[-1]:
        return LL_FLOOR_US[-1][1] * 1e-6, LL_FLOOR_US[-1][2] * 1e-6
    i = bisect.bisect_right(eps, ep)
    (e0, d0, c0), (e1, d1, c1) = LL_FLOOR_US[i - 1], LL_FLOOR_US[i]
    f = math.log(ep / e0) / math.log(e1 / e0)
    return (d0 + f * (d1 - d0)) * 1e-6, (c0 + f * (c1 - c0)) * 1e-6


def all_reduce(sm: "StepModel", s: "StepInput") -> float:
    hw, tp = sm.hw, sm.lay.tp
    if tp == 1:
        return 0.0
    nbytes = s.tokens * tp * sm.m.hidden * sm.p.act_bytes
    link = sm.eff.network * 1e9
    per_node = min(hw.gpus_per_node, tp)
    nodes = math.ceil(tp / per_node)
    if nodes == 1:
        return 2 * (tp - 1) / tp * nbytes / (hw.scaleup_gbs * link) + hw.allreduce_latency_us * 1e-6
    inside = 2 * (per_node - 1) / per_node * nbytes / (hw.scaleup_gbs * link)
    between = 2 * (nodes - 1) / nodes * nbytes / per_node / (hw.scaleout_gbs * link)
    return inside + between + hw.scaleout_allreduce_latency_us * 1e-6


def pipeline_handoffs(sm: "StepModel", s: "StepInput") -> float:
    """A token's pass through pp pipeline stages hands the hidden state and the residual (2 x H in the
    activation format, every rank of the stage its group's tokens) to the next stage pp - 1 times, over
    NVLink between stages in one node and over each GPU's NIC between nodes (stages are consecutive
    ranks). Each hand-off's latency is taken as a small all-reduce's over that link (an estimate: a
    send is one hop, an all-reduce two phases; no published send/recv latency was found)."""
    lay, hw, m = sm.lay, sm.hw, sm.m
    if lay.pp == 1:
        return 0.0
    nbytes = s.tokens * lay.tp * 2 * m.hidden * sm.p.act_bytes
    link = sm.eff.network * 1e9
    across = min(lay.pp - 1, math.ceil(lay.gpus / hw.gpus_per_node) - 1)
    inside = lay.pp - 1 - across
    return (across * (nbytes / (hw.scaleout_gbs * link) + hw.scaleout_allreduce_latency_us * 1e-6)
            + inside * (nbytes / (hw.scaleup_gbs * link) + hw.allreduce_latency_us * 1e-6))


def dispatch_combine(sm: "StepModel", s: "StepInput") -> float:
    """Dispatch then combine of one MoE layer (seconds): dispatch_and_combine's two phases together."""
    return sum(dispatch_and_combine(sm, s))


def dispatch_and_combine(sm: "StepModel", s: "StepInput") -> tuple[float, float]:
    """(dispatch, combine) seconds of one MoE layer: a token goes once to each distinct expert group it
    picks (to each of the group's moe_tp ranks), or once per distinct node at prefill across nodes, in
    the dispatch format, and comes back in the combine format; each phase pays its latency."""
    m, lay, hw = sm.m, sm.lay, sm.hw
    if lay.world == 1 or lay.attention_groups == 1:
        return 0.0, 0.0
    world, ep, etp = lay.world, lay.ep, lay.expert_tp
    per_node = min(hw.gpus_per_node, world)
    nodes = math.ceil(world / per_node)
    ranks_touched = ep * (1 - (1 - 1 / ep) ** m.top_k) * etp if ep > 1 else etp
    fmt_bytes = (sm.p.dispatch_bytes, sm.p.combine_bytes)
    link = sm.eff.network * 1e9
    if nodes == 1:
        latency = hw.scaleup_latency_us * 1e-6
        return tuple(s.tokens * ranks_touched * (1 - 1 / world) * m.hidden * b / (hw.scaleup_gbs * link) + latency
                     for b in fmt_bytes)
    if s.phase == "decode":
        remote_copies = s.tokens * ranks_touched * (1 - per_node / world)
    else:
        nodes_touched = nodes * (1 - (1 - 1 / nodes) ** m.top_k)
        if m.topk_groups and m.num_groups >= nodes:
            nodes_touched = min(nodes_touched, m.topk_groups)
        remote_copies = s.tokens * nodes_touched * (1 - 1 / nodes)
    local_copies = s.tokens * ranks_touched
    latency = hw.scaleout_latency_us * 1e-6
    phases = tuple(max(remote_copies * m.hidden * b / (hw.scaleout_gbs * link), local_copies * m.hidden * b / (hw.scaleup_gbs * link))
                   + latency for b in fmt_bytes)
    if s.phase == "decode" and not s.tbo:
        phases = tuple(max(t, floor) for t, floor in zip(phases, ll_floor(ep)))
    return phases
