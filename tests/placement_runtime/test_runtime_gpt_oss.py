"""The placement runtime with gpt-oss, whose experts carry biases: online rebalances move each expert's
biases with its weights (engine/rebalance.py moves every per-slot tensor), the recorder counts its
routing, and a --placement plan with replicas at --ep 2 gives the single-rank tokens."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from runtime_plans import cycling_planner, random_plan
from tiny_models import make_checkpoint

from moeserve import LLM, SamplingParams
from moeserve.placement.importers import load_trace

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    _, path = make_checkpoint("gpt_oss", tmp_path_factory.mktemp("gpt-oss"), layout="fused")
    rng = random.Random(5)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (3, 9, 17)]
    llm = LLM(model=str(path), block_size=4)
    try:
        want = [o.token_ids for o in llm.generate(prompts, PARAMS)]
        reference = {i: moe.experts for i, moe in llm.engine.executor.worker.runner.model.moe_layers().items()}
    finally:
        llm.shutdown()
    return path, prompts, want, reference


def test_rebalances_move_biases_and_the_recorder_counts(gpt_oss, tmp_path):
    path, prompts, want, reference = gpt_oss
    start = str(tmp_path / "start.json")
    random_plan(7, 2, 8, 12, 1).save(start)
    llm = LLM(model=str(path), block_size=4, placement=start, eplb_interval=2, record_trace_dir=str(tmp_path / "rec"))
    llm.engine.placement.controller.planner = cycling_planner()
    try:
        assert [o.token_ids for o in llm.generate(prompts, PARAMS)] == want
        stats = llm.engine.stats()
        for index, moe in llm.engine.executor.worker.runner.model.moe_layers().items():
            ref = reference[index]
            for slot, expert in enumerate(moe.phy2log):
                for name in ("w13", "w2", "b13", "b2"):
                    assert torch.equal(getattr(moe.experts, name)[slot], getattr(ref, name)[expert]), (name, slot)
        llm.engine.recorder_stop()
        trace = load_trace(llm.engine.recorder_dump(str(tmp_path / "all.npz")))
    finally:
        llm.shutdown()
    assert stats["eplb_rebalances"] >= 5 and stats["eplb_last_experts_moved"] > 0
    routed = sum(len(p) for p in prompts) + len(prompts) * (PARAMS.max_tokens - 1)  # every token once, top-2
    assert np.array_equal(trace.counts.sum(axis=(0, 2)), np.full(2, 2 * routed))


def test_a_plan_with_replicas_at_ep2(gpt_oss, tmp_path):
    path, prompts, want, _ = gpt_oss
    plan = str(tmp_path / "plan.json")
    random_plan(3, 2, 8, 10, 2).save(plan)  # 10 slots over 2 ranks: two replicas
    llm = LLM(model=str(path), block_size=4, ep=2, placement=plan)
    try:
        assert [o.token_ids for o in llm.generate(prompts, PARAMS)] == want
    finally:
        llm.shutdown()
