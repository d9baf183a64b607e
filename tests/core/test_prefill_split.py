"""Splitting bursts of waiting prompts for time to first token: the step-cost fit, the split rule,
and the scheduler admitting a burst over several steps (cut between prompts, FIFO, nothing lost)."""
from __future__ import annotations

import math

import pytest
from core_fakes import FakeEngine, make_request

from moeserve.config import CacheConfig, SchedulerConfig
from moeserve.core.prefill_split import burst_steps
from moeserve.core.scheduler import Scheduler
from moeserve.core.step_cost import StepCost, StepCostModel

TINY_MIXTRAL = StepCost(overhead_s=0.0052, per_token_s=0.000134)  # fitted in process to tiny-mixtral's steps


# ---- the cost model -------------------------------------------------------------------------------
def test_cost_model_recovers_a_line_from_its_steps():
    m = StepCostModel()
    for tokens in [8, 8, 8, 256, 8, 8, 64, 8, 32, 8, 8, 192]:
        m.observe(tokens, 0.004 + 0.0002 * tokens)
    est = m.estimate()
    assert est is not None
    assert est.overhead_s == pytest.approx(0.004, rel=1e-6) and est.per_token_s == pytest.approx(0.0002, rel=1e-6)


def test_cost_model_says_nothing_until_it_has_seen_step_sizes_apart():
    m = StepCostModel(min_steps=4, min_spread=16)
    for _ in range(50):
        m.observe(8, 0.005)  # a server that has only decoded: the overhead is known, a token's cost is not
    assert m.estimate() is None
    m.observe(200, 0.03)
    assert m.estimate() is not None
    fresh = StepCostModel(min_steps=4)
    fresh.observe(8, 0.005)
    fresh.observe(200, 0.03)
    assert fresh.estimate() is None  # two steps are not enough


def test_cost_model_ignores_empty_and_unmeasured_steps_and_refuses_a_falling_line():
    m = StepCostModel(min_steps=2)
    m.observe(0, 0.1)
    m.observe(10, 0.0)
    m.observe(10, float("nan"))
    assert m.steps == 0
    m.observe(10, 0.05)
    m.observe(100, 0.01)  # bigger steps cheaper: noise, not a cost model
    assert m.estimate() is None


def test_cost_model_forgets_an_old_regime():
    m = StepCostModel(decay=0.9)
    for i in range(100):
        m.observe(8 + (i % 5) * 50, 0.020 + 0.001 * (8 + (i % 5) * 50))  # a slow machine
    for i in range(200):
        m.observe(8 + (i % 5) * 50, 0.004 + 0.0001 * (8 + (i % 5) * 50))  # then a fast one
    est = m.estimate()
    assert est.overhead_s == pytest.approx(0.004, rel=1e-3) and est.per_token_s == pytest.approx(0.0001, rel=1e-3)


# ---- the rule -------------------------------------------------------------------------------------
def _mean_ttft(sizes: list[int], cost: StepCost) -> float:
    """Mean time to first token of prompts prefilled in consecutive steps of `sizes` tokens each
    (one prompt a token, for the arithmetic)."""
    t, total = 0.0, 0.0
    for s in sizes:
        t += cost.overhead_s + cost.per_token_s * s
        total += t * s
    return total / sum(sizes)


def test_a_further_step_is_taken_only_when_it_saves_more_than_its_overhead():
    cost = StepCost(overhead_s=0.005, per_token_s=0.0001)
    for total in (10, 100, 299, 300, 301, 900, 1000, 1800, 5000, 50_000):
        k = burst_steps(total, num_prompts=total, cost=cost)
        saved = lambda j: _mean_ttft([total / (j - 1)] * (j - 1), cost) - _mean_ttft([total / j] * j, cost)
        assert k == 1 or saved(k) >= cost.overhead_s * (1 - 1e-9)  # the last step taken pays for itself
        assert saved(k + 1) < cost.overhead_s  # the next one would not
        best = min(range(1, 200), key=lambda j: _mean_ttft([total / j] * j, cost))
        assert k <= best and _mean_ttft([total / k] * k, cost) <= _mean_ttft([total], cost)
    assert [burst_steps(t, 100, cost) for t in (299, 300, 900, 1800)] == [1, 2, 3, 4]  # b W = 6 a, 18 a, 36 a


def test_a_short_burst_or_a_single_prompt_is_not_split():
    assert burst_steps(64, 2, TINY_MIXTRAL) == 1  # b W < 4 a: one step
    assert burst_steps(4000, 1, TINY_MIXTRAL) == 1  # a cut inside one prompt brings nothing sooner
    assert burst_steps(10_000, 3, TINY_MIXTRAL) == 3  # never more steps than prompts


def test_eight_short_prompts_on_tiny_mixtral_go_as_two_steps():
    assert burst_steps(8 * 32, 8, TINY_MIXTRAL) == 2


# ---- the scheduler --------------------------------------------------------------------------------
class FixedCost:
    """A step-cost model that knows its answer (the real one is fed by the engine core)."""

    def __init__(self, cost: StepCost | None):
        self.cost = cost

    def estimate(self) -> StepCost | None:
        return self.cost


def _scheduler(split: bool, cost: StepCost | None = TINY_MIXTRAL, budget: int = 2048, seqs: int = 64) -> Scheduler:
    s = Scheduler(
        SchedulerConfig(max_num_seqs=seqs, max_num_batched_tokens=budget, split_prefill_bursts=split),
        CacheConfig(block_size=16), num_groups=1, num_blocks=512, max_model_len=4096,
    )
    for g in s.groups:
        g.step_cost = FixedCost(cost)
    return s


def _admitted_per_step(eng: FakeEngine, steps: int) -> list[list[str]]:
    return [[r.request_id for r in eng.step().new_requests] for _ in range(steps)]


def test_a_burst_is_admitted_over_steps_in_fifo_order_and_every_request_finishes():
    eng = FakeEngine(_scheduler(split=True))
    for i in range(8):
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=4))
    admitted = _admitted_per_step(eng, 2)
    assert admitted == [["r0", "r1", "r2", "r3"], ["r4", "r5", "r6", "r7"]]
    eng.run()
    assert sorted(eng.finished) == [f"r{i}" for i in range(8)]
    assert all(r.finish_reason == "length" and len(r.output_token_ids) == 4 for r in eng.finished.values())


def test_a_burst_is_planned_once_and_its_rest_is_not_cut_again():
    # a = 3 ms, b = 0.15 ms: 7 x 32 tokens -> two steps (b W = 11 a). The first takes 3 prompts
    # (96 of its 112 tokens; a 4th would pass it), and the 4 left, 128 tokens, would be two steps
    # again if planned afresh (b W = 6.4 a): 3, 2, 2. Planned once, the rest is one step.
    eng = FakeEngine(_scheduler(split=True, cost=StepCost(overhead_s=0.003, per_token_s=0.00015)))
    for i in range(7):
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=4))
    assert burst_steps(4 * 32, 4, StepCost(overhead_s=0.003, per_token_s=0.00015)) == 2
    assert _admitted_per_step(eng, 3) == [["r0", "r1", "r2"], ["r3", "r4", "r5", "r6"], []]


def test_later_arrivals_join_the_rest_of_a_burst_when_one_step_suits_them_all():
    eng = FakeEngine(_scheduler(split=True))
    for i in range(8):
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=8))
    assert len(eng.step().new_requests) == 4
    for i in range(8, 10):  # 6 x 32 tokens wait now: b W < 6 a on tiny-mixtral, one step
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=8))
    assert _admitted_per_step(eng, 1) == [["r4", "r5", "r6", "r7", "r8", "r9"]]


def test_the_rest_of_a_burst_decodes_alongside_the_first_part():
    eng = FakeEngine(_scheduler(split=True))
    for i in range(8):
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=4))
    eng.step()
    second = eng.step()
    sizes = {s.request_id: s.num_tokens for s in second.groups[0].seqs}
    assert sizes == {"r0": 1, "r1": 1, "r2": 1, "r3": 1, "r4": 32, "r5": 32, "r6": 32, "r7": 32}


@pytest.mark.parametrize("split, cost", [(False, TINY_MIXTRAL), (True, None)])
def test_off_or_without_a_cost_the_whole_burst_goes_in_one_step(split, cost):
    eng = FakeEngine(_scheduler(split=split, cost=cost))
    for i in range(8):
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=4))
    assert len(eng.step().new_requests) == 8


def test_a_long_prompt_first_in_the_queue_still_runs_whole_under_the_budget():
    eng = FakeEngine(_scheduler(split=True))
    eng.scheduler.add_request(make_request("long", [7] * 1500, max_tokens=2))
    for i in range(3):
        eng.scheduler.add_request(make_request(f"s{i}", [i + 1] * 8, max_tokens=2))
    plan = eng.step()
    sizes = {s.request_id: s.num_tokens for s in plan.groups[0].seqs}
    assert sizes["long"] == 1500  # always at least one prompt, whole up to the token budget
    eng.run()
    assert len(eng.finished) == 4


def test_a_cached_prefix_does_not_count_as_burst_work():
    # four prompts with a cached 32-token prefix and 8 tokens to compute, four fresh 40-token ones:
    # 192 tokens of work (b W < 6 a: one step), not 320 (two steps, cut after the seventh prompt)
    s = _scheduler(split=True)
    s.groups[0].step_cost = None  # while the prefix is computed: no split
    eng = FakeEngine(s)
    shared = list(range(100, 148))
    s.add_request(make_request("first", shared, max_tokens=2))
    eng.run()
    s.groups[0].step_cost = FixedCost(TINY_MIXTRAL)
    for i in range(4):
        s.add_request(make_request(f"c{i}", shared[:32] + [i + 1] * 8, max_tokens=2))
    for i in range(4):
        s.add_request(make_request(f"f{i}", [i + 200] * 40, max_tokens=2))
    plan = eng.step()
    assert len(plan.new_requests) == 8
    assert all(s.requests[f"c{i}"].num_cached_prompt_tokens == 32 for i in range(4))


def test_the_seat_and_token_budgets_bound_the_burst_the_rule_sees():
    # 4 seats: the burst is the first 4 prompts (b W < 4 a for 128 tokens on tiny-mixtral): one step
    eng = FakeEngine(_scheduler(split=True, seqs=4))
    for i in range(8):
        eng.scheduler.add_request(make_request(f"r{i}", [i + 1] * 32, max_tokens=2))
    assert len(eng.step().new_requests) == 4


def test_serve_splits_bursts_unless_told_not_to_and_the_offline_llm_does_not():
    import argparse

    from moeserve.server import cli
    from moeserve.server.config_file import configs_from_args

    def serve(argv):
        p = argparse.ArgumentParser()
        cli.add_arguments(p)
        return configs_from_args(p.parse_args(argv))[0].scheduler.split_prefill_bursts

    assert serve([]) is True
    assert serve(["--no-split-prefill-bursts"]) is False
    assert SchedulerConfig().split_prefill_bursts is False  # what LLM() and the Python API get
