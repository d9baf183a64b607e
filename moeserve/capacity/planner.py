"""Enumerate deployments of a model on N GPUs and rank them by goodput under the SLOs.

Candidates: every (tp, ep, moe_tp, redundant) whose world divides N (colocated: N / world identical
instances), each at its best batch (decode: sequences per GPU; prefill: tokens per GPU per step)
that fits memory and meets the SLOs; and prefill/decode splits pairing the best prefill and decode
layouts in the instance ratio that balances them. Ranked by goodput, then output tokens/s per GPU.
The search is bounded: at most MAX_GPUS GPUs, and expert-parallel worlds of at most
max(gpus_per_node, 2 x experts) ranks (beyond that every rank would hold replicas only).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from moeserve.capacity.layout import Layout, fill_redundant
from moeserve.capacity.predict import Options, Prediction, Predictor, Workload

MAX_GPUS = 65536
DECODE_BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
PREFILL_BATCHES = (512, 1024, 2048, 4096, 8192, 16384, 32768)
TP_CHOICES = (1, 2, 4, 8)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def candidate_worlds(num_experts: int, gpus: int, gpus_per_node: int, split: bool) -> list[int]:
    """Worlds that divide `gpus`, and with `split` also those of whole nodes (one side of a P/D split)."""
    limit = max(gpus_per_node, 2 * num_experts)
    worlds = {w for w in divisors(gpus) if w <= limit}
    if split:
        worlds |= {n * gpus_per_node for n in range(1, min(gpus - 1, limit) // gpus_per_node + 1)}
        worlds.discard(gpus)
    return sorted(worlds)


def layouts(num_experts: int, gpus: int, gpus_per_node: int, split: bool = False, pp: int = 1) -> list[Layout]:
    """Valid layouts of the candidate worlds: experts split tensor-parallel (ep 1) or over EP with 0,
    one or two redundant slots per rank or the fewest that split the experts evenly; one attention
    group of tp ranks may also split its experts TP x EP (TensorRT-LLM's min-latency layouts). With pp
    pipeline stages every layout is pp stages of a world that divides gpus / pp."""
    if pp > 1:
        return [replace(lay, pp=pp) for lay in layouts(num_experts, gpus // pp, gpus_per_node, split)]
    out = []
    for world in candidate_worlds(num_experts, gpus, gpus_per_node, split):
        for tp in TP_CHOICES:
            if tp > min(world, gpus_per_node) or world % tp:
                continue
            if world == tp:
                out.append(Layout(tp=tp, ep=1))
                out += [Layout(tp=tp, ep=d, moe_tp=tp // d, redundant=fill_redundant(num_experts, d))
                        for d in divisors(tp) if 1 < d < tp]
            if world > 1:
                fill = fill_redundant(num_experts, world)
                for redundant in sorted({0, fill, world, 2 * world}):
                    if (num_experts + redundant) % world == 0 and redundant <= num_experts:
                        out.append(Layout(tp=tp, ep=world, redundant=redundant))
    return out


def decode_batches(layout: Layout) -> list[float]:
    """Sequences per GPU to try: the ladder, and below one per GPU a sequence per attention group."""
    below = [k / layout.tp for k in (1, 2, 4) if k < layout.tp]
    return below + list(DECODE_BATCHES)


# a batch within this share of the best goodput is as good: the smallest such batch wins (lower latency)
KNEE = 0.95


def best_of(preds: list[Prediction], w: Workload) -> Prediction | None:
    """The smallest batch whose goodput is within KNEE of the best; by throughput when none meets the SLOs."""
    ok = [p for p in preds if p.fits]
    if not ok:
        return None
    score = (lambda p: p.goodput(w)) if any(p.meets(w) for p in ok) else (lambda p: p.output_tokens_per_s_per_gpu)
    top = max(score(p) for p in ok)
    return min((p for p in ok if score(p) >= KNEE * top), key=lambda p: p.batch)


def best_batch(run: Callable[[float], Prediction], batches, w: Workload) -> Prediction | None:
    return best_of([run(b) for b in batches], w)


def best_prefill(pred: Predictor, lay: Layout, w: Workload, o: Options) -> Prediction | None:
    runs = [pred.prefill(lay, b, w, o) for b in PREFILL_BATCHES]
    ok = [p for p in runs if p.fits and (w.ttft_slo_ms is None or p.ttft_ms <= w.ttft_slo_ms)]
    return max(ok, key=lambda p: p.input_tokens_per_s_per_gpu) if ok else None


def prefill_side(pred: Predictor, lay: Layout, w: Workload, o: Options, offload: bool) -> Prediction | None:
    """The layout's best prefill; with `offload`, where none fits, the best keeping routed experts in host memory."""
    p = best_prefill(pred, lay, w, o)
    if p is None and offload and pred.hw.host_link_gbs > 0:
        p = best_prefill(pred, lay, w, replace(o, offload=True))
    return p


def rank(pred: Predictor, gpus: int, w: Workload, o: Options, balance: Callable[[Layout], float],
         top: int = 10, offload_prefill: bool = False, pp: int = 1, phase: str | None = None) -> list[Prediction]:
    """The `top` best deployments on `gpus` GPUs; balance(layout) gives the expert balancedness.
    offload_prefill: a prefill side that does not fit may keep its routed experts in host memory.
    pp: pipeline stages of every layout. phase: only deployments of that phase ("prefill", "decode",
    "colocated"), each layout's world dividing `gpus` (gpus / world identical instances); None: colocated
    ones and prefill/decode splits."""
    if phase is not None:
        return rank_phase(pred, gpus, w, o, balance, phase, top, offload_prefill, pp)
    model, hw = pred.model, pred.hw
    colocated, prefills, decodes = [], [], []
    for lay in layouts(model.num_experts, gpus, hw.gpus_per_node, pp=pp):
        opts = replace(o, balancedness=balance(lay))
        c = best_batch(lambda b: pred.colocated(lay, b, w, opts), decode_batches(lay), w)
        if c is not None:
            colocated.append(c)
    for lay in layouts(model.num_experts, gpus, hw.gpus_per_node, split=True, pp=pp):
        opts = replace(o, balancedness=balance(lay))
        d = best_batch(lambda b: pred.decode(lay, b, w, opts), decode_batches(lay), w)
        if d is not None and d.meets(w):
            decodes.append(d)
        p = prefill_side(pred, lay, w, opts, offload_prefill)
        if p is not None:
            prefills.append(p)
    split = []
    prefills = sorted(prefills, key=lambda p: -p.input_tokens_per_s_per_gpu)[:4]
    decodes = sorted(decodes, key=lambda p: -p.output_tokens_per_s_per_gpu)[:4]
    for p in prefills:
        for d in decodes:
            if p.layout.gpus + d.layout.gpus <= gpus:
                split.append(pred.disaggregated(p, d, gpus, w))
    everything = colocated + split
    everything.sort(key=lambda p: (p.goodput(w), p.output_tokens_per_s_per_gpu), reverse=True)
    return everything[:top]


def rank_phase(pred: Predictor, gpus: int, w: Workload, o: Options, balance: Callable[[Layout], float], phase: str,
               top: int = 10, offload_prefill: bool = False, pp: int = 1) -> list[Prediction]:
    """The `top` best layouts of one phase on `gpus` GPUs, each at its best batch, ranked by goodput, then
    tokens/s per GPU (input for prefill, output otherwise). A prefill side is held to the TTFT objective, a
    decode side to the TPOT one; a prefill layout that fits but meets it at no batch is ranked at its batch of
    the shortest TTFT, with no goodput."""
    if phase not in ("prefill", "decode", "colocated"):
        raise ValueError(f"unknown phase {phase!r}: prefill, decode or colocated")
    out = []
    for lay in layouts(pred.model.num_experts, gpus, pred.hw.gpus_per_node, pp=pp):
        opts = replace(o, balancedness=balance(lay))
        if phase == "prefill":
            p = prefill_side(pred, lay, w, opts, offload_prefill)
            if p is None:  # no batch meets the TTFT objective: the one closest to it, ranked below those that do
                fit = [r for r in (pred.prefill(lay, b, w, opts) for b in PREFILL_BATCHES) if r.fits]
                p = min(fit, key=lambda r: r.ttft_ms) if fit else None
        else:
            run = pred.decode if phase == "decode" else pred.colocated
            p = best_batch(lambda b: run(lay, b, w, opts), decode_batches(lay), w)
        if p is not None:
            out.append(p)
    speed = (lambda p: p.input_tokens_per_s_per_gpu) if phase == "prefill" else (lambda p: p.output_tokens_per_s_per_gpu)
    out.sort(key=lambda p: (p.goodput(w), speed(p)), reverse=True)
    return out[:top]
