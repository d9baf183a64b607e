"""The placement runtime inside a single-rank engine: the recorder's counts, its trace files, and
20+ online rebalances that move expert weights without changing a greedy token."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from runtime_plans import cycling_planner, random_plan
from tiny_models import make_checkpoint

from moeserve import LLM, SamplingParams
from moeserve.cli import main
from moeserve.placement.importers import load_trace

PARAMS = SamplingParams(temperature=0.0, max_tokens=44, ignore_eos=True)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    _, path = make_checkpoint("qwen3_moe", tmp_path_factory.mktemp("qwen3"))
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (3, 9, 17)]
    llm = LLM(model=str(path), block_size=4)
    try:
        want = [o.token_ids for o in llm.generate(prompts, PARAMS)]
        reference = {i: moe.experts for i, moe in llm.engine.executor.worker.runner.model.moe_layers().items()}
    finally:
        llm.shutdown()
    return path, prompts, want, reference


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_recorded_counts_equal_a_direct_bincount_and_the_tools_read_the_trace(qwen3, tmp_path, capsys):
    path, prompts, want, _ = qwen3
    llm = LLM(model=str(path), block_size=4, record_trace_dir=str(tmp_path / "rec"), record_window_steps=7)
    layers = list(llm.engine.executor.worker.runner.model.moe_layers().values())
    routed = [[] for _ in layers]
    for index, moe in enumerate(layers):  # observe the same ids the recorder's hook sees
        def both(ids, first_row=0, hook=moe.on_route, seen=routed[index]):
            seen.append(ids.clone())
            hook(ids, first_row)

        moe.on_route = both
    try:
        assert [o.token_ids for o in llm.generate(prompts, PARAMS)] == want
        llm.engine.recorder_stop()
        dumped = llm.engine.recorder_dump(str(tmp_path / "all.npz"))
    finally:
        llm.shutdown()
    trace = load_trace(dumped)
    direct = np.stack([torch.bincount(torch.cat(ids).reshape(-1), minlength=8).numpy() for ids in routed])
    assert np.array_equal(trace.counts.sum(axis=0), direct)
    assert trace.num_windows == -(-llm.engine.num_steps // 7)  # full windows plus the partial one at stop
    assert trace.meta["top_k"] == 2 and trace.meta["steps_per_window"] == 7
    assert np.array_equal(trace.placement, np.tile(np.arange(8), (2, 1)))
    plan = str(tmp_path / "plan.json")
    assert main(["place", "--trace", dumped, "--ep", "2", "--redundant", "2", "-o", plan]) == 0
    assert main(["place", "--eval", plan, "--trace", str(tmp_path / "rec" / "window_000000.npz"), "--json"]) == 0
    assert '"balancedness_mean"' in capsys.readouterr().out


def _assert_slots_hold_their_experts(llm, reference):
    """Every slot's weights are exactly the weights of the logical expert the map says it holds."""
    for index, moe in llm.engine.executor.worker.runner.model.moe_layers().items():
        want = reference[index]
        for slot, expert in enumerate(moe.phy2log):
            assert torch.equal(moe.experts.w13[slot], want.w13[expert])
            assert torch.equal(moe.experts.w2[slot], want.w2[expert])


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("graphs", [False, True])
def test_twenty_rebalances_keep_greedy_tokens(qwen3, tmp_path, monkeypatch, graphs):
    """With decode graphs (eager replays) too: each rebalance re-captures them over the new slot maps."""
    path, prompts, want, reference = qwen3
    monkeypatch.setenv("MOESERVE_DECODE_GRAPHS_EAGER", "1" if graphs else "0")
    start = str(tmp_path / "start.json")
    random_plan(100, 2, 8, 12, 1).save(start)
    llm = LLM(model=str(path), block_size=4, placement=start, eplb_interval=2, kernels="torch" if graphs else "auto")
    assert (llm.engine.executor.worker.runner.graphs is not None) == graphs
    llm.engine.placement.controller.planner = cycling_planner()
    try:
        assert [o.token_ids for o in llm.generate(prompts, PARAMS)] == want
        stats = llm.engine.stats()
        _assert_slots_hold_their_experts(llm, reference)
    finally:
        llm.shutdown()
    assert stats["eplb_rebalances"] >= 20
    assert stats["eplb_last_experts_moved"] > 0 and stats["eplb_bytes_moved_total"] == 0  # one rank: local copies
    assert 0 < stats["eplb_balancedness_min"] <= stats["eplb_balancedness_mean"] <= 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_recorder_start_and_stop_between_requests_count_only_what_ran_in_between(qwen3, tmp_path):
    path, prompts, want, _ = qwen3
    llm = LLM(model=str(path), block_size=4)
    layers = list(llm.engine.executor.worker.runner.model.moe_layers().values())
    routed = [[] for _ in layers]
    try:
        llm.generate(prompts[:1], PARAMS)  # not recorded
        for index, moe in enumerate(layers):
            def both(ids, first_row=0, hook=moe.on_route, seen=routed[index]):
                seen.append(ids.clone())
                hook(ids, first_row)

            moe.on_route = both
        llm.engine.recorder_start()
        assert [o.token_ids for o in llm.generate(prompts[1:], PARAMS)] == want[1:]
        llm.engine.recorder_stop()
        trace = load_trace(llm.engine.recorder_dump(str(tmp_path / "t.npz")))
    finally:
        llm.shutdown()
    direct = np.stack([torch.bincount(torch.cat(ids).reshape(-1), minlength=8).numpy() for ids in routed])
    assert np.array_equal(trace.counts.sum(axis=0), direct)
