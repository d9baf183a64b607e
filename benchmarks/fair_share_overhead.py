"""What the fair-share pass (core/fair_share.py) costs `Scheduler.schedule()` under overload.

    python benchmarks/fair_share_overhead.py [--waiting 1000] [--steps 200]

128 running sequences and N waiting ones, plain decode steps with fake sampled tokens; median
schedule() time in three cases, side by side in one run: every sequence its own request (the pass
returns at once), one n=128 request running (the pass preempts it down to its share, then keeps
the queue in fair order), and the waiting sequences spread over 10 wide requests.
"""
from __future__ import annotations

import argparse
import statistics
import time

from moeserve.config import CacheConfig, SchedulerConfig
from moeserve.core.request import Request
from moeserve.core.scheduler import Scheduler
from moeserve.core.step_plan import SampledToken, StepResult
from moeserve.sampling_params import SamplingParams


def median_schedule_us(running_owner, waiting_owner, waiting: int, steps: int) -> float:
    s = Scheduler(SchedulerConfig(max_num_seqs=128, max_num_batched_tokens=8192, max_queued_requests=waiting + 128),
                  CacheConfig(block_size=16), num_groups=1, num_blocks=20000, max_model_len=4096)
    params = SamplingParams(max_tokens=4000)
    for i in range(128):
        s.add_request(Request(f"r{i}", list(range(64)), params, owner=running_owner(i)))
    for i in range(waiting):
        s.add_request(Request(f"w{i}", list(range(64)), params, owner=waiting_owner(i)))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        plan = s.schedule()
        times.append(time.perf_counter() - t)
        s.update(plan, StepResult(plan.step, [SampledToken(q.request_id, 1) for b in plan.groups for q in b.seqs if q.sample]))
    return statistics.median(times[steps // 10:]) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--waiting", type=int, default=1000)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    cases = {
        "every sequence its own request": (lambda i: None, lambda i: None),
        "one n=128 request running": (lambda i: "wide", lambda i: None),
        "and the waiting in 10 wide requests": (lambda i: "wide", lambda i: f"o{i % 10}"),
    }
    for name, (running, waiting) in cases.items():
        print(f"{name:40s} schedule() median {median_schedule_us(running, waiting, args.waiting, args.steps):8.0f} us")


if __name__ == "__main__":
    main()
