"""Enumerate deployments of a model on N GPUs and rank them by goodput under the SLOs.

Candidates: every (tp, ep, redundant) whose world divides N (colocated: N / world identical
instances), each at its best batch (decode: sequences per GPU; prefill: tokens per GPU per step)
that fits memory and meets the SLOs; and prefill/decode splits pairing the best prefill and decode
layouts in the instance ratio that balances them. Ranked by goodput, then output tokens/s per GPU.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from moeserve.capacity.layout import Layout
from moeserve.capacity.predict import Options, Prediction, Predictor, Workload

DECODE_BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
PREFILL_BATCHES = (512, 1024, 2048, 4096, 8192, 16384, 32768)
TP_CHOICES = (1, 2, 4, 8)


def layouts(num_experts: int, gpus: int, gpus_per_node: int, split: bool = False) -> list[Layout]:
    """Valid layouts whose world divides `gpus`; with `split`, also those of fewer ranks in whole
    nodes (one side of a prefill/decode split)."""
    out = []
    for world in range(1, gpus + 1):
        whole_nodes = world % gpus_per_node == 0
        if (gpus % world and not (split and whole_nodes)) or (split and world == gpus):
            continue
        for tp in TP_CHOICES:
            if tp > min(world, gpus_per_node) or world % tp:
                continue
            if world == tp and world <= gpus_per_node:
                out.append(Layout(tp=tp, ep=1))
            if world > 1:
                fill = -num_experts % world  # fewest extra slots that make the experts split evenly
                for redundant in sorted({0, fill, world, 2 * world}):
                    if (num_experts + redundant) % world == 0 and redundant <= num_experts:
                        out.append(Layout(tp=tp, ep=world, redundant=redundant))
    return out


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


def rank(pred: Predictor, gpus: int, w: Workload, o: Options, balance: Callable[[Layout], float],
         top: int = 10) -> list[Prediction]:
    """The `top` best deployments on `gpus` GPUs; balance(layout) gives the expert balancedness."""
    model, hw = pred.model, pred.hw
    colocated, prefills, decodes = [], [], []
    for lay in layouts(model.num_experts, gpus, hw.gpus_per_node):
        opts = replace(o, balancedness=balance(lay))
        c = best_batch(lambda b: pred.colocated(lay, b, w, opts), DECODE_BATCHES, w)
        if c is not None:
            colocated.append(c)
    for lay in layouts(model.num_experts, gpus, hw.gpus_per_node, split=True):
        opts = replace(o, balancedness=balance(lay))
        d = best_batch(lambda b: pred.decode(lay, b, w, opts), DECODE_BATCHES, w)
        if d is not None and d.meets(w):
            decodes.append(d)
        p = best_prefill(pred, lay, w, opts)
        if p is not None:
            prefills.append(p)
    split = []
    prefills = sorted(prefills, key=lambda p: -p.input_tokens_per_s_per_gpu)[:4]
    decodes = sorted(decodes, key=lambda p: -p.output_tokens_per_s_per_gpu)[:4]
    for p in prefills:
        for d in decodes:
            if p.layout.world + d.layout.world <= gpus:
                split.append(pred.disaggregated(p, d, gpus, w))
    everything = colocated + split
    everything.sort(key=lambda p: (p.goodput(w), p.output_tokens_per_s_per_gpu), reverse=True)
    return everything[:top]
