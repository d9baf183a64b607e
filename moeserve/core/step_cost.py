"""What a step costs: seconds ~ overhead + per_token * tokens, fitted online from the engine's steps.

    cost = StepCostModel()
    cost.observe(tokens=256, seconds=0.038)    # the engine core, after each executed step
    cost.estimate()                            # StepCost(overhead_s, per_token_s), or None

The fit is a least-squares line through recent steps, older steps weighing less (each step
multiplies the weight of the ones before by `decay`). It answers only once it has seen `min_steps`
steps spread over at least two step sizes `min_spread` tokens apart: a server that has only ever
decoded 8 sequences knows its overhead but not what a prompt token costs. Pure bookkeeping: no
clock of its own, no torch; the caller measures.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    overhead_s: float  # what a step costs however few tokens it has (weights streamed, launches, Python)
    per_token_s: float  # what each further token adds


class StepCostModel:
    def __init__(self, decay: float = 0.98, min_steps: int = 8, min_spread: int = 16):
        assert 0.0 < decay < 1.0 and min_steps >= 2 and min_spread >= 1
        self.decay = decay
        self.min_steps = min_steps
        self.min_spread = min_spread
        self.steps = 0
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self._lo: int | None = None  # smallest and largest step sizes seen
        self._hi: int | None = None

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens < 1 or not seconds > 0.0:
            return
        d = self.decay
        self._w = d * self._w + 1.0
        self._x = d * self._x + tokens
        self._y = d * self._y + seconds
        self._xx = d * self._xx + tokens * tokens
        self._xy = d * self._xy + tokens * seconds
        self._lo = tokens if self._lo is None else min(self._lo, tokens)
        self._hi = tokens if self._hi is None else max(self._hi, tokens)
        self.steps += 1

    def estimate(self) -> StepCost | None:
        if self.steps < self.min_steps or self._hi - self._lo < self.min_spread:
            return None
        mean_x, mean_y = self._x / self._w, self._y / self._w
        var_x = self._xx / self._w - mean_x * mean_x
        if var_x <= 1e-9 * max(1.0, mean_x * mean_x):  # the spread has decayed away: sizes all alike lately
            return None
        per_token = (self._xy / self._w - mean_x * mean_y) / var_x
        overhead = mean_y - per_token * mean_x
        if per_token <= 0.0 or overhead <= 0.0:  # noise, not a cost: bigger steps must cost more, and any step something
            return None
        return StepCost(overhead, per_token)
