"""How far apart published figures of one setup are: a floor under the error of any model that, like this
one, takes no engine release, tuning or benchmark harness as input.

Two validation cases have the same setup when everything the model reads is the same: card and its
overrides, model, phase, layout, batch and its rule, workload, options, number formats and unit. Their
published figures then differ only by what the model does not take: another release of the same engine
(TensorRT-LLM's perf overview at two releases), another engine, another source measuring the same run (a
benchmark's output and the same request served), another tuning (SGLang's fused-MoE configs). One figure cannot be
within a bound b of both a and c (a < c) when c / a > (1 + b) / (1 - b): 1.35 for 15%, 1.67 for 25%.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, fields

from moeserve.capacity import validation
from moeserve.capacity.validation_cases import Case

# what a case records about its source rather than its setup
NOT_SETUP = frozenset({"name", "source", "published", "assumed", "blind", "fitted"})


def setup_key(case: Case) -> tuple:
    """Everything the model reads from a case, comparable across cases."""
    return tuple((f.name, repr(getattr(case, f.name))) for f in fields(case) if f.name not in NOT_SETUP)


def same_setup_groups(cases=None) -> list[tuple[Case, ...]]:
    """The groups of two or more cases with one setup and different published figures, in table order."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for case in validation.CASES if cases is None else cases:
        groups[setup_key(case)].append(case)
    return [tuple(g) for g in groups.values() if len(g) > 1 and len({c.published for c in g}) > 1]


def unreachable_ratio(bound: float) -> float:
    """The ratio of two published figures beyond which no one figure is within `bound` of both."""
    return (1 + bound) / (1 - bound)


@dataclass(frozen=True)
class Spread:
    groups: int
    median_ratio: float  # the median over groups of the largest / smallest published figure
    largest_ratio: float
    over_15: int  # groups whose figures differ by more than 15% (largest / smallest > 1.15)
    no_figure_within_15: int  # groups no single figure is within 15% of (ratio > unreachable_ratio(0.15))
    no_figure_within_25: int


def spread(cases=None) -> Spread:
    ratios = [max(c.published for c in g) / min(c.published for c in g) for g in same_setup_groups(cases)]
    if not ratios:
        return Spread(0, 1.0, 1.0, 0, 0, 0)
    return Spread(len(ratios), statistics.median(ratios), max(ratios), sum(r > 1.15 for r in ratios),
                  sum(r > unreachable_ratio(0.15) for r in ratios), sum(r > unreachable_ratio(0.25) for r in ratios))
