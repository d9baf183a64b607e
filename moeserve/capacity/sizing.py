"""How many GPUs a request rate needs: the fewest whose best deployment serves it within the SLOs.

A deployment's requests a second are its goodput (tokens/s per GPU that meet the SLOs, none if one is
missed) times the GPUs it occupies, over the tokens of a request: output tokens for a deployment that
decodes, input tokens for a prefill side alone. A fixed layout scales in whole identical instances. A
ranked plan is searched over GPU counts (below a node 1, 2, 4, ...; then whole nodes), doubling until
one serves the rate, then bisecting the whole-node counts between the last that did not and it; the
best deployment's rate per GPU grows with the count (wider expert parallelism, a finer P/D ratio) but
not strictly, so the answer is the fewest of the counts the search tried, not a proof that no smaller
count could. Little's law is in the goodput already: each figure is a steady state at its batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from moeserve.capacity.predict import Prediction, Workload


@dataclass(frozen=True)
class Sizing:
    rate: float  # requests a second asked for
    gpus: int  # GPUs the deployment occupies (a P/D split may leave some of `planned` idle)
    served: float  # requests a second it serves within the SLOs (at least `rate`)
    instances: int | None = None  # a fixed layout: identical instances of it
    tried: tuple[int, ...] = ()  # a ranked plan: the GPU counts searched, in order
    planned: int = 0  # a ranked plan: the GPU count whose best deployment it is

    def describe(self, w: Workload, gpu_price: float | None = None) -> str:
        if self.instances:
            what = f"{self.instances} instance{'s' if self.instances != 1 else ''} of the layout"
        else:
            idle = self.planned - self.gpus
            what = "the first row's deployment" + (f" (planned on {self.planned}, {idle} left idle)" if idle else "")
        cost = (f"; ${self.gpus * gpu_price:,.2f} an hour at ${gpu_price:g} a GPU-hour, "
                f"${self.gpus * gpu_price / (self.rate * 3600) * 1000:,.4f} a thousand requests at the rate"
                if gpu_price else "")
        return (f"to serve {self.rate:g} requests a second ({self.rate * w.isl:,.0f} input and {self.rate * w.osl:,.0f} "
                f"output tokens/s) within the SLOs: {self.gpus} GPUs, {what}, serving up to {self.served:,.2f} a second"
                + cost)

    def as_dict(self) -> dict:
        return {"rate": self.rate, "gpus": self.gpus, "served": self.served, "instances": self.instances,
                "planned": self.planned or self.gpus, "tried": list(self.tried)}


def occupied(p: Prediction, gpus: int) -> int:
    """GPUs a ranked deployment on `gpus` occupies: a P/D split its two sides' whole instances, anything
    else all of them (gpus / world identical instances)."""
    return p.prefill_gpus + p.decode_gpus if p.phase == "disaggregated" else gpus


def request_tokens(p: Prediction, w: Workload) -> int:
    """Tokens of one request that the deployment's goodput counts: input for a prefill side alone."""
    return w.isl if p.phase == "prefill" else w.osl


def served(p: Prediction, gpus: int, w: Workload) -> float:
    """Requests a second `p` serves within the SLOs on the GPUs it occupies of `gpus`."""
    return p.goodput(w) * occupied(p, gpus) / request_tokens(p, w)


def instances(p: Prediction, rate: float, w: Workload) -> Sizing:
    """Identical instances of a fixed layout that serve `rate` requests a second."""
    one = served(p, p.layout.gpus, w)
    if one <= 0:
        raise ValueError(_missed(p, w))
    n = max(1, math.ceil(rate / one - 1e-9))
    return Sizing(rate, n * p.layout.gpus, n * one, instances=n)


def counts(gpus_per_node: int, most: int, step: int = 1) -> list[int]:
    """GPU counts to search, multiples of `step` (pipeline stages): 1, 2, 4, ... below a node, then whole
    nodes, up to `most`."""
    below = [c for c in (2 ** i for i in range(32)) if c < gpus_per_node]
    nodes = range(gpus_per_node, most + 1, gpus_per_node)
    return [c for c in [*below, *nodes] if c % step == 0 and c <= most]


def fewest_gpus(best_at: Callable[[int], Prediction | None], rate: float, w: Workload, gpus_per_node: int,
                most: int, step: int = 1) -> tuple[Sizing, Prediction]:
    """(the sizing, the best deployment at it): the fewest GPUs of `counts` whose best deployment
    (best_at(gpus), None where nothing fits) serves `rate` requests a second within the SLOs."""
    options = counts(gpus_per_node, most, step)
    if not options:
        raise ValueError(f"no GPU count up to {most} is a multiple of {step}")
    tried, cache = [], {}

    def serves(i: int) -> bool:
        if i not in cache:
            gpus = options[i]
            tried.append(gpus)
            p = best_at(gpus)
            cache[i] = (p, served(p, gpus, w) if p is not None else 0.0)
        return cache[i][1] >= rate

    lo, hi, i = -1, None, 0  # options[lo] does not serve the rate (-1: none tried), options[hi] does
    while hi is None:
        if serves(i):
            hi = i
        elif i == len(options) - 1:
            best = max((r for _, r in cache.values()), default=0.0)
            raise ValueError(f"{rate:g} requests a second within the SLOs needs more than {options[-1]} GPUs: the best "
                             f"GPU count tried serves {best:,.2f} a second" + ("" if best else " (none meets the SLOs)")
                             + "; raise --gpus, relax the SLOs or use smaller formats")
        else:
            lo, i = i, min(len(options) - 1, 2 * i + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if serves(mid) else (mid, hi)
    p, rate_served = cache[hi]
    return Sizing(rate, occupied(p, options[hi]), rate_served, tried=tuple(tried), planned=options[hi]), p


def _missed(p: Prediction, w: Workload) -> str:
    if not p.fits:
        return "the layout does not fit: no request rate"
    return "the layout misses the SLOs at its batch (goodput 0): it serves no request within them"
