"""Refit the efficiency factors and the GPU kernel floor to the fitted part of the validation table.

    python -m moeserve.capacity.fit            # prints the factors that minimise the fitted cases' error

A maintainer's tool, not used at run time: it searches each factor within the range its kernel
authors publish (BOUNDS, quoted in efficiency.py) for the smallest sum of squared log errors over the
cases marked `fitted` (validation_cases.py), coordinate by coordinate; held-out and blind cases are
never read.
Copy what it prints into efficiency.py and the profiles' kernel_floor_us, then regenerate the table
of docs/capacity.md (`python -m moeserve.capacity.validation`).
"""
from __future__ import annotations

import math
from dataclasses import fields, replace

from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.validation import hardware_for, predict_case

# published ranges (efficiency.py gives the sources); kernel_floor_us in microseconds
BOUNDS = {"gemm": (0.30, 0.78), "attention": (0.20, 0.70), "attention_decode": (0.20, 0.67),
          "weight_stream": (0.45, 0.80), "kv_stream": (0.60, 0.90), "network": (0.60, 0.95), "overlap": (0.30, 1.00),
          "kernel_floor_us": (1.0, 10.0)}


def loss(params: dict, cases) -> float:
    eff = Efficiency(**{f.name: params[f.name] for f in fields(Efficiency)})
    total = 0.0
    for c in cases:
        hw = hardware_for(c)
        if hw.kernel_floor_us > 0:  # GPU profiles share the fitted floor; the CPU's stays 0
            hw = replace(hw, kernel_floor_us=params["kernel_floor_us"])
        total += math.log(predict_case(c, eff, hw) / c.published) ** 2
    return total


def fit(cases, rounds: int = 4, steps: int = 24) -> dict:
    params = {f.name: getattr(DEFAULT, f.name) for f in fields(Efficiency)}
    params["kernel_floor_us"] = 5.875
    best = loss(params, cases)
    for _ in range(rounds):
        for name, (lo, hi) in BOUNDS.items():
            for i in range(steps + 1):
                trial = dict(params, **{name: round(lo + (hi - lo) * i / steps, 3)})
                value = loss(trial, cases)
                if value < best - 1e-12:
                    best, params = value, trial
    return params


if __name__ == "__main__":
    from moeserve.capacity.validation_cases import FITTED

    result = fit(FITTED)
    print({k: round(v, 3) for k, v in result.items()}, "rms log error", math.sqrt(loss(result, FITTED) / len(FITTED)))
