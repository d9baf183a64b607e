"""Per-layer roofline step-time model of one GPU (the busiest) in one engine step.

Every kernel costs the larger of its compute time (FLOPs over the profile's peak for its number
format times an efficiency factor) and its memory time (bytes over HBM bandwidth times `memory`).
A layer's kernels run one after another; communication (dispatch/combine over NVLink or InfiniBand,
TP all-reduces) adds to them, or with two-batch overlap mostly hides behind the other micro-batch.

Shape legend: T tokens one GPU runs this step, G = T x tp the attention group's tokens, S sequences
per GPU, C context (KV tokens) each query attends to, k top-k, E routed experts, H hidden.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from moeserve.capacity.dtypes import COMPUTE
from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.hardware import Hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import ModelSpec


@dataclass(frozen=True)
class StepInput:
    phase: str  # "prefill" or "decode"
    tokens: int  # T: tokens per GPU this step (decode: sequences x (1 + draft tokens))
    context: float  # C: mean KV tokens each query token attends to
    sequences: int  # S: sequences per GPU this step
    prefix_tokens: int = 0  # prefill: cached prefix tokens per GPU (expanded from the latent for MLA)
    balancedness: float = 1.0  # mean / max expert load over EP ranks (placement quality)
    tbo: bool = False  # two-batch overlap
    cuda_graphs: bool = True


@dataclass
class StepTime:
    """Seconds per step by part (the busiest GPU), and the step total."""
    parts: dict = field(default_factory=dict)
    total: float = 0.0

    def add(self, name: str, seconds: float) -> None:
        self.parts[name] = self.parts.get(name, 0.0) + seconds


class StepModel:
    def __init__(self, model: ModelSpec, hw: Hardware, layout: Layout, prec: Precision, eff: Efficiency = DEFAULT):
        self.m, self.hw, self.lay, self.p, self.eff = model, hw, layout, prec, eff

    # --- kernels ---------------------------------------------------------------------------------
    def roofline(self, flops: float, nbytes: float, fmt: str, compute_eff: float, memory_eff: float) -> float:
        return max(flops / (self.hw.peak_flops(fmt) * compute_eff), nbytes / (self.hw.memory_bandwidth_gbs * 1e9 * memory_eff))

    def gemm(self, rows: float, params: float, high_precision: bool = False) -> float:
        """rows x params GEMM on this GPU; weights read once, at least the hardware's tile of rows.
        high_precision: weights kept in the activation format (LM head, routers)."""
        if rows <= 0 or params <= 0:
            return 0.0
        fmt = COMPUTE[self.p.activations if high_precision else self.p.weights]
        wbytes = self.p.act_bytes if high_precision else self.p.weight_bytes
        flops = 2 * max(rows, self.hw.gemm_tile_rows) * params
        nbytes = params * wbytes + 2 * rows * self.m.hidden * self.p.act_bytes
        return self.roofline(flops, nbytes, fmt, self.eff.gemm, self.eff.weight_stream)

    def attention_core(self, s: StepInput) -> float:
        m, tp = self.m, self.lay.tp
        group_tokens, group_seqs = s.tokens * tp, s.sequences * tp
        decode = s.phase == "decode"
        flops = group_tokens * s.context * m.attention_flops_per_pair(absorbed=decode) / tp
        kv_layer = self.kv_bytes_per_token_layer()
        read_tokens = group_seqs * s.context if decode else s.prefix_tokens * tp
        nbytes = (read_tokens + group_tokens) * kv_layer + 2 * group_tokens * m.hidden * self.p.act_bytes
        return self.roofline(flops, nbytes, COMPUTE[self.p.activations], self.eff.attention, self.eff.kv_stream)

    def kv_bytes_per_token_layer(self) -> float:
        m = self.m
        if m.is_mla:
            return m.kv_values_per_token_layer * self.p.kv_bytes
        return 2 * max(1, m.num_kv_heads // self.lay.tp) * m.head_dim * self.p.kv_bytes

    def experts(self, s: StepInput) -> float:
        """Routed experts of one MoE layer on the busiest rank."""
        m, lay = self.m, self.lay
        if lay.ep > 1:
            assignments = s.tokens * m.top_k / s.balancedness
            slots, params = lay.slots_per_rank(m.num_experts), m.expert_params
        else:
            assignments = s.tokens * lay.tp * m.top_k
            slots, params = m.num_experts, m.expert_params / lay.tp
        active = slots * (1 - (1 - 1 / slots) ** assignments)  # experts with at least one row (uniform within the rank)
        if active <= 0:
            return 0.0
        rows = assignments / active
        flops = 2 * active * max(rows, self.hw.gemm_tile_rows) * params
        nbytes = active * params * self.p.weight_bytes + 3 * assignments * m.hidden * self.p.act_bytes
        fixed = active * self.hw.expert_overhead_us * 1e-6
        return self.roofline(flops, nbytes, COMPUTE[self.p.weights], self.eff.gemm, self.eff.weight_stream) + fixed

    # --- communication ---------------------------------------------------------------------------
    def dispatch_combine(self, s: StepInput) -> float:
        """Dispatch then combine of one MoE layer. A token goes once to each distinct rank (decode,
        DeepEP low-latency kernels) or once to each distinct node and on over NVLink (prefill, DeepEP
        normal kernels); group-limited routing caps the nodes at topk_groups."""
        m, lay, hw = self.m, self.lay, self.hw
        if lay.ep == 1:
            return 0.0
        ep, per_node = lay.ep, min(hw.gpus_per_node, lay.ep)
        nodes = math.ceil(ep / per_node)
        ranks_touched = ep * (1 - (1 - 1 / ep) ** m.top_k)
        value_bytes = self.p.dispatch_bytes + self.p.act_bytes  # there and back
        row = m.hidden * value_bytes
        if nodes == 1:
            nbytes = s.tokens * ranks_touched * (1 - 1 / ep) * row
            return nbytes / (hw.scaleup_gbs * 1e9 * self.eff.network) + 2 * hw.scaleup_latency_us * 1e-6
        if s.phase == "decode":
            remote = s.tokens * ranks_touched * (1 - per_node / ep) * row
        else:
            nodes_touched = nodes * (1 - (1 - 1 / nodes) ** m.top_k)
            if m.topk_groups and m.num_groups >= nodes:
                nodes_touched = min(nodes_touched, m.topk_groups)
            remote = s.tokens * nodes_touched * (1 - 1 / nodes) * row
        local = s.tokens * ranks_touched * row
        seconds = max(remote / (hw.scaleout_gbs * 1e9 * self.eff.network), local / (hw.scaleup_gbs * 1e9 * self.eff.network))
        return seconds + 2 * hw.scaleout_latency_us * 1e-6

    def all_reduce(self, s: StepInput) -> float:
        tp = self.lay.tp
        if tp == 1:
            return 0.0
        nbytes = s.tokens * tp * self.m.hidden * self.p.act_bytes
        return 2 * (tp - 1) / tp * nbytes / (self.hw.scaleup_gbs * 1e9 * self.eff.network) + self.hw.scaleup_latency_us * 1e-6

    # --- layers and the step ---------------------------------------------------------------------
    def layer(self, s: StepInput, moe: bool) -> tuple[dict, float]:
        """(compute parts in seconds, communication seconds) of one decoder layer."""
        m, tp = self.m, self.lay.tp
        group = s.tokens * tp
        parts = {"attention": self.attention_core(s), "projections": self.gemm(group, m.attention_params / tp)}
        if m.is_mla and s.phase == "prefill" and s.prefix_tokens:
            # the cached prefix's latents are expanded to keys and values by kv_b for non-absorbed attention
            kv_b = m.kv_lora_rank * m.num_heads * (m.qk_nope_dim + m.v_head_dim)
            parts["projections"] += self.gemm(s.prefix_tokens * tp, kv_b / tp)
        comm = 2 * self.all_reduce(s)
        if moe:
            parts["experts"] = self.experts(s)
            parts["shared_router"] = self.gemm(group, m.shared_params / tp) + self.gemm(s.tokens, m.router_params, True)
            comm += self.dispatch_combine(s)
        else:
            parts["dense_mlp"] = self.gemm(group, m.dense_mlp_params / tp)
        return parts, comm

    def layer_time(self, s: StepInput, moe: bool, out: StepTime, count: int) -> None:
        if s.tbo:
            half = StepInput(**{**s.__dict__, "tokens": s.tokens / 2, "sequences": s.sequences / 2,
                                "prefix_tokens": s.prefix_tokens / 2})
            parts, comm = self.layer(half, moe)
            parts = {k: 2 * v for k, v in parts.items()}
            comm *= 2
        else:
            parts, comm = self.layer(s, moe)
        compute = sum(parts.values())
        if s.tbo:
            exposed = max(compute, comm) + (1 - self.eff.overlap) * min(compute, comm) - compute
        else:
            exposed = comm
        # kernels leave gaps between them even replayed from a graph; launched one by one (eager), the
        # layer also takes at least as long as the host needs to launch them
        launch = self.hw.graph_layer_overhead_us * 1e-6
        eager_floor = 0.0 if s.cuda_graphs else max(0.0, self.hw.layer_overhead_us * 1e-6 - compute - exposed - launch)
        for k, v in parts.items():
            out.add(k, v * count)
        out.add("communication", exposed * count)
        out.add("overhead", (launch + eager_floor) * count)

    def step(self, s: StepInput, mtp_draft: int = 0) -> StepTime:
        """Seconds of one step on the busiest GPU. mtp_draft: draft tokens per sequence (each runs one
        MTP module layer on the step's sequences)."""
        m = self.m
        out = StepTime()
        self.layer_time(s, False, out, m.num_dense_layers)
        self.layer_time(s, True, out, m.num_moe_layers)
        if mtp_draft and m.mtp_layers:
            draft = StepInput(**{**s.__dict__, "tokens": s.sequences})
            for _ in range(mtp_draft):
                self.layer_time(draft, True, out, 1)
        logit_rows = s.tokens if s.phase == "decode" else s.sequences
        out.add("lm_head", self.gemm(logit_rows * self.lay.tp, m.vocab * m.hidden / self.lay.tp, True))
        out.add("overhead", self.hw.step_overhead_ms * 1e-3 + s.sequences * self.hw.seq_overhead_us * 1e-6)
        out.total = sum(out.parts.values())
        return out
