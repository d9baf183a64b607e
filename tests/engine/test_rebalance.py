"""Placement runtime across 4 real ranks (gloo): a plan with replicas (two of one expert on one rank)
gives the single-rank greedy tokens; 20+ online rebalances, whose expert weights travel between ranks
by point-to-point transfers, give them too; the recorder's counts are summed over every rank.
One LLM start for all of it (each multi-rank start costs ~10 s on CI)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_checkpoint

from moeserve import LLM, SamplingParams
from moeserve.placement.importers import load_trace

sys.path.insert(0, str(Path(__file__).parents[1] / "placement_runtime"))
from runtime_plans import cycling_planner, random_plan  # noqa: E402

PARAMS = SamplingParams(temperature=0.0, max_tokens=44, ignore_eos=True)


def _generate(llm, prompt_sets):
    return [[o.token_ids for o in llm.generate(prompts, PARAMS)] for prompts in prompt_sets]


def _recorded_total(llm, path) -> np.ndarray:
    llm.engine.recorder_stop()
    return load_trace(llm.engine.recorder_dump(str(path))).counts.sum(axis=0)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replicas_and_twenty_rebalances_at_ep4_keep_greedy_tokens(tmp_path):
    _, path = make_checkpoint("qwen3_moe", tmp_path / "ckpt")
    rng = random.Random(5)
    static, moving = ([[rng.randrange(3, 96) for _ in range(n)] for n in sizes] for sizes in ((4, 11, 6, 19), (3, 8, 14, 5)))
    ref = LLM(model=str(path), block_size=4, record_trace_dir=str(tmp_path / "ref"), record_window_steps=10)
    try:
        want = _generate(ref, [static, moving])
        want_counts = _recorded_total(ref, tmp_path / "ref.npz")
    finally:
        ref.shutdown()

    start = random_plan(11, 2, 8, 12, 4)
    assert any(len(set(row[r * 3 : r * 3 + 3])) < 3 for row in start.phy2log.tolist() for r in range(4))
    start.save(str(tmp_path / "start.json"))
    llm = LLM(model=str(path), block_size=4, ep=4, placement=str(tmp_path / "start.json"), eplb_interval=2,
              record_trace_dir=str(tmp_path / "ep4"), record_window_steps=10)
    controller = llm.engine.placement.controller
    try:
        controller.planner = lambda loads, current: current  # first the static plan with replicas
        assert _generate(llm, [static]) == want[:1]
        assert controller.num_rebalances == 0
        controller.planner = cycling_planner()  # then a new placement every 2 steps
        assert _generate(llm, [moving]) == want[1:]
        stats = llm.engine.stats()
        got_counts = _recorded_total(llm, tmp_path / "ep4.npz")
    finally:
        llm.shutdown()
    assert stats["eplb_rebalances"] >= 20
    assert stats["eplb_bytes_moved_total"] > 0 and stats["eplb_last_move_s"] > 0
    assert np.array_equal(got_counts, want_counts)  # every rank's routing reached rank 0, once


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rebalances_with_tp_split_routing_at_ep2_tp2(tmp_path):
    """ep=2 with tp=2: the two ranks of the one attention group route halves of its tokens, so both
    count and the sum is the whole batch; moves cross the two ranks."""
    _, path = make_checkpoint("qwen3_moe", tmp_path / "ckpt")
    rng = random.Random(6)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (5, 12, 7)]
    ref = LLM(model=str(path), block_size=4, record_trace_dir=str(tmp_path / "ref"))
    try:
        want = _generate(ref, [prompts])
        want_counts = _recorded_total(ref, tmp_path / "ref.npz")
    finally:
        ref.shutdown()
    llm = LLM(model=str(path), block_size=4, ep=2, tp=2, eplb_interval=2, record_trace_dir=str(tmp_path / "ep2"))
    llm.engine.placement.controller.planner = cycling_planner(50)
    try:
        assert _generate(llm, [prompts]) == want
        stats = llm.engine.stats()
        got_counts = _recorded_total(llm, tmp_path / "ep2.npz")
    finally:
        llm.shutdown()
    assert stats["eplb_rebalances"] >= 20 and stats["eplb_bytes_moved_total"] > 0
    assert np.array_equal(got_counts, want_counts)
