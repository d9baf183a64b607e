"""How much of a burst of waiting prompts to prefill in one step, so the burst's time to first token
is least on average.

    k = burst_steps(8 * 32, 8, StepCost(overhead_s=0.005, per_token_s=0.000134))   # -> 2 steps

A step costs a + b * tokens (`StepCost`). Prefilling n waiting prompts of W tokens in all, in one step,
gives every one of them its first token after a + b W. Cutting them into k steps of W / k tokens
gives the first group theirs after a + b W / k, the next after twice that, and so on: the mean time
to first token is f(k) = (k + 1) / 2 * (a + b W / k). Going from k - 1 to k steps saves
f(k - 1) - f(k) = b W / (2 k (k - 1)) - a / 2 of it, and adds one more overhead a to the burst's last
prompts and to every request decoding alongside (a step's overhead is what throughput pays). So a
k-th step is taken only when it saves more than the overhead it adds: b W / (2 k (k - 1)) - a / 2 >= a,
that is b W >= 3 a k (k - 1). Two steps need b W >= 6 a, three 18 a, four 36 a: a few short prompts
stay together, eight 32-token prompts on tiny-mixtral (b W ~ 7-11 a) run as two steps of four.
(Minimising the mean alone, k = sqrt(b W / a), split the same burst three ways in the server: TTFT
p50 fell below vLLM's but throughput fell to vLLM's, docs/performance.md.) k never exceeds n: the cut
falls between prompts, never inside one, so a single long prompt is not chunked by this (its first
token comes only after all of it).

Policy only: the scheduler asks, once per burst (`GroupScheduler._burst_cap` keeps the plan for the
burst's rest), and the engine core measures the cost (`core/step_cost.py`).
"""
from __future__ import annotations

import math

from moeserve.core.step_cost import StepCost


def burst_steps(total_tokens: int, num_prompts: int, cost: StepCost) -> int:
    """How many steps to spread the burst's prefill over (1: all in one)."""
    if num_prompts <= 1 or total_tokens <= 0:
        return 1
    ratio = cost.per_token_s * total_tokens / cost.overhead_s  # b W / a
    k = math.floor((1.0 + math.sqrt(1.0 + 4.0 * ratio / 3.0)) / 2.0)  # the largest k with 3 k (k - 1) <= b W / a
    return max(1, min(num_prompts, k))
