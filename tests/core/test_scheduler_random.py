"""Randomized workloads on tiny pools: arrivals, shared prefixes, aborts, preemption, failures.

After every step FakeEngine checks the pool invariant (free + cached + in_use == total), that every
block's reference count equals its holders, and that every scheduled sequence reads back exactly
its own tokens from the fake KV store (so prefix hits and recomputes are checked for content).
"""
import random

import pytest
from core_fakes import FakeEngine, make_request, make_scheduler

from moeserve.errors import QueueFullError


def random_prompt(rng: random.Random, prefixes: list[list[int]]) -> list[int]:
    tail = [rng.randrange(1000) for _ in range(rng.randint(1, 20))]
    if rng.random() < 0.5:
        return rng.choice(prefixes)[: rng.randint(1, 24)] + tail
    return tail


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
@pytest.mark.parametrize("seed", range(6))
def test_random_workload_keeps_invariants_and_leaks_nothing(seed, ahead):
    """ahead: async scheduling, each plan scheduled before the previous one's update."""
    rng = random.Random(seed)
    num_groups = 1 + seed % 2
    eng = FakeEngine(
        make_scheduler(
            num_blocks=rng.randint(6, 14),
            block_size=rng.choice([2, 4]),
            max_num_batched_tokens=rng.randint(4, 24),
            max_num_seqs=rng.randint(2, 6),
            num_groups=num_groups,
            max_queued_requests=12,
            prefix_caching=seed != 5,
            ahead=ahead,
        )
    )
    s = eng.scheduler
    prefixes = [[rng.randrange(1000) for _ in range(24)] for _ in range(3)]
    added, rejected_full, aborted = [], 0, set()
    for step in range(400):
        if step < 250 and rng.random() < 0.4:
            rid = f"r{step}"
            prompt = random_prompt(rng, prefixes)
            if len(prompt) <= s.num_blocks * s.block_size:
                try:
                    s.add_request(make_request(rid, prompt, max_tokens=rng.randint(1, 12)))
                    added.append(rid)
                except QueueFullError:
                    rejected_full += 1
        if s.requests and rng.random() < 0.05:
            victim = rng.choice(sorted(s.requests))
            s.abort_request(victim)
            aborted.add(victim)
        eng.step()
        if step >= 250 and not s.has_unfinished():
            break
    eng.run(max_steps=2000)

    assert len(added) > 20
    assert set(eng.finished) | aborted == set(added)
    for rid, req in eng.finished.items():
        if rid in eng.failed:
            assert req.finish_reason == "error"
        else:
            assert req.finish_reason == "length" and req.num_output_tokens == req.max_output_tokens
    for usage in s.block_usage():
        assert usage.in_use == 0 and usage.free + usage.cached == usage.total
    assert s.num_running == s.num_waiting == 0
    eng.step()  # the last finishes ride on the next plan
    finished_ids = [rid for p in eng.plans for rid in p.finished_request_ids]
    assert sorted(finished_ids) == sorted(added)  # every request is announced to workers once
    new_ids = [r.request_id for p in eng.plans for r in p.new_requests]
    assert len(new_ids) == len(set(new_ids))


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
def test_tiny_pool_forces_preemption_and_everything_finishes(ahead):
    rng = random.Random(7)
    eng = FakeEngine(make_scheduler(num_blocks=6, block_size=2, max_num_batched_tokens=8, max_num_seqs=4, ahead=ahead))
    for i in range(10):
        eng.scheduler.add_request(make_request(f"r{i}", [rng.randrange(50) for _ in range(3)], max_tokens=6))
    eng.run(max_steps=1000)
    assert eng.scheduler.num_preemptions > 0
    assert not eng.failed and all(r.num_output_tokens == 6 for r in eng.finished.values())
